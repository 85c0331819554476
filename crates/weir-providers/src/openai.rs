//! OpenAI Chat Completions client, for OpenAI itself and any OpenAI-compatible server
//! (`[providers.NAME] base_url` in weir.toml): `POST {base}/chat/completions`.

use serde_json::{Value, json};
use weir_core::model::{Role, Usage};
use weir_core::{ErrorClass, ModelError, ModelRequest};

use crate::http::{self, Reply};

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
        let mut messages = Vec::new();
        if let Some(s) = &req.system {
            messages.push(json!({"role": "system", "content": s}));
        }
        for m in &req.messages {
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            messages.push(json!({"role": role, "content": m.content}));
        }
        let mut body = json!({"model": model, "messages": messages});
        if let Some(t) = req.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(m) = req.max_tokens {
            body["max_tokens"] = json!(m);
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
        let v: Value = http::send_json(call).await?;
        let text = v
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ModelError::new(
                    ErrorClass::Malformed,
                    "reply has no choices[0].message.content",
                )
            })?
            .to_string();
        Ok(Reply {
            text,
            usage: Usage {
                input_tokens: v
                    .pointer("/usage/prompt_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                output_tokens: v
                    .pointer("/usage/completion_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            },
        })
    }
}
