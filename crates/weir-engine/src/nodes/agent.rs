//! `agent`: one LLM call (spec 002 "Agent"). The rendered `user_message` and `system_prompt`
//! go to `model`, failing over to `fallback_models` as governed by the model gateway. Without
//! `response_schema` the reply text is written to state; with it the reply is parsed, checked
//! and repaired by the structured-reply loop and the parsed value is written. The step output
//! records `{text, model, provider, fallback_used, input_tokens, output_tokens}` (and
//! `parsed`, `schema_valid`, `repair_attempts` with a schema; `turns` and `tool_calls` with
//! tools, whose loop is in `agent_loop`); every call is priced.

use serde_json::{Value, json};
use weir_core::ModelRequest;
use weir_core::ir::{AgentSpec, StateLayout};
use weir_core::model::Message;
use weir_core::record::{ModelAsk, Output, Reply, Request};

use super::{Failure, NodeCtx, Outcome, Route, Spent, model_failure};
use crate::structured::{self, SchemaCheck, StructuredError};

#[expect(
    clippy::too_many_lines,
    reason = "an agent node in order: prompt, model call with fallback, response schema validation and repair, output; each stage uses the previous one's values"
)]
pub async fn execute(ctx: &NodeCtx, spec: &AgentSpec) -> Result<Outcome, Failure> {
    let system = spec
        .system_prompt
        .as_ref()
        .map(|t| super::render(ctx, t, "system_prompt"))
        .transpose()?;
    let mut user = super::render(ctx, &spec.user_message, "user_message")?;
    if let Some(schema) = &spec.response_schema {
        user.push_str(&format!(
            "\n\nRespond with only a JSON value that matches this JSON Schema:\n{}",
            schema.source()
        ));
    }
    let request = Request::Model(ModelAsk {
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
        fallback_models: spec.fallback_models.clone(),
        fallback_error_classes: spec.fallback_error_classes.clone(),
        response_schema: spec.response_schema.as_ref().map(|s| s.source().clone()),
        // A fallback reaches the log (and `weir run`'s progress) when it happens.
        on_fallback: (!spec.fallback_models.is_empty()).then(|| {
            let progress = ctx.progress.clone();
            let node_id = ctx.node().id.clone();
            weir_core::model::OnFallback(std::sync::Arc::new(move |model, class, next| {
                progress.send(weir_core::event::EventKind::ModelFallback {
                    node_id: node_id.clone(),
                    model: model.to_string(),
                    error_class: class.as_str().to_string(),
                    next: next.to_string(),
                });
            }))
        }),
        tools: Vec::new(),
        tool_choice: weir_core::model::ToolChoice::Auto,
        parallel_tool_calls: true,
        on_delta: ctx.on_delta(),
    };
    let mut spent = Spent::default();
    let models = ctx.services.models.as_ref();
    let mut turns = 0;
    if spec.tools.tools.is_empty()
        && let Some(e) = ctx.over_budget(&spent, crate::budget::Next::Model(&req))
    {
        return super::budget_stop(e, Some(&request), spent);
    }
    let (response, parsed, repairs) = match &spec.response_schema {
        _ if !spec.tools.tools.is_empty() => {
            match Box::pin(super::agent_loop::run(ctx, spec, req, &request, &mut spent)).await? {
                super::agent_loop::Ended::Answered(a) => {
                    turns = a.turns;
                    (a.response, a.parsed, a.repairs)
                }
                super::agent_loop::Ended::Budget(e) => {
                    return super::budget_stop(*e, Some(&request), spent);
                }
                super::agent_loop::Ended::Parked { prompt, detail } => {
                    let mut output = json!({"waiting_for": "tool_call"});
                    output["tool_call"] = detail.clone();
                    output["tool_calls"] = json!(spent.tool_calls.len());
                    return Ok(Outcome {
                        write: None,
                        route: Route::Park {
                            prompt,
                            kind: weir_core::record::GateKind::ToolCall,
                            detail: Some(Box::new(detail)),
                        },
                        request: Some(request),
                        response: None,
                        output: output.into(),
                        spent,
                    });
                }
            }
        }
        None => match models.complete(req).await {
            Ok(mut r) => {
                spent.add(std::mem::take(&mut r.calls), &r.events);
                (r, None, 0)
            }
            Err(mut e) => {
                spent.add(std::mem::take(&mut e.calls), &e.events);
                return Err(model_failure(e, request, spent));
            }
        },
        Some(schema) => {
            let check = SchemaCheck::new(schema.clone());
            match Box::pin(structured::ask(
                models,
                req,
                &check,
                spec.repair_attempts,
                &mut spent,
            ))
            .await
            {
                Ok(s) => (s.response, Some(s.parsed), s.repairs),
                Err(StructuredError::Model(e)) => return Err(model_failure(e, request, spent)),
                Err(StructuredError::Invalid { errors, repairs }) => {
                    return Err(super::invalid_reply(errors, repairs, true, request, spent));
                }
            }
        }
    };
    let reply = Reply {
        text: response.text.clone(),
        model: response.model,
        provider: response.provider,
        fallback_used: response.fallback_used,
        input_tokens: spent.tokens.input,
        output_tokens: spent.tokens.output,
    };
    let text = response.text;
    // The common case, a priced plain reply in graph state, keeps the reply's fields as
    // they are; the others add keys to its JSON.
    if parsed.is_none()
        && spent.unpriced.is_empty()
        && turns == 0
        && ctx.layout == StateLayout::Flat
    {
        return Ok(Outcome {
            write: Some(Value::String(String::from(&*text))),
            route: Route::All,
            request: Some(request),
            response: Some(text),
            output: Output::reply(reply),
            spent,
        });
    }
    let mut output = Output::reply(reply).into_value();
    if turns > 0 {
        output["turns"] = json!(turns);
        output["tool_calls"] = json!(spent.tool_calls.len());
    }
    if !spent.unpriced.is_empty() {
        output["priced"] = json!(false);
        output["unpriced_models"] = json!(spent.unpriced);
    }
    let write = match parsed {
        Some(p) => {
            output["parsed"] = p.clone();
            output["schema_valid"] = json!(true);
            output["repair_attempts"] = json!(repairs);
            p
        }
        None => Value::String(String::from(&*text)),
    };
    // In the machine and pipeline layouts the whole output is the variable, and agents'
    // replies are read as `variables.<id>.response`.
    let write = match ctx.layout {
        StateLayout::Flat => write,
        StateLayout::Variables => {
            output["response"] = Value::String(String::from(&*text));
            output.clone()
        }
    };
    Ok(Outcome {
        write: Some(write),
        route: Route::All,
        request: Some(request),
        response: Some(text),
        output: output.into(),
        spent,
    })
}
