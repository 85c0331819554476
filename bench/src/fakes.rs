//! The benchmark's stand-ins, as the peer benchmark has them: a model that answers a fixed
//! reply after an optional delay, no tools and no scripts. Workloads without persistence use
//! `weir_store::Memory::ephemeral()`, like the peer's runs without a checkpointer.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use weir_core::model::Usage;
use weir_core::script::{ScriptCall, ScriptError, ScriptResult, ScriptRunner};
use weir_core::{
    ModelClient, ModelError, ModelRequest, ModelResponse, ToolCall, ToolError, ToolRunner,
};

pub struct FakeModel {
    pub latency: Duration,
    /// The reply: "fake llm reply", or this many bytes of text (`durable_state`).
    pub reply_bytes: usize,
}

#[async_trait]
impl ModelClient for FakeModel {
    async fn complete(&self, req: ModelRequest) -> Result<ModelResponse, ModelError> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        Ok(ModelResponse {
            text: if self.reply_bytes == 0 {
                "fake llm reply".into()
            } else {
                "fake llm reply ".repeat(self.reply_bytes / 15 + 1)[..self.reply_bytes].into()
            },
            model: req.model,
            provider: "fake".into(),
            usage: Usage::default(),
            cost_usd: Some(0.0),
            fallback_used: false,
            calls: Vec::new(),
            events: Vec::new(),
        })
    }

    fn check_model(&self, _: &str) -> Result<(), String> {
        Ok(())
    }
}

pub struct NoTools;

#[async_trait]
impl ToolRunner for NoTools {
    fn has_tool(&self, _: &str) -> bool {
        false
    }
    fn tool_names(&self) -> Vec<String> {
        Vec::new()
    }
    async fn call(&self, _: ToolCall) -> Result<Value, ToolError> {
        Err(ToolError::fatal("no tools in the benchmark"))
    }
}

pub struct NoScripts;

#[async_trait]
impl ScriptRunner for NoScripts {
    async fn run(&self, _: ScriptCall) -> Result<ScriptResult, ScriptError> {
        Err(ScriptError::Runtime("no scripts in the benchmark".into()))
    }
}
