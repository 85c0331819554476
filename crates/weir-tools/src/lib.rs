//! weir-tools: the built-in tools behind [`weir_core::ToolRunner`], one file each.
//!
//! Failure semantics (DESIGN §6): a network error or an HTTP status of 400 and above fails the
//! attempt, so the node's retries apply; bad params fail it without retrying. Every outbound
//! request carries the call's `Idempotency-Key`. Webhook URLs are secrets: they never appear
//! in a tool's output or error text.

mod delay;
mod http_request;
mod slack_message;

use async_trait::async_trait;
use serde_json::Value;
use weir_core::{ToolCall, ToolError, ToolRunner};

const BUILT_IN: &[&str] = &["http_request", "slack_message", "delay"];

/// The tool runner the binary wires into the engine.
pub struct Registry {
    client: reqwest::Client,
}

impl Registry {
    pub fn new() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            client: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
        }
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl ToolRunner for Registry {
    fn has_tool(&self, tool_name: &str) -> bool {
        BUILT_IN.contains(&tool_name)
    }

    fn tool_names(&self) -> Vec<String> {
        BUILT_IN.iter().map(|s| s.to_string()).collect()
    }

    async fn call(&self, call: ToolCall) -> Result<Value, ToolError> {
        match call.tool_name.as_str() {
            "http_request" => http_request::call(&self.client, &call).await,
            "slack_message" => slack_message::call(&self.client, &call).await,
            "delay" => delay::call(&call).await,
            other if other.starts_with("custom:") => Err(ToolError::fatal(format!(
                "custom tool `{other}` is not registered; re-register it or update the node"
            ))),
            other => Err(ToolError::fatal(format!("unknown tool `{other}`"))),
        }
    }
}

/// A transport error's text with every URL removed (webhook URLs carry secrets).
fn transport_error(e: &reqwest::Error, secret: &str) -> ToolError {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    if let Some(u) = e.url() {
        msg = msg.replace(u.as_str(), "<url>");
    }
    if !secret.is_empty() {
        msg = msg.replace(secret, "<url>");
    }
    let kind = if e.is_timeout() {
        "timed out"
    } else {
        "failed"
    };
    ToolError::retryable(format!("request {kind}: {msg}"))
}

fn param_str<'a>(params: &'a Value, key: &str) -> Result<Option<&'a str>, ToolError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ToolError::fatal(format!(
            "param `{key}` must be a string, found {other}"
        ))),
    }
}
