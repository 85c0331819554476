//! What every test of the API shares: the server in process over a real SQLite store, a
//! token per scope, and requests through the real router.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Method, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;
use weir_core::settings::Settings;
use weir_server::auth::{Scope, mint};
use weir_server::{App, Options, Services};

/// The real implementations, as the binary wires them for `weir serve`.
pub struct Real;

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

pub struct Api {
    pub app: Arc<App>,
    pub router: Router,
    _dir: tempfile::TempDir,
    pub tokens: std::collections::HashMap<&'static str, String>,
}

pub const GRAPH_JSON: &str = r#"{"name": "Two Steps", "nodes": [
  {"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "hello {who}", "output_key": "greeting"}},
  {"id": "b", "type": "tool", "config": {"tool_name": "delay", "params": {"ms": 1}, "output_key": "waited"}}],
  "edges": [{"id": "e1", "source": "a", "target": "b"}]}"#;

pub const GATE_YAML: &str = "name: Gate\nnodes:\n  - id: ask\n    type: human_gate\n    config: {prompt: \"ok?\"}\n  - id: done\n    type: tool\n    config: {tool_name: delay, params: {ms: 1}, output_key: d}\nedges:\n  - {id: e1, source: ask, target: done}\n";

pub async fn api() -> Api {
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
        1 << 20,
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

pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    pub text: String,
}

impl Api {
    pub async fn call(
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

    pub async fn as_(&self, who: &str, method: Method, path: &str, body: &str) -> Reply {
        self.as_typed(who, method, path, body, "application/json")
            .await
    }

    /// [`as_`](Self::as_) with a body of another content type (a YAML workflow).
    pub async fn as_typed(
        &self,
        who: &str,
        method: Method,
        path: &str,
        body: &str,
        ctype: &str,
    ) -> Reply {
        let token = self.tokens[who].clone();
        self.call(method, path, Some(&token), body, ctype).await
    }

    pub async fn wait_status(&self, run: &str, want: &str) -> Value {
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
