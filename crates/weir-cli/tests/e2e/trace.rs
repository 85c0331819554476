//! `weir runs show ID [STEP] [--full]`: the readable trace, read as a user reads it, and
//! `weir reject` asking for a reason.

use serde_json::json;

use crate::support::{Fake, Reply, Weir, anthropic, repo_root};

fn last_run(w: &Weir) -> String {
    w.run_ids().into_iter().next().expect("a run")
}

/// A model call that was repaired, then a fallback after a rate limit on a retry, then a
/// gate rejected with a reason: every part of it is on the trace, and long texts fold.
#[test]
fn the_trace_shows_each_call_with_its_model_tokens_cost_error_and_repair() {
    let fake = Fake::start();
    fake.queue(
        "/v1/messages",
        vec![
            anthropic(r#"{"score": 150}"#, 1000, 100),
            anthropic(r#"{"score": 87, "reason": "fits"}"#, 1200, 50),
            Reply::json(
                429,
                json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
            ),
        ],
    );
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let long = "Lead profile, line one.\\n".repeat(12);
    let f = w.file(
        "t.json",
        &format!(
            r#"{{"name": "Trace demo", "nodes": [
              {{"id": "score", "type": "agent", "config": {{"model": "claude-haiku-4-5",
                "user_message": "Score {{lead}}. {long}",
                "response_schema": {{"type": "object", "required": ["score", "reason"],
                  "properties": {{"score": {{"type": "integer", "maximum": 100}}, "reason": {{"type": "string"}}}}}},
                "output_key": "score"}}}},
              {{"id": "write", "type": "agent", "config": {{"model": "claude-haiku-4-5",
                "fallback_models": ["mock"], "user_message": "Write to {{lead}}"}}}},
              {{"id": "ship", "type": "human_gate", "config": {{"prompt": "Send it?"}}}}],
             "edges": [{{"id": "a", "source": "score", "target": "write"}},
                       {{"id": "b", "source": "write", "target": "ship"}}]}}"#
        ),
    );
    let ran = w.run(&["run", &f, "--input", r#"{"lead": "Ada"}"#]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    // The fallback was said while the run went, before its step's line.
    let fell = ran
        .stderr
        .find("↪ write claude-haiku-4-5 failed (rate_limit), fell back to mock")
        .expect(&ran.stderr);
    assert!(fell < ran.stderr.find("✓ write").expect(&ran.stderr));
    let id = last_run(&w);
    let short = &id[..8];

    // Without a reason and without a terminal, reject is refused and the run stays paused.
    let refused = w.run(&["reject", short]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains(&format!(
            "a rejection needs a reason: weir reject {short} --reason TEXT"
        )),
        "{}",
        refused.stderr
    );
    assert_eq!(w.show(&id)["status"], "paused");
    let rejected = w.run(&["reject", short, "--reason", "tone is off", "--by", "ana"]);
    assert_eq!(rejected.code, 1, "{}", rejected.stderr);

    let shown = w.run(&["runs", "show", short]);
    assert_eq!(shown.code, 1, "{}", shown.stderr);
    let t = &shown.stdout;
    // The reason the run ended comes first.
    let first: Vec<&str> = t.lines().take(2).collect();
    assert!(first[0].starts_with(&format!("run {short} failed")), "{t}");
    assert_eq!(
        first[1],
        "error [gate_rejected]: rejected at human gate `ship`: tone is off"
    );
    // The repaired call: both calls with their tokens and cost, the validation error.
    assert!(
        t.contains("model claude-haiku-4-5 via anthropic · 1000 in / 100 out · $0.001500"),
        "{t}"
    );
    assert!(t.contains("reply did not validate, repair asked:"), "{t}");
    assert!(
        t.contains("- (root): \"reason\" is a required property"),
        "{t}"
    );
    assert!(
        t.contains("- /score: 150 is greater than the maximum of 100"),
        "{t}"
    );
    assert!(
        t.contains("model claude-haiku-4-5 via anthropic · 1200 in / 50 out · $0.001450"),
        "{t}"
    );
    // The fallback: the rate-limited call with its class and error, then the mock's reply.
    assert!(t.contains("failed rate_limit"), "{t}");
    assert!(t.contains("slow down"), "{t}");
    assert!(t.contains("next model tried (fallback)"), "{t}");
    assert!(t.contains("model mock via mock"), "{t}");
    assert!(t.contains("reply: mock reply to: Write to Ada"), "{t}");
    // The gate's decision, who made it and why.
    assert!(t.contains("rejected by ana at "), "{t}");
    assert!(t.contains("comment: tone is off"), "{t}");
    // The long prompt is folded to one line that says how much it holds.
    assert!(
        t.contains("prompt: Score Ada. Lead profile, line one. ↵ "),
        "{t}"
    );
    assert!(t.contains(" lines, ") && t.contains(" chars)"), "{t}");
    assert!(t.contains("--full shows them whole"), "{t}");

    // --full prints it whole.
    let full = w.run(&["runs", "show", short, "--full"]).stdout;
    assert_eq!(
        full.matches("Lead profile, line one.").count(),
        12,
        "{full}"
    );
    assert!(!full.contains("lines, "), "{full}");

    // One step, by node id or number, shown whole with its input.
    let one = w.run(&["runs", "show", short, "write"]);
    assert_eq!(one.code, 1, "{}", one.stderr);
    assert!(
        one.stdout.contains("#2 write · agent · succeeded"),
        "{}",
        one.stdout
    );
    assert!(!one.stdout.contains("#1 score"), "{}", one.stdout);
    assert!(one.stdout.contains("input: "), "{}", one.stdout);
    let by_number = w.run(&["runs", "show", short, "#2"]).stdout;
    assert_eq!(by_number, one.stdout);
    let json = w.run(&["runs", "show", short, "2", "--json"]);
    assert_eq!(json.json()[0]["node_id"], "write");
    let unknown = w.run(&["runs", "show", short, "nope"]);
    assert_eq!(unknown.code, 2);
    assert!(
        unknown.stderr.contains(
            "has no step `nope`: give a step number (1–3) or one of its nodes: score, write, ship"
        ),
        "{}",
        unknown.stderr
    );
}

/// The examples' pipeline passes (pruned outputs) and consensus votes read off the trace.
#[test]
fn pipeline_passes_and_consensus_votes_are_on_the_trace() {
    let w = Weir::new();
    let ex = repo_root().join("examples");
    let reflexion = ex.join("pipeline/reflexion.yaml");
    let input = format!("@{}", ex.join("pipeline/reflexion.input.json").display());
    let ran = w.run(&["run", reflexion.to_str().unwrap(), "--input", &input]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let t = w.run(&["runs", "show", &last_run(&w)[..8]]).stdout;
    assert!(t.contains("#2 critique · step · succeeded"), "{t}");
    assert!(
        t.contains("pass 1 · 1 output, 1 pruned · jump:draft"),
        "{t}"
    );
    assert!(t.contains("[1] pruned: {\"verdict\": \"bad\""), "{t}");
    assert!(t.contains("#3 draft · step · succeeded · visit 2"), "{t}");
    assert!(t.contains("pass 2 · 1 output, 0 pruned · continue"), "{t}");

    let vote = ex.join("machine/incident-vote.yaml");
    let input = format!("@{}", ex.join("machine/incident-vote.input.json").display());
    let ran = w.run(&["run", vote.to_str().unwrap(), "--input", &input]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let t = w.run(&["runs", "show", &last_run(&w)[..8]]).stdout;
    assert!(t.contains("asked 3 agents"), "{t}");
    assert!(
        t.contains("consensus · 3 votes · quorum 2 of 3 · approved"),
        "{t}"
    );
    assert!(t.contains("vote 3: "), "{t}");
    assert!(
        t.contains("consensus · 5 votes · quorum 3 of 5 · decided"),
        "{t}"
    );
}
