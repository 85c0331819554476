//! Hardening, round two: what a careless user or an attacker does to the binary, each
//! case through the interface they touch.

use std::io::Read;

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
