//! The lifecycle rules every store applies the same way: who may claim a run, what a claim
//! reports, and the messages a refused change carries.

use weir_core::event::EventKind;
use weir_core::patch::Patch;
use weir_core::record::{ErrorCode, RunError, RunStatus, Snapshot};
use weir_core::store::{Stamp, StoreError, describe_expiry};

/// What a claim needs to know about a run.
pub struct ClaimView<'a> {
    pub run_id: &'a str,
    pub status: RunStatus,
    pub epoch: u64,
    pub owner: Option<&'a str>,
    pub lease_expires_at: Option<i64>,
}

/// The claim columns of one run, owned (as a store reads them).
pub struct ClaimRow {
    pub id: String,
    pub status: RunStatus,
    pub epoch: u64,
    pub owner: Option<String>,
    pub lease_expires_at: Option<i64>,
}

impl ClaimRow {
    pub fn view(&self) -> ClaimView<'_> {
        ClaimView {
            run_id: &self.id,
            status: self.status,
            epoch: self.epoch,
            owner: self.owner.as_deref(),
            lease_expires_at: self.lease_expires_at,
        }
    }
}

/// Why `run` cannot be claimed now, or `None` when it can: it is queued, or running with a
/// lease that expired (or none: a run left by a weir that had no leases).
pub fn claim_refusal(run: &ClaimView<'_>, now: i64) -> Option<StoreError> {
    match run.status {
        RunStatus::Queued => None,
        RunStatus::Running => match run.lease_expires_at {
            Some(at) if at > now => Some(StoreError::Conflict(format!(
                "run {} is being driven by {}; its lease expires at {}",
                run.run_id,
                run.owner.unwrap_or("another process"),
                describe_expiry(at)
            ))),
            _ => None,
        },
        RunStatus::Paused => Some(StoreError::Conflict(format!(
            "run {} is paused at a human gate; decide it with `weir approve` or `weir reject`",
            run.run_id
        ))),
        s => Some(StoreError::Conflict(format!(
            "run {} already ended ({})",
            run.run_id,
            s.as_str()
        ))),
    }
}

/// The event a successful claim appends.
pub fn claim_event(run: &ClaimView<'_>, owner: &str, new_epoch: u64) -> EventKind {
    // A run that was running when claimed had a driver whose lease expired.
    let took_over_from = (run.status == RunStatus::Running)
        .then(|| run.owner.map(str::to_string))
        .flatten();
    if run.epoch == 0 && run.status == RunStatus::Queued {
        EventKind::RunStarted {
            owner: owner.to_string(),
            epoch: new_epoch,
        }
    } else {
        EventKind::RunResumed {
            owner: owner.to_string(),
            epoch: new_epoch,
            took_over_from,
        }
    }
}

/// The refusal of a write whose lease is no longer the run's.
pub fn lease_lost(
    run_id: &str,
    epoch: u64,
    current: Option<(u64, Option<String>, RunStatus)>,
) -> StoreError {
    let message = match current {
        None => "the run no longer exists".to_string(),
        Some((now, owner, _)) if now != epoch => format!(
            "this driver held epoch {epoch}, but the run was claimed again (epoch {now}{})",
            owner.map(|o| format!(", by {o}")).unwrap_or_default()
        ),
        Some((_, _, status)) => format!("the lease was released (the run is {})", status.as_str()),
    };
    StoreError::LeaseLost {
        run_id: run_id.to_string(),
        message,
    }
}

/// The event a refused stale write leaves on the run's timeline (the run exists: `current`
/// is its epoch, last owner and status): only when another driver claimed the run since.
/// A write with the run's own epoch after its drive ended (a heartbeat racing the end of
/// the run) is refused without a trace: nobody was overwritten.
pub fn stale_write(
    owner: &str,
    epoch: u64,
    current: &(u64, Option<String>, RunStatus),
    write: &str,
) -> Option<EventKind> {
    (current.0 != epoch).then(|| EventKind::StaleWriteRefused {
        owner: owner.to_string(),
        epoch,
        current_owner: current.1.clone(),
        current_epoch: current.0,
        write: write.to_string(),
    })
}

/// The refusal of a decision on a run that is not (or no longer) paused as it was read.
pub fn decision_conflict(run_id: &str, status: RunStatus, epoch: u64, expected: u64) -> StoreError {
    if status != RunStatus::Paused {
        StoreError::Conflict(format!(
            "run {run_id} is not waiting at a human gate (status {})",
            status.as_str()
        ))
    } else {
        StoreError::Conflict(format!(
            "run {run_id} changed since it was read (epoch {expected} → {epoch}): another decision was written first"
        ))
    }
}

/// What a cancel does to a run: decided here from what the store read of it, carried out
/// by each store in its own statements.
pub enum CancelPlan {
    /// A live driver holds the run: set `cancel_requested` and append these events (none
    /// when it was already requested); the driver ends the run at its next write.
    Request(Vec<EventKind>),
    /// Nobody drives it: end it here and now.
    Now(CancelNow),
}

/// A run cancelled at once: its row, its steps left in flight, its events.
pub struct CancelNow {
    /// The run's error (`cancelled`).
    pub error: RunError,
    /// The run's `finished_at`, and the steps' it cancels.
    pub at: Stamp,
    /// The error of every step still running or waiting, which is cancelled too.
    pub step_error: String,
    /// `cancel_requested`, then `run_finished`.
    pub events: Vec<EventKind>,
}

impl CancelNow {
    /// The snapshot the cancelled run keeps: no gate waits and nothing is pending.
    pub fn snapshot(&self, snapshot: &mut Snapshot) {
        snapshot.gates.clear();
        snapshot.pending.clear();
    }
}

/// How to cancel a run found in `status`, its lease expiring at `lease_expires_at`, with a
/// cancel `already_requested`; a run that already ended is a conflict.
pub fn cancel_plan(
    run_id: &str,
    status: RunStatus,
    lease_expires_at: Option<i64>,
    already_requested: bool,
    by: &str,
    now: i64,
) -> Result<CancelPlan, StoreError> {
    if status.is_terminal() {
        return Err(StoreError::Conflict(format!(
            "run {run_id} already ended ({}); there is nothing to cancel",
            status.as_str()
        )));
    }
    let requested = EventKind::CancelRequested { by: by.to_string() };
    let live = lease_expires_at.is_some_and(|at| at > now);
    if status == RunStatus::Running && live {
        let events = if already_requested {
            Vec::new()
        } else {
            vec![requested]
        };
        return Ok(CancelPlan::Request(events));
    }
    let error = RunError {
        code: ErrorCode::Cancelled,
        message: format!("cancelled by {by}"),
        node_id: None,
    };
    Ok(CancelPlan::Now(CancelNow {
        at: Stamp::now(),
        step_error: format!("cancelled by {by}"),
        events: vec![
            requested,
            EventKind::RunFinished {
                status: RunStatus::Cancelled,
                error: Some(error.clone()),
            },
        ],
        error,
    }))
}

/// The statuses retention may delete: the ended ones, narrowed to `wanted` when given.
pub fn ended_statuses(wanted: &[RunStatus]) -> Vec<&'static str> {
    [
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Aborted,
        RunStatus::Cancelled,
    ]
    .into_iter()
    .filter(|s| wanted.is_empty() || wanted.contains(s))
    .map(RunStatus::as_str)
    .collect()
}

/// The version a saved workflow gets: 1 for a new id, else one past the latest (a deleted
/// workflow's id is reused and keeps counting); `create_only` on a live id is a conflict.
/// `existing`: `(latest version, deleted)`.
pub fn next_version(
    workflow_id: &str,
    existing: Option<(i64, bool)>,
    create_only: bool,
) -> Result<i64, StoreError> {
    match existing {
        Some((_, false)) if create_only => Err(StoreError::Conflict(format!(
            "a workflow with id {workflow_id} exists already; PUT /api/workflows/{workflow_id} saves a new version"
        ))),
        Some((latest, _)) => Ok(latest + 1),
        None => Ok(1),
    }
}

/// How a drive's write stores the run's snapshot (both SQL stores): its patch, when it has one
/// and an event to number it (patches apply in the order of their first events); else the
/// whole snapshot, if it carries one, which deletes the patches before it when the driver
/// says it covers some, or when it stands in for a patch. Returns the patch to write and
/// whether to delete the run's patches.
pub fn snapshot_write<'a>(
    whole: bool,
    patch: Option<&'a Patch<'a>>,
    covers_patches: bool,
    has_events: bool,
) -> (Option<&'a Patch<'a>>, bool) {
    match patch {
        Some(p) if whole && has_events => (Some(p), false),
        Some(_) => (None, whole),
        None => (None, whole && covers_patches),
    }
}

/// How a write of a drive ends the drive, if it does.
pub enum End<'a> {
    /// A terminal status or `paused`; the lease is released.
    Finish(&'a weir_core::store::RunUpdate),
    /// Back to `queued`; the lease is released.
    Release,
}

/// One write of a drive, as each `DriveWrites` method of the SQL stores makes it: what the
/// write carries, whether it is synced, and how it ends the drive. Each backend turns it
/// into its fenced statements.
pub struct DriveWrite<'a> {
    pub lease: &'a weir_core::store::Lease,
    /// The method, for the event a refusal leaves.
    pub write: &'static str,
    /// Progress only (a step's start, a failed attempt): committed without a sync.
    pub visible: bool,
    pub snapshot: Option<&'a Snapshot>,
    /// Written instead of the whole `snapshot` ([`snapshot_write`]).
    pub patch: Option<&'a Patch<'a>>,
    /// The whole snapshot covers patches written before it (`StepCommit::covers_patches`).
    pub clear: bool,
    pub steps: Vec<&'a weir_core::record::StepRecord>,
    pub events: Vec<EventKind>,
    pub end: Option<End<'a>>,
}

impl<'a> DriveWrite<'a> {
    fn progress(
        lease: &'a weir_core::store::Lease,
        write: &'static str,
        steps: Vec<&'a weir_core::record::StepRecord>,
        events: Vec<EventKind>,
    ) -> Self {
        Self {
            lease,
            write,
            visible: true,
            snapshot: None,
            patch: None,
            clear: false,
            steps,
            events,
            end: None,
        }
    }

    /// Steps that started (`running`), with their events: progress only.
    pub fn start_steps(
        lease: &'a weir_core::store::Lease,
        steps: &[&'a weir_core::record::StepRecord],
        events: Vec<EventKind>,
    ) -> Self {
        Self::progress(lease, "start_steps", steps.to_vec(), events)
    }

    /// Events alone (an attempt that failed and will be retried): progress only.
    pub fn append_events(lease: &'a weir_core::store::Lease, events: Vec<EventKind>) -> Self {
        Self::progress(lease, "append_events", Vec::new(), events)
    }

    /// A finished step with the steps that started beside it, the snapshot (or its patch)
    /// and the events: synced.
    pub fn commit_step(
        lease: &'a weir_core::store::Lease,
        c: weir_core::store::StepCommit<'a>,
    ) -> Self {
        let mut steps = c.started.to_vec();
        steps.push(c.step);
        Self {
            lease,
            write: "commit_step",
            visible: false,
            snapshot: Some(c.snapshot),
            patch: c.patch,
            clear: c.covers_patches,
            steps,
            events: c.events,
            end: None,
        }
    }

    /// The end of a drive: its last steps, the final (or paused) status and snapshot.
    pub fn finish_run(
        lease: &'a weir_core::store::Lease,
        steps: &[&'a weir_core::record::StepRecord],
        u: &'a weir_core::store::RunUpdate,
        events: Vec<EventKind>,
    ) -> Self {
        Self {
            lease,
            write: "finish_run",
            visible: false,
            snapshot: Some(&u.snapshot),
            patch: None,
            clear: true,
            steps: steps.to_vec(),
            events,
            end: Some(End::Finish(u)),
        }
    }

    /// The run let go, `queued` again, with its snapshot.
    pub fn release(
        lease: &'a weir_core::store::Lease,
        snapshot: &'a Snapshot,
        events: Vec<EventKind>,
    ) -> Self {
        Self {
            lease,
            write: "release",
            visible: false,
            snapshot: Some(snapshot),
            patch: None,
            clear: true,
            steps: Vec::new(),
            events,
            end: Some(End::Release),
        }
    }
}

/// `impl DriveWrites` for a SQL store whose inherent `fenced` takes a [`DriveWrite`]: its
/// own items (`keeps_patches`, `renew`), then the five fenced writes, each its constructor
/// handed over.
macro_rules! fenced_drive_writes {
    ($store:ty { $($own:item)* }) => {
        #[async_trait::async_trait]
        impl weir_core::store::DriveWrites for $store {
            $($own)*

            async fn start_steps(
                &self,
                lease: &weir_core::store::Lease,
                steps: &[&weir_core::record::StepRecord],
                events: Vec<weir_core::event::EventKind>,
            ) -> Result<weir_core::store::Written, weir_core::store::StoreError> {
                self.fenced($crate::rules::DriveWrite::start_steps(lease, steps, events))
                    .await
            }

            async fn commit_step(
                &self,
                lease: &weir_core::store::Lease,
                c: weir_core::store::StepCommit<'_>,
            ) -> Result<weir_core::store::Written, weir_core::store::StoreError> {
                self.fenced($crate::rules::DriveWrite::commit_step(lease, c))
                    .await
            }

            async fn append_events(
                &self,
                lease: &weir_core::store::Lease,
                events: Vec<weir_core::event::EventKind>,
            ) -> Result<weir_core::store::Written, weir_core::store::StoreError> {
                self.fenced($crate::rules::DriveWrite::append_events(lease, events))
                    .await
            }

            async fn finish_run(
                &self,
                lease: &weir_core::store::Lease,
                steps: &[&weir_core::record::StepRecord],
                u: &weir_core::store::RunUpdate,
                events: Vec<weir_core::event::EventKind>,
            ) -> Result<weir_core::store::Written, weir_core::store::StoreError> {
                self.fenced($crate::rules::DriveWrite::finish_run(lease, steps, u, events))
                    .await
            }

            async fn release(
                &self,
                lease: &weir_core::store::Lease,
                snapshot: &weir_core::record::Snapshot,
                events: Vec<weir_core::event::EventKind>,
            ) -> Result<weir_core::store::Written, weir_core::store::StoreError> {
                self.fenced($crate::rules::DriveWrite::release(lease, snapshot, events))
                    .await
            }
        }
    };
}
pub(crate) use fenced_drive_writes;
