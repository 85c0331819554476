//! Authorisation: every route refuses a token without its scope, and sessions name theirs.

use axum::http::{Method, StatusCode};
use serde_json::Value;
use weir_server::auth::{Scope, mint};

use crate::support::*;

/// Every route of the API, with the scope it needs.
pub fn routes() -> Vec<(Method, &'static str, Scope)> {
    use Method as M;
    vec![
        (M::GET, "/metrics", Scope::Read),
        (M::GET, "/api/openapi.json", Scope::Read),
        (M::GET, "/api/workflows", Scope::Read),
        (M::POST, "/api/workflows", Scope::Admin),
        (M::GET, "/api/workflows/two-steps", Scope::Read),
        (M::PUT, "/api/workflows/two-steps", Scope::Admin),
        (M::DELETE, "/api/workflows/zzz", Scope::Admin),
        (M::GET, "/api/workflows/two-steps/versions", Scope::Read),
        (M::GET, "/api/workflows/two-steps/versions/1", Scope::Read),
        (M::POST, "/api/workflows/two-steps/validate", Scope::Read),
        (M::POST, "/api/validate", Scope::Read),
        (M::POST, "/api/workflows/two-steps/runs", Scope::Run),
        (M::GET, "/api/workflows/two-steps/triggers", Scope::Read),
        (
            M::POST,
            "/api/workflows/two-steps/triggers/zzz/fire",
            Scope::Run,
        ),
        (
            M::POST,
            "/api/workflows/two-steps/triggers/zzz/pause",
            Scope::Run,
        ),
        (
            M::POST,
            "/api/workflows/two-steps/triggers/zzz/resume",
            Scope::Run,
        ),
        (M::GET, "/api/runs", Scope::Read),
        (M::GET, "/api/runs/RUN", Scope::Read),
        (M::GET, "/api/runs/RUN/events", Scope::Read),
        (M::POST, "/api/runs/RUN/approve", Scope::Approve),
        (M::POST, "/api/runs/RUN/reject", Scope::Approve),
        (M::POST, "/api/runs/RUN/cancel", Scope::Run),
        (M::POST, "/api/runs/RUN/rerun", Scope::Run),
        (M::GET, "/api/tools", Scope::Read),
        (M::POST, "/api/tools", Scope::Admin),
        (M::DELETE, "/api/tools/zzz", Scope::Admin),
        (M::GET, "/api/tokens", Scope::Admin),
        (M::POST, "/api/tokens", Scope::Admin),
        (M::DELETE, "/api/tokens/zzz", Scope::Admin),
        (M::GET, "/api/session", Scope::Read),
        (M::GET, "/api/models", Scope::Read),
    ]
}

pub fn below(scope: Scope) -> Option<&'static str> {
    match scope {
        Scope::Read => None,
        Scope::Run => Some("read"),
        Scope::Approve => Some("run"),
        Scope::Admin => Some("approve"),
    }
}

pub fn at(scope: Scope) -> &'static str {
    match scope {
        Scope::Read => "read",
        Scope::Run => "run",
        Scope::Approve => "approve",
        Scope::Admin => "admin",
    }
}

#[tokio::test]
async fn no_route_answers_2xx_without_the_right_token() {
    let api = api().await;
    api.as_("admin", Method::POST, "/api/workflows", GRAPH_JSON)
        .await;
    let run = api
        .as_(
            "run",
            Method::POST,
            "/api/workflows/two-steps/runs",
            r#"{"input": {"who": "x"}}"#,
        )
        .await
        .body["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Ended, so its event stream ends too.
    api.as_("run", Method::POST, &format!("/api/runs/{run}/cancel"), "")
        .await;
    let (fake_id, _) = mint("never stored", Scope::Admin).unwrap();
    let unknown = format!("weir_{}_{}", fake_id.id, "0".repeat(64));
    let bodies = |path: &str| match path {
        "/api/workflows" | "/api/validate" => GRAPH_JSON.to_string(),
        p if p.ends_with("/two-steps") => GRAPH_JSON.to_string(),
        "/api/tokens" => r#"{"name": "x", "scope": "read"}"#.into(),
        "/api/tools" => r#"{"name": "t", "kind": "http", "url": "https://example.com"}"#.into(),
        p if p.ends_with("/approve") || p.ends_with("/reject") => r#"{"gate": "g"}"#.into(),
        _ => "{}".into(),
    };
    let mut checked = 0;
    for (method, path, scope) in routes() {
        let path = path.replace("RUN", &run);
        let body = bodies(&path);
        let bad: Vec<(String, Option<String>)> = vec![
            ("no token".into(), None),
            ("malformed token".into(), Some("not-a-token".into())),
            ("unknown token".into(), Some(unknown.clone())),
            ("revoked token".into(), Some(api.tokens["revoked"].clone())),
        ];
        for (what, token) in bad {
            let r = api
                .call(
                    method.clone(),
                    &path,
                    token.as_deref(),
                    &body,
                    "application/json",
                )
                .await;
            assert_eq!(
                r.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {what}: {}",
                r.text
            );
            assert_eq!(r.body["error"]["code"], "unauthorized");
            // The same words whether or not the token exists.
            assert!(
                !r.text.contains("revoked") && !r.text.contains("unknown"),
                "{}",
                r.text
            );
            checked += 1;
        }
        if let Some(lower) = below(scope) {
            let r = api.as_(lower, method.clone(), &path, &body).await;
            assert_eq!(
                r.status,
                StatusCode::FORBIDDEN,
                "{method} {path} as {lower}: {}",
                r.text
            );
            checked += 1;
        }
        let r = api.as_(at(scope), method.clone(), &path, &body).await;
        assert!(
            r.status != StatusCode::UNAUTHORIZED && r.status != StatusCode::FORBIDDEN,
            "{method} {path} as {}: {} {}",
            at(scope),
            r.status,
            r.text
        );
        checked += 1;
    }
    assert!(checked > 120, "{checked}");
    // /healthz needs nothing.
    assert_eq!(
        api.call(Method::GET, "/healthz", None, "", "").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_web_ui_is_served_outside_the_api_and_sessions_name_their_scope() {
    let api = api().await;
    // Deep links get the UI's page (it routes itself); its assets are files of the build.
    for path in ["/", "/runs/some-run", "/workflows"] {
        let r = api.call(Method::GET, path, None, "", "").await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        assert!(r.text.contains("<div id=\"root\">"), "{path}: {}", r.text);
    }
    let index = api.call(Method::GET, "/", None, "", "").await.text;
    let script = index
        .split("src=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("the page loads a script");
    let js = api.call(Method::GET, script, None, "", "").await;
    assert_eq!(js.status, StatusCode::OK, "{script}");
    assert!(js.text.len() > 1000, "the bundle is served");
    // The API keeps its own 404s, in its error shape.
    let missing = api.call(Method::GET, "/api/nope", None, "", "").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.body["error"]["code"], "not_found");
    // Each token learns its own scope, and nothing about others'.
    for who in ["read", "approve", "admin"] {
        let s = api.as_(who, Method::GET, "/api/session", "").await;
        assert_eq!(s.status, StatusCode::OK);
        assert_eq!(s.body["scope"], who, "{}", s.text);
        assert_eq!(s.body["name"], who);
        assert!(!s.text.contains("weir_"), "no token value in {}", s.text);
    }
    let models = api.as_("read", Method::GET, "/api/models", "").await;
    assert_eq!(models.status, StatusCode::OK);
    assert_eq!(models.body["named_providers"], serde_json::json!([]));
    assert!(
        models.body.get("allow").is_none(),
        "every model allowed: {}",
        models.text
    );
    let known: Vec<&str> = models.body["known"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        known.contains(&"mock") && known.contains(&"claude-haiku-4-5") && known.contains(&"gpt-4o"),
        "the priced models are suggested: {known:?}"
    );
    let anonymous = api.call(Method::GET, "/api/session", None, "", "").await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
}
