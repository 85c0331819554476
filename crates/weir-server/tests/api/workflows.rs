//! Workflows saved in versions and validated; request bodies capped and checked.

use axum::http::{Method, StatusCode};

use crate::support::*;

#[tokio::test]
async fn workflows_are_saved_in_versions_and_validated_with_located_diagnostics() {
    let api = api().await;
    let r = api
        .as_("admin", Method::POST, "/api/workflows", GRAPH_JSON)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(
        (r.body["id"].as_str(), r.body["version"].as_u64()),
        (Some("two-steps"), Some(1))
    );
    assert_eq!(r.body["dialect"], "graph");
    // A second POST of the same id conflicts; a PUT is a new version.
    let again = api
        .as_("admin", Method::POST, "/api/workflows", GRAPH_JSON)
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    let v2 = api
        .as_typed(
            "admin",
            Method::PUT,
            "/api/workflows/two-steps",
            &GRAPH_JSON.replace("hello", "hi"),
            "application/json",
        )
        .await;
    assert_eq!(v2.body["version"], 2, "{}", v2.text);
    let versions = api
        .as_("read", Method::GET, "/api/workflows/two-steps/versions", "")
        .await;
    assert_eq!(versions.body["versions"].as_array().unwrap().len(), 2);
    let v1 = api
        .as_(
            "read",
            Method::GET,
            "/api/workflows/two-steps/versions/1",
            "",
        )
        .await;
    assert!(v1.body["source"].as_str().unwrap().contains("hello"));
    // YAML, by content type, with an explicit id.
    let y = api
        .as_typed(
            "admin",
            Method::POST,
            "/api/workflows?id=gate",
            GATE_YAML,
            "application/yaml",
        )
        .await;
    assert_eq!(
        (y.status, y.body["format"].as_str()),
        (StatusCode::CREATED, Some("yaml")),
        "{}",
        y.text
    );
    // An invalid document is refused with the CLI's diagnostics, located.
    let broken = GATE_YAML.replace("target: done", "target: nowhere");
    let bad = api
        .as_typed(
            "admin",
            Method::PUT,
            "/api/workflows/gate",
            &broken,
            "application/yaml",
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(bad.body["error"]["code"], "invalid_workflow");
    let e = &bad.body["error"]["details"]["errors"][0];
    assert!(
        e["code"].as_str().unwrap().starts_with('E') && e["line"].as_u64().unwrap() > 0,
        "{e}"
    );
    // Validation of an unsaved document: 200 with the diagnostics.
    let v = api
        .as_(
            "read",
            Method::POST,
            "/api/validate",
            "{\"name\": \"x\", \"nodes\": [}",
        )
        .await;
    assert_eq!(v.body["valid"], false);
    assert_eq!(v.body["errors"][0]["code"], "E001");
    assert_eq!(v.body["errors"][0]["line"], 1);
    let ok = api
        .as_("read", Method::POST, "/api/workflows/gate/validate", "")
        .await;
    assert_eq!(ok.body["valid"], true, "{}", ok.text);
    // Deleted workflows disappear from the list.
    assert_eq!(
        api.as_("admin", Method::DELETE, "/api/workflows/gate", "")
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api.as_("read", Method::GET, "/api/workflows/gate", "")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn bodies_are_capped_and_checked() {
    let api = api().await;
    api.as_("admin", Method::POST, "/api/workflows", GRAPH_JSON)
        .await;
    let path = "/api/workflows/two-steps/runs";
    let unknown = api
        .as_("run", Method::POST, path, r#"{"input": {}, "inptu": 1}"#)
        .await;
    assert_eq!(unknown.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(unknown.text.contains("inptu"), "{}", unknown.text);
    let malformed = api
        .as_("run", Method::POST, path, "{\"input\": {\n  \"a\": }")
        .await;
    assert_eq!(malformed.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(malformed.text.contains("line 2"), "{}", malformed.text);
    let dup = api
        .as_("run", Method::POST, path, r#"{"input": {"a": 1, "a": 2}}"#)
        .await;
    assert_eq!(dup.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", dup.text);
    let not_object = api
        .as_("run", Method::POST, path, r#"{"input": [1]}"#)
        .await;
    assert_eq!(not_object.status, StatusCode::UNPROCESSABLE_ENTITY);
    // A body is an object; `null` is an absent body, as an empty one is (serde alone would
    // read `[null]` as a struct).
    for body in ["[null]", "[]", "\"x\"", "7", "true"] {
        let r = api.as_("run", Method::POST, path, body).await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            r.text
        );
        assert!(
            r.text.contains("must be a JSON object"),
            "{body}: {}",
            r.text
        );
    }
    let mut run_id = String::new();
    for body in ["null", "", r#"{"input": null}"#] {
        let r = api.as_("run", Method::POST, path, body).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{body:?}: {}", r.text);
        run_id = r.body["run_id"].as_str().unwrap().to_string();
    }
    // Event numbers are 64-bit signed, as the document says.
    let beyond = api
        .as_(
            "read",
            Method::GET,
            &format!("/api/runs/{run_id}/events?after=9223372036854775808"),
            "",
        )
        .await;
    assert_eq!(
        beyond.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        beyond.text
    );
    // Limits in characters count characters, not bytes.
    let name = "é".repeat(100);
    let token = api
        .as_(
            "admin",
            Method::POST,
            "/api/tokens",
            &format!(r#"{{"name": "{name}", "scope": "read"}}"#),
        )
        .await;
    assert_eq!(token.status, StatusCode::CREATED, "{}", token.text);
    let long = api
        .as_(
            "admin",
            Method::POST,
            "/api/tokens",
            &format!(r#"{{"name": "{name}e", "scope": "read"}}"#),
        )
        .await;
    assert_eq!(
        long.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        long.text
    );
    let big = format!(r#"{{"input": {{"x": "{}"}}}}"#, "a".repeat(1 << 20));
    let r = api.as_("run", Method::POST, path, &big).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.text);
    assert_eq!(r.body["error"]["code"], "body_too_large");
    let none = api.as_("read", Method::GET, "/api/nothing", "").await;
    assert_eq!(none.status, StatusCode::NOT_FOUND);
}
