//! The model-client trait and its request/response types. Providers implement it; the engine
//! calls it without knowing which provider answers.
//!
//! One call of [`ModelClient::complete`] may reach several models: the primary, then each
//! fallback the error class and the workspace policy allow. Every model reached is listed in
//! `calls` (priced), and policy refusals are listed in `events`, so the engine can record and
//! charge all of them.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// An assistant turn's tool calls (the model asked for them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_uses: Vec<ToolUse>,
    /// A user turn's tool results (answers to the previous turn's calls, in their order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_returns: Vec<ToolReturn>,
}

impl Message {
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
            tool_uses: Vec::new(),
            tool_returns: Vec::new(),
        }
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
            tool_uses: Vec::new(),
            tool_returns: Vec::new(),
        }
    }

    /// The text a model reads in this turn: its content, or its tool results' contents.
    pub fn text(&self) -> String {
        if self.tool_returns.is_empty() {
            return self.content.clone();
        }
        self.tool_returns
            .iter()
            .map(|r| r.content.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A tool the model may call: the name it calls it by, what it does, and the JSON Schema of
/// its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// A tool call a model asked for: the provider's call id, the tool's name and its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolUse {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// What a tool call gave back, as the model reads it in the next turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolReturn {
    /// The [`ToolUse::id`] it answers.
    pub id: String,
    pub content: String,
    /// The call failed; `content` says why.
    #[serde(default)]
    pub is_error: bool,
}

/// Which tools the model may or must call in a turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// The model must call some tool.
    Required,
    /// The model may not call a tool.
    None,
    /// The model must call this tool.
    Tool(String),
}

/// A model's name as a workflow gives it: shared, not copied, by the node's spec, the request,
/// the reply and the step's record (an agent step used to copy it three times).
pub type ModelName = std::sync::Arc<str>;

/// A model's reply text: shared, not copied, by the response, the call's record, the step's
/// output and its attempt's record.
pub type ReplyText = std::sync::Arc<str>;

#[derive(Debug, Clone, Serialize)]
pub struct ModelRequest {
    pub model: ModelName,
    pub system: Option<String>,
    /// The conversation, ending with a user message.
    pub messages: Vec<Message>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    /// How long one HTTP call may take.
    #[serde(skip)]
    pub timeout: Duration,
    /// Tried in order when the primary fails with an approved error class.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fallback_models: Vec<String>,
    /// Classes that may fail over; `None` = every class but `auth`.
    #[serde(skip)]
    pub fallback_error_classes: Option<Vec<ErrorClass>>,
    /// The JSON Schema the reply must match, when the node has one (the mock model answers
    /// with a valid instance; real providers get it in the prompt).
    #[serde(skip)]
    pub response_schema: Option<Value>,
    /// Told as it happens when the call fails over to the next model (the failed model, its
    /// error class, the next one), so the run's log and progress show the fallback before
    /// the step ends. Without it the gateway reports the fallback in the response's events.
    #[serde(skip)]
    pub on_fallback: Option<OnFallback>,
    /// The tools the model may call (none: a plain completion).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDef>,
    #[serde(skip)]
    pub tool_choice: ToolChoice,
    /// Whether the model may ask for several calls in one turn (default true).
    #[serde(skip)]
    pub parallel_tool_calls: bool,
    /// Told each piece of the reply's text as the provider streams it: when set, the providers
    /// ask for a stream (server-sent events) instead of one JSON reply.
    #[serde(skip)]
    pub on_delta: Option<OnDelta>,
}

/// What [`OnDelta`] calls: the text just written, and how many characters of the reply came
/// before it (0: the first piece of a reply, of a new model call or a call after a fallback
/// or a retry).
pub type DeltaFn = dyn Fn(&str, usize) + Send + Sync;

/// See [`ModelRequest::on_delta`].
#[derive(Clone)]
pub struct OnDelta(pub std::sync::Arc<DeltaFn>);

impl std::fmt::Debug for OnDelta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnDelta")
    }
}

/// What [`OnFallback`] calls: the failed model, its error class, the model tried next.
pub type FallbackFn = dyn Fn(&str, ErrorClass, &str) + Send + Sync;

/// See [`ModelRequest::on_fallback`].
#[derive(Clone)]
pub struct OnFallback(pub std::sync::Arc<FallbackFn>);

impl std::fmt::Debug for OnFallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnFallback")
    }
}

impl ModelRequest {
    /// The last user message (what the node asked).
    pub fn last_user(&self) -> &str {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map_or("", |m| m.content.as_str())
    }

    /// A request of one user message, with no tools and the defaults of everything else.
    pub fn new(model: ModelName, user: String, timeout: Duration) -> Self {
        Self {
            model,
            system: None,
            messages: vec![Message::user(user)],
            temperature: None,
            max_tokens: None,
            timeout,
            fallback_models: Vec::new(),
            fallback_error_classes: None,
            response_schema: None,
            on_fallback: None,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            parallel_tool_calls: true,
            on_delta: None,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One model reached while serving a request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelCall {
    pub model: ModelName,
    pub provider: String,
    pub status: String,
    pub error_class: Option<ErrorClass>,
    pub error: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `None` when the model has no price (see `priced`).
    #[serde(serialize_with = "crate::record::cost::opt")]
    pub cost_usd: Option<f64>,
    pub priced: bool,
    pub duration_ms: u64,
    /// The reply text, for calls that answered.
    pub reply: Option<ReplyText>,
    /// The tool calls the model asked for in its reply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_uses: Vec<ToolUse>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelResponse {
    pub text: ReplyText,
    /// The model that answered, as the workflow named it.
    pub model: ModelName,
    pub provider: String,
    pub usage: Usage,
    /// Priced cost of this answer; `None` when the model has no price in the table.
    pub cost_usd: Option<f64>,
    /// Whether a fallback model answered instead of the primary.
    pub fallback_used: bool,
    /// Every model reached, the answering one last.
    pub calls: Vec<ModelCall>,
    /// Governance events (`model_fallback_blocked`), without node ids.
    pub events: Vec<Value>,
    /// The tool calls the model asked for (none: `text` is its answer).
    pub tool_uses: Vec<ToolUse>,
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
    pub const ALL: [ErrorClass; 7] = [
        ErrorClass::RateLimit,
        ErrorClass::Timeout,
        ErrorClass::ServerError,
        ErrorClass::HttpError,
        ErrorClass::Malformed,
        ErrorClass::Network,
        ErrorClass::Auth,
    ];

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
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", class.as_str())]
pub struct ModelError {
    pub class: ErrorClass,
    pub message: String,
    pub status: Option<u16>,
    pub retry_after: Option<Duration>,
    /// False for failures a retry cannot fix: bad credentials, exhausted quota or spend limit.
    pub retryable: bool,
    /// Every model reached before giving up.
    pub calls: Vec<ModelCall>,
    pub events: Vec<Value>,
    /// The reply was cut after its first piece of text reached the live views: the call does
    /// not fail over to another model (its text was seen), the attempt fails and the node's
    /// retries apply.
    pub after_output: bool,
}

impl ModelError {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self {
            class,
            message: message.into(),
            status: None,
            retry_after: None,
            retryable: class != ErrorClass::Auth,
            calls: Vec::new(),
            events: Vec::new(),
            after_output: false,
        }
    }
}

#[async_trait]
pub trait ModelClient: Send + Sync {
    async fn complete(&self, req: ModelRequest) -> Result<ModelResponse, ModelError>;

    /// Whether a model name can be routed; `Err` says why not (used by validation).
    fn check_model(&self, model: &str) -> Result<(), String>;

    /// Whether the workspace policy allows the model; `Err` says why not.
    fn check_policy(&self, _model: &str) -> Result<(), String> {
        Ok(())
    }

    /// What a call of `model` with these token counts costs, in US dollars; `None` when the
    /// model has no price (a budget's worst case counts it as free).
    fn price(&self, _model: &str, _input_tokens: u64, _output_tokens: u64) -> Option<f64> {
        None
    }

    /// For a name the client routes but does not know (a provider's name missing from the
    /// price table, likely misspelled): the hint of validation's W105 warning. Default: none.
    fn unknown_model(&self, _model: &str) -> Option<String> {
        None
    }
}
