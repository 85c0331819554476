//! API errors: `{"error": {"code", "message", "details"}}`, mapped from the engine's and
//! the store's typed errors in one place ([`From<weir_engine::Error>`]).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};
use weir_core::store::StoreError;

/// What went wrong, for clients to branch on; each code has one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 401: no valid token (missing, unknown, malformed or revoked).
    Unauthorized,
    /// 403: the token lacks the route's scope.
    Forbidden,
    /// 404: no such workflow, version, run, tool or token (or a bad path).
    NotFound,
    /// 409: already decided, driven elsewhere, or not in a state that allows the request.
    Conflict,
    /// 422: the request's body, query or input does not fit the route.
    InvalidRequest,
    /// 422: the workflow document has errors (`details` lists them).
    InvalidWorkflow,
    /// 413: the body is over the server's limit.
    BodyTooLarge,
    /// 429: over a rate (a webhook's `[webhooks] requests_per_minute`); `Retry-After` says
    /// when to try again.
    RateLimited,
    /// 500: the store or the server failed.
    Internal,
    /// 503: the database is busy or cannot be reached for now; the same request may succeed
    /// when tried again.
    Unavailable,
}

impl ErrorCode {
    /// The HTTP status of this code.
    pub fn status(self) -> StatusCode {
        match self {
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::Conflict => StatusCode::CONFLICT,
            Self::InvalidRequest | Self::InvalidWorkflow => StatusCode::UNPROCESSABLE_ENTITY,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// An error answer of the API.
#[derive(Debug)]
pub struct ApiError {
    /// What went wrong; it sets the HTTP status.
    pub code: ErrorCode,
    /// For people: what and how to fix it.
    pub message: String,
    /// More about it (diagnostics, problems), or null.
    pub details: Value,
}

impl ApiError {
    /// An error of `code` saying `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Value::Null,
        }
    }

    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        self.code.status()
    }

    /// Adds `details` for clients (every problem, the diagnostics).
    pub fn details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// 401: no valid token.
    pub fn unauthorized() -> Self {
        // One answer for a missing, unknown, malformed or revoked token: the body never
        // says whether a token exists.
        Self::new(
            ErrorCode::Unauthorized,
            "a valid API token is required: send `Authorization: Bearer TOKEN` (weir tokens create makes one)",
        )
    }

    /// 403: the token's scope is not enough for the route.
    pub fn forbidden(needed: &str, has: &str) -> Self {
        Self::new(
            ErrorCode::Forbidden,
            format!("this route needs a token with scope `{needed}`; this token has `{has}`"),
        )
    }

    /// 422: the request does not fit the route.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// 404: no such thing.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// 500: the store or the server failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(code = ?self.code, "{}", self.message);
        }
        let body =
            json!({"error": {"code": self.code, "message": self.message, "details": self.details}});
        (status, axum::Json(body)).into_response()
    }
}

impl From<weir_runtime::StartError> for ApiError {
    fn from(e: weir_runtime::StartError) -> Self {
        match e {
            weir_runtime::StartError::Compile(m) => Self::invalid(m),
            weir_runtime::StartError::Engine(e) => e.into(),
        }
    }
}

impl From<weir_engine::Error> for ApiError {
    fn from(e: weir_engine::Error) -> Self {
        use weir_engine::Error as E;
        match e {
            E::NotFound(m) => Self::not_found(m),
            E::Conflict(m) => Self::new(ErrorCode::Conflict, m),
            E::LeaseLost { run_id, message } => Self::new(
                ErrorCode::Conflict,
                format!("run {run_id} is driven elsewhere: {message}"),
            ),
            E::InvalidInput(problems) => {
                Self::invalid(problems.join("; ")).details(json!({"problems": problems}))
            }
            E::Store(e) if e.fault.transient() => Self::new(
                ErrorCode::Unavailable,
                format!("the store is unavailable: {e}; try again"),
            ),
            E::Store(e) => Self::internal(e.to_string()),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        weir_engine::Error::from(e).into()
    }
}

/// What a handler returns.
pub type ApiResult<T> = Result<T, ApiError>;
