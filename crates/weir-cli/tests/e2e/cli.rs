//! The CLI contract: validate output, exit codes, runs list/show.

use serde_json::json;

use crate::support::{Weir, repo_root};

#[test]
fn validate_reports_every_problem_with_location_and_hint() {
    let w = Weir::new();
    let f = w.file(
        "bad.json",
        r#"{
  "nodes": [
    {"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "hi"}},
    {"id": "a", "type": "tool", "config": {"tool_name": "http_requets"}},
    {"id": "c", "type": "condition", "config": {"expression": "x >"}}
  ],
  "edges": [
    {"id": "e1", "source": "a", "target": "ghost"},
    {"id": "e2", "source": "a", "target": "c"}
  ]
}"#,
    );
    let ran = w.run(&["validate", &f]);
    assert_eq!(ran.code, 2);
    for needle in [
        "error[E002]: duplicate node id `a`",
        "error[E005]: unknown tool `http_requets`",
        "did you mean `http_request`?",
        "error[E006]",
        "error[E003]: edge `e1` has target `ghost`",
        "bad.json:5:",
    ] {
        assert!(
            ran.stderr.contains(needle),
            "missing {needle:?} in:\n{}",
            ran.stderr
        );
    }
    let v = w.run(&["validate", &f, "--json"]).json()[0].clone();
    assert_eq!(v["valid"], false);
    let codes: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert!(
        codes.contains(&"E002") && codes.contains(&"E003") && codes.contains(&"E006"),
        "{codes:?}"
    );
    let e6 = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["code"] == "E006")
        .unwrap();
    assert_eq!(e6["node_id"], "c");
    assert_eq!(e6["line"], 5);
    assert!(e6["hint"].is_string());
}

#[test]
fn warnings_do_not_block_a_run_but_errors_do() {
    let w = Weir::new();
    let warn = w.file(
        "w.json",
        r#"{"nodes": [
        {"id": "c", "type": "condition", "config": {"expression": "True"}},
        {"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "a"}},
        {"id": "island", "type": "merge"}],
      "edges": [{"source": "c", "target": "a"}, {"source": "island", "target": "island"}]}"#,
    );
    let v = w.run(&["validate", &warn, "--json"]);
    assert_eq!(v.code, 0);
    let codes: Vec<String> = v.json()[0]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap().to_string())
        .collect();
    assert!(
        codes.contains(&"W101".to_string()) && codes.contains(&"W102".to_string()),
        "{codes:?}"
    );
    let ran = w.run(&["run", &warn, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.stderr.contains("warning[W101]"));

    let bad = w.file(
        "b.json",
        r#"{"nodes": [{"id": "x", "type": "widget"}], "edges": []}"#,
    );
    let ran = w.run(&["run", &bad, "--json"]);
    assert_eq!(ran.code, 2);
    // Not run: the JSON on stdout is an error carrying the diagnostics, not a record.
    let e = ran.json();
    assert_eq!(e["error"]["code"], "invalid_workflow", "{e}");
    assert!(e.get("run_id").is_none());
    assert!(ran.stderr.contains("unknown node type `widget`"));
}

#[test]
fn usage_errors_exit_2() {
    let w = Weir::new();
    let ok = repo_root().join("examples/graph/support-triage.json");
    assert_eq!(
        w.run(&["run", ok.to_str().unwrap(), "--input", "not json"])
            .code,
        2
    );
    assert_eq!(
        w.run(&["run", ok.to_str().unwrap(), "--input", "[1]"]).code,
        2
    );
    assert_eq!(w.run(&["run", "/nonexistent.json"]).code, 2);
    assert_eq!(w.run(&["runs", "show", "nope"]).code, 2);
    assert_eq!(w.run(&["approve", "nope"]).code, 2);
    assert_eq!(w.run(&["frobnicate"]).code, 2);
}

#[test]
fn runs_list_and_show() {
    let w = Weir::new();
    let f = w.file("one.json", r#"{"name": "one", "nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "a"}}], "edges": []}"#);
    let first = w.run(&["run", &f, "--json"]).json();
    let second = w.run(&["run", &f, "--json"]).json();
    let list = w.run(&["runs", "list", "--json"]).json();
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            second["run_id"].as_str().unwrap(),
            first["run_id"].as_str().unwrap()
        ]
    );
    assert_eq!(list[0]["workflow"], "one");
    assert_eq!(list[0]["status"], "succeeded");
    let shown = w
        .run(&["runs", "show", first["run_id"].as_str().unwrap(), "--json"])
        .json();
    assert_eq!(shown, first);
    let table = w.run(&["runs", "list"]);
    assert!(table.stdout.contains("RUN ") && table.stdout.contains("one"));
    let human = w.run(&["runs", "show", first["run_id"].as_str().unwrap()]);
    assert!(
        human.stdout.contains("succeeded") && human.stdout.contains("#1 a · agent · succeeded"),
        "{}",
        human.stdout
    );
}

#[test]
fn run_record_has_the_documented_shape() {
    let w = Weir::new();
    let f = w.file("one.json", r#"{"nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "hi {who}"}}], "edges": []}"#);
    let r = w
        .run(&["run", &f, "--input", r#"{"who": "Ada"}"#, "--json"])
        .json();
    let keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "schema_version",
            "run_id",
            "workflow",
            "dialect",
            "status",
            "trigger",
            "input",
            "state",
            "output",
            "error",
            "pending_gate",
            "cost_usd",
            "events",
            "started_at",
            "finished_at",
            "duration_ms",
            "steps"
        ]
    );
    assert_eq!(r["run_id"].as_str().unwrap().len(), 36);
    assert_eq!(r["workflow"], "one");
    assert_eq!(r["dialect"], "graph");
    assert_eq!(
        r["trigger"],
        serde_json::json!({"kind": "cli"}),
        "weir run started it"
    );
    assert_eq!(r["status"], "succeeded");
    assert_eq!(r["input"], json!({"who": "Ada"}));
    assert_eq!(
        r["state"],
        json!({"who": "Ada", "a": "mock reply to: hi Ada"})
    );
    // The output of the last node that ran: the agent's reply record.
    assert_eq!(r["output"]["text"], "mock reply to: hi Ada");
    assert_eq!(r["output"]["model"], "mock");
    assert!(r["error"].is_null() && r["pending_gate"].is_null());
    assert_eq!(r["cost_usd"], 0.0);
    for t in ["started_at", "finished_at"] {
        assert!(
            chrono::DateTime::parse_from_rfc3339(r[t].as_str().unwrap()).is_ok(),
            "{t}"
        );
    }
    assert!(r["duration_ms"].as_u64().is_some());
    // The event log: gap-free sequence numbers, in the order things happened.
    let types: Vec<&str> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, e)| {
            assert_eq!(e["seq"], i as u64 + 1);
            e["type"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        types,
        [
            "run_created",
            "run_started",
            "step_started",
            "step_finished",
            "run_finished"
        ]
    );
    let steps = r["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1);
    let s = &steps[0];
    assert_eq!(s["seq"], 1);
    assert_eq!(s["node_id"], "a");
    assert_eq!(s["node_type"], "agent");
    assert_eq!(s["visit"], 1);
    assert_eq!(s["status"], "succeeded");
    assert!(s["route"].is_null());
    assert!(s["input"].is_null(), "agent steps store no input snapshot");
    assert_eq!(s["output"]["text"], "mock reply to: hi Ada");
    assert_eq!(s["tokens"], json!({"input": 2, "output": 6}));
    assert!(s["finished_at"].is_string() && s["duration_ms"].as_u64().is_some());
    let a = &s["attempts"][0];
    assert_eq!(a["n"], 1);
    assert_eq!(a["status"], "succeeded");
    assert!(a["error"].is_null());
    assert_eq!(a["request"]["user"], "hi Ada");
    // The store keeps the reply once (the output's text) and puts it back in the
    // attempt's response and the answering call's reply.
    assert_eq!(a["response"], "mock reply to: hi Ada");
    assert_eq!(a["calls"][0]["reply"], "mock reply to: hi Ada");
    assert_eq!(a["calls"][0]["model"], "mock");
}

#[test]
fn input_from_a_file_and_a_limited_runs_list() {
    let w = Weir::new();
    let f = w.file("one.json", r#"{"name": "echo", "nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "hi {who}"}}], "edges": []}"#);
    let input = w.file("input.json", r#"{"who": "Ada"}"#);
    let arg = format!("@{input}");
    for _ in 0..3 {
        let r = w.run(&["run", &f, "--input", &arg, "--json"]).json();
        assert_eq!(r["state"]["a"], "mock reply to: hi Ada");
        assert_eq!(r["input"], serde_json::json!({"who": "Ada"}));
    }
    let list = w.run(&["runs", "list", "--limit", "2", "--json"]).json();
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert_eq!(
        w.run(&["run", &f, "--input", "@/no/such/file.json"]).code,
        2
    );
}
