//! Decisions at human gates (DESIGN §8 "Decide"): one conditional transition naming the
//! gate, written with the decision step and its event in one transaction. Deciding never
//! drives the run; an approved run becomes `queued` for a driver to claim.

use std::sync::Arc;

use serde_json::{Value, json};
use weir_core::Workflow;
use weir_core::event::EventKind;
use weir_core::record::{
    ErrorCode, GateKind, PendingGate, Resume, RunError, RunStatus, StepRecord, StepStatus,
    ToolDecision,
};
use weir_core::store::{GateDecision, StoreError};

use crate::{Engine, Error, now, routing};

/// A reviewer's decision at a human gate.
pub struct Decision {
    /// Approve (`true`) or reject.
    pub approved: bool,
    /// Who decided, as recorded on the gate's step.
    pub by: String,
    /// Approve: an object merged into state. Ignored on reject.
    pub input: Option<Value>,
    /// Reject: the reason. Approve: an optional comment.
    pub comment: Option<String>,
}

/// What a decision did.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The run decided.
    pub run_id: String,
    /// The gate node decided.
    pub gate: String,
    /// `queued` (approved: a driver continues it), `paused` (another gate still waits) or
    /// `failed` (rejected).
    pub status: RunStatus,
}

impl Engine {
    /// Decides gate `gate` (or, when `None`, the only or oldest waiting gate) of a paused
    /// run. Of two concurrent decisions exactly one wins; the other gets `Conflict` naming
    /// the decision that won.
    #[expect(
        clippy::too_many_lines,
        reason = "a gate decision's rules read together: find the gate, check who may decide, build the step and events, one conditional write; split, the checks would sit apart from the write they guard"
    )]
    pub async fn decide(
        &self,
        wf: Arc<Workflow>,
        run_id: &str,
        gate: Option<&str>,
        mut decision: Decision,
    ) -> Result<Decided, Error> {
        // What a reviewer typed (a comment, a reason, the approval's input) is recorded, so
        // a secret value in it is redacted as every recorded value is.
        if let Some(c) = &mut decision.comment {
            self.redactor.string(c);
        }
        if let Some(i) = &mut decision.input {
            self.redactor.value(i);
        }
        if !decision.approved
            && decision
                .comment
                .as_deref()
                .is_none_or(|c| c.trim().is_empty())
        {
            return Err(Error::InvalidInput(vec![
                "a rejection needs a reason: say why the run should not go on (`--reason` on \
                 the command line, `comment` over the API)"
                    .into(),
            ]));
        }
        let store = &self.services.store;
        let stored = store.load_run(run_id).await?;
        if stored.status != RunStatus::Paused {
            return Err(Error::Conflict(
                self.why_not_waiting(run_id, gate, stored.status).await,
            ));
        }
        let mut snapshot = stored.snapshot;
        let index = match gate {
            None => 0,
            Some(g) => snapshot
                .gates
                .iter()
                .position(|p| p.node_id == g)
                .ok_or_else(|| {
                    let waiting: Vec<&str> =
                        snapshot.gates.iter().map(|p| p.node_id.as_str()).collect();
                    Error::Conflict(format!(
                        "run {run_id} is not waiting at gate `{g}`; it waits at {}",
                        if waiting.is_empty() {
                            "no gate".to_string()
                        } else {
                            waiting
                                .iter()
                                .map(|w| format!("`{w}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    ))
                })?,
        };
        let Some(pending) = snapshot.gates.get(index).cloned() else {
            return Err(Error::Conflict(format!(
                "run {run_id} is paused but no gate is waiting; continue it with `weir resume {run_id}`"
            )));
        };
        snapshot.gates.remove(index);
        let stamp = weir_core::store::Stamp::now();
        let at = stamp.to_string();
        let mut step = store.get_step(run_id, pending.seq).await?;
        step.finished_at = Some(stamp.clone());
        let key = format!("approval_{}", pending.node_id);
        let decided_event = EventKind::GateDecided {
            node_id: pending.node_id.clone(),
            approved: decision.approved,
            by: decision.by.clone(),
            comment: decision.comment.clone(),
        };
        let mut events = vec![decided_event];
        let (status, error, finished_at, also) = if pending.kind == GateKind::ToolCall
            || (pending.kind == GateKind::Budget && decision.approved)
        {
            let resume = if pending.kind == GateKind::ToolCall {
                self.decide_tool_call(&pending, &mut step, &decision, &at)
                    .await?
            } else {
                raise_budget(&pending, &mut snapshot, &mut step, &decision, &at)?
            };
            snapshot.resume.insert(pending.node_id.clone(), resume);
            if let Some(at) = wf.position(&pending.node_id) {
                snapshot.pending.push(wf.node_id(at).clone());
            }
            let status = if snapshot.gates.is_empty() {
                RunStatus::Queued
            } else {
                RunStatus::Paused
            };
            (status, None, None, Vec::new())
        } else if decision.approved {
            let mut record = json!({"approved": true, "by": decision.by, "at": at});
            if let Some(c) = &decision.comment {
                record["comment"] = json!(c);
            }
            match &decision.input {
                None | Some(Value::Null) => {}
                Some(Value::Object(m)) => {
                    record["input"] = Value::Object(m.clone());
                    for (k, v) in m {
                        if !k.starts_with("__") {
                            Arc::make_mut(&mut snapshot.state).insert(k.clone(), v.clone());
                        }
                    }
                }
                Some(_) => {
                    return Err(Error::InvalidInput(vec![
                        "approval input must be a JSON object".into(),
                    ]));
                }
            }
            Arc::make_mut(&mut snapshot.state).insert(key, record.clone());
            step.status = StepStatus::Succeeded;
            step.route = Some("approved".into());
            step.output = Arc::new(record.into());
            routing::complete_gate(&wf, &mut snapshot, &pending.node_id);
            let status = if snapshot.gates.is_empty() {
                RunStatus::Queued
            } else {
                RunStatus::Paused
            };
            (status, None, None, Vec::new())
        } else {
            let reason = decision
                .comment
                .clone()
                .unwrap_or_else(|| "no reason given".into());
            let record = json!({"approved": false, "by": decision.by, "at": at, "reason": reason});
            Arc::make_mut(&mut snapshot.state).insert(key, record.clone());
            step.status = StepStatus::Failed;
            step.route = Some("rejected".into());
            step.error = Some(format!("rejected: {reason}"));
            step.output = Arc::new(record.into());
            // The run ends: every other waiting gate closes with it.
            let mut also = Vec::new();
            for g in std::mem::take(&mut snapshot.gates) {
                let mut s = store.get_step(run_id, g.seq).await?;
                s.status = StepStatus::Cancelled;
                s.error = Some(format!(
                    "cancelled: gate `{}` was rejected",
                    pending.node_id
                ));
                s.finished_at = Some(stamp.clone());
                also.push(s);
            }
            snapshot.pending.clear();
            let error = if pending.kind == GateKind::Budget {
                RunError {
                    code: ErrorCode::BudgetExceeded,
                    message: format!(
                        "the budget at `{}` was not raised: {reason}",
                        pending.node_id
                    ),
                    node_id: Some(pending.node_id.clone()),
                }
            } else {
                RunError {
                    code: ErrorCode::GateRejected,
                    message: format!("rejected at human gate `{}`: {reason}", pending.node_id),
                    node_id: Some(pending.node_id.clone()),
                }
            };
            events.push(EventKind::RunFinished {
                status: RunStatus::Failed,
                error: Some(error.clone()),
            });
            (RunStatus::Failed, Some(error), Some(now()), also)
        };
        let written = store
            .decide(&GateDecision {
                run_id: run_id.to_string(),
                expect_epoch: stored.epoch,
                step,
                status,
                error,
                finished_at,
                snapshot,
                also,
                events,
            })
            .await;
        match written {
            Ok(w) => {
                self.publish(run_id, &w.events);
                Ok(Decided {
                    run_id: run_id.to_string(),
                    gate: pending.node_id,
                    status,
                })
            }
            Err(StoreError::Conflict(_)) => {
                Err(Error::Conflict(self.lost_to(run_id, &pending).await))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A decision on an agent's tool call: the gate's step records it, and the agent's loop
    /// goes on from its committed turns with it (approved: the call is made, with the
    /// reviewer's arguments when given, checked against the tool's schema here; rejected:
    /// the model reads the reason as the call's result).
    async fn decide_tool_call(
        &self,
        pending: &PendingGate,
        step: &mut StepRecord,
        decision: &Decision,
        at: &str,
    ) -> Result<Resume, Error> {
        let detail = pending.detail.clone().unwrap_or(Value::Null);
        let field = |k: &str| detail.get(k).and_then(Value::as_str).unwrap_or_default();
        let (id, tool, name) = (field("id"), field("tool"), field("name"));
        let arguments = match &decision.input {
            _ if !decision.approved => None,
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) if m.keys().all(|k| k == "arguments") => {
                m.get("arguments").cloned()
            }
            Some(_) => {
                return Err(Error::InvalidInput(vec![
                    "a tool call's approval input is `{\"arguments\": {…}}`: the arguments to call the tool with instead of the model's".into(),
                ]));
            }
        };
        if let Some(args) = &arguments {
            self.check_arguments(tool, name, args).await?;
        }
        let mut record = json!({"approved": decision.approved, "by": decision.by, "at": at,
            "tool": tool, "arguments": arguments.clone().unwrap_or_else(|| detail["arguments"].clone())});
        if let Some(c) = &decision.comment {
            record[if decision.approved {
                "comment"
            } else {
                "reason"
            }] = json!(c);
        }
        step.status = StepStatus::Succeeded;
        step.route = Some(
            if decision.approved {
                "approved"
            } else {
                "rejected"
            }
            .into(),
        );
        step.output = Arc::new(record.into());
        let attempt = loop_so_far(step);
        Ok(Resume {
            visit: step.visit,
            attempt,
            decision: Some(ToolDecision {
                id: id.to_string(),
                approved: decision.approved,
                by: decision.by.clone(),
                at: at.to_string(),
                comment: decision.comment.clone(),
                arguments,
            }),
        })
    }

    /// Arguments a reviewer gave a tool call, checked against the tool's schema.
    async fn check_arguments(&self, tool: &str, name: &str, args: &Value) -> Result<(), Error> {
        if !args.is_object() {
            return Err(Error::InvalidInput(vec![format!(
                "the arguments for `{name}` must be a JSON object"
            )]));
        }
        let described = self
            .services
            .tools
            .describe(tool)
            .await
            .map_err(|e| Error::InvalidInput(vec![format!("`{tool}`: {}", e.message)]))?;
        let Some((_, def)) = described.into_iter().find(|(_, d)| d.name == name) else {
            return Ok(());
        };
        let Ok(schema) = weir_core::schema::CompiledSchema::compile(&def.parameters) else {
            return Ok(());
        };
        let errors = schema.errors(args);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidInput(
                errors
                    .into_iter()
                    .map(|e| format!("the arguments for `{name}` do not match its schema: {e}"))
                    .collect(),
            ))
        }
    }

    /// Why a run that is not paused cannot take a decision, naming an earlier decision of the
    /// gate when there is one.
    async fn why_not_waiting(&self, run_id: &str, gate: Option<&str>, status: RunStatus) -> String {
        if let Ok(record) = self.services.store.get_record(run_id).await
            && let Some(d) = record
                .steps
                .iter()
                .rev()
                .filter(|s| s.node_type == "human_gate" && gate.is_none_or(|g| g == &*s.node_id))
                .find_map(|s| describe_decision(&s.node_id, &s.output))
        {
            return format!(
                "run {run_id} is not waiting at a human gate: {d} (status {})",
                status.as_str()
            );
        }
        format!(
            "run {run_id} is not waiting at a human gate (status {})",
            status.as_str()
        )
    }

    /// The message of a decision that lost the race: who won and what they decided.
    async fn lost_to(&self, run_id: &str, gate: &PendingGate) -> String {
        match self.services.store.get_step(run_id, gate.seq).await {
            Ok(s) => match describe_decision(&gate.node_id, &s.output) {
                Some(d) => format!("run {run_id}: {d}"),
                None => format!(
                    "run {run_id} changed while this decision was being written; look again with `weir runs show {run_id}`"
                ),
            },
            Err(e) => format!("run {run_id} changed while deciding ({e})"),
        }
    }
}

/// An approved `budget` gate: the raise (`{"raise": {"usd": 1.0}}`) added to the budget
/// that stopped the node, the gate's step recording it, and the node to run again (an
/// agent's loop going on from its committed turns).
fn raise_budget(
    pending: &PendingGate,
    snapshot: &mut weir_core::record::Snapshot,
    step: &mut StepRecord,
    decision: &Decision,
    at: &str,
) -> Result<Resume, Error> {
    let usage = || {
        Error::InvalidInput(vec![
            "a budget's approval input is `{\"raise\": {\"usd\": 1.0}}` (any of usd, tokens, model_calls, tool_calls): how much to add to the budget".into(),
        ])
    };
    let raw = decision
        .input
        .as_ref()
        .and_then(|i| i.get("raise"))
        .ok_or_else(usage)?;
    let raise: weir_core::ir::Budget = serde_json::from_value(raw.clone()).map_err(|_| usage())?;
    let positive = |x: Option<f64>| x.is_some_and(|v| v > 0.0);
    if !(positive(raise.usd)
        || positive(raise.tokens.map(|t| t as f64))
        || positive(raise.model_calls.map(|t| t as f64))
        || positive(raise.tool_calls.map(|t| t as f64)))
    {
        return Err(usage());
    }
    let detail = pending.detail.clone().unwrap_or(Value::Null);
    let key = if detail["scope"] == "run" {
        String::new()
    } else {
        pending.node_id.clone()
    };
    let total = snapshot.raised.entry(key).or_default();
    let add = |a: &mut Option<f64>, b: Option<f64>| {
        if let Some(b) = b {
            *a = Some(a.unwrap_or(0.0) + b);
        }
    };
    let addn = |a: &mut Option<u64>, b: Option<u64>| {
        if let Some(b) = b {
            *a = Some(a.unwrap_or(0) + b);
        }
    };
    add(&mut total.usd, raise.usd);
    addn(&mut total.tokens, raise.tokens);
    addn(&mut total.model_calls, raise.model_calls);
    addn(&mut total.tool_calls, raise.tool_calls);
    let mut record = json!({"approved": true, "by": decision.by, "at": at, "raise": raw});
    if let Some(c) = &decision.comment {
        record["comment"] = json!(c);
    }
    step.status = StepStatus::Succeeded;
    step.route = Some("approved".into());
    step.output = Arc::new(record.into());
    let attempt = loop_so_far(step);
    Ok(Resume {
        visit: step.visit,
        attempt,
        decision: None,
    })
}

/// The agent's loop as a parked step committed it (its last attempt, marked decided on the
/// step), to go on from.
fn loop_so_far(step: &mut StepRecord) -> weir_core::record::Attempt {
    let Some(last) = step.attempts.last_mut() else {
        return weir_core::record::Attempt {
            n: 1,
            status: StepStatus::Running,
            error: None,
            error_class: None,
            duration_ms: 0,
            request: None,
            response: None,
            calls: Vec::new(),
            tool_calls: Vec::new(),
            cost_usd: 0.0,
        };
    };
    last.status = StepStatus::Succeeded;
    let mut attempt = last.clone();
    attempt.status = StepStatus::Running;
    attempt
}

/// `gate `review` was already approved by alice at 2026-…`, from a gate step's output.
fn describe_decision(node_id: &str, output: &Value) -> Option<String> {
    let approved = output.get("approved")?.as_bool()?;
    let by = output
        .get("by")
        .and_then(Value::as_str)
        .unwrap_or("someone");
    let at = output
        .get("at")
        .and_then(Value::as_str)
        .unwrap_or("an earlier time");
    Some(format!(
        "gate `{node_id}` was already {} by {by} at {at}",
        if approved { "approved" } else { "rejected" }
    ))
}
