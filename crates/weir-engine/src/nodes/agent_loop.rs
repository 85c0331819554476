//! An agent with `tools`: the model's tool-use loop. Each turn sends the conversation and
//! the tools' definitions; when the model asks for tool calls, weir checks each call's
//! arguments against the tool's schema, makes the calls (concurrently, when the model asked
//! for several), and sends the results back as the next turn. The loop ends when the model
//! answers without a tool call, or fails the node after `max_turns` model calls. A tool's
//! error, an unknown tool and arguments that do not match are returned to the model as the
//! call's result, so it can recover; they count against `max_turns` like any turn.
//!
//! Every model call is in the attempt's `calls` and every tool call in its `tool_calls`
//! (turn, arguments, result or error, duration). Each tool call carries the idempotency key
//! `{run}:{node}:{visit}:{turn}:{index}`.

use std::collections::HashMap;
use std::time::Instant;

use serde_json::Value;
use weir_core::ModelRequest;
use weir_core::model::{Message, ModelResponse, ToolChoice, ToolDef, ToolReturn, ToolUse};
use weir_core::record::{Request, ToolCallRecord};
use weir_core::schema::CompiledSchema;
use weir_core::{ToolCall, ToolError};

use super::{Failure, NodeCtx, Spent, model_failure};
use crate::structured::{self, ReplyCheck, SchemaCheck, StructuredError};

/// A tool the model was offered: what the workflow calls it, and its argument schema.
struct Offered {
    tool_ref: String,
    schema: Option<CompiledSchema>,
}

/// What the loop ended with: the final answer, its parsed value (with a response schema)
/// and the repairs that took.
pub struct Answer {
    pub response: ModelResponse,
    pub parsed: Option<Value>,
    pub repairs: u32,
    pub turns: u32,
}

fn tool_failure(e: &ToolError, request: &Request, spent: Spent) -> Failure {
    Failure {
        message: e.message.clone(),
        class: "tool".into(),
        retryable: e.retryable,
        retry_after: None,
        request: Some(Box::new(request.clone())),
        spent: Some(Box::new(spent)),
    }
}

/// Runs the loop from `req` (the node's prompt), recording into `spent`.
pub async fn run(
    ctx: &NodeCtx,
    spec: &weir_core::ir::AgentSpec,
    mut req: ModelRequest,
    request: &Request,
    spent: &mut Spent,
) -> Result<Answer, Failure> {
    let (offered, defs) = offer(ctx, spec, request, spent).await?;
    req.tool_choice = match &spec.tools.tool_choice {
        // The model calls a tool by its name for models.
        ToolChoice::Tool(r) => match defs.iter().zip(&spec.tools.tools).find(|(_, t)| *t == r) {
            Some((def, _)) => ToolChoice::Tool(def.name.clone()),
            None => ToolChoice::Required,
        },
        other => other.clone(),
    };
    req.tools = defs;
    req.parallel_tool_calls = spec.tools.parallel_tool_calls;
    let models = ctx.services.models.as_ref();
    for turn in 1..=spec.tools.max_turns {
        let mut response = match models.complete(req.clone()).await {
            Ok(r) => r,
            Err(mut e) => {
                spent.add(std::mem::take(&mut e.calls), &e.events);
                return Err(model_failure(e, request.clone(), std::mem::take(spent)));
            }
        };
        spent.add(std::mem::take(&mut response.calls), &response.events);
        if response.tool_uses.is_empty() {
            return finish(ctx, spec, req, response, turn, request, spent).await;
        }
        // A forced choice holds for the first turn; then the model decides.
        req.tool_choice = ToolChoice::Auto;
        let uses = std::mem::take(&mut response.tool_uses);
        let calls = uses
            .iter()
            .enumerate()
            .map(|(i, u)| call_one(ctx, turn, i, u, &offered));
        let done: Vec<(ToolReturn, ToolCallRecord)> = if spec.tools.parallel_tool_calls {
            futures_util::future::join_all(calls).await
        } else {
            let mut out = Vec::new();
            for c in calls {
                out.push(c.await);
            }
            out
        };
        let mut assistant = Message::assistant(&*response.text);
        assistant.tool_uses = uses;
        let mut results = Message::user("");
        for (ret, record) in done {
            results.tool_returns.push(ret);
            spent.tool_calls.push(record);
        }
        req.messages.push(assistant);
        req.messages.push(results);
    }
    Err(Failure {
        message: format!(
            "the model was still calling tools after {} turns (`max_turns`); raise it, or make the prompt say when to answer",
            spec.tools.max_turns
        ),
        class: "max_turns_exceeded".into(),
        retryable: false,
        retry_after: None,
        request: Some(Box::new(request.clone())),
        spent: Some(Box::new(std::mem::take(spent))),
    })
}

/// Every tool the agent names, described for its model (by the name the model calls it).
async fn offer(
    ctx: &NodeCtx,
    spec: &weir_core::ir::AgentSpec,
    request: &Request,
    spent: &mut Spent,
) -> Result<(HashMap<String, Offered>, Vec<ToolDef>), Failure> {
    let mut offered: HashMap<String, Offered> = HashMap::new();
    let mut defs: Vec<ToolDef> = Vec::new();
    for tool_ref in &spec.tools.tools {
        let listed = ctx
            .services
            .tools
            .describe(tool_ref)
            .await
            .map_err(|e| tool_failure(&e, request, std::mem::take(spent)))?;
        for (tool_ref, def) in listed {
            if offered.contains_key(&def.name) {
                return Err(Failure::fatal(
                    "tool",
                    format!(
                        "two of the agent's tools are both called `{}` (`{}` and `{tool_ref}`): list one of them",
                        def.name, offered[&def.name].tool_ref
                    ),
                ));
            }
            let schema = CompiledSchema::compile(&def.parameters).ok();
            offered.insert(def.name.clone(), Offered { tool_ref, schema });
            defs.push(def);
        }
    }
    Ok((offered, defs))
}

/// The model's answer without tool calls: checked against the response schema when the node
/// has one (repaired in the same conversation, tools no longer offered).
async fn finish(
    ctx: &NodeCtx,
    spec: &weir_core::ir::AgentSpec,
    mut req: ModelRequest,
    response: ModelResponse,
    turns: u32,
    request: &Request,
    spent: &mut Spent,
) -> Result<Answer, Failure> {
    let Some(schema) = &spec.response_schema else {
        return Ok(Answer {
            response,
            parsed: None,
            repairs: 0,
            turns,
        });
    };
    let check = SchemaCheck::new(schema.clone());
    let errors = match check.check(&response.text) {
        Ok(parsed) => {
            return Ok(Answer {
                response,
                parsed: Some(parsed),
                repairs: 0,
                turns,
            });
        }
        Err(errors) => errors,
    };
    if let Some(last) = spent.calls.last_mut() {
        let last = last.value_mut();
        last["validation_errors"] = serde_json::json!(errors);
        last["repair"] = serde_json::json!(0);
    }
    if spec.repair_attempts == 0 {
        return Err(super::invalid_reply(
            errors,
            0,
            true,
            request.clone(),
            std::mem::take(spent),
        ));
    }
    req.messages.push(Message::assistant(&*response.text));
    req.messages
        .push(Message::user(check.repair_prompt(&errors)));
    req.tool_choice = ToolChoice::None;
    match Box::pin(structured::ask(
        ctx.services.models.as_ref(),
        req,
        &check,
        spec.repair_attempts - 1,
        spent,
    ))
    .await
    {
        Ok(s) => Ok(Answer {
            response: s.response,
            parsed: Some(s.parsed),
            repairs: s.repairs + 1,
            turns,
        }),
        Err(StructuredError::Model(e)) => {
            Err(model_failure(e, request.clone(), std::mem::take(spent)))
        }
        Err(StructuredError::Invalid { errors, repairs }) => Err(super::invalid_reply(
            errors,
            repairs + 1,
            true,
            request.clone(),
            std::mem::take(spent),
        )),
    }
}

/// One tool call the model asked for: its arguments checked, the call made, and what goes
/// back to the model (the result, or the error as the result) with the call's record.
async fn call_one(
    ctx: &NodeCtx,
    turn: u32,
    index: usize,
    u: &ToolUse,
    offered: &HashMap<String, Offered>,
) -> (ToolReturn, ToolCallRecord) {
    let started = Instant::now();
    let mut record = ToolCallRecord {
        turn,
        id: u.id.clone(),
        name: u.name.clone(),
        tool: String::new(),
        arguments: u.arguments.clone(),
        result: None,
        error: None,
        duration_ms: 0,
    };
    let outcome: Result<Value, String> = match offered.get(&u.name) {
        None => {
            let mut names: Vec<&str> = offered.keys().map(String::as_str).collect();
            names.sort_unstable();
            Err(format!(
                "there is no tool `{}`; the tools are: {}",
                u.name,
                names.join(", ")
            ))
        }
        Some(tool) => {
            record.tool.clone_from(&tool.tool_ref);
            let problems = match (&tool.schema, &u.arguments) {
                (_, Value::String(raw)) => {
                    vec![format!("the arguments are not a JSON object: {raw}")]
                }
                (Some(schema), args) => schema.errors(args),
                (None, _) => Vec::new(),
            };
            if problems.is_empty() {
                let call = ToolCall {
                    tool_name: tool.tool_ref.clone(),
                    params: u.arguments.clone(),
                    idempotency_key: format!(
                        "{}:{}:{}:{turn}:{index}",
                        ctx.run_id,
                        ctx.node().id,
                        ctx.visit
                    ),
                    timeout: ctx.tool_timeout(),
                };
                ctx.services.tools.call(call).await.map_err(|e| e.message)
            } else {
                Err(format!(
                    "the arguments do not match the tool's schema:\n- {}",
                    problems.join("\n- ")
                ))
            }
        }
    };
    record.duration_ms = started.elapsed().as_millis() as u64;
    let ret = answer(&u.id, outcome, &mut record);
    (ret, record)
}

/// What goes back to the model for a call's outcome, kept in its record too.
fn answer(id: &str, outcome: Result<Value, String>, record: &mut ToolCallRecord) -> ToolReturn {
    match outcome {
        Ok(v) => {
            let content = match &v {
                Value::String(s) => s.clone(),
                // An MCP tool's text is what its content says.
                Value::Object(o)
                    if o.get("text").is_some_and(Value::is_string) && o.contains_key("content") =>
                {
                    o["text"].as_str().unwrap_or_default().to_string()
                }
                other => other.to_string(),
            };
            record.result = Some(v);
            ToolReturn {
                id: id.to_string(),
                content,
                is_error: false,
            }
        }
        Err(e) => {
            record.error = Some(e.clone());
            ToolReturn {
                id: id.to_string(),
                content: e,
                is_error: true,
            }
        }
    }
}
