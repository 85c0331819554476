//! Anthropic Messages API client: `POST {ANTHROPIC_BASE_URL}/v1/messages`.

use serde_json::{Value, json};
use weir_core::model::{Role, Usage};
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
        let messages: Vec<Value> = req
            .messages
            .iter()
            .map(|m| {
                let role = match m.role {
                    Role::User => "user",
                    Role::Assistant => "assistant",
                };
                json!({"role": role, "content": m.content})
            })
            .collect();
        let mut body = json!({
            "model": model,
            "max_tokens": req.max_tokens.unwrap_or(1024),
            "messages": messages,
        });
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
        Ok(Reply {
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
