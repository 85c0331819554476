//! Routes model names to providers.

use async_trait::async_trait;
use weir_core::{ErrorClass, ModelClient, ModelError, ModelRequest, ModelResponse};

use crate::anthropic::Anthropic;
use crate::mock::Mock;
use crate::openai::OpenAi;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provider {
    Mock,
    Anthropic,
    OpenAi,
}

/// Which provider serves `model`, and the model name to send it.
fn route(model: &str) -> Result<(Provider, &str), String> {
    if let Some((prefix, rest)) = model.split_once(':') {
        let p = match prefix {
            "anthropic" => Provider::Anthropic,
            "openai" => Provider::OpenAi,
            "mock" => Provider::Mock,
            other => {
                return Err(format!(
                    "unknown provider `{other}` (known: anthropic, openai, mock)"
                ));
            }
        };
        if rest.is_empty() {
            return Err("empty model name after the provider prefix".into());
        }
        return Ok((p, rest));
    }
    if model == "mock" {
        Ok((Provider::Mock, model))
    } else if model.starts_with("claude-") {
        Ok((Provider::Anthropic, model))
    } else if ["gpt-", "o1", "o3", "o4"]
        .iter()
        .any(|p| model.starts_with(p))
    {
        Ok((Provider::OpenAi, model))
    } else {
        Err("no provider serves this name".into())
    }
}

/// The model client the binary wires into the engine.
pub struct Router {
    mock: Mock,
    anthropic: Anthropic,
    openai: OpenAi,
}

impl Router {
    /// A router with an unscripted mock, for checks that only need routing.
    pub fn offline() -> Self {
        Self {
            mock: Mock::default(),
            anthropic: Anthropic::from_env(),
            openai: OpenAi::from_env(),
        }
    }

    /// Reads provider settings from the environment (DESIGN §5).
    pub fn from_env() -> Result<Self, String> {
        Ok(Self {
            mock: Mock::from_env()?,
            anthropic: Anthropic::from_env(),
            openai: OpenAi::from_env(),
        })
    }
}

#[async_trait]
impl ModelClient for Router {
    async fn complete(&self, req: ModelRequest) -> Result<ModelResponse, ModelError> {
        let (provider, name) =
            route(&req.model).map_err(|e| ModelError::new(ErrorClass::HttpError, e))?;
        match provider {
            Provider::Mock => self.mock.complete(&req).await,
            Provider::Anthropic => self.anthropic.complete(&req, name).await,
            Provider::OpenAi => self.openai.complete(&req, name).await,
        }
    }

    fn check_model(&self, model: &str) -> Result<(), String> {
        route(model).map(|_| ())
    }
}
