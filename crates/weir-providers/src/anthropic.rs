//! Anthropic Messages API client: `POST {ANTHROPIC_BASE_URL}/v1/messages`.

use serde_json::{Value, json};
use weir_core::model::{Message, Role, ToolChoice, ToolUse, Usage};
use weir_core::{ErrorClass, ModelError, ModelRequest};

use crate::http::{self, Flow, Reply, Sent, Streamed};

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
        if req.on_delta.is_some() {
            body["stream"] = json!(true);
        }
        let request = self
            .client
            .get_or_init(http::client)
            .post(format!("{}/v1/messages", self.base_url))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .timeout(req.timeout)
            .json(&body);
        match http::send(request).await? {
            Sent::Json(v) => whole(&v),
            Sent::Stream(resp) => {
                let mut reading = Reading::new(req);
                let read = http::read_stream(resp, |_, data| reading.event(data)).await;
                match read {
                    Ok(()) => Ok(reading.finish()),
                    Err(e) => Err(reading.text.fail(e)),
                }
            }
        }
    }
}

/// A reply read whole.
fn whole(v: &Value) -> Result<Reply, ModelError> {
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
    let count = |k: &str| v.pointer(k).and_then(Value::as_u64).unwrap_or(0);
    Ok(Reply {
        tool_uses,
        text,
        usage: Usage {
            input_tokens: count("/usage/input_tokens"),
            output_tokens: count("/usage/output_tokens"),
        },
    })
}

/// A streamed reply as its events arrive (`message_start`, `content_block_start`,
/// `content_block_delta` of `text_delta` or `input_json_delta`, `message_delta` with the
/// output tokens so far, `message_stop`; `error` mid-stream).
struct Reading<'a> {
    text: Streamed<'a>,
    usage: Usage,
}

impl<'a> Reading<'a> {
    fn new(req: &'a ModelRequest) -> Self {
        Self {
            text: Streamed::new(req.on_delta.as_ref()),
            usage: Usage::default(),
        }
    }

    fn event(&mut self, data: &str) -> Result<Flow, ModelError> {
        let v: Value = serde_json::from_str(data).map_err(|e| http::malformed_event(&e))?;
        let str_at = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match str_at("/type") {
            "message_start" => {
                let count = |k: &str| v.pointer(k).and_then(Value::as_u64).unwrap_or(0);
                self.usage.input_tokens = count("/message/usage/input_tokens");
                self.usage.output_tokens = count("/message/usage/output_tokens");
            }
            "content_block_start" if str_at("/content_block/type") == "tool_use" => {
                let (id, name) = (str_at("/content_block/id"), str_at("/content_block/name"));
                if id.is_empty() || name.is_empty() {
                    return Err(ModelError::new(
                        ErrorClass::Malformed,
                        "a tool_use block has no `id` or `name`",
                    ));
                }
                self.text
                    .calls
                    .insert(index, (id.into(), name.into(), String::new()));
            }
            "content_block_start" => self.text.push(str_at("/content_block/text")),
            "content_block_delta" => match str_at("/delta/type") {
                "text_delta" => self.text.push(str_at("/delta/text")),
                "input_json_delta" => {
                    if let Some(t) = self.text.calls.get_mut(&index) {
                        t.2.push_str(str_at("/delta/partial_json"));
                    }
                }
                _ => {}
            },
            // Counts so far: the last one is the call's.
            "message_delta" => {
                if let Some(n) = v.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    self.usage.output_tokens = n;
                }
                if let Some(n) = v.pointer("/usage/input_tokens").and_then(Value::as_u64) {
                    self.usage.input_tokens = n;
                }
            }
            "message_stop" => return Ok(Flow::Done),
            "error" => return Err(stream_error(&v)),
            _ => {}
        }
        Ok(Flow::More)
    }

    fn finish(self) -> Reply {
        self.text.into_reply(self.usage)
    }
}

/// An `error` event in a stream (`overloaded_error`, `rate_limit_error`, `api_error`, …),
/// classified like the status it stands for.
fn stream_error(v: &Value) -> ModelError {
    let kind = v
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or("error");
    let message = v
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("the provider ended the stream with an error");
    let class = match kind {
        "rate_limit_error" => ErrorClass::RateLimit,
        "overloaded_error" | "api_error" => ErrorClass::ServerError,
        "authentication_error" | "permission_error" => ErrorClass::Auth,
        "timeout_error" => ErrorClass::Timeout,
        _ => ErrorClass::HttpError,
    };
    ModelError::new(class, format!("{kind}: {message}"))
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
