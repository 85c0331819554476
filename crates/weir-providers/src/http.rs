//! What the HTTP providers share: one client each, and error classification by status.

use std::time::Duration;

use weir_core::model::Usage;
use weir_core::{ErrorClass, ModelError};

/// A provider's answer to one call.
pub struct Reply {
    pub text: String,
    pub usage: Usage,
}

pub fn client() -> reqwest::Client {
    // rustls needs a process-wide crypto provider; installing twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default()
}

/// Classifies an HTTP error status (spec 002 "Model fallback").
pub fn classify_status(status: u16) -> ErrorClass {
    match status {
        401 | 403 => ErrorClass::Auth,
        408 => ErrorClass::Timeout,
        429 => ErrorClass::RateLimit,
        500..=599 => ErrorClass::ServerError,
        _ => ErrorClass::HttpError,
    }
}

pub fn classify_transport(e: &reqwest::Error) -> ModelError {
    let msg = e.without_url_ref();
    if e.is_timeout() {
        ModelError::new(ErrorClass::Timeout, format!("request timed out: {msg}"))
    } else if e.is_decode() || e.is_body() {
        ModelError::new(
            ErrorClass::Malformed,
            format!("could not read the response: {msg}"),
        )
    } else {
        ModelError::new(
            ErrorClass::Network,
            format!("could not reach the provider: {msg}"),
        )
    }
}

pub trait WithoutUrl {
    fn without_url_ref(&self) -> String;
}

impl WithoutUrl for reqwest::Error {
    fn without_url_ref(&self) -> String {
        let mut s = self.to_string();
        if let Some(u) = self.url() {
            s = s.replace(u.as_str(), "<provider>");
        }
        let mut src = std::error::Error::source(self);
        while let Some(e) = src {
            s.push_str(": ");
            s.push_str(&e.to_string());
            src = e.source();
        }
        s
    }
}

pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers.get("retry-after")?.to_str().ok()?;
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// Builds the error for a non-2xx reply, keeping the provider's own message.
pub fn status_error(status: u16, headers: &reqwest::header::HeaderMap, body: &str) -> ModelError {
    let detail = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.pointer("/message"))
                .and_then(|m| m.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| body.chars().take(300).collect());
    let mut err = ModelError::new(classify_status(status), format!("HTTP {status}: {detail}"));
    err.status = Some(status);
    err.retry_after = retry_after(headers);
    // A 429 for an exhausted quota or a spend limit will not clear up by waiting.
    let lower = body.to_ascii_lowercase();
    if status == 429
        && [
            "insufficient_quota",
            "quota",
            "billing",
            "spend limit",
            "spending limit",
            "credit balance",
        ]
        .iter()
        .any(|k| lower.contains(k))
    {
        err.retryable = false;
        err.message.push_str(" (quota or spend limit: not retried)");
    }
    err
}

/// Sends a provider request and reads its JSON reply; a non-2xx status, a transport failure
/// or a body that is not JSON becomes a classified error. 5xx (Anthropic's 529 overloaded
/// included) are server errors.
pub async fn send_json(req: reqwest::RequestBuilder) -> Result<serde_json::Value, ModelError> {
    let resp = req.send().await.map_err(|e| classify_transport(&e))?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.map_err(|e| classify_transport(&e))?;
    if !(200..300).contains(&status) {
        return Err(status_error(status, &headers, &text));
    }
    serde_json::from_str(&text)
        .map_err(|e| ModelError::new(ErrorClass::Malformed, format!("reply is not JSON: {e}")))
}
