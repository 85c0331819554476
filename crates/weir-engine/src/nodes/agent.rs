//! `agent`: one LLM call. The rendered `user_message` and `system_prompt` go to `model`; the
//! reply text is written to state; the step output records `{text, model, provider,
//! input_tokens, output_tokens}` and the priced cost.

use serde_json::json;
use weir_core::ErrorClass;
use weir_core::ModelRequest;
use weir_core::ir::AgentSpec;
use weir_core::record::Tokens;

use super::{Failure, NodeCtx, Outcome, Route};

pub async fn execute(ctx: &NodeCtx, spec: &AgentSpec) -> Result<Outcome, Failure> {
    let state = ctx.state.as_ref();
    let system = spec
        .system_prompt
        .as_ref()
        .map(|t| t.render(state))
        .transpose()
        .map_err(|e| Failure::fatal("template", format!("system_prompt: {}", e.message)))?;
    let user = spec
        .user_message
        .render(state)
        .map_err(|e| Failure::fatal("template", format!("user_message: {}", e.message)))?;
    let request = json!({"model": spec.model, "system": system, "user": user});
    let req = ModelRequest {
        model: spec.model.clone(),
        system,
        user,
        temperature: spec.temperature,
        max_tokens: spec.max_tokens,
        // A little past the attempt timeout, so the engine's own timeout decides.
        timeout: ctx.node.policy.timeout + std::time::Duration::from_secs(1),
    };
    match ctx.services.models.complete(req).await {
        Ok(r) => {
            let mut output = json!({
                "text": r.text,
                "model": r.model,
                "provider": r.provider,
                "input_tokens": r.usage.input_tokens,
                "output_tokens": r.usage.output_tokens,
            });
            if r.cost_usd.is_none() {
                output["priced"] = json!(false);
            }
            Ok(Outcome {
                write: Some(json!(r.text)),
                route: Route::All,
                tokens: Tokens {
                    input: r.usage.input_tokens,
                    output: r.usage.output_tokens,
                },
                cost_usd: r.cost_usd.unwrap_or(0.0),
                request: Some(request),
                response: Some(r.text.clone()),
                output,
            })
        }
        Err(e) => Err(Failure {
            message: e.message.clone(),
            class: e.class.as_str().into(),
            // A bad key or forbidden model does not fix itself on a retry.
            retryable: e.class != ErrorClass::Auth,
            retry_after: e.retry_after,
            request: Some(Box::new(request)),
        }),
    }
}
