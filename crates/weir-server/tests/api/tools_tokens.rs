//! Tokens and custom tools.

use axum::http::{Method, StatusCode};

use crate::support::*;

#[tokio::test]
async fn tokens_are_shown_once_listed_without_values_and_revocable() {
    let api = api().await;
    let made = api
        .as_(
            "admin",
            Method::POST,
            "/api/tokens",
            r#"{"name": "ci", "scope": "run"}"#,
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    let token = made.body["token"].as_str().unwrap().to_string();
    let listed = api.as_("admin", Method::GET, "/api/tokens", "").await;
    assert!(
        !listed.text.contains(&token[20..]),
        "a listing never holds a token's value"
    );
    let ok = api
        .call(Method::GET, "/api/runs", Some(&token), "", "")
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    let id = made.body["id"].as_str().unwrap();
    assert_eq!(
        api.as_("admin", Method::DELETE, &format!("/api/tokens/{id}"), "")
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let after = api
        .call(Method::GET, "/api/runs", Some(&token), "", "")
        .await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED);
    let bad_scope = api
        .as_(
            "admin",
            Method::POST,
            "/api/tokens",
            r#"{"name": "x", "scope": "root"}"#,
        )
        .await;
    assert_eq!(bad_scope.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn custom_tools_saved_over_the_api_are_usable_by_workflows() {
    let api = api().await;
    let tool = r#"{"name": "lookup", "kind": "http", "method": "GET", "url": "https://crm.example.com/{id}",
                   "headers": {"Authorization": "Bearer {secrets.CRM}", "X-Api-Key": "literal-key-123"}}"#;
    let made = api.as_("admin", Method::POST, "/api/tools", tool).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    let wf = r#"{"name": "Uses Tool", "nodes": [{"id": "t", "type": "tool", "config": {"tool_name": "custom:lookup", "params": {"id": "1"}}}], "edges": []}"#;
    let saved = api.as_("admin", Method::POST, "/api/workflows", wf).await;
    assert_eq!(saved.status, StatusCode::CREATED, "{}", saved.text);
    let listed = api.as_("read", Method::GET, "/api/tools", "").await;
    assert_eq!(listed.body["tools"][0]["name"], "lookup");
    let headers = &listed.body["tools"][0]["definition"]["headers"];
    assert_eq!(headers["Authorization"], "Bearer {secrets.CRM}");
    assert_eq!(
        headers["X-Api-Key"], "<hidden>",
        "a literal credential is never listed"
    );
    let bad = api
        .as_(
            "admin",
            Method::POST,
            "/api/tools",
            r#"{"name": "x", "kind": "ftp"}"#,
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        api.as_("admin", Method::DELETE, "/api/tools/lookup", "")
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    // Without the tool the workflow no longer validates.
    let v = api
        .as_(
            "read",
            Method::POST,
            "/api/workflows/uses-tool/validate",
            "",
        )
        .await;
    assert_eq!(v.body["valid"], false, "{}", v.text);
}
