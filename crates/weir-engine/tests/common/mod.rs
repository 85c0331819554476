//! Fakes of the engine's own traits shared by the engine's integration tests: no tools, no
//! scripts, and workflow nodes built by hand.

use async_trait::async_trait;
use serde_json::Value;
use weir_core::expr::Template;
use weir_core::ir::{AgentSpec, AttemptPolicy, Node, NodeKind};
use weir_core::model::Usage;
use weir_core::script::{ScriptCall, ScriptError, ScriptResult, ScriptRunner};
use weir_core::{ModelResponse, ToolCall, ToolError, ToolRunner};

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
        Err(ToolError::fatal("no tools"))
    }
}

pub struct NoScripts;

#[async_trait]
impl ScriptRunner for NoScripts {
    async fn run(&self, _: ScriptCall) -> Result<ScriptResult, ScriptError> {
        Err(ScriptError::Runtime("no scripts".into()))
    }
}

pub fn node(id: &str, kind: NodeKind) -> Node {
    Node {
        id: id.into(),
        label: None,
        kind,
        policy: AttemptPolicy::default(),
        output_key: None,
        span: None,
        model_span: None,
    }
}

/// An agent of the model `fake` asked `message`.
pub fn agent(message: &str) -> NodeKind {
    NodeKind::Agent(AgentSpec {
        model: "fake".into(),
        system_prompt: None,
        user_message: Template::parse(message).unwrap(),
        temperature: None,
        max_tokens: None,
        response_schema: None,
        repair_attempts: 2,
        fallback_models: Vec::new(),
        fallback_error_classes: None,
        tools: weir_core::ir::AgentTools::default(),
    })
}

/// A free, unmetered reply of `model` from the fake provider.
pub fn reply(
    model: weir_core::model::ModelName,
    text: weir_core::model::ReplyText,
) -> ModelResponse {
    ModelResponse {
        text,
        model,
        provider: "fake".into(),
        usage: Usage::default(),
        cost_usd: Some(0.0),
        fallback_used: false,
        calls: Vec::new(),
        events: Vec::new(),
        tool_uses: Vec::new(),
    }
}
