//! Human gates: a run parks, and a later process approves or rejects it.

use crate::support::{Weir, steps};

const GATED: &str = r#"
name: gated
nodes:
  - {id: draft, type: agent, config: {model: mock, user_message: "Draft a reply to {customer}"}}
  - {id: research, type: tool, config: {tool_name: delay, params: {ms: 200}}}
  - id: approve
    type: human_gate
    config: {label: Review Reply, prompt: "Review the reply to {customer} before it is sent."}
  - {id: send, type: agent, config: {model: mock, user_message: "Send with note {note}"}}
edges:
  - {source: draft, target: approve}
  - {source: draft, target: research}
  - {source: approve, target: send}
"#;

fn park(w: &Weir) -> String {
    let f = w.file("gated.yaml", GATED);
    let ran = w.run(&["run", &f, "--input", r#"{"customer": "Ada"}"#, "--json"]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["status"], "paused");
    assert_eq!(r["pending_gate"]["node_id"], "approve");
    assert_eq!(
        r["pending_gate"]["prompt"],
        "Review the reply to Ada before it is sent."
    );
    assert_eq!(steps(&r, "approve")[0]["status"], "waiting");
    // The in-flight sibling finished before the run parked.
    assert_eq!(steps(&r, "research")[0]["status"], "succeeded");
    assert!(steps(&r, "send").is_empty());
    r["run_id"].as_str().unwrap().to_string()
}

#[test]
fn approve_from_a_later_process_continues_the_run() {
    let w = Weir::new();
    let id = park(&w);
    // The paused run is visible to any later process.
    let shown = w.show(&id);
    assert_eq!(shown["status"], "paused");
    let ran = w.run(&[
        "approve",
        &id,
        "--input",
        r#"{"note": "ship it"}"#,
        "--by",
        "lead@example.com",
        "--json",
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["status"], "succeeded");
    assert!(r["pending_gate"].is_null());
    assert_eq!(r["state"]["note"], "ship it");
    let approval = &r["state"]["approval_approve"];
    assert_eq!(approval["approved"], true);
    assert_eq!(approval["by"], "lead@example.com");
    assert!(approval["at"].is_string());
    assert_eq!(steps(&r, "approve")[0]["status"], "succeeded");
    assert_eq!(
        steps(&r, "send")[0]["output"]["text"],
        "mock reply to: Send with note ship it"
    );
    let decided: Vec<&serde_json::Value> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "gate_decided")
        .collect();
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["node_id"], "approve");
    assert_eq!(decided[0]["approved"], true);
    assert_eq!(decided[0]["by"], "lead@example.com");
    // Approving again is a conflict that names the decision already made.
    let again = w.run(&["approve", &id]);
    assert_eq!(again.code, 5, "{}", again.stderr);
    assert!(
        again
            .stderr
            .contains("already approved by lead@example.com"),
        "{}",
        again.stderr
    );
}

#[test]
fn reject_fails_the_run() {
    let w = Weir::new();
    let id = park(&w);
    let ran = w.run(&["reject", &id, "--reason", "tone is off", "--json"]);
    assert_eq!(ran.code, 1);
    let r = ran.json();
    assert_eq!(r["status"], "failed");
    assert_eq!(r["error"]["code"], "gate_rejected");
    assert_eq!(r["error"]["node_id"], "approve");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tone is off")
    );
    assert_eq!(steps(&r, "approve")[0]["status"], "failed");
    assert_eq!(r["state"]["approval_approve"]["approved"], false);
    assert!(steps(&r, "send").is_empty());
}

#[test]
fn human_output_tells_the_user_how_to_decide() {
    let w = Weir::new();
    let f = w.file("gated.yaml", GATED);
    let ran = w.run(&["run", &f, "--input", r#"{"customer": "Ada"}"#]);
    assert_eq!(ran.code, 3);
    assert!(
        ran.stdout
            .contains("paused at human gate `approve`: Review the reply to Ada")
    );
    assert!(ran.stdout.contains("weir approve "));
}

#[test]
fn two_gates_in_parallel_branches_are_decided_one_at_a_time() {
    let w = Weir::new();
    let f = w.file(
        "two.yaml",
        r#"
nodes:
  - {id: start, type: agent, config: {model: mock, user_message: go}}
  - {id: legal, type: human_gate, config: {prompt: "legal ok?"}}
  - {id: finance, type: human_gate, config: {prompt: "finance ok?"}}
  - {id: after_legal, type: agent, config: {model: mock, user_message: legal done}}
  - {id: after_finance, type: agent, config: {model: mock, user_message: finance done}}
edges:
  - {source: start, target: legal}
  - {source: start, target: finance}
  - {source: legal, target: after_legal}
  - {source: finance, target: after_finance}
"#,
    );
    let r = w.run(&["run", &f, "--json"]).json();
    assert_eq!(r["status"], "paused");
    let first = r["pending_gate"]["node_id"].as_str().unwrap().to_string();
    let id = r["run_id"].as_str().unwrap().to_string();
    let ran = w.run(&["approve", &id, "--json"]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    let r = ran.json();
    let second = r["pending_gate"]["node_id"].as_str().unwrap().to_string();
    assert_ne!(first, second);
    let ran = w.run(&["approve", &id, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(steps(&r, "after_legal").len(), 1);
    assert_eq!(steps(&r, "after_finance").len(), 1);
    assert!(r["state"]["approval_legal"]["approved"].as_bool().unwrap());
    assert!(
        r["state"]["approval_finance"]["approved"]
            .as_bool()
            .unwrap()
    );
}
