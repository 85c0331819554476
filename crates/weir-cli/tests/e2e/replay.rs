//! `weir replay`: a recorded run driven again offline, every call answered from its record,
//! and the differences a changed workflow makes. (Every example replays unchanged in
//! `examples::every_example_runs_as_its_readme_says`.)

use serde_json::{Value, json};

use crate::support::{Fake, Reply, Weir, anthropic, repo_root};

/// The example's run recorded, then replayed on a copy with one prompt and one condition
/// changed: exactly those differences, and what follows from them.
#[test]
fn a_changed_prompt_and_condition_are_reported_exactly() {
    let w = Weir::new();
    let ex = repo_root().join("examples/graph");
    let ran = w.run(&[
        "run",
        ex.join("answer-review.json").to_str().unwrap(),
        "--input",
        &format!("@{}", ex.join("answer-review.input.json").display()),
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let id = w.run_ids()[0].clone();

    let same = w.run(&["replay", &id[..8]]);
    assert_eq!(same.code, 0, "{}{}", same.stdout, same.stderr);
    assert!(
        same.stdout
            .contains("identical: 5 steps compared, 0 differences"),
        "{}",
        same.stdout
    );
    // The replay names no run a reader could look for: it ran in memory, and says so.
    assert!(
        same.stdout
            .contains("the replay succeeded (in memory, not stored)"),
        "{}",
        same.stdout
    );
    assert_eq!(
        w.run_ids(),
        std::slice::from_ref(&id),
        "the store holds only the recorded run"
    );

    let mut wf: Value =
        serde_json::from_str(&std::fs::read_to_string(ex.join("answer-review.json")).unwrap())
            .unwrap();
    for n in wf["nodes"].as_array_mut().unwrap() {
        match n["id"].as_str() {
            Some("draft") => n["config"]["user_message"] = json!("Question (briefly):\n{question}"),
            Some("good") => {
                n["config"]["expression"] = json!("verify.strip().isdigit() and int(verify) > 5");
            }
            _ => {}
        }
    }
    let changed = w.file("changed.json", &wf.to_string());
    let ran = w.run(&["replay", &id, "--workflow", &changed, "--json"]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    let report = ran.json();
    assert_eq!(report["identical"], false);
    let diffs: Vec<(String, String)> = report["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_string(),
                d["node_id"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("prompt", "draft"),
        ("route", "good"),
        ("output", "good"),
        ("only_recorded", "publish"),
        ("only_recorded", "done"),
        ("only_replayed", "reject"),
        ("status", "-"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(diffs, want, "{report:#}");
    let prompt = &report["differences"][0];
    assert_eq!(
        prompt["diff"],
        "--- recorded prompt\n+++ replayed prompt\n@@ -1,2 +1,2 @@\n-Question:\n+Question (briefly):\n How do I resume a crashed run?\n"
    );
    assert_eq!(report["differences"][1]["recorded"], "true");
    assert_eq!(report["differences"][1]["replayed"], "false");
    assert_eq!(report["differences"][6]["recorded"], "succeeded");
    assert_eq!(report["differences"][6]["replayed"], "aborted");

    // The human report says the same.
    let human = w.run(&["replay", &id, "--workflow", &changed]);
    assert_eq!(human.code, 1);
    let t = &human.stdout;
    assert!(
        t.contains("✗ draft (visit 1)\n      prompt changed:\n"),
        "{t}"
    );
    assert!(
        t.contains("-Question:\n        +Question (briefly):"),
        "{t}"
    );
    assert!(t.contains("✓ verify (visit 1)"), "{t}");
    assert!(
        t.contains("route changed: recorded true, replayed false"),
        "{t}"
    );
    assert!(
        t.contains("the run ended succeeded in the recording, aborted in the replay"),
        "{t}"
    );
    assert!(
        t.contains("different: 5 steps compared, 7 differences"),
        "{t}"
    );
}

/// A run whose model failed over and retried against a fake provider replays with the
/// provider gone: the same calls, classes and costs, from the record.
#[test]
fn retries_and_fallbacks_replay_from_the_record_without_the_provider() {
    let fake = Fake::start();
    fake.queue(
        "/v1/messages",
        vec![
            Reply::json(
                500,
                json!({"type": "error", "error": {"type": "api_error", "message": "boom"}}),
            ),
            anthropic("first try", 100, 10),
        ],
    );
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let f = w.file(
        "r.json",
        r#"{"nodes": [
          {"id": "ask", "type": "agent", "config": {"model": "claude-haiku-4-5",
            "fallback_models": ["claude-sonnet-4-5"], "fallback_error_classes": ["rate_limit"],
            "user_message": "Say hi", "retry_count": 1}},
          {"id": "fetch", "type": "tool", "config": {"tool_name": "http_request",
            "params": {"url": "URL/data", "method": "GET"}, "output_key": "data"}}
        ], "edges": [{"id": "e1", "source": "ask", "target": "fetch"}]}"#
            .replace("URL", &fake.url)
            .as_str(),
    );
    fake.always("/data", Reply::json(200, json!({"rows": 3})));
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let recorded = ran.json();
    assert_eq!(
        recorded["steps"][0]["attempts"].as_array().unwrap().len(),
        2
    );
    let calls = fake.seen("/v1/messages").len() + fake.seen("/data").len();
    drop(fake);

    let id = recorded["run_id"].as_str().unwrap();
    let replayed = w.run_with(
        &["replay", id],
        &[("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")],
    );
    assert_eq!(replayed.code, 0, "{}{}", replayed.stdout, replayed.stderr);
    assert!(
        replayed.stdout.contains("identical: 2 steps compared"),
        "{}",
        replayed.stdout
    );
    assert_eq!(calls, 3);
    // The replay was quick: the recorded retry's 1 s backoff is not waited out (the record
    // says so; timing is not asserted).
}

/// A step the record has no call for fails with "not in the recording", never a live call.
#[test]
fn a_call_the_record_cannot_answer_is_reported_not_made() {
    let w = Weir::new().env("ANTHROPIC_API_KEY", "sk-ant-test");
    let f = w.file(
        "one.json",
        r#"{"nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "hi"}}], "edges": []}"#,
    );
    assert_eq!(w.run(&["run", &f]).code, 0);
    let id = w.run_ids()[0].clone();
    let two = w.file(
        "two.json",
        r#"{"nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "hi"}},
                      {"id": "b", "type": "agent", "config": {"model": "claude-haiku-4-5", "user_message": "more"}}],
            "edges": [{"id": "e1", "source": "a", "target": "b"}]}"#,
    );
    let ran = w.run_with(
        &["replay", &id, "--workflow", &two, "--json"],
        &[("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")],
    );
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    let report = ran.json();
    let d = &report["differences"];
    assert_eq!(d[0]["kind"], "not_recorded", "{report:#}");
    assert_eq!(d[0]["node_id"], "b");
    assert!(
        d[0]["replayed"]
            .as_str()
            .unwrap()
            .contains("not in the recording: node `b` did not run a visit 1 in the recorded run"),
        "{report:#}"
    );
    let replay_id = report["replay_run_id"].as_str().unwrap();
    assert!(!replay_id.is_empty());
    // The replay's own run is not in the database: it ran in memory.
    assert_eq!(w.run_ids(), vec![id.clone()]);
    let human = w.run(&["replay", &id, "--workflow", &two]);
    assert!(
        human
            .stdout
            .contains("✗ b (visit 1)\n      not in the recording: node `b` did not run a visit 1"),
        "{}",
        human.stdout
    );
}

/// A re-run's reused steps (no attempts, outputs from the earlier run) replay as what they
/// returned: the re-run replays identical.
#[test]
fn a_rerun_with_reused_steps_replays_identical() {
    use crate::serve::{Client, Server, block};
    let w = Weir::new();
    let server = Server::start(&w, &[]);
    let token = server.first_token().unwrap();
    let (first, rerun) = block(async {
        let api = Client::new(&server, &token);
        let (status, created) = api
            .post(
                "/api/workflows/support-triage/runs",
                json!({"input": {"customer": "Ada", "ticket": "refund please"}}),
            )
            .await;
        assert_eq!(status, 202, "{created}");
        let first = created["run_id"].as_str().unwrap().to_string();
        api.wait_for(&first, |s| s == "succeeded").await;
        let (status, again) = api
            .post(
                &format!("/api/runs/{first}/rerun"),
                json!({"from": "draft"}),
            )
            .await;
        assert!(status == 201 || status == 202, "{status} {again}");
        let rerun = again["run_id"].as_str().unwrap().to_string();
        let record = api.wait_for(&rerun, |s| s == "succeeded").await;
        assert!(
            record["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["type"] == "step_reused"),
            "{record}"
        );
        (first, rerun)
    });
    server.kill();
    for id in [&first, &rerun] {
        let ran = w.run(&["replay", id]);
        assert_eq!(ran.code, 0, "{id}: {}{}", ran.stdout, ran.stderr);
        assert!(ran.stdout.contains("identical: "), "{}", ran.stdout);
    }
}
