//! `http_request`: params `method` (default GET), `url`, `headers` (map), `query` (map),
//! `body` (string or JSON). Output `{status, headers, body}` where `body` is parsed JSON when
//! the reply is JSON, else text. A status of 400 or above fails the attempt.

use serde_json::{Map, Value, json};
use weir_core::{ToolCall, ToolError};

use crate::{param_str, transport_error};

const MAX_BODY: usize = 10 << 20;

#[expect(
    clippy::too_many_lines,
    reason = "the http_request tool in order: arguments, the network policy checks, the request, the response's classification and reading"
)]
pub async fn call(net: &crate::Net, call: &ToolCall) -> Result<Value, ToolError> {
    let p = &call.params;
    let url = param_str(p, "url")?.ok_or_else(|| ToolError::fatal("param `url` is required"))?;
    let method = param_str(p, "method")?
        .unwrap_or("GET")
        .to_ascii_uppercase();
    let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|_| {
        ToolError::fatal(format!("param `method`: `{method}` is not an HTTP method"))
    })?;
    let parsed =
        reqwest::Url::parse(url).map_err(|e| ToolError::fatal(format!("param `url`: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ToolError::fatal("param `url` must be an http or https URL"));
    }
    net.check(&parsed).await?;
    let mut req = net
        .client()
        .request(method, parsed)
        .timeout(call.timeout)
        .header("Idempotency-Key", &call.idempotency_key);
    if let Some(h) = p.get("headers") {
        let Value::Object(h) = h else {
            return Err(ToolError::fatal("param `headers` must be a map"));
        };
        for (k, v) in h {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            req = req.header(k, v);
        }
    }
    if let Some(q) = p.get("query") {
        let Value::Object(q) = q else {
            return Err(ToolError::fatal("param `query` must be a map"));
        };
        let pairs: Vec<(String, String)> = q
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_string),
                )
            })
            .collect();
        req = req.query(&pairs);
    }
    match p.get("body") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => req = req.body(s.clone()),
        Some(v) => req = req.json(v),
    }
    let resp = req.send().await.map_err(|e| transport_error(&e, ""))?;
    let status = resp.status().as_u16();
    let mut headers = Map::new();
    for (k, v) in resp.headers() {
        if let Ok(v) = v.to_str() {
            headers.insert(k.as_str().to_string(), json!(v));
        }
    }
    let is_json = headers
        .get("content-type")
        .and_then(Value::as_str)
        .is_some_and(|c| c.contains("json"));
    let bytes = resp.bytes().await.map_err(|e| transport_error(&e, ""))?;
    if bytes.len() > MAX_BODY {
        return Err(ToolError::retryable(format!(
            "response body is larger than {MAX_BODY} bytes"
        )));
    }
    let text = String::from_utf8_lossy(&bytes).to_string();
    if status >= 400 {
        let snippet: String = text.chars().take(300).collect();
        return Err(ToolError::retryable(format!("HTTP {status}: {snippet}")));
    }
    let body = if is_json {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    } else {
        Value::String(text)
    };
    Ok(json!({"status": status, "headers": headers, "body": body}))
}
