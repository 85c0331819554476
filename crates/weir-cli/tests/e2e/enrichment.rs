//! The spec's complete graph ("Data Enrichment Pipeline") end to end.

use serde_json::json;

use crate::support::{Fake, Reply, Weir, repo_root, steps};

fn run_enrichment(zen: &str) -> (Fake, crate::support::Ran) {
    let fake = Fake::start();
    fake.always("/zen", Reply::text(200, zen));
    fake.always("/hook/T000/SECRET123", Reply::text(200, "ok"));
    let w = Weir::new().env(
        "SLACK_WEBHOOK_URL",
        &format!("{}/hook/T000/SECRET123", fake.url),
    );
    let file = repo_root().join("examples/graph/enrichment.json");
    let input = json!({"source_url": format!("{}/zen", fake.url)}).to_string();
    let ran = w.run(&["run", file.to_str().unwrap(), "--input", &input, "--json"]);
    (fake, ran)
}

#[test]
fn anomaly_takes_the_alert_branch() {
    let (fake, ran) = run_enrichment("Something unusual happened in the logs.");
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["status"], "succeeded");
    assert_eq!(r["workflow"], "Data Enrichment Pipeline");
    assert_eq!(r["dialect"], "graph");
    let order: Vec<&str> = r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["node_id"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["fetch", "summarize", "check", "alert"]);
    assert_eq!(steps(&r, "check")[0]["route"], "true");
    assert_eq!(
        steps(&r, "check")[0]["output"],
        json!({"expression": "'unusual' in str(summary).lower()", "result": true})
    );
    // The fetched text flowed through the agent into the Slack message.
    let hook = fake.seen("/hook/T000/SECRET123");
    assert_eq!(hook.len(), 1);
    let text = hook[0].json()["text"].as_str().unwrap().to_string();
    assert!(text.starts_with("Anomaly: "), "{text}");
    assert!(text.contains("Something unusual happened"), "{text}");
    assert!(hook[0].headers.contains_key("idempotency-key"));
    // State carries every output key; the webhook URL (a secret) appears nowhere.
    assert_eq!(
        r["state"]["raw_data"]["body"],
        "Something unusual happened in the logs."
    );
    assert!(r["state"]["summary"].as_str().unwrap().contains("unusual"));
    assert!(
        !ran.stdout.contains("SECRET123"),
        "webhook secret leaked into the run record"
    );
    assert!(!ran.stderr.contains("SECRET123"));
    // Agent steps store a null input snapshot; others store public state.
    assert!(steps(&r, "summarize")[0]["input"].is_null());
    assert_eq!(steps(&r, "check")[0]["input"]["raw_data"]["status"], 200);
    // The run id went to stderr as soon as the run started.
    assert!(ran.stderr.contains(r["run_id"].as_str().unwrap()));
}

#[test]
fn calm_data_takes_the_log_branch() {
    let (fake, ran) = run_enrichment("Design for failure.");
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(steps(&r, "check")[0]["route"], "false");
    assert!(steps(&r, "alert").is_empty());
    assert_eq!(steps(&r, "log").len(), 1);
    let hook = fake.seen("/hook/T000/SECRET123");
    assert!(
        hook[0].json()["text"]
            .as_str()
            .unwrap()
            .starts_with("Pipeline OK: ")
    );
    assert_eq!(r["state"]["log_result"]["ok"], true);
}

#[test]
fn a_failing_webhook_fails_the_run_without_leaking_it() {
    let fake = Fake::start();
    fake.always("/zen", Reply::text(200, "calm"));
    fake.always("/hook/SECRET999", Reply::text(500, "boom"));
    let w = Weir::new().env("SLACK_WEBHOOK_URL", &format!("{}/hook/SECRET999", fake.url));
    let file = repo_root().join("examples/graph/enrichment.json");
    let input = json!({"source_url": format!("{}/zen", fake.url)}).to_string();
    let ran = w.run(&["run", file.to_str().unwrap(), "--input", &input, "--json"]);
    assert_eq!(ran.code, 1);
    let r = ran.json();
    assert_eq!(r["status"], "failed");
    assert_eq!(r["error"]["node_id"], "log");
    assert_eq!(r["error"]["code"], "node_failed");
    assert!(r["error"]["message"].as_str().unwrap().contains("HTTP 500"));
    assert!(!ran.stdout.contains("SECRET999"));
}
