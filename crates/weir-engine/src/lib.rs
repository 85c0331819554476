//! weir-engine: runs a validated [`Workflow`] (DESIGN §2) under the run lifecycle of §8.
//!
//! The engine API separates changing a run from driving it: [`Engine::create`] inserts a
//! run `queued` (or claimed, for `weir run`), [`Engine::claim`] takes a runnable run under a
//! lease, [`Engine::drive`] drives a claimed run to its end or a human gate, every write
//! fenced by the lease, [`Engine::decide`] applies a gate decision as one conditional
//! transition, [`Engine::cancel`] cancels or flags a run. A run whose lease expired is
//! claimable again; driving it first marks the steps it left `running` as cancelled
//! (recovery), so completed steps never run twice.
//!
//! The scheduler (`scheduler/`) fans out ready nodes (polled concurrently in the run's
//! task), routes on each node's outcome, waits at merges until every branch that can still
//! arrive has arrived, re-arms loop bodies, parks at human gates, enforces the hop ceiling
//! and cancels siblings when a node fails. The engine never names a concrete provider, tool
//! or store: it gets them as trait objects in [`Services`].

#![warn(missing_docs)]

mod attempt;
mod budget;
mod decide;
mod heartbeat;
pub mod nodes;
pub mod replay;
mod routing;
mod scheduler;
pub mod structured;
pub mod validators;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use weir_core::event::EventKind;
use weir_core::record::{RunError, RunStatus, Snapshot};
use weir_core::store::{BackendError, Claim, Fault, NewRun, StoreError};
use weir_core::{ModelClient, RunStore, ScriptRunner, ToolRunner, Workflow};

pub use decide::{Decided, Decision};
pub use nodes::agent_loop::returned as tool_return;
pub use nodes::tool::idempotency_key;
pub use weir_core::store::{CancelOutcome, Lease};

/// The concrete implementations the binary wires in.
#[derive(Clone)]
pub struct Services {
    /// Model calls (the provider router, or a replay's recording).
    pub models: Arc<dyn ModelClient>,
    /// Tool calls.
    pub tools: Arc<dyn ToolRunner>,
    /// `script` nodes and script validators.
    pub scripts: Arc<dyn ScriptRunner>,
    /// Where runs are kept.
    pub store: Arc<dyn RunStore>,
    /// Secret values, for templates and for scrubbing them from records.
    pub secrets: Arc<dyn weir_core::secrets::Secrets>,
}

/// Receives every event as soon as the store has committed it (the CLI prints them; the
/// server wakes its SSE readers). The store's log stays the truth.
pub trait EventSink: Send + Sync {
    /// Called with each batch of events once it is written.
    fn publish(&self, run_id: &str, events: &[EventKind]);

    /// Whether this sink shows replies as models write them: then model calls of agent
    /// nodes and pipeline steps stream, and each piece comes to [`EventSink::delta`].
    fn streams(&self) -> bool {
        false
    }

    /// A piece of a reply being written (see [`weir_core::event::Delta`]); not in the log.
    fn delta(&self, _run_id: &str, _delta: &weir_core::event::Delta<'_>) {}
}

/// A sink that ignores everything.
pub struct Quiet;
impl EventSink for Quiet {
    fn publish(&self, _: &str, _: &[EventKind]) {}
}

/// Typed errors of the engine API (DESIGN §8); the CLI maps them to exit codes and the
/// server to HTTP statuses, each in one place.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such run, gate or workflow.
    #[error("{0}")]
    NotFound(String),
    /// Not in a state that allows it: already decided, driven elsewhere, not paused.
    #[error("{0}")]
    Conflict(String),
    /// Bad input, with every problem.
    #[error("{}", .0.join("\n  - "))]
    InvalidInput(Vec<String>),
    /// This driver's lease was taken by another: it stopped without writing anything more.
    #[error("lease lost on run {run_id}: {message}; this process stopped driving it")]
    LeaseLost {
        /// The run.
        run_id: String,
        /// Who holds it now.
        message: String,
    },
    /// The database failed; the store's error, kept whole (its [`Fault`] and source).
    #[error(transparent)]
    Store(#[from] BackendError),
}

/// The kind of an [`Error`], for mapping to exit codes and HTTP statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No such thing.
    NotFound,
    /// Not in a state that allows it.
    Conflict,
    /// Bad input.
    InvalidInput,
    /// Another driver took the run.
    LeaseLost,
    /// The database failed.
    Store,
}

impl Error {
    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::Conflict(_) => ErrorKind::Conflict,
            Error::InvalidInput(_) => ErrorKind::InvalidInput,
            Error::LeaseLost { .. } => ErrorKind::LeaseLost,
            Error::Store(_) => ErrorKind::Store,
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => Error::NotFound(m),
            StoreError::Conflict(m) => Error::Conflict(m),
            StoreError::LeaseLost { run_id, message } => Error::LeaseLost { run_id, message },
            StoreError::Backend(e) => Error::Store(e),
        }
    }
}

/// How a drive of a run ended. The full record (every step and attempt) is in the store:
/// `RunStore::get_record` reads it when someone wants to see it, so running never pays for it.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The run.
    pub run_id: String,
    /// A terminal status, `paused`, or `queued` when the drive was interrupted and the run
    /// released for someone to resume.
    pub status: RunStatus,
    /// Why the run failed, when it did.
    pub error: Option<RunError>,
    /// The last output, as the run's snapshot holds it: a model's reply becomes JSON only
    /// when read (`Deref` to a `Value`, or `into_value`).
    pub output: weir_core::record::Output,
    /// What the run has cost so far, in US dollars.
    pub cost_usd: f64,
}

/// Where a run's workflow came from, stored with the run so it can be reloaded exactly.
pub struct Source {
    /// The file the workflow was read from (or the saved workflow's name).
    pub path: String,
    /// The source text, shared by the runs started from it (`String::into` makes one).
    pub text: Arc<str>,
    /// The saved workflow version this source is (runs created over the API).
    pub pin: Option<weir_core::store::Pin>,
}

/// Lease timing: a driver renews every `heartbeat`; a lease not renewed for `ttl` expires
/// and the run may be taken over.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTiming {
    /// How long a lease lasts without renewal.
    pub ttl: Duration,
    /// How often a driver renews its lease.
    pub heartbeat: Duration,
    /// Takeovers in a row (no step finishing between them) after which a run fails with
    /// `takeover_limit` instead of being taken over again.
    pub max_takeovers: u32,
}

impl LeaseTiming {
    /// `[lease]` of weir.toml.
    pub fn of(s: &weir_core::settings::LeaseSettings) -> Self {
        Self {
            ttl: Duration::from_secs_f64(s.ttl_seconds),
            heartbeat: Duration::from_secs_f64(s.heartbeat_seconds),
            max_takeovers: s.max_takeovers,
        }
    }
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self::of(&weir_core::settings::LeaseSettings::default())
    }
}

/// Options of [`Engine::create`].
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// A repeated key returns the first run.
    pub idempotency_key: Option<String>,
    /// Claim the run in the same statement (`weir run` drives its own run at once).
    pub claim: bool,
    /// What started the run (the record's `trigger`; `cli` by default).
    pub trigger: weir_core::record::RunTrigger,
}

/// A re-run's recorded steps (DESIGN §10 `rerun`): in order, the steps of `from_run` whose
/// outputs the new run reuses instead of running their nodes again.
#[derive(Debug, Clone)]
pub struct Reuse {
    /// The run whose steps are reused.
    pub from_run: String,
    /// Its steps, in order.
    pub steps: Vec<weir_core::StepRecord>,
}

/// A created run, and its lease when it was claimed in the same statement.
#[derive(Debug, Clone)]
pub struct CreatedRun {
    /// The run.
    pub run_id: String,
    /// `false` when an earlier request with the same idempotency key created it.
    pub created: bool,
    /// The lease, when the run was claimed as it was created.
    pub lease: Option<Lease>,
}

/// Creates, drives, decides and cancels runs over the [`Services`] it is given.
pub struct Engine {
    services: Arc<Services>,
    pub(crate) sink: Arc<dyn EventSink>,
    /// Nodes of one run that may execute at once.
    pub max_concurrency: usize,
    /// Who this driver is, in leases and messages.
    pub owner: String,
    /// How long leases last and how often they are renewed.
    pub lease: LeaseTiming,
    /// When notified, drives stop: in-flight steps are recorded cancelled and the run is
    /// released (`queued`) for a later `weir resume`.
    pub interrupt: Option<Arc<tokio::sync::Notify>>,
    /// The leases of the drives under way, renewed by one heartbeat task.
    leases: Arc<heartbeat::Leases>,
    /// Every secret value; nothing the engine records contains one.
    pub(crate) redactor: weir_core::secrets::Redactor,
    /// The size budget of a run (`[limits]`): input, templates, step outputs, tool
    /// requests, state.
    pub limits: weir_core::settings::Limits,
    /// Set while shutting down gracefully: drives start no new steps, and release their run
    /// once the steps in flight have finished.
    pub drain: Arc<std::sync::atomic::AtomicBool>,
    /// Replaying a recorded run (`weir replay`): each attempt runs with its
    /// [`replay::CallSite`] set for the replay clients, and retries do not wait out their
    /// backoff.
    pub replay: bool,
}

/// The time now, as the records write it (RFC 3339, milliseconds, UTC).
pub fn now() -> String {
    weir_core::store::now_rfc3339()
}

/// A readable name for this process as a lease owner: `host:pid`.
pub fn process_owner() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", std::process::id())
}

impl Engine {
    /// An engine over `services`, announcing written events to `sink`.
    pub fn new(services: Services, sink: Arc<dyn EventSink>) -> Self {
        let redactor = weir_core::secrets::Redactor::new(services.secrets.values());
        Self {
            redactor,
            services: Arc::new(services),
            sink,
            max_concurrency: 16,
            owner: process_owner(),
            lease: LeaseTiming::default(),
            interrupt: None,
            leases: Arc::default(),
            limits: weir_core::settings::Limits::default(),
            drain: Arc::default(),
            replay: false,
        }
    }

    pub(crate) fn draining(&self) -> bool {
        self.drain.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The store it keeps runs in.
    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.services.store
    }

    /// Stops what the tools started (MCP server processes).
    pub async fn shutdown_tools(&self) {
        self.services.tools.shutdown().await;
    }

    fn claim_args(&self) -> Claim {
        Claim {
            owner: self.owner.clone(),
            ttl: self.lease.ttl,
        }
    }

    pub(crate) fn publish(&self, run_id: &str, events: &[EventKind]) {
        if !events.is_empty() {
            self.sink.publish(run_id, events);
        }
    }

    /// Checks the input against the workflow's input schema and inserts the run `queued`
    /// (claimed too with [`CreateOptions::claim`]). Returns at once.
    pub async fn create(
        &self,
        wf: &Workflow,
        source: Source,
        input: Value,
        opts: CreateOptions,
    ) -> Result<CreatedRun, Error> {
        Ok(self.insert(wf, source, input, opts, None).await?.0)
    }

    /// Creates a queued run that reuses recorded steps: each node's next executions take
    /// the recorded outputs (and routes) of its steps in `reuse`, in order, instead of
    /// running; human gates always run again. The reused steps are recorded with no
    /// attempts and no cost, each with a `step_reused` event naming where it came from.
    pub async fn create_reusing(
        &self,
        wf: &Workflow,
        source: Source,
        input: Value,
        reuse: Reuse,
        trigger: weir_core::record::RunTrigger,
    ) -> Result<CreatedRun, Error> {
        let opts = CreateOptions {
            trigger,
            ..CreateOptions::default()
        };
        Ok(self.insert(wf, source, input, opts, Some(reuse)).await?.0)
    }

    /// [`create`](Self::create), also returning the snapshot the run starts from.
    async fn insert(
        &self,
        wf: &Workflow,
        source: Source,
        mut input: Value,
        opts: CreateOptions,
        reuse: Option<Reuse>,
    ) -> Result<(CreatedRun, Snapshot), Error> {
        // A secret value an operator typed into the input is kept out of the record, as
        // every other value the run records.
        self.redactor.value(&mut input);
        if let Some(schema) = &wf.input_schema {
            schema.fill_defaults(&mut input);
            let errors = schema.errors(&input);
            if !errors.is_empty() {
                let mut all = vec!["the input does not match the workflow's input schema:".into()];
                all.extend(errors);
                return Err(Error::InvalidInput(all));
            }
        }
        if !input.is_object() {
            return Err(Error::InvalidInput(vec![
                "the run input must be a JSON object".into(),
            ]));
        }
        let size = json_size(&input);
        if size > self.limits.input_bytes {
            return Err(Error::InvalidInput(vec![format!(
                "the run input is {size} bytes of JSON; the limit is {} ([limits] input_bytes in weir.toml)",
                self.limits.input_bytes
            )]));
        }
        let run_id = uuid::Uuid::new_v4().to_string();
        let mut snapshot = initial_snapshot(wf, &input);
        if let Some(reuse) = reuse {
            for step in reuse.steps {
                if step.status != weir_core::StepStatus::Succeeded {
                    continue;
                }
                snapshot
                    .reuse
                    .entry(String::from(&*step.node_id))
                    .or_default()
                    .push(weir_core::record::Reused {
                        from_run: reuse.from_run.clone(),
                        seq: step.seq,
                        output: Arc::unwrap_or_clone(step.output).into_value(),
                        route: step.route,
                    });
            }
        }
        let created = self
            .services
            .store
            .create_run(NewRun {
                run_id,
                workflow: wf.name.clone(),
                dialect: wf.dialect.as_str().into(),
                source_path: source.path,
                source_text: source.text,
                snapshot: snapshot.clone(),
                input,
                created_at: now(),
                idempotency_key: opts.idempotency_key,
                claim: opts.claim.then(|| self.claim_args()),
                pin: source.pin,
                trigger: opts.trigger,
            })
            .await?;
        self.publish(&created.run_id, &created.events);
        Ok((
            CreatedRun {
                run_id: created.run_id,
                created: created.created,
                lease: created.lease,
            },
            snapshot,
        ))
    }

    /// Claims `run_id` for this driver: it must be queued, or running with an expired lease.
    /// A live lease is a `Conflict` naming its holder and when it expires.
    pub async fn claim(&self, run_id: &str) -> Result<Lease, Error> {
        let (lease, w) = self
            .services
            .store
            .claim_run(run_id, &self.claim_args())
            .await?;
        self.publish(run_id, &w.events);
        Ok(lease)
    }

    /// Claims up to `limit` runnable runs (workers).
    pub async fn claim_next(&self, limit: u32) -> Result<Vec<Lease>, Error> {
        let got = self
            .services
            .store
            .claim_next(&self.claim_args(), limit)
            .await?;
        Ok(got
            .into_iter()
            .map(|(lease, w)| {
                self.publish(&lease.run_id, &w.events);
                lease
            })
            .collect())
    }

    /// Drives a claimed run to its end, to a human gate, or until interrupted. Steps a
    /// previous driver left `running` are recorded cancelled first and run again.
    pub fn drive(
        &self,
        wf: Arc<Workflow>,
        lease: Lease,
    ) -> impl Future<Output = Result<RunOutcome, Error>> + '_ {
        self.drive_claimed(Box::pin(scheduler::Run::claimed(self, wf, lease, None)))
    }

    /// [`drive`](Self::drive) a run the caller has just loaded (after claiming it), without
    /// reading it again.
    pub fn drive_loaded(
        &self,
        wf: Arc<Workflow>,
        lease: Lease,
        stored: weir_core::store::StoredRun,
    ) -> impl Future<Output = Result<RunOutcome, Error>> + '_ {
        self.drive_claimed(Box::pin(scheduler::Run::claimed(
            self,
            wf,
            lease,
            Some(stored),
        )))
    }

    /// The part of a drive that lives as long as the run: the run and two pointers. The
    /// creation or loading before it is boxed by the caller with its arguments moved in at
    /// once, since an `async fn` keeps its arguments, and what it awaits in place, in its
    /// own future for as long as that future lives (2.4–2.9 KB of every run in flight when
    /// `drive` and `start` were `async fn`s; BENCHMARKS.md).
    async fn drive_claimed<'e>(
        &'e self,
        claimed: std::pin::Pin<Box<impl Future<Output = Result<scheduler::Run<'e>, Error>>>>,
    ) -> Result<RunOutcome, Error> {
        let mut run = claimed.await?;
        let driven = Box::pin(run.drive()).await;
        run.after(driven).await
    }

    /// Creates a run, claims it in the same statement and drives it: `weir run`. The
    /// creation is boxed, as a drive's loading is (`drive_claimed`).
    pub fn start(
        &self,
        wf: Arc<Workflow>,
        source: Source,
        input: Value,
    ) -> impl Future<Output = Result<RunOutcome, Error>> + '_ {
        let created = Box::pin(self.create_claimed(wf.clone(), source, input));
        self.start_created(wf, created)
    }

    async fn create_claimed(
        &self,
        wf: Arc<Workflow>,
        source: Source,
        input: Value,
    ) -> Result<(CreatedRun, Snapshot), Error> {
        let opts = CreateOptions {
            claim: true,
            ..CreateOptions::default()
        };
        self.insert(&wf, source, input, opts, None).await
    }

    async fn start_created(
        &self,
        wf: Arc<Workflow>,
        created: std::pin::Pin<Box<impl Future<Output = Result<(CreatedRun, Snapshot), Error>>>>,
    ) -> Result<RunOutcome, Error> {
        // Only the lease is kept: what else the creation returned is dropped here, not
        // held while the run goes.
        let (CreatedRun { lease, .. }, snapshot) = created.await?;
        let lease = lease.ok_or_else(|| {
            Error::Store(BackendError::new(
                Fault::Other,
                "the store did not claim the new run",
            ))
        })?;
        // The drive's future boxed: awaited in place, it would take room in this one's too.
        let mut run = scheduler::Run::new(self, wf, lease, snapshot);
        let driven = Box::pin(run.drive()).await;
        run.after(driven).await
    }

    /// Cancels a queued or paused run at once, or asks the driver of a running one to stop.
    pub async fn cancel(&self, run_id: &str, by: &str) -> Result<CancelOutcome, Error> {
        let (out, w) = self.services.store.request_cancel(run_id, by).await?;
        self.publish(run_id, &w.events);
        Ok(out)
    }
}

/// The size of a value's JSON text, counted as it is written (nothing is kept).
fn json_size(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    serde_json::to_writer(&mut n, v).map_or(usize::MAX, |()| n.0)
}

/// The snapshot a new run starts from: its input as state, its entry nodes pending.
fn initial_snapshot(wf: &Workflow, input: &Value) -> Snapshot {
    let mut state = Map::new();
    match wf.layout {
        weir_core::ir::StateLayout::Flat => {
            if let Value::Object(m) = input {
                state = m.clone();
            }
        }
        weir_core::ir::StateLayout::Variables => {
            state.insert("input".into(), input.clone());
            state.insert("variables".into(), Value::Object(Map::new()));
        }
    }
    Snapshot {
        state: Arc::new(state),
        pending: wf.entry_ids().cloned().collect(),
        next_seq: 1,
        ..Snapshot::default()
    }
}
