//! The `mock` model: deterministic and offline, so every example and test runs without keys.
//!
//! By default it replies `mock reply to: <last user message>` (the first 200 characters), or,
//! when the node has a `response_schema`, a JSON value that matches it. Token counts are a
//! quarter of the characters sent and received, at $0. It can be scripted with `WEIR_MOCK`:
//! a path to a JSON file (or inline JSON starting with `[`) holding a list of rules; the
//! first rule whose `match` text occurs in the system prompt or any message (and whose
//! `times` budget is not used up) decides the reply:
//!
//! ```json
//! [{"match": "Summarize", "reply": "Nothing unusual.", "input_tokens": 12, "output_tokens": 3},
//!  {"match": "flaky", "error": "rate_limit", "message": "slow down", "times": 2},
//!  {"match": "slow", "reply": "done", "delay_ms": 5000}]
//! ```
//!
//! When the run's reply is watched as it is written (`weir run` on a terminal, a client of the
//! event stream), a rule's reply streams word by word, its `delay_ms` spread over the words.
//!
//! A rule may answer with tool calls instead (`"tool_calls": [{"name": "lookup",
//! "arguments": {"id": 7}}]`), for agents with tools. In the turns that follow, rules match
//! the tool results the model is sent (the last message), not the whole conversation, so a
//! script can answer each turn.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use weir_core::model::Usage;
use weir_core::{ErrorClass, ModelError, ModelRequest};

use crate::http::Reply;

/// One rule of a `WEIR_MOCK` script.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The text the prompt must contain (`match`; empty: any prompt).
    #[serde(rename = "match", default)]
    pub pattern: String,
    /// The reply text.
    pub reply: Option<String>,
    /// An error class to fail with instead (`rate_limit`, `timeout`, …).
    pub error: Option<String>,
    /// The error's message.
    pub message: Option<String>,
    /// Tokens reported in.
    pub input_tokens: Option<u64>,
    /// Tokens reported out.
    pub output_tokens: Option<u64>,
    /// How long the reply takes.
    #[serde(default)]
    pub delay_ms: u64,
    /// How many times the rule answers (default: every time).
    pub times: Option<u32>,
    /// Tool calls to ask for instead of (or with) a reply: `{name, arguments}` each.
    #[serde(default)]
    pub tool_calls: Vec<MockToolCall>,
    #[serde(skip)]
    used: AtomicU32,
}

/// A tool call a mock rule asks for.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockToolCall {
    /// The tool's name, as the model is told it.
    pub name: String,
    /// Its arguments (default `{}`).
    #[serde(default)]
    pub arguments: Option<Value>,
}

/// The offline `mock` model: scripted by rules, else a reply that fits the request.
#[derive(Debug, Default)]
pub struct Mock {
    rules: Vec<Rule>,
}

impl Mock {
    /// Reads rules from `WEIR_MOCK`; an unreadable script is an error, not a silent default.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var("WEIR_MOCK") {
            Ok(spec) if !spec.is_empty() => Self::from_spec(&spec),
            _ => Ok(Self::default()),
        }
    }

    /// The script for a run of the workflow file `workflow`: `WEIR_MOCK` when it is set,
    /// else `NAME.mock.json` beside `NAME.yaml` / `NAME.json` when there is one, else none.
    /// Returns the rules and, for a sidecar, its path (the CLI says which script it used).
    pub fn for_workflow(workflow: &std::path::Path) -> Result<(Self, Option<String>), String> {
        if std::env::var("WEIR_MOCK").is_ok_and(|s| !s.is_empty()) {
            return Ok((Self::from_env()?, None));
        }
        let sidecar = workflow.with_extension("mock.json");
        if sidecar != workflow && sidecar.is_file() {
            let path = sidecar.display().to_string();
            let text = std::fs::read_to_string(&sidecar).map_err(|e| format!("{path}: {e}"))?;
            return Ok((Self::parse(&text, &path)?, Some(path)));
        }
        Ok((Self::default(), None))
    }

    /// Rules given as JSON text (a test file's `mock:`); `origin` names them in errors.
    pub fn from_rules(text: &str, origin: &str) -> Result<Self, String> {
        Self::parse(text, origin)
    }

    /// `WEIR_MOCK`'s value: inline JSON (starting with `[`) or a file path.
    fn from_spec(spec: &str) -> Result<Self, String> {
        if spec.trim_start().starts_with('[') {
            return Self::parse(spec, "WEIR_MOCK");
        }
        let text =
            std::fs::read_to_string(spec).map_err(|e| format!("WEIR_MOCK file {spec}: {e}"))?;
        Self::parse(&text, &format!("WEIR_MOCK file {spec}"))
    }

    fn parse(text: &str, origin: &str) -> Result<Self, String> {
        let rules: Vec<Rule> =
            serde_json::from_str(text).map_err(|e| format!("{origin}: mock rules: {e}"))?;
        for r in &rules {
            if let Some(c) = &r.error
                && ErrorClass::parse(c).is_none()
            {
                return Err(format!("{origin}: mock rules: unknown error class `{c}`"));
            }
        }
        Ok(Self { rules })
    }

    /// The reply of the first rule that matches `req`, else the default reply.
    pub async fn complete(&self, req: &ModelRequest) -> Result<Reply, ModelError> {
        // After a tool turn the rules match what the tools gave back; else the whole request.
        let last = req.messages.last();
        let sent = match last {
            Some(m) if !m.tool_returns.is_empty() => m.text(),
            _ => {
                let mut sent = req.system.clone().unwrap_or_default();
                for m in &req.messages {
                    sent.push('\n');
                    sent.push_str(&m.content);
                }
                sent
            }
        };
        let approx = |s: &str| (s.chars().count() as u64).div_ceil(4);
        let rule = self.rules.iter().find(|r| {
            sent.contains(&r.pattern)
                && match r.times {
                    None => true,
                    Some(t) => r.used.fetch_add(1, Ordering::SeqCst) < t,
                }
        });
        let Some(rule) = rule else {
            let reply = match &req.response_schema {
                Some(schema) => example(schema, 0).to_string(),
                None => format!(
                    "mock reply to: {}",
                    last.map(weir_core::model::Message::text)
                        .unwrap_or_default()
                        .chars()
                        .take(200)
                        .collect::<String>()
                ),
            };
            return Ok(reply_with(reply.clone(), approx(&sent), approx(&reply)));
        };
        let streams = req.on_delta.is_some() && rule.error.is_none();
        if rule.delay_ms > 0 && !streams {
            tokio::time::sleep(Duration::from_millis(rule.delay_ms)).await;
        }
        if let Some(class) = rule.error.as_deref().and_then(ErrorClass::parse) {
            let msg = rule
                .message
                .clone()
                .unwrap_or_else(|| format!("mock {} error", class.as_str()));
            return Err(ModelError::new(class, msg));
        }
        let reply = rule.reply.clone().unwrap_or_default();
        if let Some(tell) = req.on_delta.as_ref().filter(|_| streams) {
            stream(&reply, rule.delay_ms, tell).await;
        }
        let mut out = reply_with(
            reply.clone(),
            rule.input_tokens.unwrap_or_else(|| approx(&sent)),
            rule.output_tokens.unwrap_or_else(|| approx(&reply)),
        );
        if req.tool_choice != weir_core::model::ToolChoice::None {
            let turn = req.messages.len();
            out.tool_uses = rule
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, c)| weir_core::model::ToolUse {
                    id: format!("mock_call_{turn}_{i}"),
                    name: c.name.clone(),
                    arguments: c.arguments.clone().unwrap_or_else(|| json!({})),
                })
                .collect();
        }
        Ok(out)
    }
}

/// A scripted reply as a stream: word by word, its delay spread over the words.
async fn stream(reply: &str, delay_ms: u64, tell: &weir_core::model::OnDelta) {
    let words: Vec<&str> = reply.split_inclusive(char::is_whitespace).collect();
    let gap = Duration::from_millis(delay_ms) / (words.len().max(1) as u32);
    let mut at = 0;
    for w in &words {
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        (tell.0)(w, at);
        at += w.chars().count();
    }
    if words.is_empty() && !gap.is_zero() {
        tokio::time::sleep(gap).await;
    }
}

fn reply_with(text: String, input_tokens: u64, output_tokens: u64) -> Reply {
    Reply {
        text,
        usage: Usage {
            input_tokens,
            output_tokens,
        },
        tool_uses: Vec::new(),
    }
}

/// A small value that satisfies common JSON Schema shapes: `const`/`enum` first, then by
/// `type` with `minimum`/`maximum`, `minLength`, `minItems` and every property.
pub fn example(schema: &Value, depth: usize) -> Value {
    if depth > 16 {
        return Value::Null;
    }
    let Some(s) = schema.as_object() else {
        return Value::Null;
    };
    if let Some(c) = s.get("const") {
        return c.clone();
    }
    if let Some(Value::Array(options)) = s.get("enum")
        && let Some(first) = options.first()
    {
        return first.clone();
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(options)) = s.get(key)
            && let Some(first) = options.first()
        {
            return example(first, depth + 1);
        }
    }
    let ty = match s.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts.iter().find_map(Value::as_str).unwrap_or("null"),
        _ if s.contains_key("properties") => "object",
        _ => "string",
    };
    let num = |default: f64| {
        let lo = s.get("minimum").and_then(Value::as_f64);
        let hi = s.get("maximum").and_then(Value::as_f64);
        match (lo, hi) {
            (Some(l), _) if default < l => l,
            (_, Some(h)) if default > h => h,
            _ => default,
        }
    };
    match ty {
        "object" => {
            let mut out = Map::new();
            if let Some(Value::Object(props)) = s.get("properties") {
                for (k, v) in props {
                    out.insert(k.clone(), example(v, depth + 1));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let n = s
                .get("minItems")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .min(16);
            let item = s
                .get("items")
                .map_or(Value::Null, |i| example(i, depth + 1));
            Value::Array(vec![item; n as usize])
        }
        "integer" => json!(num(50.0).ceil() as i64),
        "number" => json!(num(0.5)),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => {
            let min = s.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
            let mut text = "mock".to_string();
            while text.len() < min {
                text.push('x');
            }
            json!(text)
        }
    }
}
