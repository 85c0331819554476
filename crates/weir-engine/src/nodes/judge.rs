//! `ai_judge` (spec 000): one model call answering in its validator's JSON envelope, retried
//! with the parser error up to `maxRetries`, then routed: boolean → `'true'`/`'false'`, enum →
//! the route name, confidence → `'true'` when `score >= threshold`. Output (in
//! `variables.<id>`): `{result, reasoning}`, plus `score` for confidence.

use serde_json::json;
use weir_core::ModelRequest;
use weir_core::ir::{JudgeSpec, Validator};
use weir_core::model::Message;

use super::{Failure, NodeCtx, Outcome, Route, Spent, model_failure, render};
use crate::structured::{self, StructuredError};
use crate::validators::Envelope;

pub async fn execute(ctx: &NodeCtx, spec: &JudgeSpec) -> Result<Outcome, Failure> {
    let envelope = Envelope::for_validator(&spec.validator);
    let prompt = render(ctx, &spec.prompt, "prompt")?;
    let system = spec
        .system
        .as_ref()
        .map(|t| render(ctx, t, "system"))
        .transpose()?;
    let user = envelope.prompt(&prompt);
    let request = weir_core::record::Request::Model(weir_core::record::ModelAsk {
        model: spec.model.clone(),
        system: system.clone(),
        user: user.clone(),
    });
    let req = ModelRequest {
        model: spec.model.clone(),
        system,
        messages: vec![Message::user(user)],
        temperature: spec.temperature,
        max_tokens: spec.max_tokens,
        timeout: ctx.call_timeout(),
        fallback_models: Vec::new(),
        fallback_error_classes: None,
        response_schema: Some(envelope.schema()),
        on_fallback: None,
        tools: Vec::new(),
        tool_choice: weir_core::model::ToolChoice::Auto,
        parallel_tool_calls: true,
        on_delta: None,
    };
    let mut spent = Spent::default();
    let answer = match structured::ask(
        ctx.services.models.as_ref(),
        req,
        &envelope,
        spec.max_retries,
        &mut spent,
    )
    .await
    {
        Ok(a) => a,
        Err(StructuredError::Model(e)) => return Err(model_failure(e, request, spent)),
        Err(StructuredError::Invalid { errors, repairs }) => {
            return Err(super::invalid_reply(errors, repairs, false, request, spent));
        }
    };
    let mut output = answer.parsed.clone();
    let route = match &spec.validator {
        Validator::Boolean => output["result"].as_bool().unwrap_or(false).to_string(),
        Validator::Enum { .. } => output["result"].as_str().unwrap_or_default().to_string(),
        Validator::Confidence { threshold } => {
            let pass = output["score"].as_f64().unwrap_or(0.0) >= *threshold;
            output["result"] = json!(pass);
            output["threshold"] = json!(threshold);
            pass.to_string()
        }
    };
    output["model"] = json!(answer.response.model);
    output["retries"] = json!(answer.repairs);
    Ok(Outcome {
        write: None,
        route: Route::Key(route),
        request: Some(request),
        response: Some(answer.response.text.clone()),
        output: output.into(),
        spent,
    })
}
