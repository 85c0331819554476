//! The JSON contract of `--json` (docs/cli.md, docs/run-record.schema.json): every run
//! record any command prints matches the published JSON Schema (every key present, null when
//! absent, `schema_version`), costs carry no float noise, list and validate outputs are
//! arrays with every key, and errors are `{"error": {"code", "message"}}` on stdout.

use serde_json::Value;

use crate::support::{Weir, repo_root};

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(repo_root().join("docs/run-record.schema.json")).unwrap();
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
}

/// Every `cost_usd` in `v`, at any depth, with the path to it.
fn costs(v: &Value, path: &str, out: &mut Vec<(String, f64)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "cost_usd"
                    && let Some(c) = x.as_f64()
                {
                    out.push((format!("{path}.{k}"), c));
                }
                costs(x, &format!("{path}.{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                costs(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn check_record(schema: &jsonschema::Validator, what: &str, r: &Value) {
    let errors: Vec<String> = schema
        .iter_errors(r)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what}: the record does not match the schema:\n{}",
        errors.join("\n")
    );
    let mut found = Vec::new();
    costs(r, "", &mut found);
    for (path, c) in found {
        let text = serde_json::to_string(&c).unwrap();
        let decimals = text.split_once('.').map_or(0, |(_, d)| d.len());
        assert!(decimals <= 9, "{what}: {path} = {text} has float noise");
    }
}

#[test]
fn every_json_output_keeps_the_contract() {
    let schema = schema();
    let w = Weir::new();
    // Prices that make float sums noisy (1.1 and 3.3 per million tokens).
    w.file(
        "weir.toml",
        "[pricing.\"mock\"]\ninput_per_mtok = 1.1\noutput_per_mtok = 3.3\n",
    );
    let ex = |p: &str| {
        repo_root()
            .join("examples")
            .join(p)
            .to_string_lossy()
            .to_string()
    };
    let input = |p: &str| format!("@{}", ex(p));
    let mut records: Vec<(String, Value)> = Vec::new();
    for (file, inp, code) in [
        (
            "graph/support-triage.json",
            "graph/support-triage.input.json",
            0,
        ),
        (
            "graph/lead-scoring.yaml",
            "graph/lead-scoring.input.json",
            0,
        ),
        (
            "machine/incident-vote.yaml",
            "machine/incident-vote.input.json",
            0,
        ),
        (
            "pipeline/score-threshold.yaml",
            "pipeline/score-threshold.input.json",
            0,
        ),
        ("graph/approval.yaml", "graph/approval.input.json", 3),
    ] {
        let ran = w.run(&["run", &ex(file), "--input", &input(inp), "--json"]);
        assert_eq!(ran.code, code, "{file}: {}", ran.stderr);
        records.push((file.to_string(), ran.json()));
    }
    // A failed run (a template naming a key the input lacks) and a retried attempt.
    let failing = w.file(
        "failing.json",
        r#"{"nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "{missing}"}}], "edges": []}"#,
    );
    let ran = w.run(&["run", &failing, "--json"]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    records.push(("failed".into(), ran.json()));
    let flaky = w.file(
        "flaky.json",
        r#"{"nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "flaky", "retry_count": 1}}], "edges": []}"#,
    );
    let retried = Weir::new().env(
        "WEIR_MOCK",
        r#"[{"match": "flaky", "error": "server_error", "times": 1}, {"match": "flaky", "reply": "ok"}]"#,
    );
    let ran = retried.run(&["run", &flaky, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["steps"][0]["attempts"][0]["error_class"], "server_error");
    records.push(("retried".into(), r));
    // Approve and reject print records too, and so does runs show.
    let paused = records
        .iter()
        .find(|(f, _)| f == "graph/approval.yaml")
        .unwrap()
        .1
        .clone();
    let id = paused["run_id"].as_str().unwrap();
    let approved = w.run(&["approve", id, "--json"]);
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    records.push(("approved".into(), approved.json()));
    let again = w.run(&[
        "run",
        &ex("graph/approval.yaml"),
        "--input",
        &input("graph/approval.input.json"),
        "--json",
    ]);
    let id2 = again.json()["run_id"].as_str().unwrap().to_string();
    let rejected = w.run(&["reject", &id2, "--reason", "no", "--json"]);
    assert_eq!(rejected.code, 1, "{}", rejected.stderr);
    records.push(("rejected".into(), rejected.json()));
    records.push((
        "shown".into(),
        w.run(&["runs", "show", id, "--json"]).json(),
    ));
    for (what, r) in &records {
        check_record(&schema, what, r);
    }
    // The noisy prices were charged, and rounded.
    assert!(records[0].1["cost_usd"].as_f64().unwrap() > 0.0);

    // runs list: an array of summaries with every key.
    let list = w.run(&["runs", "list", "--json"]).json();
    for s in list.as_array().unwrap() {
        for key in [
            "run_id",
            "workflow",
            "status",
            "started_at",
            "finished_at",
            "cost_usd",
            "pin",
            "steps",
            "error_code",
        ] {
            assert!(s.get(key).is_some(), "runs list lacks `{key}`: {s}");
        }
    }
    // validate: always an array.
    let v = w.run(&["validate", &failing, "--json"]).json();
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");

    // Errors under --json: one JSON object on stdout.
    for (args, code, error_code) in [
        (vec!["runs", "show", "nope", "--json"], 2, "usage"),
        (vec!["approve", "nope", "--json"], 2, "usage"),
        (vec!["run", "/no/such/file.yaml", "--json"], 2, "usage"),
    ] {
        let ran = w.run(&args);
        assert_eq!(ran.code, code, "{args:?}: {}", ran.stderr);
        let e = ran.json();
        assert_eq!(e["error"]["code"], error_code, "{args:?}: {e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{e}"
        );
    }
    let bad = w.file(
        "bad.json",
        r#"{"nodes": [{"id": "a", "type": "agnet"}], "edges": []}"#,
    );
    let ran = w.run(&["run", &bad, "--json"]);
    assert_eq!(ran.code, 2);
    let e = ran.json();
    assert_eq!(e["error"]["code"], "invalid_workflow", "{e}");
    assert!(!e["error"]["errors"].as_array().unwrap().is_empty(), "{e}");
}
