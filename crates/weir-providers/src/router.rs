//! Routes model names to providers, and governs fallback.
//!
//! One `complete` call tries the primary model, then each `fallback_models` candidate, but
//! only after a failure whose class the node approved (`fallback_error_classes`, default every
//! class but `auth`), and only for candidates the workspace allows (`weir.toml` model and
//! provider allowlists). A refused candidate is skipped and reported as a
//! `model_fallback_blocked` event. There is no retry loop here: the engine's attempt policy
//! is the one retry loop, so retries never multiply between layers.

use std::collections::BTreeMap;
use std::time::Instant;

use async_trait::async_trait;
use serde_json::json;
use weir_core::model::ModelCall;
use weir_core::settings::Settings;
use weir_core::{ErrorClass, ModelClient, ModelError, ModelRequest, ModelResponse};

use crate::anthropic::Anthropic;
use crate::http::Reply;
use crate::mock::Mock;
use crate::openai::OpenAi;
use crate::pricing::Pricing;

#[derive(Clone, Copy)]
enum Target<'a> {
    Mock,
    Anthropic,
    OpenAi,
    Named(&'a OpenAi),
}

/// The model client the binary wires into the engine.
pub struct Router {
    mock: Mock,
    anthropic: Anthropic,
    openai: OpenAi,
    named: BTreeMap<String, OpenAi>,
    pricing: Pricing,
    settings: Settings,
    /// `weir run --model NAME`: every call goes to this model, fallbacks included.
    force: Option<weir_core::model::ModelName>,
}

impl Router {
    /// Providers from the environment (DESIGN §5) and `weir.toml` settings (DESIGN §7).
    pub fn new(settings: Settings) -> Result<Self, String> {
        Ok(Self::build(Mock::from_env()?, settings))
    }

    /// A router whose mock follows `mock` (e.g. [`Mock::for_workflow`]).
    pub fn with_mock(settings: Settings, mock: Mock) -> Self {
        Self::build(mock, settings)
    }

    /// A router with an unscripted mock, for checks that only need routing and policy.
    pub fn offline(settings: Settings) -> Self {
        Self::build(Mock::default(), settings)
    }

    /// Sends every call to `model` instead of the one the node names (and drops the node's
    /// fallbacks): `weir run --model mock` runs any workflow offline without editing it.
    /// Fails when no provider serves `model`.
    pub fn forcing(mut self, model: &str) -> Result<Self, String> {
        self.route(model)
            .map_err(|why| format!("--model {model}: {why}"))?;
        self.force = Some(model.into());
        Ok(self)
    }

    fn build(mock: Mock, settings: Settings) -> Self {
        let named = settings
            .providers
            .named
            .iter()
            .map(|(name, p)| {
                (
                    name.clone(),
                    OpenAi::new(&p.base_url, p.api_key_env.as_deref()),
                )
            })
            .collect();
        Self {
            mock,
            anthropic: Anthropic::from_env(),
            openai: OpenAi::from_env(),
            named,
            pricing: Pricing::new(settings.pricing.clone()),
            settings,
            force: None,
        }
    }

    /// Which provider serves `model`: its name, client and the model name to send.
    fn route<'a>(&'a self, model: &'a str) -> Result<(&'a str, Target<'a>, &'a str), String> {
        if let Some((prefix, rest)) = model.split_once(':') {
            if rest.is_empty() {
                return Err("empty model name after the provider prefix".into());
            }
            return match prefix {
                "anthropic" => Ok(("anthropic", Target::Anthropic, rest)),
                "openai" => Ok(("openai", Target::OpenAi, rest)),
                "mock" => Ok(("mock", Target::Mock, rest)),
                other => match self.named.get_key_value(other) {
                    Some((name, client)) => Ok((name.as_str(), Target::Named(client), rest)),
                    None => Err(format!(
                        "unknown provider `{other}` (known: anthropic, openai, mock{}); add [providers.{other}] base_url to weir.toml",
                        self.named
                            .keys()
                            .map(|k| format!(", {k}"))
                            .collect::<String>()
                    )),
                },
            };
        }
        if model == "mock" {
            Ok(("mock", Target::Mock, model))
        } else if model.starts_with("claude-") {
            Ok(("anthropic", Target::Anthropic, model))
        } else if ["gpt-", "o1", "o3", "o4"]
            .iter()
            .any(|p| model.starts_with(p))
        {
            Ok(("openai", Target::OpenAi, model))
        } else {
            Err("no provider serves this name".into())
        }
    }

    async fn call(
        &self,
        target: Target<'_>,
        req: &ModelRequest,
        name: &str,
    ) -> Result<Reply, ModelError> {
        match target {
            Target::Mock => self.mock.complete(req).await,
            Target::Anthropic => self.anthropic.complete(req, name).await,
            Target::OpenAi => self.openai.complete(req, name).await,
            Target::Named(client) => client.complete(req, name).await,
        }
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "complete walks the fallback chain with each model's retries, backoff and timeouts in one loop: its attempts list and the error to report are built across all of it"
)]
#[async_trait]
impl ModelClient for Router {
    fn price(&self, model: &str, input_tokens: u64, output_tokens: u64) -> Option<f64> {
        self.pricing.cost(model, input_tokens, output_tokens)
    }

    async fn complete(&self, mut req: ModelRequest) -> Result<ModelResponse, ModelError> {
        if let Some(model) = &self.force {
            req.model = model.clone();
            req.fallback_models.clear();
        }
        let approved: Vec<ErrorClass> = req.fallback_error_classes.clone().unwrap_or_else(|| {
            ErrorClass::ALL
                .into_iter()
                .filter(|c| *c != ErrorClass::Auth)
                .collect()
        });
        let candidates: Vec<weir_core::model::ModelName> = std::iter::once(req.model.clone())
            .chain(req.fallback_models.iter().map(|m| m.as_str().into()))
            .collect();
        // The request's timeout is the budget of the whole chain.
        let budget = req.timeout;
        let mut calls = Vec::new();
        let mut events = Vec::new();
        let mut last: Option<ModelError> = None;
        // Each call gets an equal share of what is left of the budget, so a primary that
        // hangs leaves its fallbacks time.
        let chain_started = Instant::now();
        for (i, model) in candidates.iter().enumerate() {
            let (provider, target, name) = match self.route(model) {
                Ok(r) => r,
                Err(why) => {
                    if i == 0 {
                        let mut e = ModelError::new(
                            ErrorClass::HttpError,
                            format!("model `{model}`: {why}"),
                        );
                        e.retryable = false;
                        last = Some(e);
                        break;
                    }
                    events.push(
                        json!({"type": "model_fallback_blocked", "model": model, "reason": why}),
                    );
                    continue;
                }
            };
            if let Err(why) = self.settings.allows(model, provider) {
                if i == 0 {
                    let mut e =
                        ModelError::new(ErrorClass::Auth, format!("workspace policy: {why}"));
                    e.retryable = false;
                    last = Some(e);
                    break;
                }
                events.push(json!({
                    "type": "model_fallback_blocked", "model": model, "provider": provider, "reason": why
                }));
                continue;
            }
            let left = (candidates.len() - i) as u32;
            let share = budget.saturating_sub(chain_started.elapsed()) / left;
            // The same request for each call, with its share of the time (not a copy of the
            // request, prompts and all, per call).
            req.timeout = share.max(std::time::Duration::from_millis(1));
            let started = Instant::now();
            let result = self.call(target, &req, name).await;
            let duration_ms = started.elapsed().as_millis() as u64;
            match result {
                Ok(reply) => {
                    let cost = self.pricing.cost(
                        model,
                        reply.usage.input_tokens,
                        reply.usage.output_tokens,
                    );
                    // One copy of the text, shared by the call's record and the answer.
                    let text: weir_core::model::ReplyText = reply.text.into();
                    calls.push(ModelCall {
                        model: model.clone(),
                        provider: provider.to_string(),
                        status: "succeeded".into(),
                        error_class: None,
                        error: None,
                        input_tokens: reply.usage.input_tokens,
                        output_tokens: reply.usage.output_tokens,
                        cost_usd: cost,
                        priced: cost.is_some(),
                        duration_ms,
                        reply: Some(text.clone()),
                        tool_uses: reply.tool_uses.clone(),
                    });
                    return Ok(ModelResponse {
                        text,
                        model: model.clone(),
                        provider: provider.to_string(),
                        usage: reply.usage,
                        cost_usd: cost,
                        fallback_used: i > 0,
                        calls,
                        events,
                        tool_uses: reply.tool_uses,
                    });
                }
                Err(e) => {
                    calls.push(ModelCall {
                        model: model.clone(),
                        provider: provider.to_string(),
                        status: "failed".into(),
                        error_class: Some(e.class),
                        error: Some(e.message.clone()),
                        input_tokens: 0,
                        output_tokens: 0,
                        cost_usd: Some(0.0),
                        priced: true,
                        duration_ms,
                        reply: None,
                        tool_uses: Vec::new(),
                    });
                    // A reply cut after its text was seen is not answered again by another
                    // model: the attempt fails, and its retries apply.
                    let fail_over = approved.contains(&e.class) && !e.after_output;
                    if fail_over && let Some(next) = candidates.get(i + 1) {
                        match &req.on_fallback {
                            Some(tell) => (tell.0)(model, e.class, next),
                            None => events.push(json!({
                                "type": "model_fallback", "model": model,
                                "error_class": e.class, "next": next
                            })),
                        }
                    }
                    last = Some(e);
                    if !fail_over {
                        break;
                    }
                }
            }
        }
        let mut err = last.unwrap_or_else(|| {
            ModelError::new(
                ErrorClass::Auth,
                "no candidate model is allowed by the workspace policy",
            )
        });
        err.calls = calls;
        err.events = events;
        Err(err)
    }

    fn check_model(&self, model: &str) -> Result<(), String> {
        self.route(self.force.as_deref().unwrap_or(model))
            .map(|_| ())
    }

    fn check_policy(&self, model: &str) -> Result<(), String> {
        let model = self.force.as_deref().unwrap_or(model);
        let (provider, _, _) = self.route(model)?;
        self.settings.allows(model, provider)
    }

    /// A built-in provider's model (routed by its name, not as `provider:model`) that neither
    /// the price table nor `[pricing]` knows: most likely a typo; the nearest known name.
    fn unknown_model(&self, model: &str) -> Option<String> {
        if self.force.is_some() || model.contains(':') || model.contains('/') {
            return None;
        }
        let (provider, _, _) = self.route(model).ok()?;
        if !matches!(provider, "anthropic" | "openai") || self.pricing.cost(model, 0, 0).is_some() {
            return None;
        }
        let near = crate::pricing::known_models()
            .map(|k| (weir_core::validate::edit_distance(model, k), k))
            .min()
            .filter(|(d, _)| *d <= 3)
            .map(|(_, k)| k);
        Some(match near {
            Some(k) => format!(
                "did you mean `{k}`? A model that is new to weir's price table takes a price under [pricing] in weir.toml"
            ),
            None => "check the name; a model that is new to weir's price table takes a price under [pricing] in weir.toml (its calls are recorded unpriced until then)".into(),
        })
    }
}
