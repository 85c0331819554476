//! `send_email`: sends a message over SMTP at `SMTP_URL` (`smtp://user:pass@host:587` with
//! STARTTLS when the server offers it, `?tls=required` to insist, `smtps://` for implicit TLS).
//! Params: `to` (string or list), `cc`, `bcc`, `from` (default `SMTP_FROM`), `reply_to`,
//! `subject`, `text`, `html` (text and html together send both alternatives). Output
//! `{ok, to, code, message}`. A refused recipient or message (a permanent 5xx) fails without a
//! retry; a dead or busy server fails the attempt so retries apply. The SMTP URL and its
//! password never appear in errors.

use lettre::message::{Mailbox, MultiPart, SinglePart, header::ContentType};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde_json::{Value, json};
use weir_core::{ToolCall, ToolError};

use crate::param_str;

fn addresses(params: &Value, key: &str) -> Result<Vec<Mailbox>, ToolError> {
    let raw: Vec<String> = match params.get(key) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s
            .split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ToolError::fatal(format!("param `{key}` must list strings")))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(ToolError::fatal(format!(
                "param `{key}` must be a string or a list, found {other}"
            )));
        }
    };
    raw.iter()
        .map(|a| {
            a.parse::<Mailbox>().map_err(|e| {
                ToolError::fatal(format!("param `{key}`: `{a}` is not an email address: {e}"))
            })
        })
        .collect()
}

pub async fn call(call: &ToolCall) -> Result<Value, ToolError> {
    let p = &call.params;
    let url = std::env::var("SMTP_URL").map_err(|_| {
        ToolError::fatal("SMTP_URL is not set (e.g. smtp://user:pass@mail.example.com:587)")
    })?;
    let to = addresses(p, "to")?;
    if to.is_empty() {
        return Err(ToolError::fatal("param `to` is required"));
    }
    let from = match param_str(p, "from")? {
        Some(f) => f.to_string(),
        None => std::env::var("SMTP_FROM")
            .map_err(|_| ToolError::fatal("param `from` is required (or set SMTP_FROM)"))?,
    };
    let from: Mailbox = from
        .parse()
        .map_err(|e| ToolError::fatal(format!("param `from`: {e}")))?;
    let mut b = Message::builder()
        .from(from)
        .subject(param_str(p, "subject")?.unwrap_or(""))
        .message_id(Some(format!("<{}@weir>", call.idempotency_key)));
    for m in &to {
        b = b.to(m.clone());
    }
    for m in addresses(p, "cc")? {
        b = b.cc(m);
    }
    for m in addresses(p, "bcc")? {
        b = b.bcc(m);
    }
    for m in addresses(p, "reply_to")? {
        b = b.reply_to(m);
    }
    let text = param_str(p, "text")?;
    let html = param_str(p, "html")?;
    let message = match (text, html) {
        (Some(t), Some(h)) => b.multipart(MultiPart::alternative_plain_html(
            t.to_string(),
            h.to_string(),
        )),
        (None, Some(h)) => b.singlepart(
            SinglePart::builder()
                .header(ContentType::TEXT_HTML)
                .body(h.to_string()),
        ),
        (Some(t), None) => b.singlepart(
            SinglePart::builder()
                .header(ContentType::TEXT_PLAIN)
                .body(t.to_string()),
        ),
        (None, None) => return Err(ToolError::fatal("give `text` or `html` (or both)")),
    }
    .map_err(|e| ToolError::fatal(format!("cannot build the message: {e}")))?;
    let hide = |s: String| {
        let mut s = s.replace(&url, "<SMTP_URL>");
        if let Ok(u) = reqwest::Url::parse(&url)
            && let Some(pw) = u.password()
            && pw.len() >= 3
        {
            s = s.replace(pw, "[redacted]");
        }
        s
    };
    let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(&url)
        .map_err(|e| ToolError::fatal(hide(format!("SMTP_URL is not a valid SMTP URL: {e}"))))?
        .timeout(Some(call.timeout))
        .build();
    match transport.send(message).await {
        Ok(resp) => Ok(json!({
            "ok": true,
            "to": to.iter().map(|m| m.email.to_string()).collect::<Vec<_>>(),
            "code": resp.code().to_string(),
            "message": resp.message().collect::<Vec<_>>().join(" "),
        })),
        Err(e) if e.is_permanent() => Err(ToolError::fatal(hide(format!(
            "the SMTP server refused the message: {e}"
        )))),
        Err(e) => Err(ToolError::retryable(hide(format!("sending failed: {e}")))),
    }
}
