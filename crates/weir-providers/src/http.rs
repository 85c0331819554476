//! What the HTTP providers share: one client each, and error classification by status.

use std::time::Duration;

use weir_core::model::Usage;
use weir_core::{ErrorClass, ModelError};

/// A provider's answer to one call.
pub struct Reply {
    pub text: String,
    pub usage: Usage,
    /// The tool calls the model asked for.
    pub tool_uses: Vec<weir_core::model::ToolUse>,
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
        // The provider's URL is shown (keys travel in headers), less any password in it.
        if let Some(u) = self.url()
            && u.password().is_some()
        {
            let mut shown = u.clone();
            let _ = shown.set_password(Some("<redacted>"));
            s = s.replace(u.as_str(), shown.as_str());
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
    parse_retry_after(headers.get("retry-after")?.to_str().ok()?)
}

/// The longest `retry-after` kept from a reply (the engine waits at most a minute anyway).
const RETRY_AFTER_CAP: f64 = 3600.0;

/// `retry-after` as seconds (`2`, `0.5`) or an HTTP date, from any server: a value that is
/// negative, not a number, infinite or absurdly large never panics; it is ignored or capped.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    let secs = match v.parse::<f64>() {
        Ok(s) => s,
        Err(_) => {
            let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
            (at.timestamp_millis() - chrono::Utc::now().timestamp_millis()) as f64 / 1000.0
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(secs.min(RETRY_AFTER_CAP)))
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
    // A request the provider refuses as invalid (400, 404, 422, …) fails the same way when
    // sent again: not retried (the node's fallback models may still answer it).
    if err.class == ErrorClass::HttpError && (400..500).contains(&status) {
        err.retryable = false;
    }
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

/// A provider's reply before it is read: one JSON document, or a stream of server-sent events
/// (asked for with `stream: true`; a server that ignores the flag answers with JSON, which is
/// read as such).
pub enum Sent {
    Json(serde_json::Value),
    Stream(reqwest::Response),
}

/// Sends a provider request; a non-2xx status or a transport failure becomes a classified
/// error, a JSON body is read, an event stream is handed back to be read as it arrives.
pub async fn send(req: reqwest::RequestBuilder) -> Result<Sent, ModelError> {
    let resp = req.send().await.map_err(|e| classify_transport(&e))?;
    let status = resp.status().as_u16();
    let streamed = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if (200..300).contains(&status) && streamed {
        return Ok(Sent::Stream(resp));
    }
    let headers = resp.headers().clone();
    let text = resp.text().await.map_err(|e| classify_transport(&e))?;
    if !(200..300).contains(&status) {
        return Err(status_error(status, &headers, &text));
    }
    serde_json::from_str(&text)
        .map(Sent::Json)
        .map_err(|e| ModelError::new(ErrorClass::Malformed, format!("reply is not JSON: {e}")))
}

/// Whether a stream reader has read the reply's end.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    More,
    Done,
}

/// The text of a streamed reply as it arrives: each piece goes to the request's
/// [`OnDelta`](weir_core::model::OnDelta), and whether any did decides how a cut stream fails.
pub struct Streamed<'a> {
    pub text: String,
    /// Tool calls by their index in the reply: id, name and the arguments' JSON text so far
    /// (both APIs send a call's arguments in pieces).
    pub calls: std::collections::BTreeMap<u64, (String, String, String)>,
    /// Characters of `text`.
    chars: usize,
    on_delta: Option<&'a weir_core::model::OnDelta>,
}

impl<'a> Streamed<'a> {
    pub fn new(on_delta: Option<&'a weir_core::model::OnDelta>) -> Self {
        Self {
            text: String::new(),
            calls: Default::default(),
            chars: 0,
            on_delta,
        }
    }

    /// A piece of the reply's text.
    pub fn push(&mut self, piece: &str) {
        if piece.is_empty() {
            return;
        }
        if let Some(tell) = self.on_delta {
            (tell.0)(piece, self.chars);
        }
        self.chars += piece.chars().count();
        self.text.push_str(piece);
    }

    /// The whole reply, its tool calls' arguments parsed (arguments that are not JSON reach
    /// the loop as text, which tells the model).
    pub fn into_reply(self, usage: Usage) -> Reply {
        let tool_uses = self
            .calls
            .into_values()
            .map(|(id, name, args)| weir_core::model::ToolUse {
                id,
                name,
                arguments: if args.trim().is_empty() {
                    serde_json::json!({})
                } else {
                    serde_json::from_str(&args).unwrap_or(serde_json::Value::String(args))
                },
            })
            .collect();
        Reply {
            text: self.text,
            usage,
            tool_uses,
        }
    }

    /// `e`, marked as coming after the first piece of text when one was written: such a
    /// call does not fail over (its text was seen), its attempt's retries apply.
    pub fn fail(&self, mut e: ModelError) -> ModelError {
        if !self.text.is_empty() {
            e.after_output = true;
            e.message.push_str(" (after the reply had begun)");
        }
        e
    }
}

/// Reads a stream of server-sent events, handing each event's type and data to `each` until
/// it reads the reply's end. A stream that is cut first (the connection drops, the time is
/// up, the server closes it early) is a `network` (or `timeout`) error.
pub async fn read_stream(
    resp: reqwest::Response,
    mut each: impl FnMut(Option<&str>, &str) -> Result<Flow, ModelError>,
) -> Result<(), ModelError> {
    use futures_util::StreamExt as _;
    let mut events = sse_stream::SseStream::from_bytes_stream(resp.bytes_stream());
    while let Some(item) = events.next().await {
        let sse = item.map_err(|e| match &e {
            sse_stream::Error::Body(inner) => match inner.downcast_ref::<reqwest::Error>() {
                Some(r) if r.is_timeout() => ModelError::new(
                    ErrorClass::Timeout,
                    format!("the reply stream timed out: {}", r.without_url_ref()),
                ),
                _ => ModelError::new(
                    ErrorClass::Network,
                    format!("the reply stream was cut: {inner}"),
                ),
            },
            other => ModelError::new(
                ErrorClass::Malformed,
                format!("the reply stream is not server-sent events: {other}"),
            ),
        })?;
        let Some(data) = sse.data else { continue };
        if each(sse.event.as_deref(), &data)? == Flow::Done {
            return Ok(());
        }
    }
    Err(ModelError::new(
        ErrorClass::Network,
        "the reply stream ended before the reply was complete",
    ))
}

/// An event of a stream that is not the JSON it should be.
pub fn malformed_event(e: &serde_json::Error) -> ModelError {
    ModelError::new(
        ErrorClass::Malformed,
        format!("a reply stream event is not JSON: {e}"),
    )
}

#[cfg(test)]
mod retry_after_tests {
    use super::parse_retry_after;
    use std::time::Duration;

    #[test]
    fn any_retry_after_is_survivable() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 0.5 "), Some(Duration::from_millis(500)));
        for capped in [
            "1e30",
            "2e19",
            "99999999999999999999",
            "18446744073709551616",
        ] {
            assert_eq!(
                parse_retry_after(capped),
                Some(Duration::from_secs(3600)),
                "{capped}"
            );
        }
        for ignored in ["inf", "-inf", "NaN", "-1", "2^64", "", "soon", "1e999999"] {
            let got = parse_retry_after(ignored);
            assert!(
                got.is_none() || got == Some(Duration::from_secs(3600)),
                "{ignored}: {got:?}"
            );
        }
        let later = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        let d = parse_retry_after(&later).unwrap();
        assert!(
            d <= Duration::from_secs(30) && d >= Duration::from_secs(28),
            "{d:?}"
        );
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
