//! The machine dialect (spec 000) through the binary: judges, validators, consensus, scripts
//! under bun, and the retry prompts, against a fake Anthropic server.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Fake, Reply, Weir, steps};

fn reply(text: &str) -> Reply {
    Reply::json(
        200,
        json!({
            "id": "msg", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 100, "output_tokens": 20}
        }),
    )
}

fn weir(fake: &Fake) -> Weir {
    Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
}

fn prompts(fake: &Fake) -> Vec<String> {
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

const BOOLEAN_INSTRUCTION: &str = "Respond with a JSON object and nothing else — no prose before or after,\nno markdown fences:\n{\n  \"reasoning\": \"<your step-by-step reasoning>\",\n  \"result\": <true or false>\n}";

fn judge(validator: &str, on: &str, extra: &str) -> String {
    format!(
        r#"name: judged
nodes:
  build:
    type: script
    script: |
      console.log("build ok: 42 files");
      export default true;
    next: gate
  gate:
    type: ai_judge
    model: claude-sonnet-4-5
    prompt: |
      Given the build output below, is it safe to deploy?

      {{{{ build.stdout }}}}
    validator: {validator}
{extra}    on: {on}
  deploy: {{type: end, output: {{went: deploy}}}}
  abort: {{type: end, status: aborted}}
  review: {{type: end, output: {{went: review}}}}
"#
    )
}

#[test]
fn a_boolean_judge_routes_and_sees_the_exact_instruction() {
    let fake = Fake::start();
    fake.queue(
        "/v1/messages",
        vec![reply(r#"{"reasoning": "build is green", "result": true}"#)],
    );
    let w = weir(&fake);
    let f = w.file(
        "j.yaml",
        &judge("{kind: boolean}", "{'true': deploy, 'false': abort}", ""),
    );
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(steps(&r, "gate")[0]["route"], "true");
    assert_eq!(r["output"], json!({"went": "deploy"}));
    assert_eq!(r["state"]["variables"]["gate"]["result"], true);
    assert_eq!(
        r["state"]["variables"]["gate"]["reasoning"],
        "build is green"
    );
    let p = &prompts(&fake)[0];
    // The template read the script's stdout, and the spec's instruction was appended verbatim.
    assert!(p.contains("build ok: 42 files"), "{p}");
    assert!(p.ends_with(BOOLEAN_INSTRUCTION), "{p}");
}

#[test]
fn an_enum_judge_retries_with_the_original_prompt_bad_response_and_parser_error() {
    let fake = Fake::start();
    fake.queue(
        "/v1/messages",
        vec![
            reply(r#"{"reasoning": "some risk", "result": "Medium"}"#),
            reply(r#"{"reasoning": "some risk", "result": "medium"}"#),
        ],
    );
    let w = weir(&fake);
    let f = w.file(
        "j.yaml",
        &judge(
            "{kind: enum, routes: [low, medium, high]}",
            "{low: deploy, medium: review, high: abort}",
            "    maxRetries: 2\n",
        ),
    );
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(steps(&r, "gate")[0]["route"], "medium");
    assert_eq!(r["output"], json!({"went": "review"}));
    let p = prompts(&fake);
    assert!(p[0].ends_with("\"result\": \"<exactly one of: low, medium, high>\"\n}\nThe \"result\" value must be reproduced exactly (case-sensitive)."), "{}", p[0]);
    // One retry prompt holding the original prompt, the bad response and the parser error.
    assert!(p[1].starts_with(&p[0]), "{}", p[1]);
    assert!(p[1].contains(r#"{"reasoning": "some risk", "result": "Medium"}"#));
    assert!(p[1].contains("must be exactly one of: low, medium, high"));
    let calls = steps(&r, "gate")[0]["attempts"][0]["calls"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(calls.len(), 2);
    assert!(
        calls[0]["validation_errors"][0]
            .as_str()
            .unwrap()
            .contains("Medium")
    );
}

#[test]
fn a_confidence_judge_writes_its_score_for_downstream_templates() {
    let fake = Fake::start();
    fake.queue(
        "/v1/messages",
        vec![
            reply(r#"{"reasoning": "solid", "score": 85}"#),
            reply("fine"),
        ],
    );
    let w = weir(&fake);
    let f = w.file(
        "c.yaml",
        r#"
nodes:
  quality:
    type: ai_judge
    model: claude-sonnet-4-5
    prompt: "Score this answer."
    validator: {kind: confidence, threshold: 80}
    on: {'true': publish, 'false': revise}
  publish:
    type: ai_agent
    model: claude-sonnet-4-5
    prompt: "Publish with score {{ quality.score }} ({{ variables.quality.result }})"
  revise: {type: end, status: failed}
"#,
    );
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["state"]["variables"]["quality"]["score"], 85);
    assert_eq!(r["state"]["variables"]["publish"]["response"], "fine");
    assert!(
        prompts(&fake)[1].contains("Publish with score 85 (true)"),
        "{}",
        prompts(&fake)[1]
    );
    // Below the threshold routes 'false'.
    let fake = Fake::start();
    fake.queue(
        "/v1/messages",
        vec![reply(r#"{"reasoning": "weak", "score": 79}"#)],
    );
    let w = weir(&fake);
    let f = w.file(
        "c.yaml",
        r#"
nodes:
  quality:
    type: ai_judge
    model: claude-sonnet-4-5
    prompt: "Score this answer."
    validator: {kind: confidence, threshold: 80}
    on: {'true': publish, 'false': revise}
  publish: {type: end}
  revise: {type: end, status: aborted}
"#,
    );
    assert_eq!(w.run(&["run", &f]).code, 4);
}

#[test]
fn retries_exhausted_fail_the_node_and_halt_the_run() {
    let fake = Fake::start();
    fake.always("/v1/messages", reply("Yes, looks safe to me!"));
    let w = weir(&fake);
    let f = w.file(
        "j.yaml",
        &judge(
            "{kind: boolean}",
            "{'true': deploy, 'false': abort}",
            "    maxRetries: 2\n",
        ),
    );
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 1);
    let r = ran.json();
    assert_eq!(r["error"]["node_id"], "gate");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("after 2 retries")
    );
    assert_eq!(fake.seen("/v1/messages").len(), 3);
    assert!(steps(&r, "deploy").is_empty() && steps(&r, "abort").is_empty());
    // maxRetries: 0 disables retries.
    let fake = Fake::start();
    fake.always("/v1/messages", reply("nope"));
    let w = weir(&fake);
    let f = w.file(
        "j.yaml",
        &judge(
            "{kind: boolean}",
            "{'true': deploy, 'false': abort}",
            "    maxRetries: 0\n",
        ),
    );
    assert_eq!(w.run(&["run", &f]).code, 1);
    assert_eq!(fake.seen("/v1/messages").len(), 1);
}

fn vote(kind: &str, agents: u32, quorum: u32, on: &str) -> String {
    format!(
        r#"nodes:
  vote:
    type: consensus
    model: claude-sonnet-4-5
    prompt: "Is the change safe to merge?"
    agentCount: {agents}
    quorum: {quorum}
    validator: {kind}
    on: {on}
  a: {{type: end}}
  b: {{type: end, status: aborted}}
"#
    )
}

fn run_vote(replies: &[&str], yaml: &str) -> (Value, Fake) {
    let fake = Fake::start();
    fake.queue("/v1/messages", replies.iter().map(|r| reply(r)).collect());
    let w = weir(&fake);
    let f = w.file("v.yaml", yaml);
    let ran = w.run(&["run", &f, "--json"]);
    assert!(ran.code == 0 || ran.code == 4, "{}", ran.stderr);
    (ran.json(), fake)
}

#[test]
fn a_boolean_consensus_needs_quorum_approvals() {
    let yes = r#"{"reasoning": "ok", "result": true}"#;
    let no = r#"{"reasoning": "risky", "result": false}"#;
    let yaml = vote("{kind: boolean}", 3, 2, "{approved: a, rejected: b}");
    let (r, fake) = run_vote(&[yes, yes, no], &yaml);
    assert_eq!(steps(&r, "vote")[0]["route"], "approved");
    assert_eq!(r["state"]["variables"]["vote"]["approvals"], 2);
    assert_eq!(
        r["state"]["variables"]["vote"]["votes"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(fake.seen("/v1/messages").len(), 3);
    // One short of quorum.
    let (r, _) = run_vote(&[yes, no, no], &yaml);
    assert_eq!(steps(&r, "vote")[0]["route"], "rejected");
    // Every agent's call is charged: 3 × (100 × $3 + 20 × $15) per million.
    assert!((r["cost_usd"].as_f64().unwrap() - 0.0018).abs() < 1e-12);
}

#[test]
fn a_confidence_consensus_counts_scores_at_the_threshold() {
    let yaml = vote(
        "{kind: confidence, threshold: 80}",
        3,
        2,
        "{approved: a, rejected: b}",
    );
    let s = |n: u32| format!(r#"{{"reasoning": "r", "score": {n}}}"#);
    let (r, _) = run_vote(&[&s(80), &s(95), &s(10)], &yaml);
    assert_eq!(steps(&r, "vote")[0]["route"], "approved");
    let (r, _) = run_vote(&[&s(79), &s(95), &s(10)], &yaml);
    assert_eq!(steps(&r, "vote")[0]["route"], "rejected");
}

#[test]
fn an_answer_consensus_decides_by_plurality_and_ties_are_undecided() {
    let yaml = vote("{kind: answer}", 3, 2, "{decided: a, undecided: b}");
    let a = |t: &str| format!(r#"{{"reasoning": "r", "answer": "{t}"}}"#);
    let (r, _) = run_vote(&[&a("Disk full"), &a(" disk full "), &a("DNS")], &yaml);
    assert_eq!(steps(&r, "vote")[0]["route"], "decided");
    assert_eq!(
        r["state"]["variables"]["vote"]["answer"]
            .as_str()
            .unwrap()
            .to_lowercase(),
        "disk full"
    );
    assert_eq!(r["state"]["variables"]["vote"]["count"], 2);
    // Below quorum.
    let (r, _) = run_vote(&[&a("A"), &a("B"), &a("C")], &yaml);
    assert_eq!(steps(&r, "vote")[0]["route"], "undecided");
    // A tie is undecided even when it meets quorum.
    let yaml = vote("{kind: answer}", 4, 2, "{decided: a, undecided: b}");
    let (r, _) = run_vote(&[&a("A"), &a("B"), &a("A"), &a("B")], &yaml);
    assert_eq!(steps(&r, "vote")[0]["route"], "undecided");
}

#[test]
fn answer_choices_are_enforced_with_a_retry() {
    let yaml = vote(
        "{kind: answer, choices: [rollback, hotfix]}",
        1,
        1,
        "{decided: a, undecided: b}",
    );
    let (r, fake) = run_vote(
        &[
            r#"{"reasoning": "r", "answer": "Rollback"}"#,
            r#"{"reasoning": "r", "answer": "rollback"}"#,
        ],
        &yaml,
    );
    assert_eq!(steps(&r, "vote")[0]["route"], "decided");
    assert_eq!(r["state"]["variables"]["vote"]["answer"], "rollback");
    assert!(prompts(&fake)[1].contains("must be exactly one of: rollback, hotfix"));
}

#[test]
fn most_consistent_runs_an_aggregation_pass() {
    let yaml = vote(
        "{kind: most_consistent}",
        3,
        2,
        "{decided: a, undecided: b}",
    );
    let a = |t: &str| format!(r#"{{"reasoning": "r", "answer": "{t}"}}"#);
    let (r, fake) = run_vote(
        &[
            &a("restart the pod"),
            &a("restart the pod now"),
            &a("page the DBA"),
            r#"{"reasoning": "two agree", "index": 2, "agreeing": 2}"#,
        ],
        &yaml,
    );
    assert_eq!(steps(&r, "vote")[0]["route"], "decided");
    let v = &r["state"]["variables"]["vote"];
    assert_eq!(v["answer"], v["votes"][1]["answer"]);
    let agg = &prompts(&fake)[3];
    assert!(
        agg.contains("Several independent answers") && agg.contains("[3]"),
        "{agg}"
    );
    let (r, _) = run_vote(
        &[
            &a("x"),
            &a("y"),
            &a("z"),
            r#"{"reasoning": "none agree", "index": 1, "agreeing": 1}"#,
        ],
        &yaml,
    );
    assert_eq!(steps(&r, "vote")[0]["route"], "undecided");
}

fn script(body: &str, validator: &str, on: &str) -> String {
    let body: String = body.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        "nodes:\n  check:\n    type: script\n    timeout_seconds: 3\n    script: |\n{body}    validator: {validator}\n    on: {on}\n  yes: {{type: end, output: {{went: 'yes'}}}}\n  no: {{type: end, output: {{went: 'no'}}}}\n  high: {{type: end, output: {{went: high}}}}\n  low: {{type: end, output: {{went: low}}}}\n"
    )
}

fn run_script(w: &Weir, yaml: &str) -> (i32, Value) {
    let f = w.file("s.yaml", yaml);
    let ran = w.run(&["run", &f, "--json"]);
    (ran.code, ran.json())
}

#[test]
fn script_values_map_through_validators_as_the_spec_says() {
    let w = Weir::new().env("DEPLOY_ENV", "production");
    // Scripts see the variables declared for them (the spec's process.env.ENV example).
    w.file("weir.toml", "[scripts]\nenv = [\"DEPLOY_ENV\"]\n");
    let b = |code: &str| script(code, "{kind: boolean}", "{'true': 'yes', 'false': 'no'}");
    for (code, went) in [
        ("export default 0;", "no"),
        ("export default '';", "no"),
        ("export default null;", "no"),
        ("export default undefined;", "no"),
        ("export default 'false';", "yes"),
        ("export default [];", "yes"),
        (
            "import { $ } from 'bun';\nconst res = await $`exit 3`.nothrow();\nexport default res.exitCode === 0;",
            "no",
        ),
    ] {
        let (c, r) = run_script(&w, &b(code));
        assert_eq!(c, 0, "{code}: {r}");
        assert_eq!(r["output"]["went"], went, "{code}");
    }
    let e = |code: &str| {
        script(
            code,
            "{kind: enum, routes: [low, high]}",
            "{low: low, high: high}",
        )
    };
    let (_, r) = run_script(
        &w,
        &e("export default process.env.DEPLOY_ENV === 'production' ? 'high' : 'low';"),
    );
    assert_eq!(r["output"]["went"], "high");
    let c = |code: &str| {
        script(
            code,
            "{kind: confidence, threshold: 70}",
            "{'true': 'yes', 'false': 'no'}",
        )
    };
    let (_, r) = run_script(&w, &c("export default 70;"));
    assert_eq!(r["output"]["went"], "yes");
    let (_, r) = run_script(&w, &c("export default { score: 40, note: 'weak' };"));
    assert_eq!(r["output"]["went"], "no");
    assert_eq!(r["state"]["variables"]["check"]["score"], 40.0);
    assert_eq!(
        r["state"]["variables"]["check"]["value"],
        json!({"score": 40, "note": "weak"})
    );
}

#[test]
fn bad_script_values_and_throws_are_hard_failures() {
    let w = Weir::new();
    for (yaml, needle) in [
        (
            script(
                "export default 'medium';",
                "{kind: enum, routes: [low, high]}",
                "{low: low, high: high}",
            ),
            "not one of the routes",
        ),
        (
            script(
                "export default 'abc';",
                "{kind: confidence, threshold: 50}",
                "{'true': 'yes', 'false': 'no'}",
            ),
            "numeric `score`",
        ),
        (
            script(
                "throw new Error('kaboom');",
                "{kind: boolean}",
                "{'true': 'yes', 'false': 'no'}",
            ),
            "kaboom",
        ),
        (
            script(
                "import { $ } from 'bun';\nawait $`exit 3`;\nexport default true;",
                "{kind: boolean}",
                "{'true': 'yes', 'false': 'no'}",
            ),
            "exit code",
        ),
    ] {
        let (code, r) = run_script(&w, &yaml);
        assert_eq!(code, 1, "{yaml}");
        assert_eq!(r["status"], "failed");
        assert_eq!(r["error"]["node_id"], "check");
        assert!(
            r["error"]["message"].as_str().unwrap().contains(needle),
            "{}",
            r["error"]
        );
        // No transition was taken.
        assert_eq!(r["steps"].as_array().unwrap().len(), 1);
    }
}

#[test]
fn a_script_timeout_kills_the_whole_process_tree() {
    let w = Weir::new();
    let yaml = script(
        "import { $ } from 'bun';\nawait $`sleep 47.25`;\nexport default true;",
        "{kind: boolean}",
        "{'true': 'yes', 'false': 'no'}",
    );
    let t = Instant::now();
    let (code, r) = run_script(&w, &yaml);
    assert!(t.elapsed() < Duration::from_secs(20));
    assert_eq!(code, 1);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{}",
        r["error"]
    );
    // The shell's `sleep` child went with it.
    let alive = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("47.25"))
        });
    assert!(!alive, "the script's child process outlived the timeout");
}

#[test]
fn scripts_see_state_capture_output_and_keep_secrets_out() {
    let w = Weir::new()
        .env("SERVICE_API_KEY", "sk-live-supersecret-123")
        .env("UNDECLARED_VAR", "not-for-scripts");
    // The script may see SERVICE_API_KEY (declared for scripts), and its value is a declared
    // secret, so it is redacted from everything recorded. UNDECLARED_VAR never reaches it.
    w.file(
        "weir.toml",
        "[scripts]\nenv = [\"SERVICE_API_KEY\"]\n[secrets]\nSERVICE = { env = \"SERVICE_API_KEY\" }\n",
    );
    let f = w.file(
        "s.yaml",
        r#"
nodes:
  first:
    type: script
    script: |
      console.log("hello from", weir.input.who);
      console.error("warn: key is", process.env.SERVICE_API_KEY, "UNDECLARED_VAR" in process.env);
      export default { n: 41 };
    next: second
  second:
    type: script
    script: |
      export default weir.variables.first.value.n + 1;
"#,
    );
    let ran = w.run(&["run", &f, "--input", r#"{"who": "Ada"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    let first = &r["state"]["variables"]["first"];
    assert_eq!(first["stdout"], "hello from Ada\n");
    assert_eq!(first["exitCode"], 0);
    assert_eq!(first["stderr"], "warn: key is [redacted] false\n");
    assert!(!ran.stdout.contains("supersecret"));
    assert_eq!(r["state"]["variables"]["second"]["value"], 42);
}

#[test]
fn the_input_schema_is_enforced() {
    let w = Weir::new();
    let f = w.file(
        "i.yaml",
        "input:\n  type: object\n  required: [diff]\nnodes:\n  a: {type: end}\n",
    );
    let ran = w.run(&["run", &f, "--input", r#"{"other": 1}"#]);
    assert_eq!(ran.code, 2);
    assert!(
        ran.stderr.contains("input schema") && ran.stderr.contains("diff"),
        "{}",
        ran.stderr
    );
    assert_eq!(w.run(&["run", &f, "--input", r#"{"diff": "x"}"#]).code, 0);
}

#[test]
fn a_transition_back_reruns_the_node_until_the_hop_ceiling() {
    let w = Weir::new();
    let f = w.file(
        "loop.yaml",
        r#"
hopCeiling: 7
nodes:
  draft: {type: ai_agent, model: mock, prompt: "draft", next: check}
  check:
    type: ai_judge
    model: mock
    prompt: "good enough?"
    validator: {kind: confidence, threshold: 90}
    on: {'true': done, 'false': draft}
  done: {type: end}
"#,
    );
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 1);
    let r = ran.json();
    assert_eq!(r["error"]["code"], "hop_ceiling_exceeded");
    assert_eq!(steps(&r, "draft").len(), 4);
    assert_eq!(steps(&r, "check").len(), 3);
}

/// The spec's own example, `process.env.ENV`, without `ENV` in `[scripts] env`: reading it
/// fails the node, naming the variable and where to pass it, instead of routing `low` on an
/// `undefined`; `weir validate` warns before any run.
#[test]
fn a_script_that_reads_a_variable_weir_does_not_pass_fails_naming_it() {
    let w = Weir::new().env("ENV", "production");
    let yaml = script(
        "export default process.env.ENV === 'production' ? 'high' : 'low';",
        "{kind: enum, routes: [low, high]}",
        "{low: low, high: high}",
    );
    let f = w.file("s.yaml", &yaml);
    let checked = w.run(&["validate", &f]);
    assert_eq!(
        checked.code, 0,
        "a warning, not an error: {}",
        checked.stderr
    );
    assert!(
        checked.stderr.contains("W109") && checked.stderr.contains("`ENV`"),
        "{}",
        checked.stderr
    );
    let (code, r) = run_script(&w, &yaml);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["status"], "failed");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("process.env.ENV is not passed to scripts")
            && message.contains("[scripts]")
            && message.contains("weir.toml"),
        "{message}"
    );
    // Passed, it is read.
    w.file("weir.toml", "[scripts]\nenv = [\"ENV\"]\n");
    assert!(!w.run(&["validate", &f]).stderr.contains("W109"));
    let (code, r) = run_script(&w, &yaml);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["output"]["went"], "high");
}
