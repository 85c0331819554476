//! weir-server: the HTTP API of `weir serve` over a [`weir_runtime::Runtime`]. The server
//! creates runs and decisions through the engine and never drives them: the runtime's
//! workers claim and drive them under leases, like any `weir worker`. Every route but
//! `/healthz` needs a bearer token with the route's scope; errors are `{"error": {"code",
//! "message", "details"}}`; the OpenAPI 3.1 document at `/api/openapi.json` is generated
//! from the handlers below (utoipa).

#![warn(missing_docs)]
// utoipa's `#[utoipa::path(params(...))]` expands to qualified paths of the handlers' own types.
#![allow(unused_qualifications)]

mod app;
pub mod auth;
mod error;
mod examples;
mod hooks;
mod meta;
mod openapi;
mod runs;
mod sse;
mod tools_tokens;
mod triggers;
mod ui;
mod workflows;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use serde::de::DeserializeOwned;

pub use app::{App, Records};
pub use error::{ApiError, ApiResult, ErrorCode};
pub use weir_runtime::{Options, Services};

use auth::{Caller, Scope};

/// The API router over a started [`App`].
pub fn router(app: Arc<App>) -> Router {
    let max_body = app.max_body;
    Router::new()
        .route("/healthz", get(meta::healthz))
        .route("/metrics", get(meta::metrics))
        .route("/api/openapi.json", get(openapi::document))
        .route("/api/validate", post(workflows::validate_unsaved))
        .route(
            "/api/workflows",
            get(workflows::list).post(workflows::create),
        )
        .route(
            "/api/workflows/{id}",
            get(workflows::get_one)
                .put(workflows::put)
                .delete(workflows::delete),
        )
        .route("/api/workflows/{id}/versions", get(workflows::versions))
        .route("/api/workflows/{id}/versions/{v}", get(workflows::version))
        .route(
            "/api/workflows/{id}/validate",
            post(workflows::validate_saved),
        )
        .route("/api/workflows/{id}/runs", post(runs::create))
        .route("/api/workflows/{id}/triggers", get(triggers::list))
        .route("/hooks/{workflow}/{name}", post(hooks::deliver))
        .route(
            "/api/workflows/{id}/triggers/{name}/fire",
            post(triggers::fire),
        )
        .route(
            "/api/workflows/{id}/triggers/{name}/pause",
            post(triggers::pause),
        )
        .route(
            "/api/workflows/{id}/triggers/{name}/resume",
            post(triggers::resume),
        )
        .route("/api/runs", get(runs::list))
        .route("/api/runs/{id}", get(runs::get_one))
        .route("/api/runs/{id}/events", get(sse::events))
        .route("/api/runs/{id}/approve", post(runs::approve))
        .route("/api/runs/{id}/reject", post(runs::reject))
        .route("/api/runs/{id}/cancel", post(runs::cancel))
        .route("/api/runs/{id}/rerun", post(runs::rerun))
        .route(
            "/api/tools",
            get(tools_tokens::list_tools).post(tools_tokens::create_tool),
        )
        .route(
            "/api/tools/{name}",
            axum::routing::delete(tools_tokens::delete_tool),
        )
        .route(
            "/api/tokens",
            get(tools_tokens::list_tokens).post(tools_tokens::create_token),
        )
        .route(
            "/api/tokens/{id}",
            axum::routing::delete(tools_tokens::revoke_token),
        )
        .route("/api/session", get(tools_tokens::session))
        .route("/api/models", get(tools_tokens::models))
        .fallback(ui::fallback)
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .with_state(app)
}

/// Checks the request's token for `scope` (the one place routes authorise).
pub(crate) async fn authorize(app: &App, headers: &HeaderMap, scope: Scope) -> ApiResult<Caller> {
    app.tokens
        .require(app.rt.catalog.as_ref(), headers, scope)
        .await
}

/// Query parameters; a bad one (unknown, or not of its type) is a 422 in the API's error
/// shape rather than axum's plain-text 400.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        axum::extract::Query::try_from_uri(&parts.uri)
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::invalid(format!("bad query parameters: {}", e.body_text())))
    }
}

/// Path parameters, with rejections in the API's error shape.
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> axum::extract::FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e| ApiError::not_found(format!("bad path: {}", e.body_text())))
    }
}

/// A request body: JSON (or, for workflows, YAML) read under the body cap, parse errors
/// located by line and column, unknown fields refused; all as 422 (413 when too large).
pub struct Body {
    /// The raw body.
    pub bytes: Bytes,
    /// Its `Content-Type` (empty when none was sent).
    pub content_type: String,
}

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let content_type = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            let status = e.status();
            if status == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    ErrorCode::BodyTooLarge,
                    "the request body is over the server's limit (weir serve --max-body)",
                )
            } else {
                ApiError::invalid(format!("cannot read the request body: {e}"))
            }
        })?;
        Ok(Self {
            bytes,
            content_type,
        })
    }
}

impl Body {
    /// The body as JSON of type `T`; an empty body is `{}`.
    pub fn json<T: DeserializeOwned>(&self) -> ApiResult<T> {
        let text = std::str::from_utf8(&self.bytes)
            .map_err(|e| ApiError::invalid(format!("the request body is not UTF-8: {e}")))?;
        let text = if text.trim().is_empty() { "{}" } else { text };
        let value = weir_core::json::from_str(text)
            .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))?;
        // Every JSON body of the API is an object; `null` is an absent body, as an empty one
        // is (serde would read a struct from an array too).
        let value = match value {
            serde_json::Value::Null => serde_json::Value::Object(Default::default()),
            v @ serde_json::Value::Object(_) => v,
            other => {
                return Err(ApiError::invalid(format!(
                    "the request body must be a JSON object, found {}",
                    match other {
                        serde_json::Value::Array(_) => "an array",
                        serde_json::Value::String(_) => "a string",
                        serde_json::Value::Number(_) => "a number",
                        _ => "a boolean",
                    }
                )));
            }
        };
        serde_json::from_value(value).map_err(|e| {
            ApiError::invalid(format!("the request body does not fit this route: {e}"))
        })
    }

    /// The body as UTF-8 text, or a 422 saying it is not.
    pub fn text(&self) -> ApiResult<&str> {
        std::str::from_utf8(&self.bytes)
            .map_err(|e| ApiError::invalid(format!("the request body is not UTF-8: {e}")))
    }
}

/// Serves the API on `listen` until `shutdown` resolves, then drains the workers.
pub async fn serve(
    app: Arc<App>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let workers = app.rt.start_workers(stop_rx.clone());
    let schedules = app.rt.start_schedules(stop_rx.clone());
    let cache = app.clone();
    let pruning = weir_runtime::retention::schedule(
        app.rt.clone(),
        move |id| cache.records.forget(id),
        stop_rx,
    );
    let service = router(app.clone()).into_make_service_with_connect_info::<SocketAddr>();
    let stop = stop_tx.clone();
    let closing = app.closing.clone();
    let result = axum::serve(listener, service)
        .with_graceful_shutdown(async move {
            shutdown.await;
            let _ = stop.send(true);
            let _ = closing.send(true);
        })
        .await;
    let _ = stop_tx.send(true);
    let _ = schedules.await;
    app.rt.drain(workers).await;
    if let Some(p) = pruning {
        let _ = p.await;
    }
    result
}

/// Adds the examples to a store that never had a workflow, and makes the first admin
/// token when there is none; returns that token's value (to print once).
pub async fn first_start(app: &App) -> Result<Option<String>, String> {
    examples::seed(app).await?;
    let tokens = app.rt.catalog.tokens().await.map_err(|e| e.to_string())?;
    if tokens.is_empty() {
        let (row, value) = auth::mint("initial admin", Scope::Admin).map_err(|e| e.message)?;
        app.rt
            .catalog
            .create_token(&row)
            .await
            .map_err(|e| e.to_string())?;
        return Ok(Some(value));
    }
    Ok(None)
}
