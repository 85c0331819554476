//! Runs created, driven, listed and decided over the API.

use axum::body::{Body, to_bytes};
use axum::http::{Method, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

use crate::support::*;

#[tokio::test]
async fn runs_are_created_idempotently_driven_listed_and_paged() {
    let api = api().await;
    let stop = tokio::sync::watch::channel(false);
    let _workers = api.app.rt.start_workers(stop.1.clone());
    api.as_("admin", Method::POST, "/api/workflows", GRAPH_JSON)
        .await;
    let create = |key: Option<&'static str>| {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri("/api/workflows/two-steps/runs")
            .header("authorization", format!("Bearer {}", api.tokens["run"]));
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        api.router.clone().oneshot(
            req.body(Body::from(r#"{"input": {"who": "Ada"}}"#))
                .unwrap(),
        )
    };
    let first = create(Some("k-1")).await.unwrap();
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let first: Value =
        serde_json::from_slice(&to_bytes(first.into_body(), 1 << 20).await.unwrap()).unwrap();
    let again = create(Some("k-1")).await.unwrap();
    assert_eq!(again.status(), StatusCode::ACCEPTED);
    let again: Value =
        serde_json::from_slice(&to_bytes(again.into_body(), 1 << 20).await.unwrap()).unwrap();
    assert_eq!(first["run_id"], again["run_id"]);
    assert_eq!(again["created"], false);
    let run = first["run_id"].as_str().unwrap().to_string();
    let record = api.wait_status(&run, "succeeded").await;
    assert_eq!(record["state"]["greeting"], "mock reply to: hello Ada");
    assert_eq!(record["steps"].as_array().unwrap().len(), 2);
    for _ in 0..4 {
        create(None).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = api
            .as_(
                "read",
                Method::GET,
                &format!("/api/runs?workflow=two-steps&limit=2{cursor}"),
                "",
            )
            .await;
        for r in page.body["runs"].as_array().unwrap() {
            seen.push(r["run_id"].as_str().unwrap().to_string());
        }
        match page.body["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5, "{seen:?}");
    seen.dedup();
    assert_eq!(seen.len(), 5);
    let q = api
        .as_(
            "read",
            Method::GET,
            &format!("/api/runs?q={}", &run[..8]),
            "",
        )
        .await;
    assert_eq!(q.body["runs"][0]["run_id"], run.as_str());
    let bad = api
        .as_("read", Method::GET, "/api/runs?status=done", "")
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    // Re-run from `b`: `a` is reused (no attempts), `b` runs again.
    let rerun = api
        .as_(
            "run",
            Method::POST,
            &format!("/api/runs/{run}/rerun"),
            r#"{"from": "b"}"#,
        )
        .await;
    assert_eq!(rerun.status, StatusCode::ACCEPTED, "{}", rerun.text);
    let again = api
        .wait_status(rerun.body["run_id"].as_str().unwrap(), "succeeded")
        .await;
    assert_eq!(again["steps"][0]["attempts"].as_array().unwrap().len(), 0);
    assert_eq!(again["steps"][1]["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(again["state"]["greeting"], record["state"]["greeting"]);
    assert!(
        again["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "step_reused")
    );
    let _ = stop.0.send(true);
}

#[tokio::test]
async fn of_concurrent_approvals_exactly_one_wins() {
    let api = api().await;
    let stop = tokio::sync::watch::channel(false);
    let _workers = api.app.rt.start_workers(stop.1.clone());
    api.as_typed(
        "admin",
        Method::POST,
        "/api/workflows?id=gate",
        GATE_YAML,
        "application/yaml",
    )
    .await;
    let run = api
        .as_("run", Method::POST, "/api/workflows/gate/runs", "{}")
        .await
        .body["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    api.wait_status(&run, "paused").await;
    let wrong = api
        .as_(
            "approve",
            Method::POST,
            &format!("/api/runs/{run}/approve"),
            r#"{"gate": "done"}"#,
        )
        .await;
    assert_eq!(wrong.status, StatusCode::CONFLICT, "{}", wrong.text);
    let path = format!("/api/runs/{run}/approve");
    let tries: Vec<_> = (0..8)
        .map(|_| {
            api.as_(
                "approve",
                Method::POST,
                &path,
                r#"{"gate": "ask", "comment": "fine"}"#,
            )
        })
        .collect();
    let results = futures_util::future::join_all(tries).await;
    let wins = results
        .iter()
        .filter(|r| r.status == StatusCode::OK)
        .count();
    let conflicts = results
        .iter()
        .filter(|r| r.status == StatusCode::CONFLICT)
        .count();
    assert_eq!(
        (wins, conflicts),
        (1, 7),
        "{:?}",
        results.iter().map(|r| &r.text).collect::<Vec<_>>()
    );
    let done = api.wait_status(&run, "succeeded").await;
    assert!(
        done["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "gate_decided" && e["by"] == "token:approve")
    );
    // Cancel a paused run at once; a finished run cannot be cancelled.
    let other = api
        .as_("run", Method::POST, "/api/workflows/gate/runs", "{}")
        .await
        .body["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    api.wait_status(&other, "paused").await;
    let c = api
        .as_(
            "run",
            Method::POST,
            &format!("/api/runs/{other}/cancel"),
            "",
        )
        .await;
    assert_eq!(
        (c.status, c.body["outcome"].as_str()),
        (StatusCode::ACCEPTED, Some("cancelled"))
    );
    let c = api
        .as_("run", Method::POST, &format!("/api/runs/{run}/cancel"), "")
        .await;
    assert_eq!(c.status, StatusCode::CONFLICT);
    let _ = stop.0.send(true);
}

#[tokio::test]
async fn a_graph_workflow_s_declared_input_is_checked_before_a_run_exists() {
    let api = api().await;
    let doc = r#"{"name": "Topic Writer",
      "input": {"type": "object", "required": ["topic"],
                "properties": {"topic": {"type": "string"}, "words": {"type": "integer", "default": 50}}},
      "nodes": [{"id": "write", "type": "agent",
                 "config": {"model": "mock", "user_message": "{words} words on {topic}", "output_key": "text"}}],
      "edges": []}"#;
    let saved = api.as_("admin", Method::POST, "/api/workflows", doc).await;
    assert_eq!(saved.status, StatusCode::CREATED, "{}", saved.body);
    let refused = api
        .as_(
            "run",
            Method::POST,
            "/api/workflows/topic-writer/runs",
            r#"{"input": {"words": "many"}}"#,
        )
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.body
    );
    assert_eq!(refused.body["error"]["code"], "invalid_request");
    let problems = refused.body["error"]["details"]["problems"].to_string();
    assert!(
        problems.contains("topic"),
        "the missing key is named: {problems}"
    );
    assert!(
        problems.contains("words"),
        "the mistyped key is named: {problems}"
    );
    let runs = api.as_("read", Method::GET, "/api/runs", "").await;
    assert_eq!(
        runs.body["runs"],
        serde_json::json!([]),
        "no run was created"
    );

    let stop = tokio::sync::watch::channel(false);
    let _workers = api.app.rt.start_workers(stop.1.clone());
    let created = api
        .as_(
            "run",
            Method::POST,
            "/api/workflows/topic-writer/runs",
            r#"{"input": {"topic": "tides"}}"#,
        )
        .await;
    assert_eq!(created.status, StatusCode::ACCEPTED, "{}", created.body);
    let run = created.body["run_id"].as_str().unwrap().to_string();
    let record = api.wait_status(&run, "succeeded").await;
    assert_eq!(
        record["state"]["text"], "mock reply to: 50 words on tides",
        "the schema's default filled the missing `words`"
    );
}
