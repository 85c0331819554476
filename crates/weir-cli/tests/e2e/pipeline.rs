//! The pipeline dialect (spec 001) through the binary: parallel nodes, gates that prune,
//! abort, reflexion loops, early exits and the hop ceiling.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Fake, Reply, Weir, repo_root, steps};

fn reply(text: &str) -> Reply {
    Reply::json(
        200,
        json!({
            "id": "msg", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 1}
        }),
    )
}

fn users(fake: &Fake) -> Vec<String> {
    fake.seen("/v1/messages")
        .iter()
        .map(|s| {
            s.json()["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

const VERIFY: &str = r"
name: verify
model: claude-haiku-4-5
steps:
  - id: verify
    nodes: 5
    fields:
      - { name: Candidate, type: text, from: input.candidate }
    systemPrompt: 'Score 1-5. Output the integer alone.'
    if:
      integerRange: [4, 5]
      then: continue
      else: abort
  - id: accumulate
    fields:
      - { name: Survivors, type: multi_ingest, from: { stepId: verify, loopRef: current } }
    systemPrompt: Summarise.
";

#[test]
fn a_gate_prunes_and_only_survivors_are_visible_downstream() {
    let fake = Fake::start();
    fake.queue(
        "/v1/messages",
        ["5", "3", "4", "2", "5"].iter().map(|t| reply(t)).collect(),
    );
    fake.always("/v1/messages", reply("summary"));
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "k");
    let f = w.file("v.yaml", VERIFY);
    let ran = w.run(&[
        "run",
        &f,
        "--input",
        r#"{"candidate": "Agents that never lose their place"}"#,
        "--json",
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["dialect"], "pipeline");
    let v = steps(&r, "verify")[0];
    assert_eq!(v["output"]["survivors"], 3);
    assert_eq!(v["output"]["action"], "continue");
    assert_eq!(v["output"]["pass"], 1);
    let outs = v["output"]["outputs"].as_array().unwrap();
    assert_eq!(outs.len(), 5);
    for o in outs {
        let n: i64 = o["text"].as_str().unwrap().parse().unwrap();
        assert_eq!(o["pruned"], !(4..=5).contains(&n), "{o}");
    }
    let mut visible: Vec<String> = r["state"]["variables"]["verify"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    visible.sort();
    assert_eq!(visible, ["4", "5", "5"]);
    // The downstream step saw the survivors and nothing else.
    let last = users(&fake).pop().unwrap();
    assert!(last.starts_with("Survivors:\n[1] "), "{last}");
    let mut seen: Vec<&str> = last
        .lines()
        .filter_map(|l| l.split_once("] ").map(|(_, v)| v))
        .collect();
    seen.sort();
    assert_eq!(seen, ["4", "5", "5"], "{last}");
    // Five calls and a summary, each priced: 6 × (10 × $1 + 1 × $5) per million.
    assert!((r["cost_usd"].as_f64().unwrap() - 0.00009).abs() < 1e-12);
}

#[test]
fn no_survivors_aborts_and_keeps_the_outputs_readable() {
    let fake = Fake::start();
    fake.always("/v1/messages", reply("2"));
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "k");
    let f = w.file("v.yaml", VERIFY);
    let ran = w.run(&["run", &f, "--input", r#"{"candidate": "meh"}"#, "--json"]);
    assert_eq!(ran.code, 4);
    let r = ran.json();
    assert_eq!(r["status"], "aborted");
    assert_eq!(steps(&r, "verify")[0]["output"]["action"], "abort");
    assert_eq!(
        r["state"]["variables"]["verify"].as_array().unwrap().len(),
        5
    );
    assert!(steps(&r, "accumulate").is_empty());
}

#[test]
fn nodes_of_a_step_run_concurrently() {
    let fake = Fake::start();
    fake.always(
        "/v1/messages",
        reply("5").delayed(Duration::from_millis(1500)),
    );
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "k");
    let f = w.file(
        "c.yaml",
        "model: claude-haiku-4-5\nsteps:\n  - id: fan\n    nodes: 4\n    systemPrompt: go\n",
    );
    let r = w.run(&["run", &f, "--json"]).json();
    assert_eq!(r["status"], "succeeded");
    let seen = fake.seen("/v1/messages");
    assert_eq!(seen.len(), 4);
    // All four requests were in flight before the first reply could have come back.
    let first = seen.iter().map(|s| s.at).min().unwrap();
    let last = seen.iter().map(|s| s.at).max().unwrap();
    assert!(last.duration_since(first) < Duration::from_millis(1500));
}

fn mock_run(file: &str, mock: &str, input: &str) -> (i32, Value) {
    let w = Weir::new().env("WEIR_MOCK", mock);
    let ran = w.run(&["run", file, "--input", input, "--json"]);
    (ran.code, ran.json())
}

fn example(name: &str) -> String {
    repo_root()
        .join("examples/pipeline")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_reflexion_loop_feeds_the_previous_critique_back() {
    let mock = r#"[{"match": "Critique the answer", "reply": "{\"verdict\": \"bad\", \"why\": \"cite the docs\"}", "times": 1},
                   {"match": "Critique the answer", "reply": "{\"verdict\": \"good\"}"}]"#;
    let (code, r) = mock_run(
        &example("reflexion.yaml"),
        mock,
        r#"{"context": "How do I resume?"}"#,
    );
    assert_eq!(code, 0);
    let drafts = steps(&r, "draft");
    assert_eq!(drafts.len(), 2);
    assert_eq!(drafts[0]["output"]["pass"], 1);
    assert_eq!(drafts[1]["output"]["pass"], 2);
    let critiques = steps(&r, "critique");
    assert_eq!(critiques[0]["output"]["action"], "jump:draft");
    assert_eq!(critiques[1]["output"]["action"], "continue");
    // Pass 1 had no feedback (fallback ""); pass 2 read the failed critique.
    let first = drafts[0]["attempts"][0]["request"]["nodes"][0]["user"]
        .as_str()
        .unwrap();
    let second = drafts[1]["attempts"][0]["request"]["nodes"][0]["user"]
        .as_str()
        .unwrap();
    assert!(!first.contains("Feedback"), "{first}");
    assert!(
        second.contains("Feedback:\n{\"verdict\": \"bad\", \"why\": \"cite the docs\"}"),
        "{second}"
    );
    assert_eq!(steps(&r, "publish").len(), 1);
}

#[test]
fn the_hop_ceiling_bounds_a_reflexion_loop() {
    let mock = r#"[{"match": "Critique the answer", "reply": "{\"verdict\": \"bad\"}"}]"#;
    let w = Weir::new().env("WEIR_MOCK", mock);
    let text = std::fs::read_to_string(example("reflexion.yaml"))
        .unwrap()
        .replace("hopCeiling: 10", "hopCeiling: 5");
    let f = w.file("r.yaml", &text);
    let ran = w.run(&["run", &f, "--input", r#"{"context": "q"}"#, "--json"]);
    assert_eq!(ran.code, 1);
    let r = ran.json();
    assert_eq!(r["error"]["code"], "hop_ceiling_exceeded");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("hop ceiling of 5 step executions"), "{msg}");
    assert!(
        msg.contains("draft ×3") && msg.contains("critique ×2"),
        "{msg}"
    );
}

#[test]
fn early_exit_jumps_forward_when_confident_and_continues_otherwise() {
    let confident =
        r#"[{"match": "Emit JSON", "reply": "{\"answer\": \"Paris\", \"confidence\": 0.97}"}]"#;
    let (code, r) = mock_run(
        &example("early-exit.yaml"),
        confident,
        r#"{"context": "Capital of France?"}"#,
    );
    assert_eq!(code, 0);
    assert_eq!(steps(&r, "draft")[0]["output"]["action"], "jump:answer");
    assert!(steps(&r, "expand").is_empty());
    let user = steps(&r, "answer")[0]["attempts"][0]["request"]["nodes"][0]["user"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(user.contains("Paris"), "{user}");

    let unsure =
        r#"[{"match": "Emit JSON", "reply": "{\"answer\": \"Lyon?\", \"confidence\": 0.4}"}]"#;
    let (code, r) = mock_run(
        &example("early-exit.yaml"),
        unsure,
        r#"{"context": "Capital of France?"}"#,
    );
    assert_eq!(code, 0);
    assert_eq!(steps(&r, "draft")[0]["output"]["action"], "continue");
    assert_eq!(steps(&r, "expand").len(), 1);
    // With no survivor the draft's output stays readable downstream.
    let user = steps(&r, "expand")[0]["attempts"][0]["request"]["nodes"][0]["user"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(user.contains("Lyon?"), "{user}");
}

#[test]
fn other_gate_conditions() {
    let w = Weir::new().env(
        "WEIR_MOCK",
        r#"[{"match": "label", "reply": "verdict: APPROVED (score 9)"}]"#,
    );
    for (cond, went) in [
        ("contains: APPROVED", "continue"),
        ("regex: 'score [0-9]+'", "continue"),
        ("regex: '^denied'", "abort"),
        (
            "expression: \"'approved' in output.lower() and index == 0\"",
            "continue",
        ),
    ] {
        let f = w.file("g.yaml", &format!("model: mock\nsteps:\n  - id: judge\n    systemPrompt: label it\n    if:\n      {cond}\n      then: continue\n      else: abort\n"));
        let r = w.run(&["run", &f, "--json"]).json();
        assert_eq!(steps(&r, "judge")[0]["output"]["action"], went, "{cond}");
    }
}

#[test]
fn one_workflow_in_three_dialects_behaves_the_same() {
    let root = repo_root().join("examples");
    let files = [
        "graph/answer-review.json",
        "machine/answer-review.yaml",
        "pipeline/answer-review.yaml",
    ];
    for (score, status, code) in [("5", "succeeded", 0), ("2", "aborted", 4)] {
        let mock = format!(
            r#"[{{"match": "Score 1-5", "reply": "{score}"}},
                {{"match": "Polish the answer", "reply": "Run weir resume; finished steps are kept."}},
                {{"match": "Answer the question", "reply": "Use weir resume."}}]"#
        );
        let mut answers = Vec::new();
        let mut drafts = Vec::new();
        for f in files {
            let (c, r) = mock_run(
                &root.join(f).to_string_lossy(),
                &mock,
                r#"{"question": "How do I resume?"}"#,
            );
            assert_eq!(c, code, "{f}: {r}");
            assert_eq!(r["status"], status, "{f}");
            let answer = match &r["output"] {
                Value::Array(a) => a.first().cloned().unwrap_or(Value::Null),
                Value::Object(o) => o.get("answer").cloned().unwrap_or(Value::Null),
                other => other.clone(),
            };
            answers.push(answer);
            // The draft each dialect recorded, wherever its state layout keeps it.
            let draft = match &r["state"]["variables"]["draft"] {
                Value::Null => r["state"]["draft"].clone(),
                Value::Array(a) => a[0].clone(),
                v => v["response"].clone(),
            };
            drafts.push(draft);
            if status == "aborted" {
                // The gate stopped the run before the polish step: no dialect ran it.
                assert!(
                    r["steps"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|s| !s["node_id"].as_str().unwrap().contains("polish")),
                    "{f}: {}",
                    r["steps"]
                );
                assert!(
                    !r.to_string()
                        .contains("Run weir resume; finished steps are kept."),
                    "{f}"
                );
            }
        }
        assert_eq!(drafts, vec![json!("Use weir resume."); 3], "{status}");
        if status == "succeeded" {
            assert!(
                answers
                    .iter()
                    .all(|a| a == "Run weir resume; finished steps are kept."),
                "{answers:?}"
            );
        }
    }
}
