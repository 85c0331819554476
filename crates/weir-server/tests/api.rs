//! The HTTP API in process (`tower::ServiceExt::oneshot` on the real router over a real
//! SQLite store): authorisation on every route, and the behaviour a client sees.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Method, Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt;
use weir_core::settings::Settings;
use weir_server::auth::{Scope, mint};
use weir_server::{App, Options, Services};

/// The real implementations, as the binary wires them for `weir serve`.
struct Real;

impl weir_runtime::Implementations for Real {
    fn build(&self, settings: &Settings) -> Result<weir_runtime::Parts, String> {
        Ok(weir_runtime::Parts {
            models: Arc::new(weir_providers::Router::new(settings.clone())?),
            tools: Arc::new(weir_tools::Registry::serving(settings.clone())?),
            scripts: Arc::new(weir_script::Bun::from_env()),
            check_models: Arc::new(weir_providers::Router::offline(settings.clone())),
            check_tools: Arc::new(weir_tools::Registry::new(settings.clone())),
        })
    }

    fn known_models(&self) -> Vec<String> {
        weir_providers::pricing::known_models()
            .map(str::to_string)
            .collect()
    }
}

struct Api {
    app: Arc<App>,
    router: Router,
    _dir: tempfile::TempDir,
    tokens: std::collections::HashMap<&'static str, String>,
}

const GRAPH_JSON: &str = r#"{"name": "Two Steps", "nodes": [
  {"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "hello {who}", "output_key": "greeting"}},
  {"id": "b", "type": "tool", "config": {"tool_name": "delay", "params": {"ms": 1}, "output_key": "waited"}}],
  "edges": [{"id": "e1", "source": "a", "target": "b"}]}"#;

const GATE_YAML: &str = "name: Gate\nnodes:\n  - id: ask\n    type: human_gate\n    config: {prompt: \"ok?\"}\n  - id: done\n    type: tool\n    config: {tool_name: delay, params: {ms: 1}, output_key: d}\nedges:\n  - {id: e1, source: ask, target: done}\n";

async fn api() -> Api {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        weir_store::Sqlite::open(Some(&dir.path().join("weir.db")))
            .await
            .unwrap(),
    );
    let services = Services {
        store: store.clone(),
        catalog: store,
        settings: Settings::default(),
        implementations: Arc::new(Real),
    };
    let app = App::new(
        services,
        Options {
            workers: 2,
            poll: Duration::from_millis(50),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let mut tokens = std::collections::HashMap::new();
    for (name, scope) in [
        ("read", Scope::Read),
        ("run", Scope::Run),
        ("approve", Scope::Approve),
        ("admin", Scope::Admin),
        ("revoked", Scope::Admin),
    ] {
        let (row, value) = mint(name, scope).unwrap();
        app.rt.catalog.create_token(&row).await.unwrap();
        if name == "revoked" {
            app.rt
                .catalog
                .revoke_token(&row.id, "2026-01-01T00:00:00Z")
                .await
                .unwrap();
        }
        tokens.insert(name, value);
    }
    Api {
        router: weir_server::router(app.clone()),
        app,
        _dir: dir,
        tokens,
    }
}

struct Reply {
    status: StatusCode,
    body: Value,
    text: String,
}

impl Api {
    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: &str,
        ctype: &str,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if !ctype.is_empty() {
            req = req.header("content-type", ctype);
        }
        let resp = self
            .router
            .clone()
            .oneshot(req.body(Body::from(body.to_string())).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let bytes = to_bytes(resp.into_body(), 16 << 20).await.unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Reply {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        }
    }

    async fn as_(&self, who: &str, method: Method, path: &str, body: &str) -> Reply {
        let token = self.tokens[who].clone();
        self.call(method, path, Some(&token), body, "application/json")
            .await
    }

    async fn wait_status(&self, run: &str, want: &str) -> Value {
        for _ in 0..200 {
            let r = self
                .as_("read", Method::GET, &format!("/api/runs/{run}"), "")
                .await;
            if r.body["status"] == want {
                return r.body;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("run {run} never became {want}");
    }
}

/// Every route of DESIGN §10, with the scope it needs.
fn routes() -> Vec<(Method, &'static str, Scope)> {
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

fn below(scope: Scope) -> Option<&'static str> {
    match scope {
        Scope::Read => None,
        Scope::Run => Some("read"),
        Scope::Approve => Some("run"),
        Scope::Admin => Some("approve"),
    }
}

fn at(scope: Scope) -> &'static str {
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
    api.call(
        Method::POST,
        "/api/workflows",
        Some(&api.tokens["admin"]),
        GRAPH_JSON,
        "application/json",
    )
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

/// The OpenAPI document the server serves.
async fn openapi(api: &Api) -> Value {
    api.as_("read", Method::GET, "/api/openapi.json", "")
        .await
        .body
}

/// The component a `{"$ref": "#/components/schemas/NAME"}` schema names (a panic when the
/// schema is not such a reference).
fn named<'d>(doc: &'d Value, schema: &Value) -> &'d Value {
    let name = schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
        .unwrap_or_else(|| panic!("not a named schema: {schema}"));
    &doc["components"]["schemas"][name]
}

/// The sorted `required` list of an object schema.
fn required(schema: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = schema["required"]
        .as_array()
        .unwrap_or_else(|| panic!("no required list: {schema}"))
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    names.sort_unstable();
    names
}

#[tokio::test]
async fn the_openapi_document_covers_every_route() {
    let api = api().await;
    let doc = openapi(&api).await;
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().unwrap();
    for (method, path, scope) in routes() {
        let templ = path
            .replace("two-steps", "{id}")
            .replace(
                "/zzz",
                if path.starts_with("/api/tools") {
                    "/{name}"
                } else {
                    "/{id}"
                },
            )
            .replace("RUN", "{id}")
            .replace("versions/1", "versions/{v}");
        let op = &paths
            .get(&templ)
            .unwrap_or_else(|| panic!("{templ} is not in the document"))
            [method.as_str().to_lowercase()];
        assert!(op.is_object(), "{method} {templ} is not in the document");
        assert!(
            op["responses"].as_object().unwrap().len() >= 2,
            "{method} {templ}: errors listed"
        );
        for code in ["401", "403"] {
            assert!(
                op["responses"][code].is_object(),
                "{method} {templ}: {code} listed"
            );
        }
        assert_eq!(
            op["security"][0]["bearer"],
            json!([at(scope)]),
            "{method} {templ}: the document names the scope the route needs"
        );
    }
    assert!(paths.contains_key("/healthz"));
    assert!(
        paths["/healthz"]["get"]["responses"]["401"].is_null(),
        "healthz needs no token"
    );
}

#[tokio::test]
async fn error_codes_are_an_enum_the_document_lists() {
    let api = api().await;
    let doc = openapi(&api).await;
    let detail = named(
        &doc,
        &named(
            &doc,
            &doc["components"]["schemas"]["ErrorBody"]["properties"]["error"],
        )["properties"]["code"],
    )
    .clone();
    let mut codes: Vec<&str> = detail["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("no enum: {detail}"))
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    codes.sort_unstable();
    assert_eq!(
        codes,
        [
            "body_too_large",
            "conflict",
            "forbidden",
            "internal",
            "invalid_request",
            "invalid_workflow",
            "not_found",
            "unauthorized"
        ]
    );
    // Real answers carry listed codes with their statuses.
    let missing = api.as_("read", Method::GET, "/api/runs/nope", "").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.body["error"]["code"], "not_found");
    let anonymous = api.call(Method::GET, "/api/runs", None, "", "").await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert_eq!(anonymous.body["error"]["code"], "unauthorized");
    let weak = api.as_("read", Method::POST, "/api/tokens", "{}").await;
    assert_eq!(weak.status, StatusCode::FORBIDDEN);
    assert_eq!(weak.body["error"]["code"], "forbidden");
}

#[tokio::test]
async fn workflows_are_saved_in_versions_and_validated_with_located_diagnostics() {
    let api = api().await;
    let r = api
        .call(
            Method::POST,
            "/api/workflows",
            Some(&api.tokens["admin"]),
            GRAPH_JSON,
            "application/json",
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(
        (r.body["id"].as_str(), r.body["version"].as_u64()),
        (Some("two-steps"), Some(1))
    );
    assert_eq!(r.body["dialect"], "graph");
    // A second POST of the same id conflicts; a PUT is a new version.
    let again = api
        .call(
            Method::POST,
            "/api/workflows",
            Some(&api.tokens["admin"]),
            GRAPH_JSON,
            "application/json",
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    let v2 = api
        .call(
            Method::PUT,
            "/api/workflows/two-steps",
            Some(&api.tokens["admin"]),
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
        .call(
            Method::POST,
            "/api/workflows?id=gate",
            Some(&api.tokens["admin"]),
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
        .call(
            Method::PUT,
            "/api/workflows/gate",
            Some(&api.tokens["admin"]),
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
    api.call(
        Method::POST,
        "/api/workflows",
        Some(&api.tokens["admin"]),
        GRAPH_JSON,
        "application/json",
    )
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

#[tokio::test]
async fn runs_are_created_idempotently_driven_listed_and_paged() {
    let api = api().await;
    let stop = tokio::sync::watch::channel(false);
    let _workers = api.app.rt.start_workers(stop.1.clone());
    api.call(
        Method::POST,
        "/api/workflows",
        Some(&api.tokens["admin"]),
        GRAPH_JSON,
        "application/json",
    )
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
    api.call(
        Method::POST,
        "/api/workflows?id=gate",
        Some(&api.tokens["admin"]),
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

/// The event stream's schema describes each event as Server-Sent Events frame it (in
/// OpenAPI 3.1 the `text/event-stream` schema is one event's): `scripts/api-fuzz` checks every
/// event of a real run's stream against it.
#[tokio::test]
async fn the_event_stream_is_documented_event_by_event() {
    let api = api().await;
    let doc = openapi(&api).await;
    let event = named(
        &doc,
        &doc["paths"]["/api/runs/{id}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
            ["schema"],
    );
    assert_eq!(required(event), ["data", "event", "id"], "{event}");
    assert_eq!(event["properties"]["id"]["pattern"], "^[0-9]+$", "{event}");
    assert_eq!(
        event["properties"]["data"]["contentMediaType"], "application/json",
        "{event}"
    );
}

/// The document describes `POST /api/tools`'s body as the server reads it: one form per
/// `kind`, each with its required fields and nothing else, so that a client (or a fuzzer)
/// that follows the document writes tools the server takes.
#[tokio::test]
async fn the_documented_tool_body_is_the_one_the_server_takes() {
    let api = api().await;
    let doc = openapi(&api).await;
    let body = named(
        &doc,
        &doc["paths"]["/api/tools"]["post"]["requestBody"]["content"]["application/json"]["schema"],
    );
    let forms = body["oneOf"]
        .as_array()
        .unwrap_or_else(|| panic!("one form per kind: {body}"));
    let mut kinds = Vec::new();
    for form in forms {
        let kind = form["properties"]["kind"]["enum"][0].as_str().unwrap();
        assert_eq!(form["additionalProperties"], false, "{kind}: {form}");
        assert_eq!(
            form["properties"]["name"]["pattern"], "^[A-Za-z0-9_-]{1,64}$",
            "{kind}: {form}"
        );
        kinds.push((kind.to_string(), required(form)));
    }
    kinds.sort();
    assert_eq!(
        kinds,
        [
            ("http".to_string(), vec!["kind", "name", "url"]),
            ("mcp".to_string(), vec!["kind", "name", "server", "tool"]),
        ]
    );
    // The smallest documented HTTP form is taken; a field the document does not list is not.
    let made = api
        .as_(
            "admin",
            Method::POST,
            "/api/tools",
            r#"{"kind": "http", "name": "ping", "url": "https://example.com/ping"}"#,
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    assert_eq!(made.body["definition"]["kind"], "http");
    let extra = api
        .as_(
            "admin",
            Method::POST,
            "/api/tools",
            r#"{"kind": "http", "name": "pong", "url": "https://example.com", "timeout": 3}"#,
        )
        .await;
    assert_eq!(
        extra.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        extra.text
    );
}

#[tokio::test]
async fn custom_tools_saved_over_the_api_are_usable_by_workflows() {
    let api = api().await;
    let tool = r#"{"name": "lookup", "kind": "http", "method": "GET", "url": "https://crm.example.com/{id}",
                   "headers": {"Authorization": "Bearer {secrets.CRM}", "X-Api-Key": "literal-key-123"}}"#;
    let made = api.as_("admin", Method::POST, "/api/tools", tool).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    let wf = r#"{"name": "Uses Tool", "nodes": [{"id": "t", "type": "tool", "config": {"tool_name": "custom:lookup", "params": {"id": "1"}}}], "edges": []}"#;
    let saved = api
        .call(
            Method::POST,
            "/api/workflows",
            Some(&api.tokens["admin"]),
            wf,
            "application/json",
        )
        .await;
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
