//! A pipeline step (spec 001): `nodes` parallel LLM calls, each with the step's system prompt
//! and a user message built from its fields, then the `if:` gate.
//!
//! Fields: `text` evaluates an expression over state (`input.context`); `ingest` gives node i
//! the i-th visible output of another step (cycling when there are fewer); `multi_ingest`
//! gives every visible output. `loopRef: current` reads the source's latest execution,
//! `previous` its latest execution in an earlier pass (a pass begins at each backward jump),
//! so a reflexion loop's draft reads the critique that sent it back. A source with nothing
//! visible uses the field's `fallback`; an empty value leaves the field out.
//!
//! The gate keeps the outputs that match. When at least one survives, `then` fires and only
//! the survivors are visible downstream; when none does, `else` fires and every output stays
//! visible. Output: `{pass, outputs: [{node, text, pruned}], survivors, action, visible}`.

use serde_json::{Value, json};
use tokio::task::JoinSet;
use weir_core::ModelRequest;
use weir_core::expr;
use weir_core::ir::{EndStatus, FieldSource, GateAction, GateCondition, LoopRef, StepSpec};
use weir_core::model::{Message, ModelError, ModelResponse};
use weir_core::schema::extract_json;

use super::{Failure, NodeCtx, Outcome, Route, Spent, model_failure};

/// The visible outputs of `step` for a reader in `pass`.
fn lookup(ctx: &NodeCtx, step: &str, loop_ref: LoopRef) -> Vec<Value> {
    let Some(runs) = ctx.history.get(step) else {
        return Vec::new();
    };
    let found = match loop_ref {
        LoopRef::Current => runs.last(),
        LoopRef::Previous => runs.iter().rev().find(|r| r.pass < ctx.pass),
    };
    found.map(|r| r.visible.clone()).unwrap_or_default()
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The user message for node `i`.
fn message(ctx: &NodeCtx, spec: &StepSpec, i: usize) -> Result<String, Failure> {
    let mut parts = Vec::new();
    for f in &spec.fields {
        let (value, what) = match &f.source {
            FieldSource::Text { from } => {
                let v = ctx.scope.eval_value(from).map_err(|e| {
                    Failure::fatal(
                        "expression",
                        format!("field {}: `{from}`: {}", f.name, e.message),
                    )
                })?;
                (
                    if v.is_null() { None } else { Some(text(&v)) },
                    from.source().to_string(),
                )
            }
            FieldSource::Ingest { step, loop_ref } => {
                let outs = lookup(ctx, step, *loop_ref);
                (
                    if outs.is_empty() {
                        None
                    } else {
                        Some(text(&outs[i % outs.len()]))
                    },
                    step.clone(),
                )
            }
            FieldSource::MultiIngest { step, loop_ref } => {
                let outs = lookup(ctx, step, *loop_ref);
                let joined = match outs.len() {
                    0 => None,
                    1 => Some(text(&outs[0])),
                    _ => Some(
                        outs.iter()
                            .enumerate()
                            .map(|(k, o)| format!("[{}] {}", k + 1, text(o)))
                            .collect::<Vec<_>>()
                            .join("\n\n"),
                    ),
                };
                (joined, step.clone())
            }
        };
        let value = match (value, &f.fallback) {
            (Some(v), _) => v,
            (None, Some(fb)) => fb.clone(),
            (None, None) => {
                return Err(Failure::fatal(
                    "field",
                    format!(
                        "field `{}`: `{what}` has nothing visible yet and the field has no fallback; add `fallback: \"\"`",
                        f.name
                    ),
                ));
            }
        };
        if !value.is_empty() {
            parts.push(format!("{}:\n{value}", f.name));
        }
    }
    Ok(if parts.is_empty() {
        "(no input)".into()
    } else {
        parts.join("\n\n")
    })
}

fn matches(cond: &GateCondition, out: &str, index: usize) -> Result<bool, Failure> {
    Ok(match cond {
        GateCondition::IntegerRange(lo, hi) => out
            .trim()
            .parse::<i64>()
            .is_ok_and(|n| (*lo..=*hi).contains(&n)),
        GateCondition::JsonMatches(s) => extract_json(out).is_some_and(|v| s.is_valid(&v)),
        GateCondition::Contains(t) => out.contains(t.as_str()),
        GateCondition::Regex(r) => r.0.is_match(out),
        GateCondition::Expression(e) => {
            let scope = expr::Scope::new(std::sync::Arc::new(
                [
                    ("output".to_string(), json!(out)),
                    (
                        "parsed".to_string(),
                        extract_json(out).unwrap_or(Value::Null),
                    ),
                    ("index".to_string(), json!(index)),
                ]
                .into_iter()
                .collect(),
            ));
            scope.eval_bool(e).map_err(|err| {
                Failure::fatal("expression", format!("gate `{e}`: {}", err.message))
            })?
        }
    })
}

#[expect(
    clippy::too_many_lines,
    reason = "a pipeline step in order: templating, the call of its kind, output mapping, jumps; the kinds share the templated fields"
)]
pub async fn execute(ctx: &NodeCtx, spec: &StepSpec) -> Result<Outcome, Failure> {
    let mut calls = JoinSet::new();
    let mut requests = Vec::new();
    let mut asks = Vec::new();
    for i in 0..spec.nodes as usize {
        let user = message(ctx, spec, i)?;
        requests.push(json!({"node": i + 1, "user": user}));
        asks.push(ModelRequest {
            model: spec.model.clone(),
            system: spec.system_prompt.clone(),
            messages: vec![Message::user(user)],
            temperature: spec.temperature,
            max_tokens: spec.max_tokens,
            timeout: ctx.call_timeout(),
            fallback_models: Vec::new(),
            fallback_error_classes: None,
            response_schema: None,
            on_fallback: None,
            tools: Vec::new(),
            tool_choice: weir_core::model::ToolChoice::Auto,
            parallel_tool_calls: true,
            // One call's reply streams; several at once would interleave.
            on_delta: if spec.nodes == 1 {
                ctx.on_delta()
            } else {
                None
            },
        });
    }
    let request = json!({"model": spec.model, "system": spec.system_prompt, "nodes": requests});
    // The calls run at once; their results are taken in node order, so the record lists
    // them in that order (and a replay, which asks one after another, finds each node's).
    let mut results: Vec<Option<Result<ModelResponse, ModelError>>> =
        (0..spec.nodes).map(|_| None).collect();
    if ctx.replay {
        for (i, req) in asks.into_iter().enumerate() {
            results[i] = Some(ctx.services.models.complete(req).await);
        }
    } else {
        for (i, req) in asks.into_iter().enumerate() {
            let models = ctx.services.models.clone();
            calls.spawn(async move { (i, models.complete(req).await) });
        }
        // A panicked call leaves its reply missing; it is reported below, never judged as
        // an empty reply.
        while let Some(joined) = calls.join_next().await {
            if let Ok((i, result)) = joined {
                results[i] = Some(result);
            }
        }
    }
    let mut spent = Spent::default();
    let mut texts: Vec<Option<weir_core::model::ReplyText>> = vec![None; spec.nodes as usize];
    let mut failed = None;
    for (i, result) in results.into_iter().enumerate() {
        match result {
            Some(Ok(mut r)) => {
                spent.add(std::mem::take(&mut r.calls), &r.events);
                texts[i] = Some(r.text);
            }
            Some(Err(mut e)) => {
                spent.add(std::mem::take(&mut e.calls), &e.events);
                if failed.is_none() {
                    failed = Some((i, e));
                }
            }
            None => {}
        }
    }
    if let Some((i, e)) = failed {
        let mut f = model_failure(e, request, spent);
        f.message = format!("node {}: {}", i + 1, f.message);
        return Err(f);
    }
    if let Some(i) = texts.iter().position(Option::is_none) {
        return Err(Failure::internal(
            format!("node {}: the model call panicked", i + 1),
            request,
            spent,
        ));
    }
    let texts: Vec<weir_core::model::ReplyText> = texts.into_iter().flatten().collect();
    let mut kept = Vec::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        kept.push(match &spec.gate {
            Some(g) => matches(&g.condition, t, i)?,
            None => true,
        });
    }
    let survivors = kept.iter().filter(|k| **k).count();
    let (action, visible): (GateAction, Vec<Value>) = match &spec.gate {
        None => (
            GateAction::Continue,
            texts.iter().map(|t| json!(t)).collect(),
        ),
        Some(g) if survivors > 0 => (
            g.then.clone(),
            texts
                .iter()
                .zip(&kept)
                .filter(|(_, k)| **k)
                .map(|(t, _)| json!(t))
                .collect(),
        ),
        Some(g) => (
            g.otherwise.clone(),
            texts.iter().map(|t| json!(t)).collect(),
        ),
    };
    let (route, action_name) = match &action {
        GateAction::Continue => (Route::Key("continue".into()), "continue".to_string()),
        GateAction::Abort => (Route::End(EndStatus::Aborted), "abort".to_string()),
        GateAction::Jump(s) => (Route::Key(format!("jump:{s}")), format!("jump:{s}")),
    };
    let outputs: Vec<Value> = texts
        .iter()
        .zip(&kept)
        .enumerate()
        .map(|(i, (t, k))| json!({"node": i + 1, "text": t, "pruned": !k}))
        .collect();
    let output = json!({
        "pass": ctx.pass,
        "outputs": outputs,
        "survivors": survivors,
        "action": action_name,
        "visible": visible,
    });
    Ok(Outcome {
        write: Some(Value::Array(visible)),
        route,
        request: Some(request.into()),
        response: None,
        output: output.into(),
        spent,
    })
}
