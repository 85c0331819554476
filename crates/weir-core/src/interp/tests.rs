#![allow(
    clippy::too_many_lines,
    reason = "a test reads top to bottom as one story"
)]

use super::*;
use crate::expr::ExprError;
use serde_json::json;
use serde_json::{Map, Value};

fn run(src: &str, state: &Map<String, Value>) -> Result<Value, ExprError> {
    parse(src)?.eval(state)?.to_json()
}

/// The hostile corpus: escapes, resource bombs and numeric edge cases. Every one is
/// refused at parse time or fails (or finishes) within the evaluation budget.
#[test]
fn a_hostile_corpus_is_refused_or_bounded() {
    let Value::Object(state) = json!({
        "s": "x".repeat(1000), "big": (0..10_000).collect::<Vec<_>>(),
        "m": {"k": 1}, "__loop_l": 3, "n": 100000000
    }) else {
        unreachable!()
    };
    let mut corpus: Vec<String> = Vec::new();
    for n in [
        "1000000",
        "100000000",
        "2000000000",
        "n",
        "9223372036854775807",
        "-1",
    ] {
        for base in [
            "'a'",
            "'ab'",
            "[0]",
            "[0, 1]",
            "s",
            "big",
            "[[0] * 1000]",
            "(1,)",
        ] {
            corpus.push(format!("{base} * {n}"));
            corpus.push(format!("{n} * {base}"));
            corpus.push(format!("len({base} * {n})"));
            corpus.push(format!("{base} * {n} == {base} * {n}"));
            corpus.push(format!("max({base} * {n})"));
            corpus.push(format!("0 in {base} * {n}"));
        }
        corpus.push(format!("' '.join(['x'] * {n})"));
        corpus.push(format!("s.replace('x', 'y' * {n})"));
        corpus.push(format!("('x' * 1000).replace('', 'abc' * {n})"));
    }
    for e in [
        "__import__('os')",
        "().__class__.__bases__",
        "''.__class__",
        "m.__class__",
        "__loop_l",
        "lambda: 1",
        "[x for x in big]",
        "{% if 1 %}",
        "open('/etc/passwd')",
        "range(1000000000)",
        "eval('1')",
        "exec('1')",
        "getattr(m, 'k')",
        "s.format(1)",
        "'{:>999999999}'.format(1)",
        "m.get.__self__",
        "self",
        "s.__len__()",
        "big.append(1)",
        "big.pop()",
        "s.encode()",
        "globals()",
        "x is None",
        "1 if 1",
        "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))",
        "1e308 * 10",
        "-1e308 * 10",
        "2 ** 64",
        "10 ** 100",
        "2 ** 0.5 ** 1000",
        "(-8) ** 0.5",
        "9223372036854775807 + 1",
        "-9223372036854775807 - 2",
        "9223372036854775807 * 2",
        "1 / 0",
        "1 // 0",
        "5 % 0",
        "1.0 / 0.0",
        "float('nan')",
        "float('inf')",
        "float('-inf') < 0",
        "float('1e400')",
        "int('9' * 30)",
        "int(1e300)",
        "round(1e400)",
        "round(1e19)",
        "abs(-9223372036854775807 - 1)",
        "-(-9223372036854775807 - 1)",
        "'a' < 3",
        "[1] < 'a'",
        "m < m",
        "None < 1",
        "len(5)",
        "big[100000]",
        "big[-100000]",
        "s[10 ** 18]",
        "m['missing']",
        "m.missing",
        "missing",
        "missing.x",
        "min()",
        "max([])",
        "str(1, 2)",
        "int()",
        "s.split('')",
        "s.count('x') ** s.count('x')",
        "big == big and big == big and big == big and big == big and big == big",
        "[big, big, big, big, big] == [big, big, big, big, big]",
        "s * 1000",
        "s * 1048",
        "s * 1049",
        "str(big * 100)",
        "big + big + big + big + big + big + big + big + big + big + big + big",
        "' '.join([s] * 1000)",
        "' '.join([s] * 2000)",
        // Found by the fuzzer: a 1 MB string repeated 51,076 times (shared, not copied).
        "226*226*[2226*226*[2]~s[2]]~s[2]~s",
        "226*226*[2226*226*[2]~s[2]]",
        "[2226*226*[2]~s] + [2226*226*[2]~s] + [2226*226*[2]~s] + [2226*226*[2]~s]",
        "str([2226*226*[2]~s] * 100)",
    ] {
        corpus.push(e.to_string());
    }
    let depth = format!("{}1{}", "(".repeat(200), ")".repeat(200));
    corpus.push(depth);
    corpus.push("not ".repeat(200) + "1");
    corpus.push("-".repeat(500) + "1");
    corpus.push("1 + ".repeat(240) + "1");
    corpus.push("s ~ ".repeat(240) + "s");
    assert!(corpus.len() >= 300, "{} expressions", corpus.len());
    let (mut refused, mut failed, mut ran) = (0, 0, 0);
    for src in &corpus {
        if std::env::var_os("WEIR_CORPUS_TRACE").is_some() {
            eprintln!("{src}");
        }
        match parse(src) {
            Err(_) => refused += 1,
            Ok(p) => match p.eval(&state).and_then(|v| v.to_json()) {
                Err(e) => {
                    assert!(!e.message.is_empty());
                    failed += 1;
                }
                Ok(v) => {
                    // What runs to the end stays within the budget.
                    let size = serde_json::to_string(&v).unwrap().len();
                    assert!(size <= MEMORY + MAX_ITEMS * 8, "{src}: {size} bytes");
                    ran += 1;
                }
            },
        }
    }
    eprintln!(
        "hostile corpus: {} expressions: {refused} refused at parse, {failed} failed cleanly, {ran} finished within the budget",
        corpus.len()
    );
    // The escapes never reach anything: none of them evaluates.
    for e in [
        "__import__('os')",
        "().__class__",
        "__loop_l",
        "open('/etc/passwd')",
        "eval('1')",
    ] {
        assert!(run(e, &state).is_err(), "{e}");
    }
}

#[test]
fn python_semantics() {
    let Value::Object(st) = json!({"x": 7, "name": "Ada", "items": [3, 1, 2], "m": {"a": 1}})
    else {
        unreachable!()
    };
    for (src, want) in [
        ("-7 // 2", json!(-4)),
        ("-7 % 3", json!(2)),
        ("7 / 2", json!(3.5)),
        ("2 ** 10", json!(1024)),
        ("0 < x < 10", json!(true)),
        ("1 < x > 10", json!(false)),
        ("'d' in name.lower()", json!(true)),
        ("'a' in m", json!(true)),
        ("3 not in items", json!(false)),
        ("name ~ '-' ~ x", json!("Ada-7")),
        ("str(1.0) ~ str(None) ~ str(True)", json!("1.0NoneTrue")),
        ("'yes' if x > 5 else 'no'", json!("yes")),
        ("items[-1]", json!(2)),
        ("name[1:]", json!("da")),
        ("items[:2]", json!([3, 1])),
        ("max(items) - min(items)", json!(2)),
        ("m.get('b', 5)", json!(5)),
        ("' a b '.split()", json!(["a", "b"])),
        ("'a,b'.split(',')", json!(["a", "b"])),
        ("'Ada Lovelace'.startswith(('X', 'Ada'))", json!(true)),
        ("x and 'y' or 'z'", json!("y")),
        ("[] or 'empty'", json!("empty")),
        ("{'k': x}['k']", json!(7)),
        ("len(m.items())", json!(1)),
        ("round(2.567, 2)", json!(2.57)),
        // Python rounds half to even.
        (
            "[round(0.5), round(1.5), round(2.5), round(-2.5)]",
            json!([0, 2, 2, -2]),
        ),
        ("int(' 42 ') + int(3.9)", json!(45)),
        ("'x' + 'y' == 'xy' and [1] + [2] == [1, 2]", json!(true)),
        ("1 == 1.0", json!(true)),
        ("'hello world'.title()", json!("Hello World")),
    ] {
        assert_eq!(run(src, &st).unwrap(), want, "{src}");
    }
}
