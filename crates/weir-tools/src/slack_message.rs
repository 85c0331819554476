//! `slack_message`: posts `{"text": …}` to `params.webhook_url`, else `SLACK_WEBHOOK_URL`.
//! Output `{ok, status}`; the webhook URL (a secret) is never part of the output or errors.

use serde_json::{Value, json};
use weir_core::{ToolCall, ToolError};

use crate::{param_str, transport_error};

pub async fn call(net: &crate::Net, call: &ToolCall) -> Result<Value, ToolError> {
    let p = &call.params;
    let text = param_str(p, "text")?.ok_or_else(|| ToolError::fatal("param `text` is required"))?;
    let url = match param_str(p, "webhook_url")? {
        Some(u) => u.to_string(),
        None => std::env::var("SLACK_WEBHOOK_URL").map_err(|_| {
            ToolError::fatal(
                "no webhook: set params.webhook_url or the SLACK_WEBHOOK_URL environment variable",
            )
        })?,
    };
    let mut body = json!({"text": text});
    for key in ["channel", "username", "icon_emoji", "blocks"] {
        if let Some(v) = p.get(key) {
            body[key] = v.clone();
        }
    }
    // The webhook URL is a secret: a bad one is named by what is wrong, never by its text.
    let parsed = reqwest::Url::parse(&url)
        .map_err(|e| ToolError::fatal(format!("the Slack webhook URL is not a URL ({e})")))?;
    net.check(&parsed).await?;
    let resp = net
        .client()
        .post(parsed)
        .timeout(call.timeout)
        .header("Idempotency-Key", &call.idempotency_key)
        .json(&body)
        .send()
        .await
        .map_err(|e| transport_error(&e, &url))?;
    let status = resp.status().as_u16();
    let reply = resp.text().await.unwrap_or_default().replace(&url, "<url>");
    if status >= 400 {
        let snippet: String = reply.chars().take(300).collect();
        return Err(ToolError::retryable(format!(
            "Slack webhook answered HTTP {status}: {snippet}"
        )));
    }
    Ok(json!({"ok": true, "status": status, "text": text}))
}
