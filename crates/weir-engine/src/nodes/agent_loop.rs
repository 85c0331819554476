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
//!
//! The loop is durable: after each model turn that asks for tools and after each tool call,
//! the step's attempt so far is committed ([`NodeCtx::checkpoint`]). A driver that takes
//! the run over goes on from there (the tool calls made are not made again; one in flight
//! is sent again with its key). A tool listed in `approve_tools` parks the run at a gate of
//! kind `tool_call` before it is called; the decision comes back as [`Resume::decision`].

use std::collections::HashMap;
use std::future::Future;
use std::time::Instant;

use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::Value;
use weir_core::ModelRequest;
use weir_core::model::{Message, ModelResponse, ToolChoice, ToolDef, ToolReturn, ToolUse};
use weir_core::record::{Request, Resume, ToolCallRecord, ToolDecision};
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

/// How the loop ended: with the model's answer, or parked before a tool call that waits
/// for a reviewer.
pub enum Ended {
    Answered(Answer),
    Parked {
        prompt: String,
        detail: Value,
    },
    /// The next call would cross a budget (its turns so far committed).
    Budget(Box<crate::budget::Exceeded>),
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

/// A turn whose model call asked for tools: its calls, some of them perhaps made already.
struct Open {
    turn: u32,
    text: String,
    uses: Vec<ToolUse>,
}

/// Runs the loop from `req` (the node's prompt), recording into `spent`.
pub async fn run(
    ctx: &NodeCtx,
    spec: &weir_core::ir::AgentSpec,
    mut req: ModelRequest,
    request: &Request,
    spent: &mut Spent,
) -> Result<Ended, Failure> {
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
    let resume = ctx.take_resume();
    let (mut turn, mut open) = match &resume {
        Some(r) => rebuild(r, &mut req, spent),
        None => (0, None),
    };
    if turn > 0 {
        req.tool_choice = ToolChoice::Auto;
    }
    let mut decision = resume.and_then(|r| r.decision);
    let models = ctx.services.models.as_ref();
    loop {
        let o = match open.take() {
            Some(o) => o,
            None => {
                turn += 1;
                if turn > spec.tools.max_turns {
                    return Err(max_turns(spec, request, spent));
                }
                if let Some(e) = ctx.over_budget(spent, crate::budget::Next::Model(&req)) {
                    ctx.checkpoint(request, spent).await?;
                    return Ok(Ended::Budget(Box::new(e)));
                }
                let mut response = match models.complete(req.clone()).await {
                    Ok(r) => r,
                    Err(mut e) => {
                        spent.add(std::mem::take(&mut e.calls), &e.events);
                        return Err(model_failure(e, request.clone(), std::mem::take(spent)));
                    }
                };
                spent.add(std::mem::take(&mut response.calls), &response.events);
                if response.tool_uses.is_empty() {
                    return finish(ctx, spec, req, response, turn, request, spent)
                        .await
                        .map(Ended::Answered);
                }
                // A forced choice holds for the first turn; then the model decides.
                req.tool_choice = ToolChoice::Auto;
                ctx.checkpoint(request, spent).await?;
                Open {
                    turn,
                    text: String::from(&*response.text),
                    uses: std::mem::take(&mut response.tool_uses),
                }
            }
        };
        match call_tools(ctx, spec, &o, &offered, decision.take(), request, spent).await? {
            Stop::No => {}
            Stop::Gate(prompt, detail) => return Ok(Ended::Parked { prompt, detail }),
            // What is committed goes on from the turn's next call once raised.
            Stop::Budget(e) => return Ok(Ended::Budget(e)),
        }
        let mut assistant = Message::assistant(o.text);
        let mut results = Message::user("");
        for u in &o.uses {
            if let Some(r) = spent
                .tool_calls
                .iter()
                .find(|r| r.turn == o.turn && r.id == u.id)
            {
                results.tool_returns.push(returned(r));
            }
        }
        assistant.tool_uses = o.uses;
        req.messages.push(assistant);
        req.messages.push(results);
    }
}

fn max_turns(spec: &weir_core::ir::AgentSpec, request: &Request, spent: &mut Spent) -> Failure {
    Failure {
        message: format!(
            "the model was still calling tools after {} turns (`max_turns`); raise it, or make the prompt say when to answer",
            spec.tools.max_turns
        ),
        class: "max_turns_exceeded".into(),
        retryable: false,
        retry_after: None,
        request: Some(Box::new(request.clone())),
        spent: Some(Box::new(std::mem::take(spent))),
    }
}

/// The conversation a committed attempt recorded, rebuilt into `req`: each turn that asked
/// for tools, with the results of its calls. Its calls and tool calls are carried into
/// `spent` for the record (their cost was charged to the step that made them). Returns the
/// turns done and the last turn when some of its calls are still to make.
fn rebuild(r: &Resume, req: &mut ModelRequest, spent: &mut Spent) -> (u32, Option<Open>) {
    let mut turn = 0;
    let mut open = None;
    for c in &r.attempt.calls {
        let mut carried = c.clone();
        if carried.get("carried_over").is_none() {
            carried.value_mut()["carried_over"] = Value::Bool(true);
        }
        spent.calls.push(carried);
        let uses: Vec<ToolUse> = c
            .get("tool_uses")
            .and_then(|u| serde_json::from_value(u.clone()).ok())
            .unwrap_or_default();
        if uses.is_empty() {
            continue;
        }
        turn += 1;
        let text = c
            .get("reply")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let done: Vec<&ToolCallRecord> = uses
            .iter()
            .filter_map(|u| {
                r.attempt
                    .tool_calls
                    .iter()
                    .find(|t| t.turn == turn && t.id == u.id)
            })
            .collect();
        if done.len() < uses.len() {
            open = Some(Open { turn, text, uses });
            continue;
        }
        let mut assistant = Message::assistant(text);
        let mut results = Message::user("");
        results.tool_returns = done.into_iter().map(returned).collect();
        assistant.tool_uses = uses;
        req.messages.push(assistant);
        req.messages.push(results);
    }
    spent.tool_calls.clone_from(&r.attempt.tool_calls);
    // What the loop spent before, for the node's budget.
    let mut before = weir_core::record::Usage {
        tool_calls: r
            .attempt
            .tool_calls
            .iter()
            .filter(|t| t.approval.as_ref().is_none_or(|a| a["approved"] != false))
            .count() as u64,
        ..Default::default()
    };
    let mut usd = 0.0;
    for c in &r.attempt.calls {
        before.model_calls += 1;
        before.tokens += c.get("input_tokens").and_then(Value::as_u64).unwrap_or(0)
            + c.get("output_tokens").and_then(Value::as_u64).unwrap_or(0);
        usd += c.get("cost_usd").and_then(Value::as_f64).unwrap_or(0.0);
    }
    spent.before = (usd, before);
    (turn, open)
}

/// What a recorded tool call gave the model.
pub fn returned(r: &ToolCallRecord) -> ToolReturn {
    let (content, is_error) = match (&r.error, &r.result) {
        (Some(e), _) => (e.clone(), true),
        (None, Some(v)) => (content_of(v), false),
        (None, None) => (String::new(), false),
    };
    ToolReturn {
        id: r.id.clone(),
        content,
        is_error,
    }
}

/// A tool's result as the model reads it: a string as it is, an MCP tool's text, or JSON.
fn content_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(o)
            if o.get("text").is_some_and(Value::is_string) && o.contains_key("content") =>
        {
            o["text"].as_str().unwrap_or_default().to_string()
        }
        other => other.to_string(),
    }
}

/// Makes the calls of turn `o` not made yet, committing each as it ends: first those that
/// need no reviewer (at once when the model asked for several), then, in order, those that
/// do: one decided is made (or its rejection recorded); the first undecided parks the loop,
/// returned as the gate's prompt and detail.
async fn call_tools(
    ctx: &NodeCtx,
    spec: &weir_core::ir::AgentSpec,
    o: &Open,
    offered: &HashMap<String, Offered>,
    mut decision: Option<ToolDecision>,
    request: &Request,
    spent: &mut Spent,
) -> Result<Stop, Failure> {
    let gated = |u: &ToolUse| {
        offered.get(&u.name).is_some_and(|t| {
            spec.tools.needs_approval(&t.tool_ref)
                && t.schema
                    .as_ref()
                    .is_none_or(|s| s.errors(&u.arguments).is_empty())
        })
    };
    let todo: Vec<(usize, &ToolUse)> = o
        .uses
        .iter()
        .enumerate()
        .filter(|(_, u)| {
            !spent
                .tool_calls
                .iter()
                .any(|r| r.turn == o.turn && r.id == u.id)
        })
        .collect();
    let mut free: Vec<(usize, &ToolUse)> =
        todo.iter().filter(|(_, u)| !gated(u)).copied().collect();
    let over = fit_budget(ctx, spent, &mut free);
    let free = free
        .into_iter()
        .map(|(i, u)| call_one(ctx, o.turn, i, u, offered, None));
    make_all(ctx, spec, free, request, spent).await?;
    if let Some(e) = over {
        return Ok(Stop::Budget(Box::new(e)));
    }
    for (i, u) in todo.into_iter().filter(|(_, u)| gated(u)) {
        match decision.take_if(|d| d.id == u.id) {
            Some(d) => {
                let made = d.approved;
                if made && let Some(e) = ctx.over_budget(spent, crate::budget::Next::Tool) {
                    return Ok(Stop::Budget(Box::new(e)));
                }
                let (record, failed) = call_one(ctx, o.turn, i, u, offered, Some(d)).await;
                let fatal = fatal_error(spec, &record, failed);
                spent.tool_calls.push(record);
                spent.tools_made += u64::from(made);
                ctx.checkpoint(request, spent).await?;
                if let Some(e) = fatal {
                    let mut f = tool_failure(&e, request, std::mem::take(spent));
                    f.message = e.message;
                    return Err(f);
                }
            }
            None => {
                let (prompt, detail) = gate(o.turn, i, u, &offered[&u.name].tool_ref);
                return Ok(Stop::Gate(prompt, detail));
            }
        }
    }
    // The turn's calls in the order the model asked for them (they end in any order).
    let from = spent
        .tool_calls
        .iter()
        .position(|r| r.turn == o.turn)
        .unwrap_or(spent.tool_calls.len());
    spent.tool_calls[from..].sort_by_key(|r| {
        o.uses
            .iter()
            .position(|u| u.id == r.id)
            .unwrap_or(usize::MAX)
    });
    Ok(Stop::No)
}

/// The calls that fit the budgets (all of them, mostly): `free` is cut before the first
/// call that would cross one, which is returned (the loop stops before it).
fn fit_budget(
    ctx: &NodeCtx,
    spent: &Spent,
    free: &mut Vec<(usize, &ToolUse)>,
) -> Option<crate::budget::Exceeded> {
    ctx.limits.as_ref()?;
    let mut fits = spent.clone();
    for n in 0..free.len() {
        if let Some(e) = ctx.over_budget(&fits, crate::budget::Next::Tool) {
            free.truncate(n);
            return Some(e);
        }
        fits.tools_made += 1;
    }
    None
}

/// Makes calls that need no reviewer (at once when the model asked for several), each
/// committed as it ends; a `fatal_tools` error fails the node once they ended.
async fn make_all<F: Future<Output = (ToolCallRecord, Option<ToolError>)>>(
    ctx: &NodeCtx,
    spec: &weir_core::ir::AgentSpec,
    free: impl Iterator<Item = F>,
    request: &Request,
    spent: &mut Spent,
) -> Result<(), Failure> {
    let mut fatal = None;
    if spec.tools.parallel_tool_calls {
        let mut running: FuturesUnordered<_> = free.collect();
        while let Some((record, failed)) = running.next().await {
            fatal = fatal.or_else(|| fatal_error(spec, &record, failed));
            spent.tool_calls.push(record);
            spent.tools_made += 1;
            ctx.checkpoint(request, spent).await?;
        }
    } else {
        for c in free {
            let (record, failed) = c.await;
            fatal = fatal_error(spec, &record, failed);
            spent.tool_calls.push(record);
            spent.tools_made += 1;
            ctx.checkpoint(request, spent).await?;
            if fatal.is_some() {
                break;
            }
        }
    }
    if let Some(e) = fatal {
        let mut f = tool_failure(&e, request, std::mem::take(spent));
        f.message = e.message;
        return Err(f);
    }
    Ok(())
}

/// A tool's own error (the call was made and failed) when the tool is in `fatal_tools`:
/// it fails the node instead of going back to the model.
fn fatal_error(
    spec: &weir_core::ir::AgentSpec,
    record: &ToolCallRecord,
    failed: Option<ToolError>,
) -> Option<ToolError> {
    let mut e = failed.filter(|_| spec.tools.is_fatal(&record.tool))?;
    e.message = format!(
        "tool `{}` failed, and it is one of the agent's `fatal_tools`: {}",
        record.name, e.message
    );
    Some(e)
}

/// Why the calls of a turn stopped before all were made.
enum Stop {
    No,
    /// A call waits for a reviewer: the gate's prompt and detail.
    Gate(String, Value),
    /// A call would cross a budget.
    Budget(Box<crate::budget::Exceeded>),
}

/// The gate a tool call that waits for a reviewer parks at: what it asks, and the call.
fn gate(turn: u32, index: usize, u: &ToolUse, tool_ref: &str) -> (String, Value) {
    let args = serde_json::to_string_pretty(&u.arguments).unwrap_or_default();
    let prompt = format!(
        "The agent wants to call `{}` ({tool_ref}) with these arguments:\n{args}\nApprove to make the call (you may edit the arguments), or reject it with a reason the model will read.",
        u.name
    );
    let detail = serde_json::json!({
        "tool": tool_ref,
        "name": u.name,
        "arguments": u.arguments,
        "id": u.id,
        "turn": turn,
        "index": index,
    });
    (prompt, detail)
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
/// back to the model (the result, or the error as the result) with the call's record. With
/// a reviewer's `decision`: a rejection is the result; an approval may change the arguments.
async fn call_one(
    ctx: &NodeCtx,
    turn: u32,
    index: usize,
    u: &ToolUse,
    offered: &HashMap<String, Offered>,
    decision: Option<ToolDecision>,
) -> (ToolCallRecord, Option<ToolError>) {
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
        approval: None,
    };
    if let Some(d) = decision
        && !apply_decision(d, u, offered, &mut record)
    {
        return (record, None);
    }
    let mut failed = None;
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
            let problems = match (&tool.schema, &record.arguments) {
                (_, Value::String(raw)) => {
                    vec![format!("the arguments are not a JSON object: {raw}")]
                }
                (Some(schema), args) => schema.errors(args),
                (None, _) => Vec::new(),
            };
            if problems.is_empty() {
                let call = ToolCall {
                    tool_name: tool.tool_ref.clone(),
                    params: record.arguments.clone(),
                    idempotency_key: format!(
                        "{}:{}:{}:{turn}:{index}",
                        ctx.run_id,
                        ctx.node().id,
                        ctx.visit
                    ),
                    timeout: ctx.tool_timeout(),
                };
                match ctx.services.tools.call(call).await {
                    Ok(v) => Ok(v),
                    Err(e) => {
                        let message = e.message.clone();
                        failed = Some(e);
                        Err(message)
                    }
                }
            } else {
                Err(format!(
                    "the arguments do not match the tool's schema:\n- {}",
                    problems.join("\n- ")
                ))
            }
        }
    };
    record.duration_ms = started.elapsed().as_millis() as u64;
    settle(outcome, &mut record);
    (record, failed)
}

/// A reviewer's decision on the call, in its record (the reviewer's arguments replace the
/// model's). Whether the call is to be made: false when it was rejected (the rejection is
/// then its error, which the model reads).
fn apply_decision(
    d: ToolDecision,
    u: &ToolUse,
    offered: &HashMap<String, Offered>,
    record: &mut ToolCallRecord,
) -> bool {
    let mut approval = serde_json::json!({"approved": d.approved, "by": d.by, "at": d.at});
    if let Some(c) = &d.comment {
        approval["comment"] = Value::String(c.clone());
    }
    if let Some(args) = d.arguments.filter(|a| *a != u.arguments) {
        approval["model_arguments"] = std::mem::replace(&mut record.arguments, args);
    }
    record.approval = Some(approval);
    if !d.approved {
        record.tool = offered
            .get(&u.name)
            .map(|t| t.tool_ref.clone())
            .unwrap_or_default();
        let reason = d.comment.unwrap_or_else(|| "no reason given".into());
        settle(Err(format!("rejected by {}: {reason}", d.by)), record);
    }
    d.approved
}

/// A call's outcome in its record.
fn settle(outcome: Result<Value, String>, record: &mut ToolCallRecord) {
    match outcome {
        Ok(v) => record.result = Some(v),
        Err(e) => record.error = Some(e),
    }
}
