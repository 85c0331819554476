//! weir-tools: the built-in tools behind [`weir_core::ToolRunner`], one file each, plus
//! custom tools and the MCP client.
//!
//! Failure semantics (DESIGN §6): a network error or an HTTP status of 400 and above fails the
//! attempt, so the node's retries apply; bad params and refusals that a retry cannot fix fail
//! it without retrying. Every outbound request carries the call's `Idempotency-Key`. Webhook
//! URLs, SMTP credentials and secrets never appear in a tool's output or error text.

#![warn(missing_docs)]

mod custom;
mod delay;
mod describe;
mod http_request;
mod mcp;
pub mod network;
mod send_email;
mod slack_message;

use async_trait::async_trait;
use serde_json::Value;
use weir_core::settings::Settings;
use weir_core::{ToolCall, ToolError, ToolRunner};

const BUILT_IN: &[&str] = &[
    "http_request",
    "slack_message",
    "send_email",
    "delay",
    "mcp_call",
];

/// The tool runner the binary wires into the engine.
pub struct Registry {
    net: Net,
    settings: Settings,
    mcp: mcp::Servers,
}

/// The HTTP side of the tools: one client, and the network policy when serving.
pub(crate) struct Net {
    /// Built on first use: building one loads the platform's root certificates.
    client: std::sync::OnceLock<reqwest::Client>,
    policy: Option<std::sync::Arc<network::Policy>>,
}

impl Net {
    pub(crate) fn client(&self) -> &reqwest::Client {
        self.client
            .get_or_init(|| network::client(self.policy.as_ref()))
    }

    /// Refuses a URL the network policy does not permit (nothing to check without one).
    pub(crate) async fn check(&self, url: &reqwest::Url) -> Result<(), ToolError> {
        match &self.policy {
            Some(p) => p.check_url(url).await.map_err(ToolError::fatal),
            None => Ok(()),
        }
    }
}

impl Registry {
    /// Tools for `weir run`: the user's own file with the user's own privileges, so any
    /// address is reachable.
    pub fn new(settings: Settings) -> Self {
        Self::with_policy(settings, None)
    }

    /// Tools for `weir serve` and `weir worker`: every connection under the network policy
    /// of `[network]` in weir.toml.
    pub fn serving(settings: Settings) -> Result<Self, String> {
        let policy = network::Policy::new(&settings.network.allow)?;
        Ok(Self::with_policy(
            settings,
            Some(std::sync::Arc::new(policy)),
        ))
    }

    fn with_policy(settings: Settings, policy: Option<std::sync::Arc<network::Policy>>) -> Self {
        // rustls needs a process-wide crypto provider before any client is built (ours, and
        // the one rmcp builds for MCP over HTTP); installing it is cheap, building is not.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            mcp: mcp::Servers::new(settings.mcp.servers.clone(), policy.clone()),
            net: Net {
                client: std::sync::OnceLock::new(),
                policy,
            },
            settings,
        }
    }
}

#[async_trait]
impl ToolRunner for Registry {
    fn has_tool(&self, tool_name: &str) -> bool {
        if let Some(rest) = tool_name.strip_prefix("mcp:") {
            // An agent's `mcp:SERVER/TOOL` (or `mcp:SERVER/*`): the server must be configured.
            return rest.split_once('/').is_some_and(|(server, tool)| {
                !tool.is_empty() && self.settings.mcp.servers.contains_key(server)
            });
        }
        match tool_name.strip_prefix("custom:") {
            Some(name) => self.settings.tools.contains_key(name),
            None => BUILT_IN.contains(&tool_name),
        }
    }

    async fn describe(
        &self,
        tool_ref: &str,
    ) -> Result<Vec<(String, weir_core::model::ToolDef)>, ToolError> {
        self.describe_ref(tool_ref).await
    }

    fn tool_names(&self) -> Vec<String> {
        BUILT_IN
            .iter()
            .map(ToString::to_string)
            .chain(self.settings.tools.keys().map(|k| format!("custom:{k}")))
            .collect()
    }

    fn check_call(&self, tool_name: &str, params: &Value) -> Result<(), String> {
        if tool_name == "mcp_call"
            && let Some(server) = params.get("server").and_then(Value::as_str)
            && !server.contains('{')
            && !self.settings.mcp.servers.contains_key(server)
        {
            let known: Vec<&str> = self
                .settings
                .mcp
                .servers
                .keys()
                .map(String::as_str)
                .collect();
            return Err(format!(
                "MCP server `{server}` is not configured (configured: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ));
        }
        Ok(())
    }

    async fn call(&self, call: ToolCall) -> Result<Value, ToolError> {
        match call.tool_name.as_str() {
            "http_request" => http_request::call(&self.net, &call).await,
            "slack_message" => slack_message::call(&self.net, &call).await,
            "send_email" => send_email::call(&call).await,
            "delay" => delay::call(&call).await,
            "mcp_call" => self.mcp.call_tool_params(&call).await,
            other if other.starts_with("mcp:") => {
                // An agent's call of `mcp:SERVER/TOOL`: its params are the tool's arguments.
                let (server, tool) = other[4..].split_once('/').ok_or_else(|| {
                    ToolError::fatal(format!("`{other}`: name an MCP tool as mcp:SERVER/TOOL"))
                })?;
                let arguments = match &call.params {
                    Value::Object(m) => m.clone(),
                    _ => serde_json::Map::new(),
                };
                self.mcp
                    .call_tool(server, tool, arguments, call.timeout)
                    .await
            }
            other => match other.strip_prefix("custom:") {
                Some(name) => match self.settings.tools.get(name) {
                    Some(tool) => custom::call(self, name, tool, &call).await,
                    None => Err(ToolError::fatal(format!(
                        "custom tool `{other}` is not registered; re-register it or update the node"
                    ))),
                },
                None => Err(ToolError::fatal(format!("unknown tool `{other}`"))),
            },
        }
    }

    async fn shutdown(&self) {
        self.mcp.shutdown().await;
    }
}

/// A URL as an error may show it: without a password in it (declared secrets elsewhere in
/// it are scrubbed from every message by the engine).
fn shown(u: &reqwest::Url) -> String {
    let mut u = u.clone();
    if u.password().is_some() {
        let _ = u.set_password(Some("<redacted>"));
    }
    u.to_string()
}

/// A transport error's text, naming the URL it was for; a URL that is itself the secret (a
/// webhook's) is `<url>`.
fn transport_error(e: &reqwest::Error, secret: &str) -> ToolError {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    if let Some(u) = e.url() {
        let shown = if secret.is_empty() {
            shown(u)
        } else {
            "<url>".into()
        };
        msg = msg.replace(u.as_str(), &shown);
    }
    if !secret.is_empty() {
        msg = msg.replace(secret, "<url>");
    }
    let kind = if e.is_timeout() {
        "timed out"
    } else {
        "failed"
    };
    if msg.contains("network policy:") {
        // Refused by the server's network policy (at connect or on a redirect): a retry
        // meets the same policy.
        return ToolError::fatal(format!("request refused: {msg}"));
    }
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
