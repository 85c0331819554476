//! The web UI (DESIGN §12): the Vite build of `ui/`, embedded in the binary from
//! `crates/weir-server/ui-dist` (built by `scripts/build-ui` and committed; `scripts/test`
//! checks the committed build is current). Every path outside the API that is not a file of
//! the build gets `index.html`: the UI routes itself (`/runs/{id}` is a deep link).

use axum::body::Body;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::ApiError;

#[derive(rust_embed::Embed)]
#[folder = "ui-dist/"]
struct Assets;

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" => "application/json",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}

/// No request to any host but this server; inline styles for the canvas library.
const CSP: &str = "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The router's fallback: the API's 404 under `/api/`, else the UI.
pub async fn fallback(method: Method, uri: Uri) -> Response {
    let path = uri.path();
    if path.starts_with("/api/") || path == "/api" || !matches!(method, Method::GET | Method::HEAD)
    {
        return ApiError::not_found("no such route; GET /api/openapi.json lists them")
            .into_response();
    }
    let file = path.trim_start_matches('/');
    let (name, asset, immutable) = match Assets::get(file) {
        Some(a) if !file.is_empty() => (file, a, file.starts_with("assets/")),
        _ => match Assets::get("index.html") {
            Some(a) => ("index.html", a, false),
            None => {
                return (
                    StatusCode::NOT_FOUND,
                    "this weir was built without its web UI",
                )
                    .into_response();
            }
        },
    };
    let mut resp = Response::new(Body::from(asset.data.into_owned()));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(name)),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if immutable {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        }),
    );
    resp
}
