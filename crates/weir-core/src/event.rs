//! The run's event log (DESIGN §8 "Events"): every change a user can see, typed, with a
//! per-run sequence number assigned by the store in the transaction of the change itself.
//! The CLI's live progress, the server's SSE stream and the web UI's timeline all read it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::{RunError, RunStatus, StepStatus};

/// A piece of the reply a model is writing in a running step: sent to live views as it
/// arrives (`delta` events of the event stream), never written to the log; the committed step
/// holds the whole reply.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename = "delta")]
pub struct Delta<'a> {
    /// The step's sequence number in the run.
    pub step: u32,
    pub node_id: &'a str,
    /// The step's attempt (1-based).
    pub attempt: u32,
    /// Which of the attempt's replies with text it belongs to (1-based): a model call that
    /// starts writing (the next turn of an agent, a repair, a fallback) takes the next
    /// number, and a live view starts the text over.
    pub reply: u32,
    /// How many characters of the reply came before this piece: a view that joins late
    /// (more than 0 on the first piece it sees) knows it missed the start.
    pub offset: usize,
    /// The text written since the last piece.
    pub text: &'a str,
}

/// One entry of a run's log: `{"seq", "at", "type", …fields}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEvent {
    /// 1, 2, 3 … per run, gap-free, in commit order.
    pub seq: u64,
    /// When the store wrote it (RFC 3339 text in JSON).
    pub at: crate::store::Stamp,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened. Serialized with a `type` tag in snake case (`step_finished`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The run was inserted `queued`.
    RunCreated { workflow: String },
    /// A driver claimed the run for the first time.
    RunStarted { owner: String, epoch: u64 },
    /// A driver claimed a run that had been driven before (after a gate, a crash, a
    /// released lease or an expired one).
    RunResumed {
        owner: String,
        epoch: u64,
        /// Whoever held the lease before, when it expired instead of being released.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        took_over_from: Option<String>,
    },
    /// The run parked at a gate; its lease is released.
    RunPaused {
        node_id: String,
        prompt: String,
        /// `tool_call` or `budget`; absent for a human gate.
        #[serde(default, skip_serializing_if = "crate::record::GateKind::is_human")]
        kind: crate::record::GateKind,
    },
    /// The driver let go of the run without ending it (Ctrl-C, drain): it is `queued` again.
    RunReleased { owner: String, reason: String },
    /// Someone asked for the run to be cancelled; its driver stops at its next heartbeat or
    /// commit.
    CancelRequested { by: String },
    /// The run ended.
    RunFinished {
        status: RunStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<RunError>,
    },
    StepStarted {
        step: u32,
        node_id: crate::record::NodeId,
        node_type: crate::record::NodeType,
        visit: u32,
    },
    StepFinished {
        step: u32,
        node_id: crate::record::NodeId,
        node_type: crate::record::NodeType,
        status: StepStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        route: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        duration_ms: u64,
        #[serde(serialize_with = "crate::record::cost::serialize")]
        cost_usd: f64,
        attempts: u32,
    },
    /// An attempt failed and another one follows after `backoff_ms`.
    AttemptFailed {
        step: u32,
        node_id: String,
        n: u32,
        error: String,
        error_class: String,
        backoff_ms: u64,
    },
    /// A reviewer decided a human gate.
    GateDecided {
        node_id: String,
        approved: bool,
        by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        comment: Option<String>,
    },
    /// The workspace policy refused a fallback model.
    /// A re-run reused the recorded output of an earlier run's step instead of running it.
    StepReused {
        step: u32,
        node_id: String,
        from_run: String,
        from_step: u32,
    },
    /// A model call failed with a class that fails over, and the next model was tried.
    ModelFallback {
        node_id: String,
        /// The model that failed, and how.
        model: String,
        error_class: String,
        /// The model tried next.
        next: String,
    },
    ModelFallbackBlocked {
        node_id: String,
        model: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        reason: String,
    },
    /// A driver whose lease is no longer the run's tried to write (a zombie woken after its
    /// lease expired and another driver took the run over); the write changed nothing.
    StaleWriteRefused {
        /// The stale driver and the epoch its lease carried.
        owner: String,
        epoch: u64,
        /// The run's current lease holder and epoch (the last claimer, when none is held).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        current_owner: Option<String>,
        current_epoch: u64,
        /// What it tried: `heartbeat`, `start_steps`, `commit_step`, `append_events`,
        /// `finish_run` or `release`.
        write: String,
    },
    /// An event written by a weir version before the typed log, kept as it was.
    Legacy { body: Value },
}

impl EventKind {
    /// A governance event from the model gateway (`{"type": "model_fallback_blocked", …}`),
    /// typed, for the node it happened in.
    pub fn governance(node_id: &str, v: &Value) -> Self {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        match s("type").as_deref() {
            Some("model_fallback") => EventKind::ModelFallback {
                node_id: node_id.to_string(),
                model: s("model").unwrap_or_default(),
                error_class: s("error_class").unwrap_or_default(),
                next: s("next").unwrap_or_default(),
            },
            Some("model_fallback_blocked") => EventKind::ModelFallbackBlocked {
                node_id: node_id.to_string(),
                model: s("model").unwrap_or_default(),
                provider: s("provider"),
                reason: s("reason").unwrap_or_default(),
            },
            _ => {
                let mut body = v.clone();
                if let Value::Object(m) = &mut body {
                    m.insert("node_id".into(), Value::String(node_id.to_string()));
                }
                EventKind::Legacy { body }
            }
        }
    }

    /// The `type` tag.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::RunCreated { .. } => "run_created",
            EventKind::RunStarted { .. } => "run_started",
            EventKind::RunResumed { .. } => "run_resumed",
            EventKind::RunPaused { .. } => "run_paused",
            EventKind::RunReleased { .. } => "run_released",
            EventKind::CancelRequested { .. } => "cancel_requested",
            EventKind::RunFinished { .. } => "run_finished",
            EventKind::StepStarted { .. } => "step_started",
            EventKind::StepFinished { .. } => "step_finished",
            EventKind::AttemptFailed { .. } => "attempt_failed",
            EventKind::GateDecided { .. } => "gate_decided",
            EventKind::StepReused { .. } => "step_reused",
            EventKind::ModelFallback { .. } => "model_fallback",
            EventKind::ModelFallbackBlocked { .. } => "model_fallback_blocked",
            EventKind::StaleWriteRefused { .. } => "stale_write_refused",
            EventKind::Legacy { .. } => "legacy",
        }
    }

    /// Whether this is the last event a run's log will get (until someone re-runs it).
    pub fn is_final(&self) -> bool {
        matches!(self, EventKind::RunFinished { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_serialize_flat_with_a_type_tag() {
        let e = RunEvent {
            seq: 3,
            at: "2026-01-01T00:00:00.000Z".into(),
            kind: EventKind::AttemptFailed {
                step: 2,
                node_id: "flaky".into(),
                n: 1,
                error: "HTTP 429".into(),
                error_class: "rate_limit".into(),
                backoff_ms: 1000,
            },
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "attempt_failed");
        assert_eq!(v["seq"], 3);
        assert_eq!(v["backoff_ms"], 1000);
        let back: RunEvent = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn governance_events_become_typed() {
        let k = EventKind::governance(
            "ask",
            &json!({"type": "model_fallback_blocked", "model": "gpt-4o", "reason": "not allowed"}),
        );
        assert_eq!(
            k,
            EventKind::ModelFallbackBlocked {
                node_id: "ask".into(),
                model: "gpt-4o".into(),
                provider: None,
                reason: "not allowed".into()
            }
        );
    }
}
