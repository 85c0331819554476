//! The tool-runner trait: typed side effects called by `tool` nodes.

use async_trait::async_trait;
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct ToolCall {
    pub tool_name: String,
    /// Params already rendered against state.
    pub params: Value,
    /// Stable across retries and `weir resume`: derived from run id, node id and visit.
    pub idempotency_key: String,
    pub timeout: std::time::Duration,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    pub message: String,
    /// A configuration error (bad params, unknown tool) is not worth retrying.
    pub retryable: bool,
}

impl ToolError {
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
        }
    }

    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }
}

#[async_trait]
pub trait ToolRunner: Send + Sync {
    /// Whether `tool_name` exists (used by validation).
    fn has_tool(&self, tool_name: &str) -> bool;

    /// Names of every tool, for hints.
    fn tool_names(&self) -> Vec<String>;

    async fn call(&self, call: ToolCall) -> Result<Value, ToolError>;

    /// Checks a call's literal params when the configuration can tell (an MCP server that is
    /// not configured); `Err` says why it cannot work.
    fn check_call(&self, _tool_name: &str, _params: &Value) -> Result<(), String> {
        Ok(())
    }

    /// What an agent's model is told about a tool it may call: for each tool `tool_ref`
    /// names (`mcp:SERVER/*` names every tool of that server), the workflow's name for it
    /// and its definition (a name a model accepts, a description, the JSON Schema of its
    /// arguments). MCP tools bring theirs from the server.
    async fn describe(
        &self,
        tool_ref: &str,
    ) -> Result<Vec<(String, crate::model::ToolDef)>, ToolError> {
        Err(ToolError::fatal(format!(
            "`{tool_ref}` cannot be offered to a model here"
        )))
    }

    /// Stops what the runner started (MCP server processes, sessions).
    async fn shutdown(&self) {}
}
