//! Anthropic Messages API client: `POST {ANTHROPIC_BASE_URL}/v1/messages`.

use serde_json::{Value, json};
use weir_core::model::{Message, Role, ToolChoice, ToolUse, Usage};
use weir_core::{ErrorClass, ModelError, ModelRequest};

use crate::http::{self, Reply};

/// The Anthropic Messages API client.
pub struct Anthropic {
    /// Built on first use: building one loads the platform's root certificates.
    client: std::sync::OnceLock<reqwest::Client>,
    base_url: String,
    api_key: Option<String>,
}

impl Anthropic {
    /// The client of `$ANTHROPIC_API_KEY` and `$ANTHROPIC_BASE_URL`.
    pub fn from_env() -> Self {
        Self {
            client: std::sync::OnceLock::new(),
            base_url: std::env::var("ANTHROPIC_BASE_URL")
                .unwrap_or_else(|_| "https://api.anthropic.com".into())
                .trim_end_matches('/')
                .to_string(),
            api_key: std::env::var("ANTHROPIC_API_KEY")
                .ok()
                .filter(|k| !k.is_empty()),
        }
    }

    /// One call of `model`; faults classified, never retried here.
    pub async fn complete(&self, req: &ModelRequest, model: &str) -> Result<Reply, ModelError> {
        let key = self
            .api_key
            .as_deref()
            .ok_or_else(|| ModelError::new(ErrorClass::Auth, "ANTHROPIC_API_KEY is not set"))?;
        let messages: Vec<Value> = req.messages.iter().map(message).collect();
        let mut body = json!({
            "model": model,
            "max_tokens": req.max_tokens.unwrap_or(1024),
            "messages": messages,
        });
        add_tools(&mut body, req);
        if let Some(s) = &req.system {
            body["system"] = json!(s);
        }
        if let Some(t) = req.temperature {
            body["temperature"] = json!(t);
        }
        let request = self
            .client
            .get_or_init(http::client)
            .post(format!("{}/v1/messages", self.base_url))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .timeout(req.timeout)
            .json(&body);
        let v: Value = http::send_json(request).await?;
        let content = v
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| ModelError::new(ErrorClass::Malformed, "reply has no `content` list"))?;
        let text: String = content
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        let tool_uses = tool_uses(content)?;
        Ok(Reply {
            tool_uses,
            text,
            usage: Usage {
                input_tokens: v
                    .pointer("/usage/input_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                output_tokens: v
                    .pointer("/usage/output_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            },
        })
    }
}

/// One message as the Messages API takes it: text, or content blocks for tool calls
/// (`tool_use`, the assistant's) and their results (`tool_result`, the user's).
fn message(m: &Message) -> Value {
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    if m.tool_uses.is_empty() && m.tool_returns.is_empty() {
        return json!({"role": role, "content": m.content});
    }
    let mut blocks = Vec::new();
    if !m.content.is_empty() {
        blocks.push(json!({"type": "text", "text": m.content}));
    }
    for u in &m.tool_uses {
        blocks.push(json!({"type": "tool_use", "id": u.id, "name": u.name, "input": u.arguments}));
    }
    for r in &m.tool_returns {
        blocks.push(
            json!({"type": "tool_result", "tool_use_id": r.id, "content": r.content,
                           "is_error": r.is_error}),
        );
    }
    json!({"role": role, "content": blocks})
}

/// The tools a request offers, and how the model may use them.
fn add_tools(body: &mut Value, req: &ModelRequest) {
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        let mut choice = match &req.tool_choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
        };
        if !req.parallel_tool_calls && req.tool_choice != ToolChoice::None {
            choice["disable_parallel_tool_use"] = json!(true);
        }
        body["tool_choice"] = choice;
    }
}

/// The `tool_use` blocks of a reply's content.
fn tool_uses(content: &[Value]) -> Result<Vec<ToolUse>, ModelError> {
    let mut tool_uses = Vec::new();
    for b in content {
        if b.get("type").and_then(Value::as_str) != Some("tool_use") {
            continue;
        }
        let field = |k: &str| {
            b.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| {
                    ModelError::new(
                        ErrorClass::Malformed,
                        format!("a tool_use block has no `{k}`"),
                    )
                })
        };
        tool_uses.push(ToolUse {
            id: field("id")?,
            name: field("name")?,
            arguments: b.get("input").cloned().unwrap_or_else(|| json!({})),
        });
    }
    Ok(tool_uses)
}
