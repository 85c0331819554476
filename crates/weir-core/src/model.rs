//! The model-client trait and its request/response types. Providers implement it; the engine
//! calls it without knowing which provider answers.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize)]
pub struct ModelRequest {
    pub model: String,
    pub system: Option<String>,
    pub user: String,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    /// How long the call may take; the provider client enforces it on the HTTP request.
    #[serde(skip)]
    pub timeout: Duration,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelResponse {
    pub text: String,
    /// The model that answered, as the workflow named it.
    pub model: String,
    pub provider: String,
    pub usage: Usage,
    /// Priced cost; `None` when the model has no price in the table.
    pub cost_usd: Option<f64>,
}

/// Why a model call failed (spec 002 "Model fallback").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    RateLimit,
    Timeout,
    ServerError,
    HttpError,
    Malformed,
    Network,
    Auth,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::RateLimit => "rate_limit",
            ErrorClass::Timeout => "timeout",
            ErrorClass::ServerError => "server_error",
            ErrorClass::HttpError => "http_error",
            ErrorClass::Malformed => "malformed",
            ErrorClass::Network => "network",
            ErrorClass::Auth => "auth",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "rate_limit" => ErrorClass::RateLimit,
            "timeout" => ErrorClass::Timeout,
            "server_error" => ErrorClass::ServerError,
            "http_error" => ErrorClass::HttpError,
            "malformed" => ErrorClass::Malformed,
            "network" => ErrorClass::Network,
            "auth" => ErrorClass::Auth,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", class.as_str())]
pub struct ModelError {
    pub class: ErrorClass,
    pub message: String,
    pub status: Option<u16>,
    pub retry_after: Option<Duration>,
}

impl ModelError {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self {
            class,
            message: message.into(),
            status: None,
            retry_after: None,
        }
    }
}

#[async_trait]
pub trait ModelClient: Send + Sync {
    async fn complete(&self, req: ModelRequest) -> Result<ModelResponse, ModelError>;

    /// Whether a model name can be routed; `Err` says why not (used by validation).
    fn check_model(&self, model: &str) -> Result<(), String>;
}
