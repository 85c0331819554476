//! OpenAI Chat Completions client (and any OpenAI-compatible server):
//! `POST {OPENAI_BASE_URL}/chat/completions`.

use serde_json::{Value, json};
use weir_core::model::Usage;
use weir_core::{ErrorClass, ModelError, ModelRequest, ModelResponse};

use crate::{http, pricing};

pub struct OpenAi {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
}

impl OpenAi {
    pub fn from_env() -> Self {
        Self {
            client: http::client(),
            base_url: std::env::var("OPENAI_BASE_URL")
                .unwrap_or_else(|_| "https://api.openai.com/v1".into())
                .trim_end_matches('/')
                .to_string(),
            api_key: std::env::var("OPENAI_API_KEY")
                .ok()
                .filter(|k| !k.is_empty()),
        }
    }

    pub async fn complete(
        &self,
        req: &ModelRequest,
        model: &str,
    ) -> Result<ModelResponse, ModelError> {
        let key = self
            .api_key
            .as_deref()
            .ok_or_else(|| ModelError::new(ErrorClass::Auth, "OPENAI_API_KEY is not set"))?;
        let mut messages = Vec::new();
        if let Some(s) = &req.system {
            messages.push(json!({"role": "system", "content": s}));
        }
        messages.push(json!({"role": "user", "content": req.user}));
        let mut body = json!({"model": model, "messages": messages});
        if let Some(t) = req.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(m) = req.max_tokens {
            body["max_tokens"] = json!(m);
        }
        let resp = self
            .client
            .post(format!("{}/chat/completions", self.base_url))
            .bearer_auth(key)
            .timeout(req.timeout)
            .json(&body)
            .send()
            .await
            .map_err(|e| http::classify_transport(&e))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp
            .text()
            .await
            .map_err(|e| http::classify_transport(&e))?;
        if !(200..300).contains(&status) {
            return Err(http::status_error(status, &headers, &text));
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| {
            ModelError::new(ErrorClass::Malformed, format!("reply is not JSON: {e}"))
        })?;
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
        let usage = Usage {
            input_tokens: v
                .pointer("/usage/prompt_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            output_tokens: v
                .pointer("/usage/completion_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        };
        Ok(ModelResponse {
            text,
            model: req.model.clone(),
            provider: "openai".into(),
            cost_usd: pricing::cost(model, usage.input_tokens, usage.output_tokens),
            usage,
        })
    }
}
