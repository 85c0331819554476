//! `weir test`: the examples' test files pass, a wrong expectation fails naming the node and
//! both values, nothing unscripted is called, and `--record` writes a test that passes.

use crate::support::{Weir, repo_root};

#[test]
fn the_examples_tests_pass() {
    let w = Weir::new();
    let ran = w.run(&["test", repo_root().join("examples").to_str().unwrap()]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let out = &ran.stdout;
    for file in [
        "graph/approval.test.yaml",
        "machine/deploy-gate.test.yaml",
        "pipeline/early-exit.test.yaml",
    ] {
        assert!(out.contains(file), "{out}");
    }
    assert!(
        out.contains("  ✓ a rejected refund is never paid ("),
        "{out}"
    );
    assert!(out.trim_end().ends_with("8 passed, 0 failed"), "{out}");
    // In memory: the database the command was pointed at got no runs.
    assert!(w.run_ids().is_empty());
}

#[test]
fn a_wrong_expectation_fails_naming_the_node_and_both_values() {
    let w = Weir::new();
    let wf = repo_root().join("examples/graph/approval.yaml");
    let t = w.file(
        "wrong.test.yaml",
        &format!(
            "workflow: {}
tests:
  - name: expects the wrong branch
    input: {{customer: Ada, amount: 40}}
    mock:
      - {{match: Refund, reply: fine}}
    tools:
      pay: {{result: {{ok: true}}}}
    expect:
      status: succeeded
      routes: {{over_limit: \"true\"}}
      state: {{assessment: not this}}
      calls: {{model: 2}}
  - name: has no result for the tool
    input: {{customer: Ada, amount: 40}}
    expect: {{status: succeeded}}
  - name: passes
    input: {{customer: Ada, amount: 40}}
    tools:
      pay: {{result: {{ok: true}}}}
    expect: {{status: succeeded}}
",
            wf.display()
        ),
    );
    let ran = w.run(&["test", &t]);
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    let out = &ran.stdout;
    assert!(out.contains("  ✗ expects the wrong branch\n"), "{out}");
    assert!(
        out.contains("route of `over_limit`: expected \"true\", got \"false\""),
        "{out}"
    );
    assert!(
        out.contains("state.assessment: expected \"not this\", got \"fine\""),
        "{out}"
    );
    assert!(out.contains("model calls: expected 2, got 1"), "{out}");
    assert!(out.contains("  ✗ has no result for the tool\n"), "{out}");
    assert!(
        out.contains("the test scripts no result for tool node `pay` (delay)"),
        "{out}"
    );
    assert!(out.contains("  ✓ passes ("), "{out}");
    assert!(out.trim_end().ends_with("1 passed, 2 failed"), "{out}");

    let bad = w.file("bad.test.yaml", "tests:\n  - name: x\n    expekt: {}\n");
    let ran = w.run(&["test", &bad]);
    assert_eq!(ran.code, 1);
    assert!(
        ran.stdout.contains("bad.test.yaml: not a test file"),
        "{}",
        ran.stdout
    );
    assert!(ran.stdout.contains("expekt"), "{}", ran.stdout);
}

#[test]
fn record_writes_a_test_that_passes_and_never_overwrites() {
    let w = Weir::new();
    let src = repo_root().join("examples/graph/approval.yaml");
    let local = w.path("approval.yaml");
    std::fs::copy(&src, &local).unwrap();
    let ran = w.run(&[
        "run",
        local.to_str().unwrap(),
        "--input",
        r#"{"customer": "Bo", "amount": 250}"#,
    ]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    let id = w.run_ids()[0].clone();
    let approved = w.run(&["approve", &id[..8], "--input", r#"{"note": "ok by me"}"#]);
    assert_eq!(approved.code, 0, "{}", approved.stderr);

    let rec = w.run(&["test", "--record", &id[..8]]);
    assert_eq!(rec.code, 0, "{}", rec.stderr);
    let file = w.path("approval.test.yaml");
    assert!(
        rec.stdout.contains(&format!("wrote {}", file.display())),
        "{}",
        rec.stdout
    );
    let text = std::fs::read_to_string(&file).unwrap();
    // Beside its workflow: the workflow is found by name, not written down.
    assert!(!text.contains("workflow:"), "{text}");
    assert!(
        text.contains("review:") && text.contains("approve: true"),
        "{text}"
    );
    assert!(text.contains("note: ok by me"), "{text}");
    let ran = w.run(&["test", file.to_str().unwrap()]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout
            .contains(&format!("  ✓ as recorded in run {}", &id[..8])),
        "{}",
        ran.stdout
    );
    assert!(ran.stdout.trim_end().ends_with("1 passed, 0 failed"));

    let again = w.run(&["test", "--record", &id]);
    assert_eq!(again.code, 2);
    assert!(
        again.stderr.contains("exists; give another path"),
        "{}",
        again.stderr
    );
}

/// A test recorded from a run answered by a real provider passes on the run it came from:
/// the test's calls all go to the mock, and the expected output says so.
#[test]
fn a_test_recorded_from_a_real_provider_passes() {
    let fake = crate::support::Fake::start();
    fake.queue(
        "/v1/messages",
        vec![crate::support::anthropic("87", 1000, 200)],
    );
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-TESTKEY");
    let f = w.file(
        "score.json",
        r#"{"nodes": [{"id": "score", "type": "agent",
              "config": {"model": "claude-haiku-4-5", "user_message": "Lead: {{lead}}",
                         "output_key": "score"}}], "edges": []}"#,
    );
    let ran = w.run(&["run", &f, "--input", r#"{"lead": "Ada"}"#]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let id = w.run_ids()[0].clone();
    let rec = w.run(&["test", "--record", &id]);
    assert_eq!(rec.code, 0, "{}", rec.stderr);
    let file = w.path("score.test.yaml");
    let ran = w.run(&["test", file.to_str().unwrap()]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.trim_end().ends_with("1 passed, 0 failed"),
        "{}",
        ran.stdout
    );
    // The reply itself is still expected as it was recorded.
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("'87'") || text.contains("\"87\""), "{text}");
}

/// An agent's tool calls are recorded as mock rules that ask for them and tool results
/// keyed by their arguments: the test passes offline, whatever order the calls made at once
/// arrive in.
#[test]
fn a_recorded_agent_with_tools_replays_its_turns_offline() {
    let fake = crate::support::Fake::start();
    for (city, sky) in [("Paris", "rain"), ("Oslo", "snow")] {
        fake.always(
            &format!("/weather/{city}"),
            crate::support::Reply::json(200, serde_json::json!({"city": city, "sky": sky})),
        );
    }
    let reply = |content: serde_json::Value, stop: &str| {
        crate::support::Reply::json(
            200,
            serde_json::json!({"id": "m", "type": "message", "role": "assistant",
                "model": "claude-haiku-4-5", "content": content, "stop_reason": stop,
                "usage": {"input_tokens": 50, "output_tokens": 10}}),
        )
    };
    fake.queue(
        "/v1/messages",
        vec![
            reply(
                serde_json::json!([
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "t2", "name": "weather", "input": {"city": "Oslo"}}]),
                "tool_use",
            ),
            reply(
                serde_json::json!([{"type": "text", "text": "Rain in Paris, snow in Oslo."}]),
                "end_turn",
            ),
        ],
    );
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-TESTKEY");
    w.file(
        "weir.toml",
        &format!(
            "[tools.weather]\nkind = \"http\"\nurl = \"{}/weather/{{city}}\"\nresponse = \"body\"\n",
            fake.url
        ),
    );
    let f = w.file(
        "trip.json",
        r#"{"nodes": [{"id": "advise", "type": "agent",
              "config": {"model": "claude-haiku-4-5", "user_message": "Weather for {{trip}}?",
                         "tools": ["custom:weather"], "output_key": "advice"}}], "edges": []}"#,
    );
    let ran = w.run(&["run", &f, "--input", r#"{"trip": "Paris and Oslo"}"#]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let id = w.run_ids()[0].clone();
    let rec = w.run(&["test", "--record", &id]);
    assert_eq!(rec.code, 0, "{}", rec.stderr);
    let file = w.path("trip.test.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("tool_calls:") && text.contains("\"custom:weather\":"),
        "{text}"
    );
    // Offline: the endpoint is gone, the test's tools answer. Run it a few times: the two
    // calls made at once race, and each still gets its own city's answer.
    drop(fake);
    for _ in 0..3 {
        let ran = w.run(&["test", file.to_str().unwrap()]);
        assert_eq!(ran.code, 0, "{}{}\n{text}", ran.stdout, ran.stderr);
        assert!(
            ran.stdout.trim_end().ends_with("1 passed, 0 failed"),
            "{}",
            ran.stdout
        );
    }
}
