//! A store that refuses a write for good (a value too big for the database) ends the run
//! `failed` with `store_error` at once, on top of what was committed before; a run is never
//! left `running` with nobody able to write it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use weir_core::event::EventKind;
use weir_core::ir::{Dialect, Edge, StateLayout, Workflow};
use weir_core::record::{ErrorCode, RunRecord, RunStatus, RunSummary, Snapshot, StepRecord};
use weir_core::store::{
    Admin, CancelOutcome, Claim, Created, DriveWrites, Fault, GateDecision, Lease, Lifecycle,
    NewRun, RunFilter, RunReads, RunUpdate, StepCommit, StoreError, StoredRun, Written,
};
use weir_core::{ModelClient, ModelError, ModelRequest, ModelResponse};
use weir_engine::{Engine, Quiet, Services, Source};

mod common;
use common::{NoScripts, NoTools, agent, node, reply};

/// Replies `ok` at once.
struct Answers;

#[async_trait]
impl ModelClient for Answers {
    async fn complete(&self, req: ModelRequest) -> Result<ModelResponse, ModelError> {
        Ok(reply(req.model, "ok".into()))
    }
    fn check_model(&self, _: &str) -> Result<(), String> {
        Ok(())
    }
}

/// The memory store, but a step commit of node `refused` fails with `fault`.
struct Refusing {
    inner: weir_store::Memory,
    refused: &'static str,
    fault: Fault,
}

#[async_trait]
impl DriveWrites for Refusing {
    fn keeps_patches(&self) -> bool {
        self.inner.keeps_patches()
    }
    async fn renew(&self, lease: &mut Lease, ttl: Duration) -> Result<Written, StoreError> {
        self.inner.renew(lease, ttl).await
    }
    async fn start_steps(
        &self,
        lease: &Lease,
        steps: &[&StepRecord],
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.inner.start_steps(lease, steps, events).await
    }
    async fn commit_step(&self, lease: &Lease, c: StepCommit<'_>) -> Result<Written, StoreError> {
        if &*c.step.node_id == self.refused {
            return Err(StoreError::backend(self.fault, "string or blob too big"));
        }
        self.inner.commit_step(lease, c).await
    }
    async fn append_events(
        &self,
        lease: &Lease,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.inner.append_events(lease, events).await
    }
    async fn finish_run(
        &self,
        lease: &Lease,
        steps: &[&StepRecord],
        u: &RunUpdate,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        if steps.iter().any(|s| {
            &*s.node_id == self.refused && s.status != weir_core::record::StepStatus::Failed
        }) {
            return Err(StoreError::backend(self.fault, "string or blob too big"));
        }
        self.inner.finish_run(lease, steps, u, events).await
    }
    async fn release(
        &self,
        lease: &Lease,
        snapshot: &Snapshot,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.inner.release(lease, snapshot, events).await
    }
}

#[async_trait]
impl Lifecycle for Refusing {
    async fn create_run(&self, run: NewRun) -> Result<Created, StoreError> {
        self.inner.create_run(run).await
    }
    async fn claim_run(&self, run_id: &str, claim: &Claim) -> Result<(Lease, Written), StoreError> {
        self.inner.claim_run(run_id, claim).await
    }
    async fn claim_next(
        &self,
        claim: &Claim,
        limit: u32,
    ) -> Result<Vec<(Lease, Written)>, StoreError> {
        self.inner.claim_next(claim, limit).await
    }
    async fn decide(&self, d: &GateDecision) -> Result<Written, StoreError> {
        self.inner.decide(d).await
    }
    async fn request_cancel(
        &self,
        run_id: &str,
        by: &str,
    ) -> Result<(CancelOutcome, Written), StoreError> {
        self.inner.request_cancel(run_id, by).await
    }
}

#[async_trait]
impl RunReads for Refusing {
    async fn load_run(&self, run_id: &str) -> Result<StoredRun, StoreError> {
        self.inner.load_run(run_id).await
    }
    async fn get_step(&self, run_id: &str, seq: u32) -> Result<StepRecord, StoreError> {
        self.inner.get_step(run_id, seq).await
    }
    async fn get_record(&self, run_id: &str) -> Result<RunRecord, StoreError> {
        self.inner.get_record(run_id).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        self.inner.list_runs(filter).await
    }
    async fn run_ids_with_prefix(
        &self,
        prefix: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        self.inner.run_ids_with_prefix(prefix, limit).await
    }
    async fn events_after(
        &self,
        run_id: &str,
        after: u64,
    ) -> Result<Vec<weir_core::RunEvent>, StoreError> {
        self.inner.events_after(run_id, after).await
    }
    async fn open_steps(&self, run_id: &str) -> Result<(u32, Vec<StepRecord>), StoreError> {
        self.inner.open_steps(run_id).await
    }
    async fn count_by_status(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        self.inner.count_by_status().await
    }
}

#[async_trait]
impl Admin for Refusing {
    async fn prune(&self, before: &str, statuses: &[RunStatus]) -> Result<Vec<String>, StoreError> {
        self.inner.prune(before, statuses).await
    }
}

/// `first → big → last`.
fn chain() -> Arc<Workflow> {
    let edge = |s: &str, t: &str| Edge {
        id: format!("{s}->{t}"),
        source: s.into(),
        target: t.into(),
        selector: None,
        span: None,
        source_span: None,
        target_span: None,
    };
    Arc::new(Workflow {
        name: "chain".into(),
        dialect: Dialect::Graph,
        nodes: vec![
            node("first", agent("one")),
            node("big", agent("two")),
            node("last", agent("three")),
        ],
        edges: vec![edge("first", "big"), edge("big", "last")],
        hop_ceiling: 100,
        layout: StateLayout::Flat,
        input_schema: None,
        start: None,
        budget: None,
        triggers: Vec::new(),
        index: Default::default(),
    })
}

fn drive(
    fault: Fault,
) -> (
    Arc<Refusing>,
    Result<weir_engine::RunOutcome, weir_engine::Error>,
) {
    let store = Arc::new(Refusing {
        inner: weir_store::Memory::new(),
        refused: "big",
        fault,
    });
    let engine = Engine::new(
        Services {
            models: Arc::new(Answers),
            tools: Arc::new(NoTools),
            scripts: Arc::new(NoScripts),
            secrets: Arc::new(weir_core::settings::Settings::default()),
            store: store.clone(),
        },
        Arc::new(Quiet),
    );
    let source = Source {
        path: "chain.json".into(),
        text: "".into(),
        pin: None,
    };
    let out = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(engine.start(chain(), source, json!({})));
    (store, out)
}

fn record(store: &Refusing, run_id: &str) -> RunRecord {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(store.get_record(run_id))
        .unwrap()
}

#[test]
fn a_write_that_can_never_succeed_ends_the_run_failed_at_once() {
    let (store, out) = drive(Fault::TooBig);
    let out = out.expect("the drive reports the run's end, not the store's error");
    assert_eq!(out.status, RunStatus::Failed);
    let error = out.error.expect("an error");
    assert_eq!(error.code, ErrorCode::StoreError);
    assert!(
        error.message.contains("store_too_big") && error.message.contains("string or blob too big"),
        "{}",
        error.message
    );
    let r = record(&store, &out.run_id);
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(
        r.error.as_ref().map(|e| e.code),
        Some(ErrorCode::StoreError)
    );
    // What was committed before stays: the first step; the refused one and its successor
    // never were.
    let done: Vec<&str> = r
        .steps
        .iter()
        .filter(|s| s.status == weir_core::record::StepStatus::Succeeded)
        .map(|s| &*s.node_id)
        .collect();
    assert_eq!(done, ["first"]);
    let big: Vec<_> = r.steps.iter().filter(|s| &*s.node_id == "big").collect();
    assert_eq!(big.len(), 1, "{big:?}");
    assert_eq!(big[0].status, weir_core::record::StepStatus::Failed);
    assert!(
        big[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("not written"))
    );
    assert!(r.events.iter().any(|e| e["type"] == "run_finished"));
}

#[test]
fn a_transient_store_failure_is_the_drivers_error_and_the_run_stays_for_another() {
    let (store, out) = drive(Fault::Busy);
    let Err(weir_engine::Error::Store(e)) = out else {
        panic!("a busy store is the drive's error: {out:?}");
    };
    assert_eq!(e.fault, Fault::Busy);
    let runs = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(store.list_runs(&RunFilter {
            limit: 10,
            ..RunFilter::default()
        }))
        .unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].status,
        RunStatus::Running,
        "left for a driver to take over"
    );
}
