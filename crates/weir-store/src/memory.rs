//! The in-memory store: the same lifecycle as SQLite and Postgres behind one mutex, for
//! tests and benchmarks. Nothing survives the process.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use weir_core::event::{EventKind, RunEvent};
use weir_core::record::{
    RunError, RunRecord, RunStatus, RunSummary, Snapshot, StepRecord, StepStatus,
};
use weir_core::store::{
    Admin, CancelOutcome, Claim, Created, DriveWrites, GateDecision, Lease, Lifecycle, NewRun, Pin,
    RunFilter, RunReads, RunUpdate, StepCommit, StoreError, StoredRun, Written, now_ms,
};

use crate::rules::{self, ClaimView};
use weir_core::catalog::{Catalog, NewVersion, TokenRow, ToolRow, WorkflowEntry, WorkflowVersion};

/// A store in memory: for tests, and (ephemeral) for benchmarks.
#[derive(Default)]
pub struct Memory {
    /// The runs, in shards by their id: a run's creation, its drive's writes and its end
    /// lock its own shard only, so the drives of two workers seldom wait for each other.
    /// With one lock for every run, 2,000 runs started at once queued on it, and a worker
    /// put to sleep on the lock was woken on the other's CPU (BENCHMARKS.md).
    shards: [Mutex<Shard>; SHARDS],
    /// Creation order across the shards, for claiming oldest first.
    created: AtomicU64,
    /// Idempotency keys (→ run id). Taken before a shard when both are held.
    keys: Mutex<HashMap<String, String>>,
    catalog: Mutex<MemCatalog>,
    /// Keep only what the lifecycle needs (status, epoch, lease, event count) and forget a
    /// run as soon as it ends: benchmarks, like a run without a checkpointer.
    ephemeral: bool,
}

const SHARDS: usize = 16;

#[derive(Default)]
struct Shard {
    /// Boxed: a run's entry is most of a kilobyte, and the table moves every entry when it
    /// grows.
    runs: weir_core::ir::FastMap<String, Box<MemRun>>,
    /// This shard's runs by creation order (`Memory::created`).
    order: BTreeMap<u64, String>,
}

impl Shard {
    fn remove(&mut self, run_id: &str) {
        if let Some(run) = self.runs.remove(run_id) {
            self.order.remove(&run.order);
        }
    }
}

/// A run's shard: from the last bytes of its id (a UUID's are random), mixed.
fn shard_of(run_id: &str) -> usize {
    let h = run_id
        .bytes()
        .rev()
        .take(4)
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS
}

struct MemRun {
    workflow: String,
    dialect: String,
    source_path: String,
    source_text: std::sync::Arc<str>,
    input: Value,
    snapshot: Snapshot,
    status: RunStatus,
    error: Option<RunError>,
    started_at: String,
    finished_at: Option<String>,
    epoch: u64,
    owner: Option<String>,
    lease_expires_at: Option<i64>,
    cancel_requested: bool,
    steps: BTreeMap<u32, StepRecord>,
    events: Vec<RunEvent>,
    event_seq: u64,
    /// The store's mode: keep no steps, snapshots or events while the run goes.
    ephemeral: bool,
    /// Its key in `Inner::order`.
    order: u64,
    pin: Option<Pin>,
    trigger: weir_core::record::RunTrigger,
}

impl MemRun {
    fn view<'a>(&'a self, run_id: &'a str) -> ClaimView<'a> {
        ClaimView {
            run_id,
            status: self.status,
            epoch: self.epoch,
            owner: self.owner.as_deref(),
            lease_expires_at: self.lease_expires_at,
        }
    }

    fn append(&mut self, kinds: Vec<EventKind>, w: &mut Written) {
        if kinds.is_empty() {
            return;
        }
        if self.ephemeral {
            self.event_seq += kinds.len() as u64;
        } else {
            let at = weir_core::store::Stamp::now();
            self.events.reserve(kinds.len());
            for kind in &kinds {
                self.event_seq += 1;
                self.events.push(RunEvent {
                    seq: self.event_seq,
                    at: at.clone(),
                    kind: kind.clone(),
                });
            }
        }
        // The write's events as told: the list itself when it is the write's first.
        if w.events.is_empty() {
            w.events = kinds;
        } else {
            w.events.extend(kinds);
        }
    }

    fn claim(&mut self, run_id: &str, claim: &Claim) -> (Lease, Written) {
        let epoch = self.epoch + 1;
        let event = rules::claim_event(&self.view(run_id), &claim.owner, epoch);
        self.epoch = epoch;
        self.status = RunStatus::Running;
        self.owner = Some(claim.owner.clone());
        let expires_at = now_ms() + claim.ttl.as_millis() as i64;
        self.lease_expires_at = Some(expires_at);
        let mut w = Written {
            cancel_requested: self.cancel_requested,
            ..Written::default()
        };
        self.append(vec![event], &mut w);
        (
            Lease {
                run_id: run_id.to_string(),
                owner: claim.owner.clone(),
                epoch,
                expires_at,
            },
            w,
        )
    }

    /// Ends the run as cancelled at once (no driver holds it).
    fn cancel_now(&mut self, plan: rules::CancelNow, w: &mut Written) {
        for s in self.steps.values_mut() {
            if matches!(s.status, StepStatus::Running | StepStatus::Waiting) {
                s.status = StepStatus::Cancelled;
                s.error = Some(plan.step_error.clone());
                s.finished_at = Some(plan.at.clone());
            }
        }
        plan.snapshot(&mut self.snapshot);
        self.status = RunStatus::Cancelled;
        self.error = Some(plan.error);
        self.finished_at = Some(plan.at.to_string());
        self.lease_expires_at = None;
        self.append(plan.events, w);
    }
}

impl Memory {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store that forgets each run when it ends, so a benchmark's memory stays flat; a
    /// finished run's record cannot be read back.
    pub fn ephemeral() -> Self {
        Self {
            ephemeral: true,
            ..Self::default()
        }
    }

    /// The shard that holds `run_id`, locked.
    fn shard(&self, run_id: &str) -> std::sync::MutexGuard<'_, Shard> {
        self.shards[shard_of(run_id)]
            .lock()
            .expect("memory store lock")
    }

    /// Each shard in turn, locked while `f` reads it.
    fn each_shard(&self, mut f: impl FnMut(&mut Shard)) {
        for s in &self.shards {
            f(&mut s.lock().expect("memory store lock"));
        }
    }

    fn with_lease<T>(
        &self,
        lease: &Lease,
        write: &str,
        f: impl FnOnce(&mut MemRun, &mut Written) -> T,
    ) -> Result<(T, Written), StoreError> {
        let mut shard = self.shard(&lease.run_id);
        let Some(run) = shard.runs.get_mut(&lease.run_id) else {
            return Err(rules::lease_lost(&lease.run_id, lease.epoch, None));
        };
        if run.epoch != lease.epoch || run.lease_expires_at.is_none() {
            let current = (run.epoch, run.owner.clone(), run.status);
            if let Some(refused) = rules::stale_write(&lease.owner, lease.epoch, &current, write) {
                run.append(vec![refused], &mut Written::default());
            }
            return Err(rules::lease_lost(&lease.run_id, lease.epoch, Some(current)));
        }
        let mut w = Written {
            cancel_requested: run.cancel_requested,
            ..Written::default()
        };
        let t = f(run, &mut w);
        Ok((t, w))
    }

    fn run<T>(&self, run_id: &str, f: impl FnOnce(&MemRun) -> T) -> Result<T, StoreError> {
        self.shard(run_id)
            .runs
            .get(run_id)
            .map(|r| f(r))
            .ok_or_else(|| StoreError::NotFound(format!("no run with id {run_id}")))
    }
}

#[async_trait]
impl DriveWrites for Memory {
    async fn renew(&self, lease: &mut Lease, ttl: Duration) -> Result<Written, StoreError> {
        let expires = now_ms() + ttl.as_millis() as i64;
        let ((), w) = self.with_lease(lease, "heartbeat", |run, _| {
            run.lease_expires_at = Some(expires);
        })?;
        lease.expires_at = expires;
        Ok(w)
    }

    async fn start_steps(
        &self,
        lease: &Lease,
        steps: &[&StepRecord],
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        let ((), w) = self.with_lease(lease, "start_steps", |run, w| {
            if !run.ephemeral {
                for s in steps {
                    run.steps.insert(s.seq, (*s).clone());
                }
            }
            run.append(events, w);
        })?;
        Ok(w)
    }

    async fn commit_step(&self, lease: &Lease, c: StepCommit<'_>) -> Result<Written, StoreError> {
        let ((), w) = self.with_lease(lease, "commit_step", |run, w| {
            // Holding the snapshot would make the driver's next write copy the state.
            if !run.ephemeral {
                for s in c.started {
                    run.steps.insert(s.seq, (*s).clone());
                }
                run.steps.insert(c.step.seq, c.step.clone());
                run.snapshot = c.snapshot.clone();
            }
            run.append(c.events, w);
        })?;
        Ok(w)
    }

    async fn append_events(
        &self,
        lease: &Lease,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        let ((), w) = self.with_lease(lease, "append_events", |run, w| run.append(events, w))?;
        Ok(w)
    }

    async fn finish_run(
        &self,
        lease: &Lease,
        steps: &[&StepRecord],
        u: &RunUpdate,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        let ((), w) = self.with_lease(lease, "finish_run", |run, w| {
            if !run.ephemeral {
                for s in steps {
                    run.steps.insert(s.seq, (*s).clone());
                }
            }
            run.status = u.status;
            run.error = u.error.clone();
            run.finished_at = u.finished_at.clone();
            if !(run.ephemeral && u.status.is_terminal()) {
                run.snapshot = u.snapshot.clone();
            }
            run.lease_expires_at = None;
            run.append(events, w);
        })?;
        if self.ephemeral && u.status.is_terminal() {
            self.shard(&lease.run_id).remove(&lease.run_id);
        }
        Ok(w)
    }

    async fn release(
        &self,
        lease: &Lease,
        snapshot: &Snapshot,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        let ((), w) = self.with_lease(lease, "release", |run, w| {
            run.status = RunStatus::Queued;
            run.snapshot = snapshot.clone();
            run.lease_expires_at = None;
            run.append(events, w);
        })?;
        Ok(w)
    }
}

#[async_trait]
impl Lifecycle for Memory {
    async fn create_run(&self, new: NewRun) -> Result<Created, StoreError> {
        // The run is made before any lock is taken; the locks are held to check and insert.
        let workflow = new.workflow.clone();
        let mut run = MemRun {
            workflow: new.workflow,
            dialect: new.dialect,
            source_path: new.source_path,
            source_text: new.source_text,
            input: new.input,
            snapshot: if self.ephemeral {
                Snapshot::default()
            } else {
                new.snapshot
            },
            status: RunStatus::Queued,
            error: None,
            started_at: new.created_at,
            finished_at: None,
            epoch: 0,
            owner: None,
            lease_expires_at: None,
            cancel_requested: false,
            steps: BTreeMap::new(),
            events: Vec::new(),
            event_seq: 0,
            ephemeral: self.ephemeral,
            order: 0,
            pin: new.pin,
            trigger: new.trigger,
        };
        let mut w = Written::default();
        run.append(vec![EventKind::RunCreated { workflow }], &mut w);
        let lease = new.claim.as_ref().map(|c| {
            let (lease, claimed) = run.claim(&new.run_id, c);
            w.events.extend(claimed.events);
            lease
        });
        let mut run = Box::new(run);
        // With a key, its table stays locked until the run is in its shard.
        let mut keys = match &new.idempotency_key {
            Some(key) => {
                let keys = self.keys.lock().expect("memory store lock");
                if let Some(existing) = keys.get(key) {
                    return Ok(Created {
                        run_id: existing.clone(),
                        created: false,
                        lease: None,
                        events: Vec::new(),
                    });
                }
                Some(keys)
            }
            None => None,
        };
        let order_id = new.run_id.clone();
        {
            let mut shard = self.shard(&new.run_id);
            if shard.runs.contains_key(&new.run_id) {
                return Err(StoreError::Conflict(format!(
                    "run {} already exists",
                    new.run_id
                )));
            }
            run.order = self.created.fetch_add(1, Ordering::Relaxed) + 1;
            shard.order.insert(run.order, order_id);
            shard.runs.insert(new.run_id.clone(), run);
        }
        if let (Some(keys), Some(key)) = (&mut keys, new.idempotency_key) {
            keys.insert(key, new.run_id.clone());
        }
        Ok(Created {
            run_id: new.run_id,
            created: true,
            lease,
            events: w.events,
        })
    }

    async fn claim_run(&self, run_id: &str, claim: &Claim) -> Result<(Lease, Written), StoreError> {
        let mut shard = self.shard(run_id);
        let run = shard
            .runs
            .get_mut(run_id)
            .ok_or_else(|| StoreError::NotFound(format!("no run with id {run_id}")))?;
        if let Some(refusal) = rules::claim_refusal(&run.view(run_id), now_ms()) {
            return Err(refusal);
        }
        Ok(run.claim(run_id, claim))
    }

    async fn claim_next(
        &self,
        claim: &Claim,
        limit: u32,
    ) -> Result<Vec<(Lease, Written)>, StoreError> {
        // Oldest first across the shards, all locked (in their order) while claiming.
        let mut shards: Vec<_> = self
            .shards
            .iter()
            .map(|s| s.lock().expect("memory store lock"))
            .collect();
        let now = now_ms();
        let limit = limit as usize;
        let mut next: Vec<(u64, usize, String)> = Vec::new();
        for (i, shard) in shards.iter().enumerate() {
            next.extend(
                shard
                    .order
                    .iter()
                    .filter(|(_, id)| {
                        shard
                            .runs
                            .get(*id)
                            .is_some_and(|r| rules::claim_refusal(&r.view(id), now).is_none())
                    })
                    .take(limit)
                    .map(|(n, id)| (*n, i, id.clone())),
            );
        }
        next.sort_unstable_by_key(|(n, _, _)| *n);
        next.truncate(limit);
        let claimed = next
            .iter()
            .filter_map(|(_, i, id)| shards[*i].runs.get_mut(id).map(|r| r.claim(id, claim)))
            .collect();
        Ok(claimed)
    }

    async fn decide(&self, d: &GateDecision) -> Result<Written, StoreError> {
        let mut shard = self.shard(&d.run_id);
        let run = shard
            .runs
            .get_mut(&d.run_id)
            .ok_or_else(|| StoreError::NotFound(format!("no run with id {}", d.run_id)))?;
        if run.status != RunStatus::Paused || run.epoch != d.expect_epoch {
            return Err(rules::decision_conflict(
                &d.run_id,
                run.status,
                run.epoch,
                d.expect_epoch,
            ));
        }
        run.epoch += 1;
        run.status = d.status;
        run.error = d.error.clone();
        run.finished_at = d.finished_at.clone();
        run.snapshot = d.snapshot.clone();
        run.steps.insert(d.step.seq, d.step.clone());
        for s in &d.also {
            run.steps.insert(s.seq, s.clone());
        }
        let mut w = Written::default();
        run.append(d.events.clone(), &mut w);
        Ok(w)
    }

    async fn request_cancel(
        &self,
        run_id: &str,
        by: &str,
    ) -> Result<(CancelOutcome, Written), StoreError> {
        let mut shard = self.shard(run_id);
        let run = shard
            .runs
            .get_mut(run_id)
            .ok_or_else(|| StoreError::NotFound(format!("no run with id {run_id}")))?;
        let mut w = Written {
            cancel_requested: true,
            ..Written::default()
        };
        let plan = rules::cancel_plan(
            run_id,
            run.status,
            run.lease_expires_at,
            run.cancel_requested,
            by,
            now_ms(),
        )?;
        match plan {
            rules::CancelPlan::Request(events) => {
                run.cancel_requested = true;
                run.append(events, &mut w);
                Ok((CancelOutcome::Requested, w))
            }
            rules::CancelPlan::Now(now) => {
                run.cancel_now(now, &mut w);
                Ok((CancelOutcome::Cancelled, w))
            }
        }
    }
}

#[async_trait]
impl RunReads for Memory {
    async fn load_run(&self, run_id: &str) -> Result<StoredRun, StoreError> {
        self.run(run_id, |r| StoredRun {
            run_id: run_id.to_string(),
            workflow: r.workflow.clone(),
            status: r.status,
            source_path: r.source_path.clone(),
            source_text: r.source_text.to_string(),
            snapshot: r.snapshot.clone(),
            epoch: r.epoch,
            owner: r.owner.clone(),
            lease_expires_at: r.lease_expires_at,
            cancel_requested: r.cancel_requested,
            pin: r.pin.clone(),
            input: r.input.clone(),
        })
    }

    async fn get_step(&self, run_id: &str, seq: u32) -> Result<StepRecord, StoreError> {
        self.run(run_id, |r| r.steps.get(&seq).cloned())?
            .ok_or_else(|| StoreError::NotFound(format!("run {run_id} has no step {seq}")))
    }

    async fn get_record(&self, run_id: &str) -> Result<RunRecord, StoreError> {
        self.run(run_id, |r| {
            crate::record(crate::RecordParts {
                run_id,
                workflow: &r.workflow,
                dialect: &r.dialect,
                status: r.status,
                trigger: r.trigger.clone(),
                input: r.input.clone(),
                snapshot: &r.snapshot,
                error: r.error.clone(),
                events: r
                    .events
                    .iter()
                    .map(|e| serde_json::to_value(e).unwrap_or(Value::Null))
                    .collect(),
                started_at: r.started_at.clone(),
                finished_at: r.finished_at.clone(),
                steps: r.steps.values().cloned().collect(),
            })
        })
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        let mut all: Vec<RunSummary> = Vec::new();
        self.each_shard(|s| {
            all.extend(s.runs.iter().map(|(id, r)| RunSummary {
                run_id: id.clone(),
                workflow: r.workflow.clone(),
                status: r.status,
                started_at: r.started_at.clone(),
                cost_usd: r.snapshot.cost_usd,
                finished_at: r.finished_at.clone(),
                pin: r.pin.clone(),
                steps: r.steps.len() as u32,
                error_code: r.error.as_ref().map(|e| e.code.as_str().to_string()),
                trigger: r.trigger.clone(),
            }));
        });
        all.retain(|s| weir_core::store::matches(filter, s));
        all.sort_by(|a, b| (&b.started_at, &b.run_id).cmp(&(&a.started_at, &a.run_id)));
        all.truncate(filter.limit as usize);
        Ok(all)
    }

    async fn run_ids_with_prefix(
        &self,
        prefix: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        let mut ids: Vec<String> = Vec::new();
        self.each_shard(|s| {
            ids.extend(s.runs.keys().filter(|id| id.starts_with(prefix)).cloned());
        });
        ids.sort();
        ids.truncate(limit as usize);
        Ok(ids)
    }

    async fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<RunEvent>, StoreError> {
        self.run(run_id, |r| {
            r.events.iter().filter(|e| e.seq > after).cloned().collect()
        })
    }

    async fn open_steps(&self, run_id: &str) -> Result<(u32, Vec<StepRecord>), StoreError> {
        self.run(run_id, |r| {
            (
                r.steps.keys().next_back().copied().unwrap_or(0),
                r.steps
                    .values()
                    .filter(|s| s.status == StepStatus::Running)
                    .cloned()
                    .collect(),
            )
        })
    }

    async fn count_by_status(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        let mut counts: BTreeMap<&'static str, (RunStatus, u64)> = BTreeMap::new();
        self.each_shard(|s| {
            for r in s.runs.values() {
                counts.entry(r.status.as_str()).or_insert((r.status, 0)).1 += 1;
            }
        });
        Ok(counts.into_values().collect())
    }
}

#[async_trait]
impl Admin for Memory {
    async fn prune(&self, before: &str, statuses: &[RunStatus]) -> Result<Vec<String>, StoreError> {
        let ended = rules::ended_statuses(statuses);
        let mut ids: Vec<String> = Vec::new();
        self.each_shard(|s| {
            let old: Vec<String> = s
                .runs
                .iter()
                .filter(|(_, r)| {
                    ended.contains(&r.status.as_str())
                        && r.finished_at.as_deref().is_some_and(|f| f < before)
                })
                .map(|(id, _)| id.clone())
                .collect();
            for id in &old {
                s.remove(id);
            }
            ids.extend(old);
        });
        if !ids.is_empty() {
            let pruned: std::collections::HashSet<&String> = ids.iter().collect();
            self.keys
                .lock()
                .expect("memory store lock")
                .retain(|_, v| !pruned.contains(v));
        }
        Ok(ids)
    }
}

#[derive(Default)]
struct MemCatalog {
    /// Workflow id → (latest version, first saved at, deleted).
    workflows: BTreeMap<String, (u32, String, bool)>,
    versions: BTreeMap<(String, u32), WorkflowVersion>,
    tokens: Vec<TokenRow>,
    tools: BTreeMap<String, ToolRow>,
    triggers: BTreeMap<(String, String), weir_core::catalog::TriggerState>,
}

impl Memory {
    fn catalog<T>(&self, f: impl FnOnce(&mut MemCatalog) -> T) -> T {
        f(&mut self.catalog.lock().expect("memory store lock"))
    }
}

fn no_workflow(id: &str) -> StoreError {
    StoreError::NotFound(format!("no workflow with id {id}"))
}

impl MemCatalog {
    fn trigger_state(
        &mut self,
        workflow_id: &str,
        name: &str,
        at: &str,
    ) -> &mut weir_core::catalog::TriggerState {
        let s = self
            .triggers
            .entry((workflow_id.to_string(), name.to_string()))
            .or_insert_with(|| weir_core::catalog::TriggerState {
                workflow_id: workflow_id.to_string(),
                name: name.to_string(),
                paused: false,
                token_hash: None,
                updated_at: at.to_string(),
            });
        s.updated_at = at.to_string();
        s
    }

    fn entry(&self, id: &str) -> Option<WorkflowEntry> {
        let (latest, first, deleted) = self.workflows.get(id)?;
        if *deleted {
            return None;
        }
        Some(WorkflowEntry {
            latest: self.versions.get(&(id.to_string(), *latest))?.clone(),
            created_at: first.clone(),
        })
    }
}

#[async_trait]
impl Catalog for Memory {
    async fn put_workflow(&self, v: &NewVersion) -> Result<WorkflowVersion, StoreError> {
        self.catalog(|c| {
            let version = rules::next_version(
                &v.workflow_id,
                c.workflows
                    .get(&v.workflow_id)
                    .map(|w| (i64::from(w.0), w.2)),
                v.create_only,
            )? as u32;
            let first = c
                .workflows
                .get(&v.workflow_id)
                .map_or_else(|| v.created_at.clone(), |w| w.1.clone());
            c.workflows
                .insert(v.workflow_id.clone(), (version, first, false));
            let saved = WorkflowVersion {
                workflow_id: v.workflow_id.clone(),
                version,
                name: v.name.clone(),
                dialect: v.dialect.clone(),
                format: v.format.clone(),
                source: v.source.clone(),
                created_at: v.created_at.clone(),
            };
            c.versions
                .insert((v.workflow_id.clone(), version), saved.clone());
            Ok(saved)
        })
    }

    async fn workflow(&self, id: &str) -> Result<WorkflowEntry, StoreError> {
        self.catalog(|c| c.entry(id)).ok_or_else(|| no_workflow(id))
    }

    async fn workflows(&self) -> Result<Vec<WorkflowEntry>, StoreError> {
        Ok(self.catalog(|c| c.workflows.keys().filter_map(|id| c.entry(id)).collect()))
    }

    async fn version(&self, id: &str, version: u32) -> Result<WorkflowVersion, StoreError> {
        self.catalog(|c| c.versions.get(&(id.to_string(), version)).cloned())
            .ok_or_else(|| StoreError::NotFound(format!("workflow {id} has no version {version}")))
    }

    async fn versions(&self, id: &str) -> Result<Vec<WorkflowVersion>, StoreError> {
        self.catalog(|c| {
            c.entry(id)?;
            Some(
                c.versions
                    .range((id.to_string(), 0)..=(id.to_string(), u32::MAX))
                    .map(|(_, v)| v.clone())
                    .collect(),
            )
        })
        .ok_or_else(|| no_workflow(id))
    }

    async fn delete_workflow(&self, id: &str) -> Result<(), StoreError> {
        self.catalog(|c| match c.workflows.get_mut(id) {
            Some(w) if !w.2 => {
                w.2 = true;
                Ok(())
            }
            _ => Err(no_workflow(id)),
        })
    }

    async fn any_workflow_ever(&self) -> Result<bool, StoreError> {
        Ok(self.catalog(|c| !c.workflows.is_empty()))
    }

    async fn create_token(&self, token: &TokenRow) -> Result<(), StoreError> {
        self.catalog(|c| {
            if c.tokens.iter().any(|t| t.id == token.id) {
                return Err(StoreError::Conflict(format!("token {} exists", token.id)));
            }
            c.tokens.push(token.clone());
            Ok(())
        })
    }

    async fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        Ok(self.catalog(|c| c.tokens.clone()))
    }

    async fn token(&self, id: &str) -> Result<Option<TokenRow>, StoreError> {
        Ok(self.catalog(|c| c.tokens.iter().find(|t| t.id == id).cloned()))
    }

    async fn revoke_token(&self, id: &str, at: &str) -> Result<(), StoreError> {
        self.catalog(|c| match c.tokens.iter_mut().find(|t| t.id == id) {
            Some(t) => {
                t.revoked_at.get_or_insert_with(|| at.to_string());
                Ok(())
            }
            None => Err(StoreError::NotFound(format!("no token with id {id}"))),
        })
    }

    async fn put_tool(&self, tool: &ToolRow) -> Result<(), StoreError> {
        self.catalog(|c| {
            let created_at = c
                .tools
                .get(&tool.name)
                .map_or_else(|| tool.created_at.clone(), |t| t.created_at.clone());
            c.tools.insert(
                tool.name.clone(),
                ToolRow {
                    created_at,
                    ..tool.clone()
                },
            );
        });
        Ok(())
    }

    async fn tools(&self) -> Result<Vec<ToolRow>, StoreError> {
        Ok(self.catalog(|c| c.tools.values().cloned().collect()))
    }

    async fn delete_tool(&self, name: &str) -> Result<(), StoreError> {
        self.catalog(|c| c.tools.remove(name))
            .map(|_| ())
            .ok_or_else(|| StoreError::NotFound(format!("no custom tool named {name}")))
    }

    async fn pause_trigger(
        &self,
        workflow_id: &str,
        name: &str,
        paused: bool,
        at: &str,
    ) -> Result<(), StoreError> {
        self.catalog(|c| {
            let s = c.trigger_state(workflow_id, name, at);
            s.paused = paused;
        });
        Ok(())
    }

    async fn set_hook_token(
        &self,
        workflow_id: &str,
        name: &str,
        hash: &[u8],
        at: &str,
    ) -> Result<(), StoreError> {
        self.catalog(|c| {
            let s = c.trigger_state(workflow_id, name, at);
            s.token_hash = Some(hash.to_vec());
        });
        Ok(())
    }

    async fn trigger_states(
        &self,
        workflow_id: Option<&str>,
    ) -> Result<Vec<weir_core::catalog::TriggerState>, StoreError> {
        Ok(self.catalog(|c| {
            c.triggers
                .values()
                .filter(|s| workflow_id.is_none_or(|w| s.workflow_id == w))
                .cloned()
                .collect()
        }))
    }
}
