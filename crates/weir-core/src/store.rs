//! The run store (DESIGN §8): runs, steps, the queue with leases and fencing, and the event
//! log. Any process may drive a run, one at a time, under a [`Lease`]; every write of a
//! drive carries it and is refused with [`StoreError::LeaseLost`] once the run's epoch in the
//! store has moved on, so a paused zombie driver can never overwrite its successor.
//!
//! Every implementation passes the conformance suite in `weir-store/tests/conformance.rs`.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::event::{EventKind, RunEvent};
use crate::record::{RunError, RunRecord, RunStatus, RunSummary, Snapshot, StepRecord};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// No such run (or step).
    #[error("{0}")]
    NotFound(String),
    /// The run is not in a state that allows the change: already decided, not paused,
    /// driven elsewhere, already ended. The message says which, and who or what won.
    #[error("{0}")]
    Conflict(String),
    /// The lease this write carried is no longer the run's: another driver claimed it.
    #[error("lease lost on run {run_id}: {message}")]
    LeaseLost { run_id: String, message: String },
    /// The database failed.
    #[error("store error: {0}")]
    Backend(String),
}

/// The right to drive one run. `epoch` grows on every claim (and every decision), so a
/// write carrying an older epoch is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub run_id: String,
    pub owner: String,
    pub epoch: u64,
    /// Unix milliseconds; renewed by heartbeats.
    pub expires_at: i64,
}

/// How to claim: who claims, and for how long the lease lives without a heartbeat.
#[derive(Debug, Clone)]
pub struct Claim {
    pub owner: String,
    pub ttl: Duration,
}

/// What a new run stores: enough to reload the exact workflow version it pins.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub run_id: String,
    pub workflow: String,
    pub dialect: String,
    pub source_path: String,
    pub source_text: String,
    pub input: Value,
    pub created_at: String,
    pub snapshot: Snapshot,
    /// A repeated key returns the run created the first time instead of a new one.
    pub idempotency_key: Option<String>,
    /// Claim the new run in the same statement (`weir run`: no queue round trip).
    pub claim: Option<Claim>,
}

/// The result of [`RunStore::create_run`].
#[derive(Debug, Clone)]
pub struct Created {
    pub run_id: String,
    /// False when the idempotency key named an existing run (which is returned instead).
    pub created: bool,
    pub lease: Option<Lease>,
    pub events: Vec<RunEvent>,
}

/// A stored run as a driver, a decision or a reader needs it.
#[derive(Debug, Clone)]
pub struct StoredRun {
    pub run_id: String,
    pub workflow: String,
    pub status: RunStatus,
    pub source_path: String,
    pub source_text: String,
    pub snapshot: Snapshot,
    pub epoch: u64,
    /// The last driver that claimed the run (kept after release, for messages).
    pub owner: Option<String>,
    /// When the current lease expires (unix ms); `None` when no lease is held.
    pub lease_expires_at: Option<i64>,
    pub cancel_requested: bool,
}

/// What a fenced write tells its driver besides success.
#[derive(Debug, Clone, Default)]
pub struct Written {
    /// The events it appended, with their sequence numbers (for live readers).
    pub events: Vec<RunEvent>,
    /// Someone asked for the run to be cancelled.
    pub cancel_requested: bool,
}

/// A finished step, committed atomically with the `running` rows of the steps it launched,
/// the snapshot it produced and the events reporting all of it.
#[derive(Debug, Clone, Copy)]
pub struct StepCommit<'a> {
    pub step: &'a StepRecord,
    pub started: &'a [StepRecord],
    pub snapshot: &'a Snapshot,
    pub events: &'a [EventKind],
}

/// The end of a drive: a terminal status, or `paused` at a gate. The lease is released.
#[derive(Debug, Clone)]
pub struct RunUpdate {
    pub status: RunStatus,
    pub error: Option<RunError>,
    pub finished_at: Option<String>,
    pub snapshot: Snapshot,
}

/// A decision at a human gate, written as one conditional transition: it applies only
/// while the run is `paused` with the epoch it was read at, so of two concurrent decisions
/// exactly one wins.
#[derive(Debug, Clone)]
pub struct GateDecision {
    pub run_id: String,
    /// The epoch the decider read; the write is refused when it moved.
    pub expect_epoch: u64,
    /// The gate's step, now decided.
    pub step: StepRecord,
    /// `queued` (approved, nothing else waiting), `paused` (another gate still waits) or
    /// `failed` (rejected).
    pub status: RunStatus,
    pub error: Option<RunError>,
    pub finished_at: Option<String>,
    pub snapshot: Snapshot,
    /// Other waiting steps to close at the same time (a reject ends every gate).
    pub also: Vec<StepRecord>,
    pub events: Vec<EventKind>,
}

/// What [`RunStore::request_cancel`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The run was queued or paused: it is `cancelled` now.
    Cancelled,
    /// The run is being driven: its driver stops at its next heartbeat or commit.
    Requested,
}

/// Filters for [`RunStore::list_runs`].
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub limit: u32,
    pub status: Option<RunStatus>,
}

#[async_trait]
pub trait RunStore: Send + Sync {
    /// Inserts the run `queued` (or claimed, with [`NewRun::claim`]) with a `run_created`
    /// event; a repeated idempotency key returns the first run.
    async fn create_run(&self, run: &NewRun) -> Result<Created, StoreError>;

    /// Claims one run: it must be `queued`, or `running` with an expired lease (its driver
    /// died). A live lease, a paused or an ended run is a `Conflict` saying why.
    async fn claim_run(&self, run_id: &str, claim: &Claim) -> Result<(Lease, Written), StoreError>;

    /// Claims up to `limit` runnable runs, oldest first (workers).
    async fn claim_next(
        &self,
        claim: &Claim,
        limit: u32,
    ) -> Result<Vec<(Lease, Written)>, StoreError>;

    /// Extends a lease by `ttl` from now. `LeaseLost` when it is no longer the run's.
    async fn renew(&self, lease: &mut Lease, ttl: Duration) -> Result<Written, StoreError>;

    /// Records steps as they start (status `running`), with their events.
    async fn start_steps(
        &self,
        lease: &Lease,
        steps: &[StepRecord],
        events: &[EventKind],
    ) -> Result<Written, StoreError>;

    /// Commits a finished step with everything that goes with it, in one transaction.
    async fn commit_step(
        &self,
        lease: &Lease,
        commit: StepCommit<'_>,
    ) -> Result<Written, StoreError>;

    /// Appends events on their own (an attempt that failed and will be retried).
    async fn append_events(
        &self,
        lease: &Lease,
        events: &[EventKind],
    ) -> Result<Written, StoreError>;

    /// Ends the drive: the final (or paused) status and snapshot, with its events; releases
    /// the lease.
    async fn finish_run(
        &self,
        lease: &Lease,
        update: &RunUpdate,
        events: &[EventKind],
    ) -> Result<Written, StoreError>;

    /// Lets go of a run without ending it: it becomes `queued` again, claimable by anyone.
    async fn release(
        &self,
        lease: &Lease,
        snapshot: &Snapshot,
        events: &[EventKind],
    ) -> Result<Written, StoreError>;

    /// Applies a gate decision, or `Conflict` when the run moved since it was read.
    async fn decide(&self, decision: &GateDecision) -> Result<Written, StoreError>;

    /// Cancels a queued or paused run at once, or flags a running one for its driver.
    async fn request_cancel(
        &self,
        run_id: &str,
        by: &str,
    ) -> Result<(CancelOutcome, Written), StoreError>;

    async fn load_run(&self, run_id: &str) -> Result<StoredRun, StoreError>;
    async fn get_step(&self, run_id: &str, seq: u32) -> Result<StepRecord, StoreError>;
    async fn get_record(&self, run_id: &str) -> Result<RunRecord, StoreError>;
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError>;
    /// Events with a sequence number above `after`, in order.
    async fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<RunEvent>, StoreError>;
}

/// Milliseconds since the Unix epoch, the clock leases are measured in.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// RFC 3339 with milliseconds, as every record timestamp.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A lease expiry as a reader sees it: `2026-01-01T00:00:30Z (in 12 s)`.
pub fn describe_expiry(at_ms: i64) -> String {
    let when = chrono::DateTime::from_timestamp_millis(at_ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| at_ms.to_string());
    let left = (at_ms - now_ms()) as f64 / 1000.0;
    if left >= 0.0 {
        format!("{when} (in {left:.0} s)")
    } else {
        format!("{when} ({:.0} s ago)", -left)
    }
}
