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
use crate::patch::Patch;
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
    /// The database failed: how ([`Fault`]), and the database library's own error.
    #[error("store error: {0}")]
    Backend(BackendError),
}

impl StoreError {
    /// A database failure of kind `fault`, described by `message`.
    pub fn backend(fault: Fault, message: impl Into<String>) -> Self {
        StoreError::Backend(BackendError::new(fault, message))
    }

    /// The kind of database failure, for a `Backend` error.
    pub fn fault(&self) -> Option<Fault> {
        match self {
            StoreError::Backend(e) => Some(e.fault),
            _ => None,
        }
    }
}

/// What kind of database failure a [`StoreError::Backend`] is, which says whether trying
/// again can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The database cannot be reached or opened: a refused or dropped connection, a file
    /// that cannot be created. It may pass.
    Unavailable,
    /// Another writer held the database longer than the store waits (SQLite's busy
    /// timeout, a Postgres serialization failure or deadlock). It may pass.
    Busy,
    /// The value is larger than the database takes (SQLite's "string or blob too big",
    /// Postgres's limits on a row or a value). Trying again never helps.
    TooBig,
    /// What the database holds does not read back as weir wrote it: corrupt JSON, a
    /// malformed file.
    Corrupt,
    /// Anything else: a statement the database refused, the store's own threads stopping.
    Other,
}

impl Fault {
    /// The error code a run that ends on this fault records (`store_too_big`, …).
    pub fn code(self) -> &'static str {
        match self {
            Fault::Unavailable => "store_unavailable",
            Fault::Busy => "store_busy",
            Fault::TooBig => "store_too_big",
            Fault::Corrupt => "store_corrupt",
            Fault::Other => "store_error",
        }
    }

    /// Whether the same write may succeed if tried again later.
    pub fn transient(self) -> bool {
        matches!(self, Fault::Unavailable | Fault::Busy)
    }
}

/// A database failure: its [`Fault`], a message that says what the store was doing, and the
/// database library's error it came from, kept as its source.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    pub fault: Fault,
    pub message: String,
    #[source]
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl BackendError {
    pub fn new(fault: Fault, message: impl Into<String>) -> Self {
        Self {
            fault,
            message: message.into(),
            source: None,
        }
    }

    /// A failure caused by `source`; the message is the source's own.
    pub fn caused_by(fault: Fault, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            fault,
            message: source.to_string(),
            source: Some(std::sync::Arc::new(source)),
        }
    }

    /// The same failure, its message prefixed with what the store was doing.
    #[must_use]
    pub fn context(mut self, doing: &str) -> Self {
        self.message = format!("{doing}: {}", self.message);
        self
    }
}

/// Two failures are the same when their kind and message are (the source is the detail).
impl PartialEq for BackendError {
    fn eq(&self, other: &Self) -> bool {
        self.fault == other.fault && self.message == other.message
    }
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
    /// Shared by the runs of one workflow: a run in flight holds no copy of its own.
    pub source_text: std::sync::Arc<str>,
    pub input: Value,
    pub created_at: String,
    pub snapshot: Snapshot,
    /// A repeated key returns the run created the first time instead of a new one.
    pub idempotency_key: Option<String>,
    /// Claim the new run in the same statement (`weir run`: no queue round trip).
    pub claim: Option<Claim>,
    /// The saved workflow version the run was created from (runs created over the API).
    pub pin: Option<Pin>,
    /// What started the run.
    pub trigger: crate::record::RunTrigger,
}

/// A saved workflow's id and version.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pin {
    pub workflow_id: String,
    pub version: u32,
}

/// The result of [`RunStore::create_run`].
#[derive(Debug, Clone)]
pub struct Created {
    pub run_id: String,
    /// False when the idempotency key named an existing run (which is returned instead).
    pub created: bool,
    pub lease: Option<Lease>,
    /// The events it appended, in their order (as [`Written::events`]).
    pub events: Vec<EventKind>,
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
    pub pin: Option<Pin>,
    pub input: Value,
}

/// What a fenced write tells its driver besides success.
#[derive(Debug, Clone, Default)]
pub struct Written {
    /// The events it appended, in their order (for live readers, which read them numbered
    /// from the store: told here, they need not be numbered and stamped again, a list per
    /// write).
    pub events: Vec<EventKind>,
    /// Someone asked for the run to be cancelled.
    pub cancel_requested: bool,
}

/// A finished step, committed atomically with the `running` rows of the steps it launched,
/// the snapshot it produced and the events reporting all of it.
#[derive(Debug, Clone)]
pub struct StepCommit<'a> {
    pub step: &'a StepRecord,
    /// The steps started since the drive's last write (`running`), and any other steps
    /// finished beside `step` (siblings that finished together, steps cancelled with it):
    /// each is written as it is, whole. Borrowed from the driver: nothing is copied.
    pub started: &'a [&'a StepRecord],
    pub snapshot: &'a Snapshot,
    /// What changed since the drive's previous write, for a store that keeps patches
    /// ([`RunStore::keeps_patches`]): it writes this instead of the whole `snapshot`. `None`:
    /// write the whole snapshot (a compaction, DESIGN §8).
    pub patch: Option<&'a Patch<'a>>,
    /// With the whole snapshot (`patch` is `None`): this drive wrote patches since the run's
    /// last whole snapshot (or may have: a run just taken over), which this one covers; the
    /// store clears them.
    pub covers_patches: bool,
    pub events: Vec<EventKind>,
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
    /// A workflow's name, or a saved workflow's id.
    pub workflow: Option<String>,
    /// Runs created at or after this RFC 3339 time.
    pub since: Option<String>,
    /// Text in the run id or the workflow's name (case-insensitive).
    pub text: Option<String>,
    /// Runs started this way, and by the trigger of this name when one is given.
    pub trigger: Option<(crate::record::StartKind, Option<String>)>,
    /// Runs strictly older than this one, in list order (the next page).
    pub after: Option<Cursor>,
}

/// A position in the run list (newest first): the last run of the previous page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub started_at: String,
    pub run_id: String,
}

impl Cursor {
    /// The opaque form given to API clients.
    pub fn encode(&self) -> String {
        format!("{}~{}", self.started_at, self.run_id)
    }

    pub fn decode(s: &str) -> Option<Self> {
        let (at, id) = s.split_once('~')?;
        (!at.is_empty() && !id.is_empty()).then(|| Self {
            started_at: at.to_string(),
            run_id: id.to_string(),
        })
    }
}

/// Whether a run passes a filter's status, workflow, since and text conditions (the memory
/// store's reference for the SQL stores).
pub fn matches(filter: &RunFilter, s: &RunSummary) -> bool {
    filter.status.is_none_or(|st| st == s.status)
        && filter
            .workflow
            .as_ref()
            .is_none_or(|w| *w == s.workflow || s.pin.as_ref().is_some_and(|p| p.workflow_id == *w))
        && filter.since.as_ref().is_none_or(|t| s.started_at >= *t)
        && filter.text.as_ref().is_none_or(|q| {
            let q = q.to_lowercase();
            s.run_id.to_lowercase().contains(&q) || s.workflow.to_lowercase().contains(&q)
        })
        && filter.after.as_ref().is_none_or(|c| {
            (s.started_at.as_str(), s.run_id.as_str()) < (c.started_at.as_str(), c.run_id.as_str())
        })
        && filter.trigger.as_ref().is_none_or(|(kind, name)| {
            s.trigger.kind == *kind
                && name
                    .as_ref()
                    .is_none_or(|n| s.trigger.name.as_ref() == Some(n))
        })
}

/// A hint that something changed in a store shared by several processes (Postgres
/// `LISTEN/NOTIFY`). Hints only: readers and workers still read the store, and poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// A run became runnable (created, released, approved).
    Work,
    /// A run changed (events appended).
    Run(String),
    /// The announcements stopped for a while (the connection dropped and was made again):
    /// anything may have changed meanwhile.
    Lost,
}

/// Receives [`Wake`] hints.
pub type WakeFn = std::sync::Arc<dyn Fn(Wake) + Send + Sync>;

/// The writes of a drive, each carrying the driver's [`Lease`] and refused with
/// [`StoreError::LeaseLost`] once the run's epoch moved on.
#[async_trait]
pub trait DriveWrites: Send + Sync {
    /// Whether a step commit may carry a [`Patch`] instead of the whole snapshot (a
    /// database, where writing less is faster); the memory store keeps whole snapshots.
    fn keeps_patches(&self) -> bool {
        false
    }

    /// Extends a lease by `ttl` from now. `LeaseLost` when it is no longer the run's.
    async fn renew(&self, lease: &mut Lease, ttl: Duration) -> Result<Written, StoreError>;

    /// Records steps as they start (status `running`), with their events.
    async fn start_steps(
        &self,
        lease: &Lease,
        steps: &[&StepRecord],
        events: Vec<EventKind>,
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
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError>;

    /// Ends the drive: the final (or paused) status and snapshot, with its events; releases
    /// the lease. `steps`: the drive's last steps, finished and not written yet, which go in
    /// the same write (a run whose last step ends it pays one durable write for both; their
    /// events come first in `events`).
    async fn finish_run(
        &self,
        lease: &Lease,
        steps: &[&StepRecord],
        update: &RunUpdate,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError>;

    /// Lets go of a run without ending it: it becomes `queued` again, claimable by anyone.
    async fn release(
        &self,
        lease: &Lease,
        snapshot: &Snapshot,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError>;
}

/// Changes to a run from outside a drive: creating it, claiming it, deciding its gate,
/// cancelling it.
#[async_trait]
pub trait Lifecycle: Send + Sync {
    /// Starts announcing changes other processes make, to `on`; false when this store has
    /// no other processes to hear from (SQLite's other processes are found by polling).
    fn watch(&self, on: WakeFn) -> bool {
        let _ = on;
        false
    }

    /// Inserts the run `queued` (or claimed, with [`NewRun::claim`]) with a `run_created`
    /// event; a repeated idempotency key returns the first run.
    async fn create_run(&self, run: NewRun) -> Result<Created, StoreError>;

    /// Claims one run: it must be `queued`, or `running` with an expired lease (its driver
    /// died). A live lease, a paused or an ended run is a `Conflict` saying why.
    async fn claim_run(&self, run_id: &str, claim: &Claim) -> Result<(Lease, Written), StoreError>;

    /// Claims up to `limit` runnable runs, oldest first (workers).
    async fn claim_next(
        &self,
        claim: &Claim,
        limit: u32,
    ) -> Result<Vec<(Lease, Written)>, StoreError>;

    /// Applies a gate decision, or `Conflict` when the run moved since it was read.
    async fn decide(&self, decision: &GateDecision) -> Result<Written, StoreError>;

    /// Cancels a queued or paused run at once, or flags a running one for its driver.
    async fn request_cancel(
        &self,
        run_id: &str,
        by: &str,
    ) -> Result<(CancelOutcome, Written), StoreError>;
}

/// Reading runs back: records, steps, events, lists.
#[async_trait]
pub trait RunReads: Send + Sync {
    async fn load_run(&self, run_id: &str) -> Result<StoredRun, StoreError>;

    async fn get_step(&self, run_id: &str, seq: u32) -> Result<StepRecord, StoreError>;

    async fn get_record(&self, run_id: &str) -> Result<RunRecord, StoreError>;

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError>;

    /// Up to `limit` run ids that start with `prefix` (case-sensitive), in id order: how a
    /// short id (`fb700bbd`) is resolved to its run.
    async fn run_ids_with_prefix(
        &self,
        prefix: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError>;

    /// Events with a sequence number above `after`, in order.
    async fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<RunEvent>, StoreError>;

    /// What a driver taking a run over needs of its steps: the highest step number so far
    /// (0 with none) and the steps left `running` by a driver that stopped.
    async fn open_steps(&self, run_id: &str) -> Result<(u32, Vec<StepRecord>), StoreError>;

    /// How many runs are in each status (statuses with none are left out).
    async fn count_by_status(&self) -> Result<Vec<(RunStatus, u64)>, StoreError>;
}

/// Housekeeping over many runs.
#[async_trait]
pub trait Admin: Send + Sync {
    /// Retention: deletes the runs that ended (succeeded, failed, aborted, cancelled; of
    /// `statuses` when given) before `before` (RFC 3339), with their steps, attempts and
    /// events, and returns their ids. Queued, running and paused runs are never touched.
    async fn prune(&self, before: &str, statuses: &[RunStatus]) -> Result<Vec<String>, StoreError>;
}

/// A whole run store: every SQL backend and the memory store implement the four parts, and
/// the engine, the runtime and the server hold it as one `Arc<dyn RunStore>`.
pub trait RunStore: DriveWrites + Lifecycle + RunReads + Admin {}

impl<T: DriveWrites + Lifecycle + RunReads + Admin + ?Sized> RunStore for T {}

/// Milliseconds since the Unix epoch, the clock leases are measured in.
pub fn now_ms() -> i64 {
    // The system clock directly: chrono's `Utc::now` builds a calendar date only for
    // `timestamp_millis` to take it apart again (a few hundred instructions per call, and a
    // step takes several timestamps).
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(before) => -(before.duration().as_millis() as i64),
    }
}

/// RFC 3339 with milliseconds in UTC (`2026-12-01T08:00:00.000Z`), as every record
/// timestamp. Formatted by hand: it is written several times per step, and chrono's general
/// formatter costs more than the rest of a step's bookkeeping.
pub fn now_rfc3339() -> String {
    format_millis(now_ms())
}

/// Formats Unix milliseconds as [`now_rfc3339`] does (years 0 to 9999). The date and time
/// down to the second are formatted once per second and thread (a step writes several
/// timestamps within the same second); only the milliseconds change in between.
pub fn format_millis(ms: i64) -> String {
    thread_local! {
        /// The last millisecond formatted, and its text: steps run microseconds apart, so
        /// most timestamps repeat the previous one and are a copy of it.
        static LAST_MS: std::cell::RefCell<(i64, String)> = const { std::cell::RefCell::new((i64::MIN, String::new())) };
    }
    if let Some(hit) = LAST_MS.with(|l| {
        let l = l.borrow();
        (l.0 == ms).then(|| l.1.clone())
    }) {
        return hit;
    }
    let buf = millis_text(ms);
    let text = std::str::from_utf8(&buf)
        .expect("timestamps are ASCII")
        .to_owned();
    LAST_MS.with(|l| {
        let mut l = l.borrow_mut();
        l.0 = ms;
        l.1.clone_from(&text);
    });
    text
}

/// The text of [`format_millis`], without allocating.
fn millis_text(ms: i64) -> [u8; 24] {
    thread_local! {
        static LAST: std::cell::Cell<(i64, [u8; 24])> = const { std::cell::Cell::new((i64::MIN, [0; 24])) };
    }
    let second = ms.div_euclid(1000);
    let mut buf = LAST.with(|last| {
        let (at, buf) = last.get();
        if at == second {
            buf
        } else {
            let buf = format_second(second);
            last.set((second, buf));
            buf
        }
    });
    put_digits(&mut buf[20..23], ms.rem_euclid(1000));
    buf
}

/// A record timestamp: Unix milliseconds, written as [`format_millis`]'s RFC 3339 text only
/// when it is serialized or displayed (taking one costs a clock read, not a formatted
/// string). A stored text that is not in that exact form is kept as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp(StampRepr);

#[derive(Debug, Clone, PartialEq, Eq)]
enum StampRepr {
    Millis(i64),
    Text(Box<str>),
}

impl Stamp {
    pub fn now() -> Self {
        Self::from_millis(now_ms())
    }

    pub fn from_millis(ms: i64) -> Self {
        Self(StampRepr::Millis(ms))
    }

    /// Unix milliseconds, unless the stamp is a text of another form.
    pub fn millis(&self) -> Option<i64> {
        match &self.0 {
            StampRepr::Millis(ms) => Some(*ms),
            StampRepr::Text(_) => None,
        }
    }

    fn with_text<T>(&self, f: impl FnOnce(&str) -> T) -> T {
        match &self.0 {
            StampRepr::Millis(ms) => {
                let buf = millis_text(*ms);
                f(std::str::from_utf8(&buf).expect("timestamps are ASCII"))
            }
            StampRepr::Text(t) => f(t),
        }
    }
}

impl From<&str> for Stamp {
    /// Milliseconds when `text` is exactly what [`format_millis`] writes for them, else the
    /// text itself.
    fn from(text: &str) -> Self {
        match parse_millis(text) {
            Some(ms) if millis_text(ms) == text.as_bytes() => Self::from_millis(ms),
            _ => Self(StampRepr::Text(text.into())),
        }
    }
}

impl From<String> for Stamp {
    fn from(text: String) -> Self {
        Self::from(text.as_str())
    }
}

impl std::fmt::Display for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.with_text(|t| f.write_str(t))
    }
}

impl serde::Serialize for Stamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.with_text(|t| s.serialize_str(t))
    }
}

impl<'de> serde::Deserialize<'de> for Stamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(Self::from(text.as_ref()))
    }
}

/// Unix milliseconds of `YYYY-MM-DDTHH:MM:SS.mmmZ` (fields in range are checked by the
/// caller's round trip).
fn parse_millis(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 24 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        b[r].iter().try_fold(0i64, |n, c| {
            c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
        })
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    // Days since 1970-01-01 from a civil date (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3600 + mi * 60 + sec) * 1000) + ms)
}

/// `YYYY-MM-DDTHH:MM:SS.000Z` for a Unix second.
fn format_second(second: i64) -> [u8; 24] {
    let days = second.div_euclid(86_400);
    let in_day = second.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let mut buf = *b"0000-00-00T00:00:00.000Z";
    put_digits(&mut buf[0..4], y.clamp(0, 9999));
    put_digits(&mut buf[5..7], m);
    put_digits(&mut buf[8..10], d);
    put_digits(&mut buf[11..13], in_day / 3600);
    put_digits(&mut buf[14..16], in_day / 60 % 60);
    put_digits(&mut buf[17..19], in_day % 60);
    buf
}

/// Writes `n` in decimal into `out`, right-aligned and zero-padded to its width.
fn put_digits(out: &mut [u8], mut n: i64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// A lease expiry as a reader sees it: `2026-01-01T00:00:30Z (in 12 s)`.
pub fn describe_expiry(at_ms: i64) -> String {
    let when = chrono::DateTime::from_timestamp_millis(at_ms).map_or_else(
        || at_ms.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
    let left = (at_ms - now_ms()) as f64 / 1000.0;
    if left >= 0.0 {
        format!("{when} (in {left:.0} s)")
    } else {
        format!("{when} ({:.0} s ago)", -left)
    }
}

#[cfg(test)]
mod tests {
    use super::format_millis;

    #[test]
    fn timestamps_match_chrono() {
        let mut ms: i64 = 0;
        // Dates across leap years, century rules and month ends, up to 2200.
        while ms < 7_258_118_400_000 {
            let want = chrono::DateTime::from_timestamp_millis(ms)
                .unwrap()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            assert_eq!(format_millis(ms), want);
            ms += 86_399_999 * 3 + 7;
        }
        assert_eq!(format_millis(951_782_400_123), "2000-02-29T00:00:00.123Z");
    }

    /// A stamp reads back the text it was written as: the milliseconds for weir's own form,
    /// any other text kept as it was.
    #[test]
    fn stamps_round_trip_their_text() {
        use super::Stamp;
        let mut ms: i64 = 0;
        while ms < 7_258_118_400_000 {
            let text = format_millis(ms);
            let stamp = Stamp::from(text.as_str());
            assert_eq!(stamp.millis(), Some(ms), "{text}");
            assert_eq!(
                serde_json::to_string(&stamp).unwrap(),
                format!("\"{text}\"")
            );
            assert_eq!(Stamp::from_millis(ms), stamp);
            ms += 86_399_999 * 3 + 7;
        }
        for other in [
            "",
            "2026-12-01T08:00:00Z",
            "2026-02-30T00:00:00.000Z",
            "yesterday",
        ] {
            let stamp: Stamp = serde_json::from_str(&format!("\"{other}\"")).unwrap();
            assert_eq!(stamp.millis(), None, "{other}");
            assert_eq!(stamp.to_string(), other);
            assert_eq!(
                serde_json::to_string(&stamp).unwrap(),
                format!("\"{other}\"")
            );
        }
    }
}
