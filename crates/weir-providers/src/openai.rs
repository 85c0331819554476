//! OpenAI Chat Completions client, for OpenAI itself and any OpenAI-compatible server
//! (`[providers.NAME] base_url` in weir.toml): `POST {base}/chat/completions`.

use serde_json::{Value, json};
use weir_core::model::{Role, ToolChoice, ToolUse, Usage};
use weir_core::{ErrorClass, ModelError, ModelRequest};

use crate::http::{self, Flow, Reply, Sent, Streamed};

/// The OpenAI Chat Completions client (and any OpenAI-compatible server).
pub struct OpenAi {
    /// Built on first use: building one loads the platform's root certificates.
    client: std::sync::OnceLock<reqwest::Client>,
    base_url: String,
    api_key: Option<String>,
    /// Environment variable the key comes from, for the error when it is missing.
    key_var: Option<String>,
}

impl OpenAi {
    /// OpenAI itself: `OPENAI_BASE_URL`, `OPENAI_API_KEY`.
    pub fn from_env() -> Self {
        Self::new(
            &std::env::var("OPENAI_BASE_URL")
                .unwrap_or_else(|_| "https://api.openai.com/v1".into()),
            Some("OPENAI_API_KEY"),
        )
    }

    /// An OpenAI-compatible server; `key_var` names the environment variable holding its key
    /// (`None`: the server needs none).
    pub fn new(base_url: &str, key_var: Option<&str>) -> Self {
        Self {
            client: std::sync::OnceLock::new(),
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key: key_var
                .and_then(|v| std::env::var(v).ok())
                .filter(|k| !k.is_empty()),
            key_var: key_var.map(str::to_string),
        }
    }

    /// One call of `model`; faults classified, never retried here.
    pub async fn complete(&self, req: &ModelRequest, model: &str) -> Result<Reply, ModelError> {
        if self.api_key.is_none()
            && let Some(var) = &self.key_var
        {
            return Err(ModelError::new(
                ErrorClass::Auth,
                format!("{var} is not set"),
            ));
        }
        let messages = messages(req);
        let mut body = json!({"model": model, "messages": messages});
        add_tools(&mut body, req);
        if let Some(t) = req.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(m) = req.max_tokens {
            body["max_tokens"] = json!(m);
        }
        if req.on_delta.is_some() {
            body["stream"] = json!(true);
            // The usage comes in a last chunk of its own.
            body["stream_options"] = json!({"include_usage": true});
        }
        let mut call = self
            .client
            .get_or_init(http::client)
            .post(format!("{}/chat/completions", self.base_url))
            .timeout(req.timeout)
            .json(&body);
        if let Some(key) = &self.api_key {
            call = call.bearer_auth(key);
        }
        match http::send(call).await? {
            Sent::Json(v) => whole(&v),
            Sent::Stream(resp) => {
                let mut reading = Reading::new(req);
                let read = http::read_stream(resp, |_, data| reading.chunk(data)).await;
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
    let tool_uses = tool_uses(v)?;
    let text = match v.pointer("/choices/0/message/content") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Null) | None if !tool_uses.is_empty() => String::new(),
        _ => {
            return Err(ModelError::new(
                ErrorClass::Malformed,
                "reply has no choices[0].message.content",
            ));
        }
    };
    Ok(Reply {
        tool_uses,
        text,
        usage: usage(v).unwrap_or_default(),
    })
}

/// A reply's (or a stream's last chunk's) `usage`.
fn usage(v: &Value) -> Option<Usage> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    let count = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    Some(Usage {
        input_tokens: count("prompt_tokens"),
        output_tokens: count("completion_tokens"),
    })
}

/// A streamed reply as its chunks arrive: `choices[0].delta.content` pieces, tool calls
/// assembled by their `index` (the id and name first, the arguments' JSON in pieces), the
/// usage in the last chunk, `[DONE]` at the end.
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

    fn chunk(&mut self, data: &str) -> Result<Flow, ModelError> {
        if data.trim() == "[DONE]" {
            return Ok(Flow::Done);
        }
        let v: Value = serde_json::from_str(data).map_err(|e| http::malformed_event(&e))?;
        if let Some(e) = v.get("error").filter(|e| e.is_object()) {
            return Err(stream_error(e));
        }
        if let Some(u) = usage(&v) {
            self.usage = u;
        }
        let Some(choice) = v.pointer("/choices/0") else {
            return Ok(Flow::More);
        };
        if let Some(t) = choice.pointer("/delta/content").and_then(Value::as_str) {
            self.text.push(t);
        }
        for c in choice
            .pointer("/delta/tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = c.get("index").and_then(Value::as_u64).unwrap_or(0);
            let call = self.text.calls.entry(index).or_default();
            if let Some(id) = c.get("id").and_then(Value::as_str) {
                call.0 = id.to_string();
            }
            if let Some(name) = c.pointer("/function/name").and_then(Value::as_str) {
                call.1.push_str(name);
            }
            if let Some(args) = c.pointer("/function/arguments").and_then(Value::as_str) {
                call.2.push_str(args);
            }
        }
        Ok(Flow::More)
    }

    fn finish(self) -> Reply {
        self.text.into_reply(self.usage)
    }
}

/// An `error` object in a stream's chunk, classified by its type or code.
fn stream_error(e: &Value) -> ModelError {
    let field = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default();
    let kind = [field("type"), field("code")].join(" ");
    let class = if kind.contains("rate_limit") {
        ErrorClass::RateLimit
    } else if kind.contains("server_error") || kind.contains("overloaded") {
        ErrorClass::ServerError
    } else if kind.contains("auth") || kind.contains("permission") {
        ErrorClass::Auth
    } else {
        ErrorClass::HttpError
    };
    let message = match field("message") {
        "" => "the provider ended the stream with an error",
        m => m,
    };
    ModelError::new(class, message.to_string())
}

/// The conversation as Chat Completions takes it: the system prompt first; a turn's tool
/// results as `tool` messages, one per call; an assistant turn's calls as `tool_calls`.
fn messages(req: &ModelRequest) -> Vec<Value> {
    let mut messages = Vec::new();
    if let Some(s) = &req.system {
        messages.push(json!({"role": "system", "content": s}));
    }
    for m in &req.messages {
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        // Tool results are messages of their own, one per call, in the calls' order.
        for r in &m.tool_returns {
            messages.push(json!({"role": "tool", "tool_call_id": r.id, "content": r.content}));
        }
        if m.tool_uses.is_empty() {
            if m.tool_returns.is_empty() || !m.content.is_empty() {
                messages.push(json!({"role": role, "content": m.content}));
            }
            continue;
        }
        let calls: Vec<Value> = m
            .tool_uses
            .iter()
            .map(|u| {
                json!({"id": u.id, "type": "function",
                       "function": {"name": u.name, "arguments": u.arguments.to_string()}})
            })
            .collect();
        let content = if m.content.is_empty() {
            Value::Null
        } else {
            json!(m.content)
        };
        messages.push(json!({"role": role, "content": content, "tool_calls": calls}));
    }
    messages
}

/// The tools a request offers, and how the model may use them.
fn add_tools(body: &mut Value, req: &ModelRequest) {
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        body["tool_choice"] = match &req.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Required => json!("required"),
            ToolChoice::None => json!("none"),
            ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        };
        if req.tool_choice != ToolChoice::None {
            body["parallel_tool_calls"] = json!(req.parallel_tool_calls);
        }
    }
}

/// The tool calls of a reply (`choices[0].message.tool_calls`).
fn tool_uses(v: &Value) -> Result<Vec<ToolUse>, ModelError> {
    let mut tool_uses = Vec::new();
    for c in v
        .pointer("/choices/0/message/tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let malformed = |what: &str| {
            ModelError::new(ErrorClass::Malformed, format!("a tool call has no {what}"))
        };
        let args = c
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or("{}");
        tool_uses.push(ToolUse {
            id: c
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| malformed("`id`"))?
                .to_string(),
            name: c
                .pointer("/function/name")
                .and_then(Value::as_str)
                .ok_or_else(|| malformed("`function.name`"))?
                .to_string(),
            // Arguments that are not JSON reach the loop as text, which tells the model.
            arguments: serde_json::from_str(args).unwrap_or_else(|_| Value::String(args.into())),
        });
    }
    Ok(tool_uses)
}
