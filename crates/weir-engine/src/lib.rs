//! weir-engine: runs a validated [`Workflow`] (DESIGN §2).
//!
//! The scheduler (`scheduler.rs`) fans out ready nodes (polled concurrently in the run's
//! task), routes on each node's
//! outcome, waits at merges until every branch that can still arrive has arrived, re-arms loop
//! bodies, parks at human gates, enforces the hop ceiling and cancels siblings when a node
//! fails. Each finished step is committed with the scheduler snapshot it produced, so a run
//! continues after a crash from its last committed step. The engine never names a concrete
//! provider, tool or store: it gets them as trait objects in [`Services`].

mod attempt;
pub mod nodes;
mod owner;
mod scheduler;
pub mod structured;
pub mod validators;

use std::sync::Arc;

use serde_json::{Map, Value, json};
use weir_core::record::{PendingGate, RunStatus, Snapshot, StepRecord, StepStatus};
use weir_core::store::{NewRun, RunUpdate, StoreError};
use weir_core::{ModelClient, RunStore, ScriptRunner, ToolRunner, Workflow};

pub use nodes::tool::idempotency_key;

/// The concrete implementations the binary wires in.
#[derive(Clone)]
pub struct Services {
    pub models: Arc<dyn ModelClient>,
    pub tools: Arc<dyn ToolRunner>,
    pub scripts: Arc<dyn ScriptRunner>,
    pub store: Arc<dyn RunStore>,
    pub secrets: Arc<dyn weir_core::secrets::Secrets>,
}

/// Progress callbacks (the CLI prints them; the server streams them).
pub trait Observer: Send + Sync {
    fn run_started(&self, _run_id: &str) {}
    fn step_started(&self, _step: &StepRecord) {}
    fn step_finished(&self, _step: &StepRecord) {}
}

/// An observer that ignores everything.
pub struct Quiet;
impl Observer for Quiet {}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    State(String),
}

/// How a drive of a run ended. The full record (every step and attempt) is in the store:
/// `RunStore::get_record` reads it when someone wants to see it, so running never pays for it.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run_id: String,
    pub status: RunStatus,
    pub error: Option<weir_core::record::RunError>,
    pub output: Value,
    pub cost_usd: f64,
}

/// Where a run's workflow came from, stored with the run so it can be reloaded exactly.
pub struct Source {
    pub path: String,
    pub text: String,
}

/// A reviewer's decision at a human gate.
pub struct Decision {
    pub approved: bool,
    pub by: String,
    /// Approve: an object merged into state. Ignored on reject.
    pub input: Option<Value>,
    /// Reject: the reason. Approve: an optional comment.
    pub comment: Option<String>,
}

pub struct Engine {
    services: Arc<Services>,
    observer: Arc<dyn Observer>,
    /// Nodes of one run that may execute at once.
    pub max_concurrency: usize,
}

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl Engine {
    pub fn new(services: Services, observer: Arc<dyn Observer>) -> Self {
        Self {
            services: Arc::new(services),
            observer,
            max_concurrency: 16,
        }
    }

    /// Starts a run of `wf` with `input` and drives it to its end or to a human gate.
    pub async fn start(
        &self,
        wf: Arc<Workflow>,
        source: Source,
        input: Value,
    ) -> Result<RunOutcome, Error> {
        if let Some(schema) = &wf.input_schema {
            let errors = weir_core::schema::Schema::compile(schema)
                .map_err(Error::State)?
                .errors(&input);
            if !errors.is_empty() {
                return Err(Error::State(format!(
                    "the input does not match the workflow's input schema:\n  - {}",
                    errors.join("\n  - ")
                )));
            }
        }
        let run_id = uuid::Uuid::new_v4().to_string();
        let mut state = Map::new();
        match wf.layout {
            weir_core::ir::StateLayout::Flat => {
                if let Value::Object(m) = &input {
                    state.extend(m.clone());
                }
            }
            weir_core::ir::StateLayout::Variables => {
                state.insert("input".into(), input.clone());
                state.insert("variables".into(), Value::Object(Map::new()));
            }
        }
        let snapshot = Snapshot {
            state: Arc::new(state),
            pending: wf.entries().iter().map(|n| n.id.clone()).collect(),
            next_seq: 1,
            output: Value::Null,
            owner: Some(owner::this_process()),
            ..Snapshot::default()
        };
        self.services
            .store
            .create_run(&NewRun {
                run_id: run_id.clone(),
                workflow: wf.name.clone(),
                dialect: wf.dialect.as_str().into(),
                source_path: source.path,
                source_text: source.text,
                input,
                started_at: now(),
                snapshot: snapshot.clone(),
            })
            .await?;
        self.observer.run_started(&run_id);
        scheduler::Run::new(self, wf, run_id, snapshot)
            .drive()
            .await
    }

    /// Continues a run whose process died: steps that were in flight are marked cancelled
    /// and run again; completed steps are not.
    pub async fn resume(&self, wf: Arc<Workflow>, run_id: &str) -> Result<RunOutcome, Error> {
        let stored = self.services.store.load_run(run_id).await?;
        if let Some(pid) = stored
            .snapshot
            .owner
            .as_deref()
            .and_then(owner::live_local_pid)
        {
            return Err(Error::State(format!(
                "run {run_id} is still being driven by process {pid} on this machine; stop it first"
            )));
        }
        match stored.status {
            RunStatus::Running | RunStatus::Queued => {}
            RunStatus::Paused => {
                return Err(Error::State(format!(
                    "run {run_id} is paused at a human gate; use `weir approve` or `weir reject`"
                )));
            }
            s => {
                return Err(Error::State(format!(
                    "run {run_id} already ended ({}); only a run whose process died can be resumed",
                    s.as_str()
                )));
            }
        }
        let mut snapshot = stored.snapshot;
        let record = self.services.store.get_record(run_id).await?;
        for step in record
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Running)
        {
            let mut s = step.clone();
            s.status = StepStatus::Cancelled;
            s.error = Some(
                "interrupted: the process running this step exited; it runs again on resume".into(),
            );
            s.finished_at = Some(now());
            self.services
                .store
                .finish_step(run_id, &s, &[], &snapshot)
                .await?;
        }
        snapshot.next_seq = record
            .steps
            .iter()
            .map(|s| s.seq + 1)
            .max()
            .unwrap_or(1)
            .max(snapshot.next_seq);
        self.services
            .store
            .add_event(run_id, &json!({"type": "run_resumed", "at": now()}))
            .await?;
        self.observer.run_started(run_id);
        scheduler::Run::new(self, wf, run_id.to_string(), snapshot)
            .drive()
            .await
    }

    /// Decides the oldest pending gate of a paused run, then continues it.
    pub async fn decide(
        &self,
        wf: Arc<Workflow>,
        run_id: &str,
        decision: Decision,
    ) -> Result<RunOutcome, Error> {
        let store = &self.services.store;
        let stored = store.load_run(run_id).await?;
        let mut snapshot = stored.snapshot;
        if stored.status != RunStatus::Paused || snapshot.gates.is_empty() {
            return Err(Error::State(format!(
                "run {run_id} is not waiting at a human gate (status {})",
                stored.status.as_str()
            )));
        }
        let gate: PendingGate = snapshot.gates.remove(0);
        let at = now();
        let mut step = store.get_step(run_id, gate.seq).await?;
        step.finished_at = Some(at.clone());
        let key = format!("approval_{}", gate.node_id);
        if decision.approved {
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
                    return Err(Error::State("approval input must be a JSON object".into()));
                }
            }
            Arc::make_mut(&mut snapshot.state).insert(key, record.clone());
            step.status = StepStatus::Succeeded;
            step.route = Some("approved".into());
            step.output = record;
            let mut run = scheduler::Run::new(self, wf, run_id.to_string(), snapshot);
            run.complete_gate(&gate.node_id);
            store.finish_step(run_id, &step, &[], &run.snapshot).await?;
            self.observer.step_finished(&step);
            store
                .add_event(run_id, &json!({"type": "gate_approved", "node_id": gate.node_id, "by": decision.by, "at": at}))
                .await?;
            store
                .update_run(
                    run_id,
                    &RunUpdate {
                        status: RunStatus::Running,
                        error: None,
                        finished_at: None,
                        snapshot: run.snapshot.clone(),
                    },
                )
                .await?;
            self.observer.run_started(run_id);
            run.drive().await
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
            step.output = record;
            store.finish_step(run_id, &step, &[], &snapshot).await?;
            self.observer.step_finished(&step);
            store
                .add_event(run_id, &json!({"type": "gate_rejected", "node_id": gate.node_id, "by": decision.by, "at": at, "reason": reason}))
                .await?;
            store
                .update_run(
                    run_id,
                    &RunUpdate {
                        status: RunStatus::Failed,
                        error: Some(weir_core::record::RunError {
                            code: "gate_rejected".into(),
                            message: format!("rejected at human gate `{}`: {reason}", gate.node_id),
                            node_id: Some(gate.node_id.clone()),
                        }),
                        finished_at: Some(now()),
                        snapshot,
                    },
                )
                .await?;
            let record = store.get_record(run_id).await?;
            Ok(RunOutcome {
                run_id: record.run_id,
                status: record.status,
                error: record.error,
                output: record.output,
                cost_usd: record.cost_usd,
            })
        }
    }
}
