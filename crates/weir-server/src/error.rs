//! API errors: `{"error": {"code", "message", "details"}}`, mapped from the typed errors of
//! DESIGN §8 in one place ([`From<weir_engine::Error>`]).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use weir_core::store::StoreError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Value,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            details: Value::Null,
        }
    }

    pub fn details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    pub fn unauthorized() -> Self {
        // One answer for a missing, unknown, malformed or revoked token: the body never
        // says whether a token exists.
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid API token is required: send `Authorization: Bearer TOKEN` (weir tokens create makes one)",
        )
    }

    pub fn forbidden(needed: &str, has: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("this route needs a token with scope `{needed}`; this token has `{has}`"),
        )
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, "{}", self.message);
        }
        let body =
            json!({"error": {"code": self.code, "message": self.message, "details": self.details}});
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<weir_engine::Error> for ApiError {
    fn from(e: weir_engine::Error) -> Self {
        use weir_engine::Error as E;
        match e {
            E::NotFound(m) => Self::not_found(m),
            E::Conflict(m) => Self::new(StatusCode::CONFLICT, "conflict", m),
            E::LeaseLost { run_id, message } => Self::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("run {run_id} is driven elsewhere: {message}"),
            ),
            E::InvalidInput(problems) => {
                Self::invalid(problems.join("; ")).details(json!({"problems": problems}))
            }
            E::Store(m) => Self::internal(m),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        weir_engine::Error::from(e).into()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
