//! The `mock` model: deterministic and offline, so every example and test runs without keys.
//!
//! By default it replies `mock reply to: <user message>` (the first 200 characters), with
//! token counts of a quarter of the characters sent and received, at $0. It can be scripted
//! with `WEIR_MOCK`: a path to a JSON file (or inline JSON starting with `[`) holding a list
//! of rules; the first rule whose `match` text occurs in the system prompt or user message
//! (and whose `times` budget is not used up) decides the reply:
//!
//! ```json
//! [{"match": "Summarize", "reply": "Nothing unusual.", "input_tokens": 12, "output_tokens": 3},
//!  {"match": "flaky", "error": "rate_limit", "message": "slow down", "times": 2},
//!  {"match": "slow", "reply": "done", "delay_ms": 5000}]
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde::Deserialize;
use weir_core::model::Usage;
use weir_core::{ErrorClass, ModelError, ModelRequest, ModelResponse};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(rename = "match", default)]
    pub pattern: String,
    pub reply: Option<String>,
    pub error: Option<String>,
    pub message: Option<String>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub delay_ms: u64,
    pub times: Option<u32>,
    #[serde(skip)]
    used: AtomicU32,
}

#[derive(Debug, Default)]
pub struct Mock {
    rules: Vec<Rule>,
}

impl Mock {
    /// Reads rules from `WEIR_MOCK`; an unreadable script is an error, not a silent default.
    pub fn from_env() -> Result<Self, String> {
        let Ok(spec) = std::env::var("WEIR_MOCK") else {
            return Ok(Self::default());
        };
        let text = if spec.trim_start().starts_with('[') {
            spec
        } else {
            std::fs::read_to_string(&spec).map_err(|e| format!("WEIR_MOCK file {spec}: {e}"))?
        };
        let rules: Vec<Rule> =
            serde_json::from_str(&text).map_err(|e| format!("WEIR_MOCK rules: {e}"))?;
        for r in &rules {
            if let Some(c) = &r.error
                && ErrorClass::parse(c).is_none()
            {
                return Err(format!("WEIR_MOCK rules: unknown error class `{c}`"));
            }
        }
        Ok(Self { rules })
    }

    pub async fn complete(&self, req: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let sent = format!("{}\n{}", req.system.as_deref().unwrap_or(""), req.user);
        let rule = self.rules.iter().find(|r| {
            sent.contains(&r.pattern)
                && match r.times {
                    None => true,
                    Some(t) => r.used.fetch_add(1, Ordering::SeqCst) < t,
                }
        });
        let approx = |s: &str| (s.chars().count() as u64).div_ceil(4);
        let Some(rule) = rule else {
            let reply = format!(
                "mock reply to: {}",
                req.user.chars().take(200).collect::<String>()
            );
            return Ok(respond(req, reply.clone(), approx(&sent), approx(&reply)));
        };
        if rule.delay_ms > 0 {
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
        Ok(respond(
            req,
            reply.clone(),
            rule.input_tokens.unwrap_or_else(|| approx(&sent)),
            rule.output_tokens.unwrap_or_else(|| approx(&reply)),
        ))
    }
}

fn respond(
    req: &ModelRequest,
    text: String,
    input_tokens: u64,
    output_tokens: u64,
) -> ModelResponse {
    ModelResponse {
        text,
        model: req.model.clone(),
        provider: "mock".into(),
        usage: Usage {
            input_tokens,
            output_tokens,
        },
        cost_usd: Some(0.0),
    }
}
