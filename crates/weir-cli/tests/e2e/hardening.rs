//! Bad input from a hostile or careless user: located errors and the right exit codes, no
//! database created by a read, nothing written for refused input.

use serde_json::Value;

use crate::support::Weir;

const ONE: &str = r#"{"name": "one", "nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "a"}}], "edges": []}"#;

#[test]
fn a_db_that_is_not_a_database_is_a_usage_error_naming_it() {
    let w = Weir::new();
    let f = w.file("one.json", ONE);
    let dir = w.path("a-folder");
    std::fs::create_dir(&dir).unwrap();
    let text = w.file("notes.txt", "these are my notes, not a database\n");
    for db in [dir.to_string_lossy().into_owned(), text.clone()] {
        let ran = w.run(&["--db", &db, "run", &f]);
        assert_eq!(ran.code, 2, "{db}: {}", ran.stderr);
        assert!(
            ran.stderr.contains(&db),
            "the message names {db}: {}",
            ran.stderr
        );
        let ran = w.run(&["--db", &db, "runs", "list"]);
        assert_eq!(ran.code, 2, "{db}: {}", ran.stderr);
        assert!(ran.stderr.contains(&db), "{}", ran.stderr);
    }
    // The text file is untouched.
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        "these are my notes, not a database\n"
    );
}

#[test]
fn read_commands_never_create_a_database() {
    let w = Weir::new();
    let db = w.path("typo/weir.db");
    let db_s = db.to_string_lossy().into_owned();
    for args in [
        vec!["runs", "show", "abc"],
        vec!["approve", "abc"],
        vec!["reject", "abc"],
        vec!["resume", "abc"],
        vec!["cancel", "abc"],
    ] {
        let mut full = vec!["--db", db_s.as_str()];
        full.extend(args.iter());
        let ran = w.run(&full);
        assert_eq!(ran.code, 2, "{args:?}: {}", ran.stderr);
        assert!(
            ran.stderr.contains("no weir database at") && ran.stderr.contains(&db_s),
            "{args:?}: {}",
            ran.stderr
        );
    }
    let ran = w.run(&["--db", &db_s, "runs", "list", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(ran.json(), serde_json::json!([]));
    assert!(!db.exists() && !db.parent().unwrap().exists());
    // `weir run` creates it.
    let f = w.file("one.json", ONE);
    assert_eq!(w.run(&["--db", &db_s, "run", &f]).code, 0);
    assert!(db.exists());
}

#[test]
fn validate_json_has_an_entry_for_every_file() {
    let w = Weir::new();
    let good = w.file("one.json", ONE);
    let latin1 = w.path("latin1.json");
    std::fs::write(&latin1, b"{\"name\": \"caf\xe9\"}").unwrap();
    let latin1 = latin1.to_string_lossy().into_owned();
    let missing = w.path("missing.json").to_string_lossy().into_owned();
    let ran = w.run(&["validate", "--json", &good, &latin1, &missing]);
    assert_eq!(ran.code, 2);
    let v = ran.json();
    let files: Vec<(&str, bool)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["file"].as_str().unwrap(), e["valid"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        files,
        [
            (good.as_str(), true),
            (latin1.as_str(), false),
            (missing.as_str(), false)
        ]
    );
    assert!(
        v[1]["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("not UTF-8")
    );
    assert_eq!(v[2]["errors"][0]["code"], "E001");
}

#[test]
fn duplicate_json_keys_are_refused_with_a_location() {
    let w = Weir::new();
    let f = w.file(
        "dup.json",
        "{\"nodes\": [{\"id\": \"a\", \"type\": \"agent\",\n  \"config\": {\"model\": \"mock\",\n  \"model\": \"claude-x\", \"user_message\": \"a\"}}], \"edges\": []}",
    );
    let ran = w.run(&["validate", "--json", &f]);
    assert_eq!(ran.code, 2);
    let e = &ran.json()[0]["errors"][0];
    assert_eq!(e["code"], "E001");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("duplicate key `model`"),
        "{e}"
    );
    assert_eq!(e["line"], 3);
    let one = w.file("one.json", ONE);
    let ran = w.run(&["run", &one, "--input", r#"{"x": 1, "x": 2}"#]);
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("duplicate key `x`"), "{}", ran.stderr);
}

#[test]
fn a_deep_top_level_array_is_a_located_json_error() {
    let w = Weir::new();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let f = w.file("deep.json", &deep);
    let ran = w.run(&["validate", "--json", &f]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    let e = &ran.json()[0]["errors"][0];
    assert!(
        !e["message"].as_str().unwrap().contains("YAML"),
        "a JSON file is reported as JSON: {e}"
    );
    assert!(e["line"].as_u64().is_some(), "{e}");
}

#[test]
fn oversized_input_is_refused_before_anything_is_written() {
    let w = Weir::new();
    let f = w.file("one.json", ONE);
    let big = format!(r#"{{"blob": "{}"}}"#, "x".repeat(2 << 20));
    let input = w.file("big.json", &big);
    let ran = w.run(&["run", &f, "--input", &format!("@{input}")]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("the limit is 1048576"),
        "{}",
        ran.stderr
    );
    let list: Value = w.run(&["runs", "list", "--json"]).json();
    assert_eq!(list, serde_json::json!([]));
    // The limit is configurable.
    w.file("weir.toml", "[limits]\ninput_bytes = 4194304\n");
    assert_eq!(w.run(&["run", &f, "--input", &format!("@{input}")]).code, 0);
}

fn chain(n: usize, broken: bool) -> String {
    let nodes: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"id": "n{i}", "type": "agent", "config": {{"model": "mock", "user_message": "x"}}}}"#))
        .collect();
    let mut edges: Vec<String> = (1..n)
        .map(|i| format!(r#"{{"source": "n{}", "target": "n{i}"}}"#, i - 1))
        .collect();
    if broken {
        edges.push(r#"{"source": "n0", "target": "nowhere"}"#.into());
    }
    format!(
        "{{\"name\": \"big\",\n\"nodes\": [\n{}],\n\"edges\": [\n{}]}}",
        nodes.join(",\n"),
        edges.join(",\n")
    )
}

#[test]
fn large_graphs_load_and_their_errors_are_located() {
    let w = Weir::new();
    let n = 20_000;
    let ok = w.file("big.json", &chain(n, false));
    let ran = w.run(&["validate", "--json", &ok]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let bad = w.file("bad.json", &chain(n, true));
    let ran = w.run(&["validate", "--json", &bad]);
    assert_eq!(ran.code, 2);
    let e = &ran.json()[0]["errors"][0];
    assert_eq!(e["code"], "E003");
    // The broken edge is the last line but one.
    assert_eq!(e["line"], 2 * n as u64 + 3, "{e}");
}

#[test]
fn hostile_documents_fail_cleanly_with_a_location() {
    let w = Weir::new();
    let laughs = "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n\
        b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n\
        d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n\
        f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n\
        h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n\
        nodes: *i\n";
    let deep_yaml = format!("nodes:\n{}x: 1\n", "- ".repeat(2_000));
    let cases = [
        ("laughs.yaml", laughs.to_string()),
        ("deep.yaml", deep_yaml),
        (
            "nan.json",
            r#"{"nodes": [], "edges": [], "hop_ceiling": NaN}"#.to_string(),
        ),
        (
            "huge.json",
            r#"{"nodes": [], "edges": [], "hop_ceiling": 1e999}"#.to_string(),
        ),
        (
            "big-int.yaml",
            "hop_ceiling: 99999999999999999999999999\nnodes: []\nedges: []\n".to_string(),
        ),
    ];
    for (name, text) in cases {
        let f = w.file(name, &text);
        let ran = w.run(&["validate", "--json", &f]);
        assert_eq!(ran.code, 2, "{name}: {}", ran.stderr);
        let e = &ran.json()[0]["errors"][0];
        assert!(e["line"].as_u64().is_some(), "{name}: no location: {e}");
    }
    // A byte-order mark is not an error.
    let bom = w.file(
        "bom.json",
        &format!("\u{feff}{}", r#"{"nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "a"}}], "edges": []}"#),
    );
    let ran = w.run(&["validate", &bom]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
}

#[test]
fn runaway_expressions_fail_their_node_within_the_budget() {
    let w = Weir::new();
    for (i, expr) in [
        "[0]*100000000 == [0]*100000000",
        "max([0]*100000000) > 0",
        "len(s.join(['x']*100000000)) > 0",
        "'a' * 2000000000 == 'a'",
        "float('nan') > 1",
    ]
    .iter()
    .enumerate()
    {
        let f = w.file(
            &format!("bomb{i}.json"),
            &serde_json::json!({"nodes": [
                {"id": "check", "type": "condition", "config": {"expression": expr, "timeout_seconds": 1}},
                {"id": "yes", "type": "agent", "config": {"model": "mock", "user_message": "y"}}],
              "edges": [{"source": "check", "target": "yes", "condition_value": "true"}]})
            .to_string(),
        );
        let ran = w.run(&["run", &f, "--input", r#"{"s": "-"}"#, "--json"]);
        assert_eq!(ran.code, 1, "{expr}: {}", ran.stderr);
        let r = ran.json();
        assert_eq!(r["error"]["code"], "node_failed", "{expr}");
        assert_eq!(r["error"]["node_id"], "check");
        let msg = r["steps"][0]["error"].as_str().unwrap();
        assert!(
            msg.contains("too large") || msg.contains("fuel") || msg.contains("finite"),
            "{expr}: {msg}"
        );
    }
}
