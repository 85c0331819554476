//! `mcp_call` and MCP-backed custom tools: calls a tool on an MCP server configured under
//! `[mcp.servers]` in weir.toml. A stdio server is a command the engine starts on first use,
//! reuses for every later call in the process, and stops cleanly (closing the session, which
//! ends the process) at shutdown; an HTTP server is a streamable-HTTP session. Params:
//! `{server, tool, arguments}`. Output: `{content, text, structured_content}`; a result the
//! server marks as an error fails the node with its text.

use std::collections::{BTreeMap, HashMap};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;
use weir_core::settings::McpServer;
use weir_core::{ToolCall, ToolError};

pub struct Servers {
    config: BTreeMap<String, McpServer>,
    running: Mutex<HashMap<String, RunningService<RoleClient, ()>>>,
    /// The server's network policy for MCP over HTTP.
    policy: Option<std::sync::Arc<crate::network::Policy>>,
}

impl Servers {
    pub fn new(
        config: BTreeMap<String, McpServer>,
        policy: Option<std::sync::Arc<crate::network::Policy>>,
    ) -> Self {
        Self {
            config,
            running: Mutex::new(HashMap::new()),
            policy,
        }
    }

    async fn peer(&self, name: &str) -> Result<Peer<RoleClient>, ToolError> {
        let mut running = self.running.lock().await;
        if let Some(s) = running.get(name)
            && !s.is_closed()
        {
            return Ok(s.peer().clone());
        }
        let cfg = self.config.get(name).ok_or_else(|| {
            ToolError::fatal(format!(
                "MCP server `{name}` is not configured; add [mcp.servers.{name}] to weir.toml"
            ))
        })?;
        let service = match (&cfg.command, &cfg.url) {
            (Some(command), _) => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(&cfg.args)
                    .envs(&cfg.env)
                    .stderr(std::process::Stdio::null());
                // The server's stderr is its log, not weir's output.
                let (transport, _) = TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .map_err(|e| {
                        ToolError::fatal(format!(
                            "cannot start MCP server `{name}` ({command}): {e}"
                        ))
                    })?;
                ().serve(transport).await.map_err(|e| {
                    ToolError::retryable(format!(
                        "MCP server `{name}` did not start a session: {e}"
                    ))
                })?
            }
            (None, Some(url)) => {
                let mut headers = HashMap::new();
                for (k, v) in &cfg.headers {
                    let k = reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|e| {
                        ToolError::fatal(format!("[mcp.servers.{name}] header `{k}`: {e}"))
                    })?;
                    let v = reqwest::header::HeaderValue::from_str(v).map_err(|e| {
                        ToolError::fatal(format!("[mcp.servers.{name}] header value: {e}"))
                    })?;
                    headers.insert(k, v);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers);
                let transport = match &self.policy {
                    None => StreamableHttpClientTransport::from_config(config),
                    Some(p) => {
                        let parsed = reqwest::Url::parse(url).map_err(|e| {
                            ToolError::fatal(format!("[mcp.servers.{name}] url: {e}"))
                        })?;
                        p.check_url(&parsed)
                            .await
                            .map_err(|e| ToolError::fatal(format!("MCP server `{name}`: {e}")))?;
                        StreamableHttpClientTransport::with_client(
                            crate::network::client(Some(p)),
                            config,
                        )
                    }
                };
                ().serve(transport).await.map_err(|e| {
                    ToolError::retryable(format!("cannot reach MCP server `{name}`: {e}"))
                })?
            }
            (None, None) => {
                return Err(ToolError::fatal(format!(
                    "[mcp.servers.{name}] has neither command nor url"
                )));
            }
        };
        let peer = service.peer().clone();
        running.insert(name.to_string(), service);
        Ok(peer)
    }

    /// `mcp_call` with `{server, tool, arguments}` params.
    pub async fn call_tool_params(&self, call: &ToolCall) -> Result<Value, ToolError> {
        let p = &call.params;
        let server = p
            .get("server")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::fatal("param `server` is required"))?;
        let tool = p
            .get("tool")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::fatal("param `tool` is required"))?;
        let arguments = match p.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(other) => {
                return Err(ToolError::fatal(format!(
                    "param `arguments` must be a map, found {other}"
                )));
            }
        };
        self.call_tool(server, tool, arguments, call.timeout).await
    }

    pub async fn call_tool(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: std::time::Duration,
    ) -> Result<Value, ToolError> {
        let peer = self.peer(server).await?;
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = Some(arguments);
        let result = match tokio::time::timeout(timeout, peer.call_tool(params)).await {
            Err(_) => {
                return Err(ToolError::retryable(format!(
                    "MCP tool `{tool}` on `{server}` timed out"
                )));
            }
            Ok(Err(e)) => {
                // Say which tools exist when the one asked for does not.
                let names = peer
                    .list_all_tools()
                    .await
                    .map(|ts| ts.iter().map(|t| t.name.to_string()).collect::<Vec<_>>())
                    .unwrap_or_default();
                if !names.is_empty() && !names.iter().any(|n| n == tool) {
                    return Err(ToolError::fatal(format!(
                        "MCP server `{server}` has no tool `{tool}` (it has: {})",
                        names.join(", ")
                    )));
                }
                return Err(ToolError::retryable(format!(
                    "MCP call `{tool}` on `{server}` failed: {e}"
                )));
            }
            Ok(Ok(r)) => r,
        };
        let value = serde_json::to_value(&result).map_err(|e| ToolError::fatal(e.to_string()))?;
        let content = value.get("content").cloned().unwrap_or_else(|| json!([]));
        let text: Vec<&str> = content
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|c| c.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        let text = text.join("\n");
        if result.is_error == Some(true) {
            return Err(ToolError::fatal(format!(
                "MCP tool `{tool}` on `{server}` reported an error: {text}"
            )));
        }
        let mut out = json!({"content": content, "text": text});
        if let Some(s) = value.get("structuredContent") {
            out["structured_content"] = s.clone();
        }
        Ok(out)
    }

    /// The tools `server` offers (`tools/list`), as a model is told about them.
    pub async fn list(&self, server: &str) -> Result<Vec<weir_core::model::ToolDef>, ToolError> {
        let peer = self.peer(server).await?;
        let tools = peer.list_all_tools().await.map_err(|e| {
            ToolError::retryable(format!(
                "listing the tools of MCP server `{server}` failed: {e}"
            ))
        })?;
        Ok(tools
            .into_iter()
            .map(|t| weir_core::model::ToolDef {
                name: t.name.to_string(),
                description: t.description.map(|d| d.to_string()).unwrap_or_default(),
                parameters: Value::Object((*t.input_schema).clone()),
            })
            .collect())
    }

    /// Closes every session (stdio servers exit when their session ends).
    pub async fn shutdown(&self) {
        let running: Vec<_> = self.running.lock().await.drain().map(|(_, s)| s).collect();
        for s in running {
            let _ = s.cancel().await;
        }
    }
}
