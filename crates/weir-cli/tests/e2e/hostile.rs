//! Hardening, round two: what a careless user or an attacker does to the binary, each
//! case through the interface they touch.

use std::io::Read;

use serde_json::json;

use crate::support::Weir;

/// A workflow whose one agent echoes its input's `text` (the mock model replies with the
/// prompt): its record is as large as the input.
const ECHO: &str = r#"{"name": "echo", "nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "{{ text }}", "output_key": "reply"}}], "edges": []}"#;

/// A reader that goes away after ten bytes ends `weir` quietly with status 0: no panic, no
/// "Broken pipe" on the terminal.
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let w = Weir::new();
    let f = w.file("echo.json", ECHO);
    let input = w.file(
        "input.json",
        &serde_json::json!({"text": "x".repeat(300_000)}).to_string(),
    );
    let ran = w.run(&["run", &f, "--input", &format!("@{input}")]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let id = w.run_ids().pop().expect("one run");
    for args in [
        vec!["runs", "show", id.as_str(), "--json"],
        vec!["runs", "show", id.as_str()],
        vec!["runs", "list"],
    ] {
        let mut child = w.spawn(&args);
        let mut out = child.stdout.take().expect("stdout");
        let mut first = [0u8; 10];
        out.read_exact(&mut first).expect("ten bytes");
        drop(out);
        let mut err = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
    }
}

/// A YAML map of 50,000 keys (with as many anchors) loads in time linear in its size: the
/// duplicate-key check no longer scans the map for every key.
#[test]
fn a_map_of_fifty_thousand_anchored_keys_loads_quickly() {
    let w = Weir::new();
    let mut doc = String::from(
        "name: big\nnodes:\n  - id: a\n    type: agent\n    config: {model: mock, user_message: hi}\nedges: []\nmetadata:\n",
    );
    for i in 0..50_000 {
        doc.push_str(&format!("  k{i}: &a{i} v{i}\n"));
    }
    let f = w.file("big.yaml", &doc);
    let started = std::time::Instant::now();
    let ran = w.run(&["validate", &f]);
    let took = started.elapsed();
    // Not a timing assertion of weir's speed: a quadratic check took 20 s here, a linear
    // one well under a second; the bound only catches the quadratic one coming back.
    assert!(took.as_secs() < 8, "validate took {took:?}: {}", ran.stderr);
    assert!(!ran.stderr.contains("duplicate key"), "{}", ran.stderr);
    let dup = w.file("dup.yaml", "name: d\nname: e\nnodes: []\nedges: []\n");
    let ran = w.run(&["validate", &dup]);
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("duplicate key: name"), "{}", ran.stderr);
    assert!(!ran.stderr.contains("DuplicateKeyPolicy"), "{}", ran.stderr);
}

/// A `.json` workflow is JSON: unquoted keys, comments, trailing commas and `NaN` are
/// errors with their line and column, not read as YAML.
#[test]
fn a_json_file_is_read_as_strict_json() {
    let w = Weir::new();
    for (name, text, line) in [
        (
            "unquoted.json",
            "{\n  name: \"x\", \"nodes\": [], \"edges\": []}",
            2,
        ),
        (
            "comment.json",
            "{\"name\": \"x\",\n # a comment\n \"nodes\": [], \"edges\": []}",
            2,
        ),
        (
            "comma.json",
            "{\"name\": \"x\", \"nodes\": [], \"edges\": [],\n}",
            2,
        ),
        (
            "nan.json",
            "{\"name\": \"x\", \"nodes\": [{\"id\": \"a\", \"type\": \"agent\", \"config\": {\"model\": \"mock\", \"user_message\": \"hi\",\n \"temperature\": NaN}}], \"edges\": []}",
            2,
        ),
    ] {
        let f = w.file(name, text);
        let ran = w.run(&["validate", &f]);
        assert_eq!(ran.code, 2, "{name}: {}", ran.stderr);
        assert!(
            ran.stderr.contains("invalid JSON"),
            "{name}: {}",
            ran.stderr
        );
        assert!(
            ran.stderr.contains(&format!("{name}:{line}:")),
            "{name}: names the file and line: {}",
            ran.stderr
        );
        assert!(ran.stderr.contains("strict JSON"), "{name}: {}", ran.stderr);
    }
    // The same text as YAML is YAML.
    let y = w.file(
        "unquoted.yaml",
        "{name: x, nodes: [{id: a, type: agent, config: {model: mock, user_message: hi}}], edges: []}",
    );
    assert_eq!(w.run(&["validate", &y]).code, 0);
}

/// An integer too large to keep exactly is refused where it is written, not recorded as
/// another number.
#[test]
fn an_integer_too_large_to_keep_is_refused_not_rounded() {
    let w = Weir::new();
    let f = w.file("echo.json", ECHO);
    let ran = w.run(&[
        "run",
        &f,
        "--input",
        r#"{"text": "t", "x": 123456789012345678901234567890}"#,
    ]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("123456789012345678901234567890") && ran.stderr.contains("too large"),
        "{}",
        ran.stderr
    );
    assert!(w.run_ids().is_empty(), "no run was created");
    // The largest integers that are kept are kept exactly.
    let ran = w.run(&[
        "run",
        &f,
        "--json",
        "--input",
        r#"{"text": "t", "x": 18446744073709551615}"#,
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let id = w.run_ids().pop().unwrap();
    let shown = w.run(&["runs", "show", &id, "--json"]);
    assert!(
        shown.stdout.contains("18446744073709551615"),
        "{}",
        shown.stdout
    );
}

/// A rejection needs a reason: an empty or blank one is refused, and the run stays paused.
#[test]
fn a_blank_rejection_reason_is_refused() {
    let w = Weir::new();
    assert_eq!(w.run_approval("Ada", 500).code, 3);
    let id = w.run_ids().pop().unwrap();
    for reason in ["", "   "] {
        let ran = w.run(&["reject", &id, "--reason", reason]);
        assert_eq!(ran.code, 2, "{reason:?}: {}", ran.stderr);
        assert!(ran.stderr.contains("needs a reason"), "{}", ran.stderr);
        assert_eq!(w.show(&id)["status"], "paused");
    }
    let ran = w.run(&["reject", &id, "--reason", "over budget"]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert_eq!(w.show(&id)["status"], "failed");
}

/// Whether a process whose command line holds `needle` is running.
fn running(needle: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
}

/// `kill -9` of `weir` during a script step: bun and what the script started die with it,
/// and the script's temporary folder is removed by the next weir that runs a script.
#[test]
fn a_killed_weir_leaves_no_script_process_or_folder_behind() {
    let w = Weir::new();
    let f = w.file(
        "slow.yaml",
        "nodes:\n  slow:\n    type: script\n    timeout_seconds: 60\n    script: |\n      import { $ } from 'bun';\n      await $`sleep 47.31`;\n      export default true;\n",
    );
    let mut child = w.spawn(&["run", &f]);
    let pid = child.id();
    crate::support::wait_until("the script's sleep to start", || running("47.31"));
    let owned_by = |pid: u32| {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("weir-script-"))
            .filter(|e| {
                std::fs::read_to_string(e.path().join("owner"))
                    .is_ok_and(|o| o.trim() == pid.to_string())
            })
            .count()
    };
    assert_eq!(owned_by(pid), 1, "the running step has its folder");
    child.kill().expect("kill -9");
    child.wait().unwrap();
    crate::support::wait_until("the script's processes to die with weir", || {
        !running("47.31")
    });
    // The next script run sweeps the dead process's folder.
    let quick = w.file(
        "quick.yaml",
        "nodes:\n  q:\n    type: script\n    script: |\n      export default true;\n",
    );
    let ran = w.run(&["run", &quick]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(owned_by(pid), 0, "the killed weir's folder was removed");
}

/// Output built from many placeholders has an overall limit: an end output and a tool's
/// body of twenty placeholders, each within the per-placeholder cap, fail their node with
/// a clear error instead of building gigabytes (or reaching the network or the store).
#[test]
fn many_placeholders_cannot_build_gigabytes() {
    let fake = crate::support::Fake::start();
    fake.always("/sink", crate::support::Reply::text(200, "ok"));
    let w = Weir::new();
    let big = "{['a'*1000000]*60}";
    let fields: Vec<String> = (0..20).map(|i| format!("\"f{i}\": \"{big}\"")).collect();
    let end = w.file(
        "end.json",
        &format!(
            r#"{{"nodes": [{{"id": "done", "type": "end", "config": {{"status": "succeeded", "output": {{{}}}}}}}], "edges": []}}"#,
            fields.join(", ")
        ),
    );
    let tool = w.file(
        "tool.json",
        &format!(
            r#"{{"nodes": [{{"id": "post", "type": "tool", "config": {{"tool_name": "http_request",
                "params": {{"url": "{}/sink", "method": "POST", "body": {{{}}}}}}}}}], "edges": []}}"#,
            fake.url,
            fields.join(", ")
        ),
    );
    for f in [end, tool] {
        let started = std::time::Instant::now();
        let ran = w.run(&["run", &f, "--json"]);
        assert_eq!(ran.code, 1, "{f}: {}", ran.stderr);
        let r = ran.json();
        let message = r["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("larger than 8 MiB"), "{f}: {message}");
        assert!(
            ran.stdout.len() < 1 << 20,
            "{f}: {} bytes printed",
            ran.stdout.len()
        );
        // Not a timing assertion of weir: building the gigabytes took 31 s.
        assert!(
            started.elapsed().as_secs() < 20,
            "{f}: {:?}",
            started.elapsed()
        );
    }
    assert!(fake.seen("/sink").is_empty(), "nothing reached the webhook");
}

/// The size budget of `[limits]` in weir.toml: each limit, set low, fails the node that
/// would pass it, naming the setting, before the value is built, sent or written.
#[test]
fn each_limits_setting_fails_the_node_that_would_pass_it() {
    let fake = crate::support::Fake::start();
    fake.always("/sink", crate::support::Reply::text(200, "ok"));
    fake.always("/3500", crate::support::Reply::text(200, &"y".repeat(3500)));
    fake.always("/2000", crate::support::Reply::text(200, &"y".repeat(2000)));
    let w = Weir::new();
    std::fs::write(
        w.path("weir.toml"),
        "[limits]\ntemplate_bytes = 4000\nstep_output_bytes = 3000\n\
         tool_request_bytes = 2000\nstate_bytes = 5000\n",
    )
    .unwrap();
    // A chain of `http_request` GETs, each node's reply written to state under its id.
    let chain = |nodes: &[(&str, &str)]| {
        let mut text = String::from("name: limits\nnodes:\n");
        for (id, path) in nodes {
            text.push_str(&format!(
                "  - id: {id}\n    type: tool\n    config: {{tool_name: http_request, \
                 params: {{url: \"{}{path}\"}}}}\n",
                fake.url
            ));
        }
        text.push_str("edges:\n");
        for pair in nodes.windows(2) {
            text.push_str(&format!(
                "  - {{source: {}, target: {}}}\n",
                pair[0].0, pair[1].0
            ));
        }
        text
    };
    let cases = [
        // A prompt of 5,000 characters: over template_bytes.
        (
            "template.yaml",
            "name: limits\nnodes:\n  - id: ask\n    type: agent\n    config: {model: mock, \
             user_message: \"{'x' * 5000}\"}\nedges: []\n"
                .to_string(),
            "ask",
            "`[limits] template_bytes`",
        ),
        // A reply of 3,500 characters: over step_output_bytes.
        (
            "output.yaml",
            chain(&[("get", "/3500")]),
            "get",
            "`[limits] step_output_bytes`",
        ),
        // Three replies of 2,000 characters each: the third passes state_bytes.
        (
            "state.yaml",
            chain(&[("a", "/2000"), ("b", "/2000"), ("c", "/2000")]),
            "c",
            "`[limits] state_bytes`",
        ),
        // A body of 2,500 characters: over tool_request_bytes, and nothing is sent.
        (
            "tool.yaml",
            format!(
                "name: limits\nnodes:\n  - id: post\n    type: tool\n    config:\n      \
                 tool_name: http_request\n      params: {{url: \"{}/sink\", method: POST, \
                 body: {{text: \"{{'x' * 2500}}\"}}}}\nedges: []\n",
                fake.url
            ),
            "post",
            "`[limits] tool_request_bytes`",
        ),
    ];
    for (name, text, node, setting) in cases {
        let f = w.file(name, &text);
        let ran = w.run(&["run", &f, "--json"]);
        assert_eq!(ran.code, 1, "{name}: {}\n{}", ran.stdout, ran.stderr);
        let r = ran.json();
        assert_eq!(r["status"], "failed", "{name}");
        assert_eq!(r["error"]["node_id"], node, "{name}: {r}");
        let message = r["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(setting), "{name}: {message}");
        // The step that met the limit is recorded failed, without the value.
        let shown = w.show(r["run_id"].as_str().unwrap());
        let step = crate::support::steps(&shown, node)[0];
        assert_eq!(step["status"], "failed", "{name}: {step}");
        assert!(
            step["output"].to_string().len() < 200,
            "{name}: {}",
            step["output"]
        );
    }
    assert!(fake.seen("/sink").is_empty(), "nothing reached the webhook");

    // The same workflows run under the default limits.
    std::fs::remove_file(w.path("weir.toml")).unwrap();
    let ran = w.run(&["run", &w.path("state.yaml").to_string_lossy(), "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);

    // A limit of zero is refused when weir.toml is read.
    std::fs::write(w.path("weir.toml"), "[limits]\nstate_bytes = 0\n").unwrap();
    let ran = w.run(&["runs", "list"]);
    assert_ne!(ran.code, 0);
    assert!(ran.stderr.contains("[limits]"), "{}", ran.stderr);
}

/// Hostile expressions, built from families of known attacks on an evaluator (huge
/// repetitions, deep nesting, overflow, NaN, escapes from the sandbox, quadratic string
/// methods, malformed templates) at sizes from small to absurd.
fn hostile_expressions() -> Vec<String> {
    let sizes = [
        "0",
        "10",
        "1000",
        "100000",
        "1000000",
        "10000000",
        "2000000000",
        "9223372036854775807",
        "100000000000000000000",
        "-1",
    ];
    let families: &[&str] = &[
        "'a' * N",
        "['a'] * N",
        "[[0] * N] * N",
        "('x' * N) ~ ('y' * N)",
        "len(str([0] * N))",
        "2 ** N",
        "9223372036854775807 + N",
        "N // 0",
        "N % 0",
        "' '.join(['a' * N] * N)",
        "('a' * N).replace('a', 'bb')",
        "('a' * N).split('a')",
        "max([0] * N)",
        "min([1] * N + [0])",
        "str(N) * N",
        "{'k': 'v' * N}",
        "'é' * N",
        "int('9' * N)",
        "float('9' * N)",
        "('ab' * N).count('ab')",
        "('a' * N).find('b')",
        "'b' in 'a' * N",
        "[0] * N == [0] * N",
        "[0] * N + [0] * N",
        "str({'a': [0] * N})",
        "('a' * N).upper().lower().strip()",
        "len(('\\n' * N).splitlines())",
        "'a' ~ [0] * N",
        "round(1e308, N)",
        "round(2.5, -N)",
        "abs(-N) * abs(-N) * abs(-N)",
        "N * 1e308",
        "float(N) ** N",
        "[N] * N * N",
        "{'a': N}.get('a') * 'x'",
        "'%s' * N",
        "('a' * N)[N]",
        "[0, 1][N]",
        "len(['x' * N, 'y' * N, 'z' * N])",
        "0 < N < N < N < N < N",
    ];
    let mut all: Vec<String> = families
        .iter()
        .flat_map(|f| sizes.iter().map(move |n| f.replace('N', n)))
        .collect();
    for depth in [10, 63, 64, 65, 200, 499] {
        all.push(format!("{}1{}", "(".repeat(depth), ")".repeat(depth)));
        all.push(format!("{}1{}", "[".repeat(depth), "]".repeat(depth)));
        all.push(format!("{}True", "not ".repeat(depth)));
        all.push(vec!["1"; depth].join(" + "));
    }
    all.extend(
        [
            "__import__('os').system('id')",
            "().__class__.__bases__[0].__subclasses__()",
            "open('/etc/passwd').read()",
            "exec('1')",
            "eval('1')",
            "lambda: 1",
            "[x for x in [1, 2]]",
            "input.__dict__",
            "globals()",
            "undefined_name",
            "input.missing.deeper",
            "float('nan') == float('nan')",
            "float('inf')",
            "1e308 * 10",
            "'a' < 3",
            "'\\x00' * 100",
            "'\\ud800'",
            "{",
            "}",
            "'unterminated",
            "1 +",
            "",
            " ",
            "a if b else",
            &"x".repeat(1001),
            &format!("'{}'", "a".repeat(998)),
        ]
        .map(String::from),
    );
    all
}

/// The peak resident memory of the largest child process waited for so far, in KiB.
fn children_peak_kb() -> i64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .map_or(0, |u| u.max_rss())
}

/// At least 400 hostile expressions, each through every kind of place one is evaluated: as
/// a condition's and a loop's expression, and as a placeholder of a prompt template and of
/// an end node's output template (half of them meet a template first). Each is refused
/// with an error that names its node, or evaluates within the budget: no crash, no
/// runaway output. The worst time and the peak memory of any one `weir run` are printed,
/// for RELIABILITY.md.
#[test]
fn four_hundred_hostile_expressions_are_refused_or_bounded() {
    let w = Weir::new();
    let expressions = hostile_expressions();
    assert!(expressions.len() >= 400, "{}", expressions.len());
    let (mut refused, mut evaluated, mut invalid) = (0, 0, 0);
    let mut worst = (std::time::Duration::ZERO, String::new());
    let mut heaviest = (0, String::new());
    for (i, e) in expressions.iter().enumerate() {
        let placeholder = format!("{{{e}}}");
        let condition = json!({"id": "check", "type": "condition", "config": {"expression": e}});
        let prompt = json!({"id": "ask", "type": "agent",
            "config": {"model": "mock", "user_message": placeholder}});
        let spin = json!({"id": "spin", "type": "loop",
            "config": {"expression": e, "max_iterations": 2}});
        let end = json!({"id": "done", "type": "end", "config": {"output": {"v": placeholder}}});
        let (first, second) = if i % 2 == 0 {
            (condition, prompt)
        } else {
            (prompt, condition)
        };
        let (a, b) = (first["id"].clone(), second["id"].clone());
        let wf = json!({"name": "hostile", "nodes": [first, second, spin, end], "edges": [
            {"source": a, "target": b, "condition_value": "true"},
            {"source": a, "target": b, "condition_value": "false"},
            {"source": b, "target": "spin", "condition_value": "true"},
            {"source": b, "target": "spin", "condition_value": "false"},
            {"source": "spin", "target": "done", "condition_value": "true"},
            {"source": "spin", "target": "done", "condition_value": "false"},
        ]});
        // A condition fires only its matching edges, and an agent all of them: both kinds
        // of edge are drawn, so every outcome reaches the next node.
        let f = w.file("hostile.json", &wf.to_string());
        let started = std::time::Instant::now();
        let ran = w.run(&["run", &f, "--json"]);
        let took = started.elapsed();
        if took > worst.0 {
            worst = (took, e.chars().take(60).collect());
        }
        // The largest peak of any child so far: it grows only with a run that went higher.
        let rss = children_peak_kb();
        if rss > heaviest.0 {
            heaviest = (rss, e.chars().take(60).collect());
        }
        assert!(
            !ran.stderr.contains("panicked"),
            "{e:.80}: a panic\n{}",
            ran.stderr
        );
        assert!(
            ran.stdout.len() < 16 << 20,
            "{e:.80}: {} bytes printed",
            ran.stdout.len()
        );
        match ran.code {
            0 => evaluated += 1,
            1 => {
                let r = ran.json();
                let message = r["error"]["message"].as_str().unwrap_or_default();
                assert!(
                    !message.is_empty() && r["error"]["node_id"].is_string(),
                    "{e:.80}: {r}"
                );
                refused += 1;
            }
            2 => {
                // Refused when the file was read: the message says where.
                assert!(
                    ran.stderr.contains("hostile.json"),
                    "{e:.80}: {}",
                    ran.stderr
                );
                invalid += 1;
            }
            other => panic!("{e:.80}: exit {other}\n{}", ran.stderr),
        }
    }
    eprintln!(
        "hostile expressions: {} tried, {evaluated} evaluated, {refused} refused at run \
         time, {invalid} refused at load; worst run {:.0} ms ({}), peak memory of any run \
         {} MB ({})",
        expressions.len(),
        worst.0.as_secs_f64() * 1000.0,
        worst.1,
        heaviest.0 / 1024,
        heaviest.1
    );
    assert!(refused > 100 && evaluated > 50 && invalid > 10);
}
