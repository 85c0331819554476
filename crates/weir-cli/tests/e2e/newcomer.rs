//! What a newcomer does first: `weir init`, running any workflow offline with `--model
//! mock`, a workflow's mock script found beside it, and hints that paste as printed.

use crate::support::{Weir, steps};

#[test]
fn init_writes_a_workflow_of_each_dialect_that_runs_offline() {
    let w = Weir::new();
    for dialect in ["graph", "machine", "pipeline"] {
        let file = w
            .path(&format!("{dialect}.yaml"))
            .to_string_lossy()
            .to_string();
        let made = w.run(&["init", &file, "--dialect", dialect]);
        assert_eq!(made.code, 0, "{}", made.stderr);
        assert!(
            made.stdout.contains(&format!("weir run {file}")),
            "{}",
            made.stdout
        );
        let ran = w.run(&["run", &file, "--input", r#"{"topic": "tides"}"#, "--json"]);
        assert_eq!(ran.code, 0, "{dialect}: {}", ran.stderr);
        assert_eq!(ran.json()["status"], "succeeded");
        // As the README shows it, without input: the topic's default is filled in.
        let ran = w.run(&["run", &file, "--json"]);
        assert_eq!(ran.code, 0, "{dialect}: {}", ran.stderr);
        assert_eq!(ran.json()["input"]["topic"], "tides");
        // A mistyped input is refused before a run exists, naming the key and the type.
        let before = w.run_ids().len();
        let bad = w.run(&["run", &file, "--input", r#"{"topic": 3}"#]);
        assert_eq!(bad.code, 2, "{dialect}: {}", bad.stderr);
        assert!(
            bad.stderr.contains("/topic: 3 is not of type \"string\""),
            "{}",
            bad.stderr
        );
        assert_eq!(w.run_ids().len(), before, "no run was created");
        // A second init does not overwrite the user's file.
        let again = w.run(&["init", &file, "--dialect", dialect]);
        assert_eq!(again.code, 2);
        assert!(again.stderr.contains("--force"), "{}", again.stderr);
    }
    let bad = w.run(&["init", "x.yaml", "--dialect", "flowchart"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}

const REAL_MODELS: &str = r#"{"nodes": [
  {"id": "ask", "type": "agent", "config": {"model": "claude-haiku-4-5",
   "fallback_models": ["gpt-4o-mini"], "user_message": "Say hi to {name}"}}],
 "edges": []}"#;

#[test]
fn model_mock_runs_a_workflow_of_real_models_offline() {
    // No API keys, and providers pointed at a closed port: only the mock can answer.
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9");
    let f = w.file("real.json", REAL_MODELS);
    let without = w.run(&["run", &f, "--input", r#"{"name": "Ada"}"#, "--json"]);
    assert_eq!(
        without.code, 1,
        "real models without keys fail: {}",
        without.stderr
    );
    let ran = w.run(&[
        "run",
        &f,
        "--model",
        "mock",
        "--input",
        r#"{"name": "Ada"}"#,
        "--json",
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("every model call goes to `mock`"),
        "{}",
        ran.stderr
    );
    let r = ran.json();
    let step = steps(&r, "ask")[0];
    assert_eq!(
        step["output"]["text"], "mock reply to: Say hi to Ada",
        "{step}"
    );
    let calls = step["attempts"][0]["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "the fallbacks are not tried: {calls:?}");
    assert_eq!(calls[0]["model"], "mock");
    let unknown = w.run(&["run", &f, "--model", "gpt4-typo", "--json"]);
    assert_eq!(unknown.code, 2, "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains("--model gpt4-typo"),
        "{}",
        unknown.stderr
    );
}

#[test]
fn a_mock_script_beside_the_workflow_is_used_and_weir_mock_overrides_it() {
    let w = Weir::new();
    let f = w.file(
        "greet.json",
        r#"{"nodes": [{"id": "ask", "type": "agent", "config": {"model": "mock", "user_message": "Greet {name}"}}], "edges": []}"#,
    );
    w.file(
        "greet.mock.json",
        r#"[{"match": "Greet", "reply": "Hello from the sidecar"}]"#,
    );
    let ran = w.run(&["run", &f, "--input", r#"{"name": "Ada"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("greet.mock.json"),
        "the run says which script: {}",
        ran.stderr
    );
    assert_eq!(ran.json()["output"]["text"], "Hello from the sidecar");
    let over = Weir::new().env(
        "WEIR_MOCK",
        r#"[{"match": "Greet", "reply": "From WEIR_MOCK"}]"#,
    );
    let ran = over.run(&["run", &f, "--input", r#"{"name": "Ada"}"#, "--json"]);
    assert_eq!(
        ran.json()["output"]["text"],
        "From WEIR_MOCK",
        "{}",
        ran.stderr
    );
    // A broken sidecar is an error naming the file, not a silent default.
    w.file("greet.mock.json", "[{\"match\": ");
    let broken = w.run(&["run", &f, "--json"]);
    assert_eq!(broken.code, 2, "{}", broken.stderr);
    assert!(
        broken.stderr.contains("greet.mock.json"),
        "{}",
        broken.stderr
    );
}

#[test]
fn a_paused_runs_hints_carry_the_db_and_model_flags_and_paste_as_printed() {
    let w = Weir::new();
    let db = w.path("other place.db").to_string_lossy().to_string();
    let gate = crate::support::repo_root().join("examples/graph/approval.yaml");
    let ran = w.run(&[
        "run",
        &gate.to_string_lossy(),
        "--db",
        &db,
        "--model",
        "mock",
        "--input",
        r#"{"customer": "Ada", "amount": 250}"#,
    ]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    let approve = ran
        .stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("approve: "))
        .unwrap_or_else(|| panic!("no approve hint:\n{}", ran.stdout))
        .replace(" [--input JSON]", "");
    assert!(approve.contains(&format!("--db '{db}'")), "{approve}");
    assert!(approve.contains("--model mock"), "{approve}");
    // Pasted into a shell as printed, with the database only reachable through the flag.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(approve.replacen("weir", crate::support::bin(), 1))
        .env_remove("WEIR_DB")
        .env("HOME", w.path(""))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn short_ids_are_taken_everywhere_and_unknown_or_ambiguous_ones_are_explained() {
    let w = Weir::new();
    let ran = w.run_approval("Ada", 250);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    let id = ran.json()["run_id"].as_str().unwrap().to_string();
    let short = &id[..8];
    // Human output prints the 8-character id, and the hint it prints works as printed.
    let human = w.run(&["runs", "show", short]);
    assert_eq!(human.code, 3, "{}", human.stderr);
    assert!(
        human.stdout.contains(&format!("weir approve {short} ")),
        "{}",
        human.stdout
    );
    assert!(
        human.stdout.contains(&id),
        "the whole id is there too: {}",
        human.stdout
    );
    let approved = w.run(&["approve", short, "--json"]);
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    assert_eq!(approved.json()["run_id"], id.as_str());
    // An unknown id names the database and how it was chosen.
    let missing = w.run(&["runs", "show", "0000dead"]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    let db = w.path("weir.db").to_string_lossy().to_string();
    assert!(
        missing.stderr.contains(&db) && missing.stderr.contains("WEIR_DB"),
        "{}",
        missing.stderr
    );
    // A prefix two runs share is refused, with both listed.
    let mut ids = vec![id.clone()];
    while ids.iter().all(|i| !i.starts_with(&id[..1]) || i == &id) {
        let r = w.run_approval("Bo", 10);
        ids.push(r.json()["run_id"].as_str().unwrap().to_string());
    }
    let prefix = &id[..1];
    let ambiguous = w.run(&["runs", "show", prefix]);
    assert_eq!(ambiguous.code, 2, "{}", ambiguous.stderr);
    assert!(
        ambiguous.stderr.contains("ambiguous"),
        "{}",
        ambiguous.stderr
    );
    assert!(ambiguous.stderr.contains(&id), "{}", ambiguous.stderr);
}

#[test]
fn runs_list_filters_by_status_workflow_and_time_and_shows_steps_and_errors() {
    let w = Weir::new();
    let ok = w.file(
        "ok.json",
        r#"{"name": "fine", "nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "hi"}}], "edges": []}"#,
    );
    let bad = w.file(
        "bad.json",
        r#"{"name": "a-workflow-with-a-very-long-name-indeed", "nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "{missing}"}}], "edges": []}"#,
    );
    assert_eq!(w.run(&["run", &ok]).code, 0);
    assert_eq!(w.run(&["run", &ok]).code, 0);
    assert_eq!(w.run(&["run", &bad]).code, 1);
    let list = |args: &[&str]| {
        let mut all = vec!["runs", "list", "--json"];
        all.extend_from_slice(args);
        let ran = w.run(&all);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        ran.json().as_array().unwrap().clone()
    };
    assert_eq!(list(&[]).len(), 3);
    assert_eq!(list(&["--status", "failed"]).len(), 1);
    assert_eq!(list(&["--workflow", "fine"]).len(), 2);
    assert_eq!(list(&["--limit", "1"]).len(), 1);
    assert_eq!(list(&["--since", "1h"]).len(), 3);
    assert_eq!(list(&["--since", "2999-01-01T00:00:00Z"]).len(), 0);
    let failed = &list(&["--status", "failed"])[0];
    assert_eq!(failed["steps"], 1);
    assert_eq!(failed["error_code"], "node_failed", "{failed}");
    let table = w.run(&["runs", "list"]).stdout;
    let header = table.lines().next().unwrap();
    for col in [
        "RUN", "WORKFLOW", "STATUS", "STARTED", "DURATION", "STEPS", "COST", "ERROR",
    ] {
        assert!(header.contains(col), "{header}");
    }
    assert!(
        table.contains("a-workflow-with-a-very-…"),
        "long names are cut with …:\n{table}"
    );
    assert!(table.contains("node_failed"), "{table}");
    let wrong = w.run(&["runs", "list", "--status", "done"]);
    assert_eq!(wrong.code, 2, "{}", wrong.stderr);
    let wrong = w.run(&["runs", "list", "--since", "yesterday"]);
    assert_eq!(wrong.code, 2, "{}", wrong.stderr);
}

/// Every dialect may declare its input as a JSON Schema (`input:` at the top level): a
/// missing or mistyped key is refused before a run exists, each named, with exit 2 and
/// `invalid_input` under `--json`; a bad schema is a validation error.
#[test]
fn a_declared_input_is_checked_before_the_run_is_created_in_every_dialect() {
    let w = Weir::new();
    let schema = "input:\n  type: object\n  properties:\n    n: {type: integer}\n    \
                  who: {type: string}\n  required: [n, who]\n";
    let graph = w.file(
        "g.yaml",
        &format!(
            "name: g\n{schema}nodes:\n  - id: done\n    type: end\n    config: \
             {{output: {{n: \"{{n}}\"}}}}\nedges: []\n"
        ),
    );
    let pipeline = w.file(
        "p.yaml",
        &format!(
            "name: p\nmodel: mock\n{schema}steps:\n  - id: a\n    fields: [{{ name: N, \
             type: text, from: input.who }}]\n    systemPrompt: Say hi.\n"
        ),
    );
    for f in [&graph, &pipeline] {
        let ran = w.run(&["run", f, "--input", r#"{"n": "seven"}"#, "--json"]);
        assert_eq!(ran.code, 2, "{f}: {}", ran.stderr);
        let e = &ran.json()["error"];
        assert_eq!(e["code"], "invalid_input", "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(
            message.contains("/n: \"seven\" is not of type \"integer\""),
            "{message}"
        );
        assert!(
            message.contains("\"who\" is a required property"),
            "{message}"
        );
        let ok = w.run(&["run", f, "--input", r#"{"n": 7, "who": "Ada"}"#, "--json"]);
        assert_eq!(ok.code, 0, "{f}: {}", ok.stderr);
    }
    assert_eq!(w.run_ids().len(), 2, "only the valid runs exist");
    let bad = w.file(
        "bad.yaml",
        "name: b\ninput: {type: nonsense}\nnodes:\n  - id: done\n    type: end\nedges: []\n",
    );
    let ran = w.run(&["validate", &bad]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("E017"), "{}", ran.stderr);
}
