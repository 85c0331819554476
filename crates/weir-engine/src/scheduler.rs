//! The scheduler: one [`Run`] drives one run from its snapshot to its end or a human gate.
//!
//! Rules (DESIGN §2):
//! - a node becomes ready when one of its incoming edges fires, unless it already completed
//!   (a loop re-arms its body) or is already pending; in the machine and pipeline layouts
//!   every transition runs its target again, as in a state machine;
//! - a merge becomes ready once every incoming edge has fired or can no longer fire: an edge
//!   can still fire when its source is pending or running, or reachable from one that is;
//! - ready nodes run concurrently, at most `max_concurrency` at once;
//! - total node executions are bounded by the workflow's hop ceiling;
//! - a node failing after its last attempt fails the run and cancels in-flight siblings;
//! - a human gate stops new nodes from starting; once in-flight nodes finish the run parks;
//! - a finished step is committed, with the snapshot it produced and the `running` rows of
//!   the nodes it launched, before any of those nodes is polled.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use std::future::Future;
use std::pin::Pin;

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use weir_core::Workflow;
use weir_core::event::EventKind;
use weir_core::ir::{EndStatus, NodeKind, StateLayout};
use weir_core::patch::Tracker;
use weir_core::record::{
    ErrorCode, NodeId, PendingGate, RunError, Snapshot, StepRecord, StepStatus, Tokens,
};
use weir_core::store::{Lease, Stamp, StepCommit, Written};

use crate::attempt::{self, Attempts};
use crate::heartbeat::Signal;
use crate::nodes::{NodeCtx, Progress, Route};
use crate::routing::{fire, ready_merges};

mod end;
mod state;
use crate::{Engine, Error, RunOutcome};
pub use state::view;

/// A node's result is boxed where it is made: it passes through several futures and the
/// select on its way to `finish`, and a box moves as one pointer, not a few hundred bytes.
/// A task yields its node's position in the workflow, not a copy of its id.
type Task = Pin<Box<dyn Future<Output = (usize, std::thread::Result<Box<Attempts>>)> + Send>>;
type Tasks = FuturesUnordered<Task>;

pub struct InFlight {
    /// Boxed from its launch to its write: it moves from the launch into the list in
    /// flight, out of it, and into the list to write, and a box moves as one pointer, not
    /// 300 bytes.
    step: Box<StepRecord>,
    started: Instant,
}

/// The steps in flight, by their node's position in the workflow, in no particular order: a
/// handful at most (bounded by the run's concurrency), so a list beats a map keyed by ids.
#[derive(Default)]
pub struct InFlights(Vec<(usize, InFlight)>);

impl InFlights {
    pub fn contains(&self, node: usize) -> bool {
        self.0.iter().any(|(at, _)| *at == node)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The positions of the nodes in flight.
    pub fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().map(|(at, _)| *at)
    }

    fn reserve(&mut self, more: usize) {
        self.0.reserve_exact(more);
    }

    fn insert(&mut self, node: usize, f: InFlight) {
        // Room for one at first (a chain never has more in flight), not the four a first
        // push reserves: an entry is a few hundred bytes, and thousands of runs hold one.
        if self.0.capacity() == 0 {
            self.0.reserve_exact(1);
        }
        self.0.push((node, f));
    }

    fn remove(&mut self, node: usize) -> Option<InFlight> {
        let i = self.0.iter().position(|(at, _)| *at == node)?;
        // Order does not matter to anyone (writes go by sequence number): nothing shifts.
        Some(self.0.swap_remove(i).1)
    }

    fn steps(&self) -> impl Iterator<Item = &StepRecord> {
        self.0.iter().map(|(_, f)| &*f.step)
    }
}

/// How the run is ending, decided while draining.
enum Ending {
    Failed(RunError),
    End(EndStatus),
    /// Someone asked for the run to be cancelled.
    Cancelled,
    /// This process was interrupted (Ctrl-C): the run is released, not ended.
    Interrupted,
}

pub struct Run<'e> {
    engine: &'e Engine,
    wf: Arc<Workflow>,
    lease: Lease,
    pub snapshot: Snapshot,
    in_flight: InFlights,
    ending: Option<Ending>,
    /// Finished steps not committed yet (more than one when siblings finish together): they
    /// are committed together with the `running` rows of the successors they launched, in
    /// one write, before any of them is polled. Each keeps the box it had in flight.
    #[expect(
        clippy::vec_box,
        reason = "a record comes boxed from the steps in flight: kept in its box, not copied out"
    )]
    unsaved: Vec<Box<StepRecord>>,
    /// Edges fired since merges were last weighed ([`ready_merges`]).
    fired: bool,
    /// Steps launched since the last write (their sequence numbers; their rows are the
    /// in-flight ones).
    started: Vec<u32>,
    /// The run's id, shared with every node it launches.
    run_id: Arc<str>,
    /// Events of the changes not committed yet; they go in the same transaction.
    events: Vec<EventKind>,
    /// Attempt events from node futures (a retry shows when it happens).
    progress: Arc<Progress>,
    /// For stores that keep snapshot patches: what changed since the last write (marked as
    /// the scheduler writes it), so a step commit writes a patch of the snapshot, and the
    /// whole snapshot every few commits (`weir_core::patch`).
    stored: Option<Tracker>,
    /// The lease as the heartbeat keeps it, for the nodes to check before each attempt.
    held: Option<Arc<crate::heartbeat::Held>>,
    /// About how many bytes of JSON the run's state takes (`[limits] state_bytes`): counted
    /// once, at the drive's first write of state, then kept up to date write by write.
    state_bytes: Option<usize>,
}

/// Whether a node's ending stops the gathering of siblings finished with it: a failure (or
/// a panic), an end node or a gate, after which nothing else is to be recorded as done.
fn ends_gathering(joined: &std::thread::Result<Box<Attempts>>) -> bool {
    match joined {
        Err(_) => true,
        Ok(a) => match &a.result {
            Err(_) => true,
            Ok(o) => matches!(o.route, Route::End(_) | Route::Park { .. }),
        },
    }
}

async fn interrupted(n: &Option<Arc<tokio::sync::Notify>>) {
    match n {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

impl<'e> Run<'e> {
    pub fn new(engine: &'e Engine, wf: Arc<Workflow>, lease: Lease, snapshot: Snapshot) -> Self {
        let stored = engine.services.store.keeps_patches().then(Tracker::new);
        let run_id = lease.run_id.as_str().into();
        Self {
            engine,
            wf,
            lease,
            snapshot,
            in_flight: InFlights::default(),
            ending: None,
            unsaved: Vec::new(),
            fired: false,
            started: Vec::new(),
            run_id,
            events: Vec::new(),
            progress: Arc::default(),
            stored,
            held: None,
            state_bytes: None,
        }
    }

    /// A run claimed from the store: steps a previous driver left `running` are recorded
    /// cancelled (they run again), in one fenced commit.
    pub async fn claimed(
        engine: &'e Engine,
        wf: Arc<Workflow>,
        lease: Lease,
        stored: Option<weir_core::store::StoredRun>,
    ) -> Result<Self, Error> {
        let store = &engine.services.store;
        let stored = match stored {
            Some(s) => s,
            None => store.load_run(&lease.run_id).await?,
        };
        let (last, running) = store.open_steps(&lease.run_id).await?;
        let mut snapshot = stored.snapshot;
        snapshot.next_seq = snapshot.next_seq.max(last + 1);
        let interrupted: Vec<StepRecord> = running
            .into_iter()
            .map(|mut s| {
                s.status = StepStatus::Cancelled;
                s.error =
                    Some("interrupted: the driver of this step stopped; it runs again".into());
                s.finished_at = Some(Stamp::now());
                resume_loop(&mut snapshot, &mut s);
                s
            })
            .collect();
        let poisoned = match interrupted.first() {
            Some(step) => Some(takeovers_in_a_row(engine, &lease.run_id).await?)
                .filter(|n| *n > engine.lease.max_takeovers)
                .map(|n| RunError {
                    code: ErrorCode::TakeoverLimit,
                    message: format!(
                        "the run was taken over {n} times in a row from drivers that stopped while running step {} ({}), with no step finishing in between (the limit is [lease] max_takeovers = {}); it is not taken over again",
                        step.seq, step.node_id, engine.lease.max_takeovers
                    ),
                    node_id: Some(String::from(&*step.node_id)),
                }),
            None => None,
        };
        let mut run = Self::new(engine, wf, lease, snapshot);
        if let Some(err) = poisoned {
            run.fail(err);
        }
        if let Some((first, rest)) = interrupted.split_first() {
            let events: Vec<EventKind> = interrupted.iter().map(finished_event).collect();
            let w = store
                .commit_step(
                    &run.lease,
                    StepCommit {
                        step: first,
                        started: &rest.iter().collect::<Vec<_>>(),
                        snapshot: &run.snapshot,
                        patch: None,
                        // The driver before may have written patches.
                        covers_patches: true,
                        events,
                    },
                )
                .await?;
            run.written(w);
            if let Some(t) = &mut run.stored {
                t.whole();
            }
        }
        Ok(run)
    }

    fn written(&mut self, w: Written) {
        let Written {
            mut events,
            cancel_requested,
        } = w;
        self.engine.publish(&self.lease.run_id, &events);
        if cancel_requested && self.ending.is_none() {
            self.ending = Some(Ending::Cancelled);
        }
        // The write's list of events comes back from the store: emptied, it is the next
        // write's, instead of a list made for every write (a few hundred bytes at most kept).
        if self.events.capacity() == 0 && events.capacity() <= 8 {
            events.clear();
            self.events = events;
        }
    }

    /// Drives the run to its end, a gate or an interruption. By reference, so that the
    /// caller's future holds the run: taken by value, the run (584 bytes) was stored twice
    /// in this future, as its argument and as the body's local, for as long as it went
    /// (BENCHMARKS.md).
    #[expect(
        clippy::too_many_lines,
        reason = "the drive loop: launch, wait for the first finished node or a lease event, finish it, repeat; its select is the engine's heartbeat and reads best whole"
    )]
    pub async fn drive(&mut self) -> Result<RunOutcome, Error> {
        let holding =
            self.engine
                .leases
                .hold(&self.lease, &self.engine.services.store, self.engine.lease);
        self.held = Some(holding.held.clone());
        let interrupt = self.engine.interrupt.clone();
        let progress = self.progress.clone();
        // Node futures are polled here, in the run's own task: concurrency without a task
        // spawn (and a cross-thread wake-up) per node.
        let mut tasks: Tasks = FuturesUnordered::new();
        // The heartbeat's and the interrupt's waits live as long as the loop: made again at
        // every turn, each would register and unregister a waiter per step. Either one
        // ending ends the loop (fused all the same).
        let held = holding.held.clone();
        let mut signal = std::pin::pin!(held.wait().fuse());
        let mut interrupted = std::pin::pin!(interrupted(&interrupt).fuse());
        loop {
            let draining = self.engine.draining();
            if self.ending.is_none() && self.snapshot.gates.is_empty() && !draining {
                self.launch_ready(&mut tasks);
            }
            // Commit before polling: a finished step (and the state it produced) is durable
            // before its successors run. With nothing in flight the loop ends here, and
            // what is left to write goes in with the run's end (`finalize`): one durable
            // write where there were two (a chain's last step and the run's end).
            if !tasks.is_empty() {
                self.flush().await?;
            }
            if draining
                && tasks.is_empty()
                && self.ending.is_none()
                && !self.snapshot.pending.is_empty()
                && self.snapshot.gates.is_empty()
            {
                // Shutting down: the steps in flight have finished; release the run for
                // another driver instead of starting its next steps.
                self.ending = Some(Ending::Interrupted);
            }
            if tasks.is_empty() || self.ending.is_some() {
                break;
            }
            tokio::select! {
                biased;
                sig = &mut signal => match sig {
                    Signal::Lost(e) => return Err(e),
                    Signal::Cancel => {
                        self.ending.get_or_insert(Ending::Cancelled);
                    }
                },
                _ = &mut interrupted => {
                    self.ending.get_or_insert(Ending::Interrupted);
                }
                mut told = progress.next() => {
                    for ev in &mut told {
                        self.redact(ev);
                    }
                    let w = self
                        .engine
                        .services
                        .store
                        .append_events(&self.lease, told)
                        .await?;
                    self.written(w);
                }
                next = tasks.next() => {
                    let Some(first) = next else { break };
                    if tasks.is_empty() || ends_gathering(&first.1) {
                        self.joined(first.0, first.1);
                    } else {
                        // Siblings that finished at the same moment (parallel branches of
                        // instant nodes) are committed together, as one write: none of
                        // their successors has been launched yet, so the rule that a step
                        // is durable before its successors start holds for each of them.
                        // They are all taken before any is recorded, so their futures (and
                        // the state they shared) are gone by then: recording the first does
                        // not copy the run's state for the others. A failure, an end or a
                        // gate stops the gathering: what is still in flight then is
                        // cancelled or waited for as before.
                        let mut done = Vec::with_capacity(tasks.len() + 1);
                        done.push(first);
                        while let Some(Some(d)) = tasks.next().now_or_never() {
                            let stop = ends_gathering(&d.1);
                            done.push(d);
                            if stop || tasks.is_empty() {
                                break;
                            }
                        }
                        // Their records and events get their room at once.
                        self.unsaved.reserve(done.len());
                        self.events.reserve(done.len());
                        for (index, joined) in done {
                            self.joined(index, joined);
                        }
                    }
                    // Merges are weighed once the steps that finished together are in.
                    if std::mem::take(&mut self.fired) {
                        ready_merges(&self.wf, &mut self.snapshot, &self.in_flight);
                    }
                }
            }
        }
        // Dropping the futures cancels whatever is still in flight.
        drop(tasks);
        self.cancel_in_flight().await?;
        // Boxed: its state (the run's end, written once) need not take room in the drive's
        // future for the whole of the run (3.9 → 2.6 KB).
        Box::pin(self.finalize()).await
    }

    /// A node's future ended: its step is finished (or the run failed, if it panicked).
    fn joined(&mut self, index: usize, joined: std::thread::Result<Box<Attempts>>) {
        // What a node told while it ran (a fallback) but the loop has not read yet goes in
        // with its step, before the step's end.
        for mut ev in self.progress.take() {
            self.redact(&mut ev);
            self.events.push(ev);
        }
        match joined {
            Ok(r) => self.finish(index, r),
            Err(_) => {
                let node_id = self.wf.nodes[index].id.clone();
                // A panicking node is a bug, but it must not take the run down silently.
                self.fail(RunError {
                    code: ErrorCode::Internal,
                    message: format!("node `{node_id}` panicked; this is a bug in weir"),
                    node_id: Some(node_id),
                });
            }
        }
    }

    /// A told event's error as the log may show it (no secrets).
    fn redact(&self, ev: &mut EventKind) {
        if let EventKind::AttemptFailed { error, .. } = ev {
            self.engine.redactor.string(error);
        }
    }

    /// Commits the finished steps (if any) with the steps started since and the events of
    /// all of them, or just records the started steps.
    async fn flush(&mut self) -> Result<(), Error> {
        let store = &self.engine.services.store;
        // The list goes to the store and comes back with what it wrote (`written`).
        let events = std::mem::take(&mut self.events);
        // A step that started and already finished is written once, finished.
        // Siblings finished beside the first go in as its company (every store writes a
        // finished step among the started ones whole). `unsaved` keeps its room between
        // writes (taken, it would be allocated again at every step); the list of steps
        // this write starts is on the stack while it holds two or fewer (a chain's next
        // step, a join's).
        let unsaved = &self.unsaved;
        let mut started: smallvec::SmallVec<[&StepRecord; 2]> = smallvec::SmallVec::new();
        started.extend(unsaved.iter().skip(1).map(|s| &**s));
        for seq in &self.started {
            if let Some(step) = self.in_flight.steps().find(|s| s.seq == *seq)
                && !started.iter().any(|s| s.seq == *seq)
            {
                started.push(step);
            }
        }
        let w = match unsaved.first() {
            Some(step) => {
                let (patch, covers_patches) = match self.stored.as_mut() {
                    Some(t) => match t.next(&self.snapshot) {
                        Some(p) => (Some(p), false),
                        None => (None, t.whole()),
                    },
                    None => (None, false),
                };
                store
                    .commit_step(
                        &self.lease,
                        StepCommit {
                            step,
                            started: &started,
                            snapshot: &self.snapshot,
                            patch: patch.as_ref(),
                            covers_patches,
                            events,
                        },
                    )
                    .await?
            }
            None if !started.is_empty() => store.start_steps(&self.lease, &started, events).await?,
            None if !events.is_empty() => store.append_events(&self.lease, events).await?,
            None => return Ok(()),
        };
        drop(started);
        self.unsaved.clear();
        self.started.clear();
        self.written(w);
        Ok(())
    }

    fn fail(&mut self, err: RunError) {
        if self.ending.is_none() {
            self.ending = Some(Ending::Failed(err));
        }
    }

    fn launch_ready(&mut self, tasks: &mut Tasks) {
        // Launching changes neither `pending` nor its order: walked in place. A fan-out
        // launches several at once: their lists get their room in one step each, not by
        // doubling (each growth copies what the list holds).
        let launching = self.snapshot.pending.len().min(
            self.engine
                .max_concurrency
                .saturating_sub(self.in_flight.len()),
        );
        if launching > 1 {
            self.events.reserve(launching);
            self.started.reserve(launching);
            self.in_flight.reserve(launching);
        }
        let mut at = 0;
        while at < self.snapshot.pending.len() {
            at += 1;
            let pending = &self.snapshot.pending[at - 1];
            let Some(index) = self.wf.position(pending) else {
                let node_id = pending.to_string();
                self.fail(RunError {
                    code: ErrorCode::Internal,
                    message: format!("node `{node_id}` is pending but not in the workflow"),
                    node_id: Some(node_id),
                });
                return;
            };
            if self.in_flight.contains(index) {
                continue;
            }
            let node = &self.wf.nodes[index];
            let node_id = node.id.as_str();
            if self.in_flight.len() >= self.engine.max_concurrency {
                break;
            }
            let executed = self.snapshot.hops as usize + self.in_flight.len();
            if executed >= self.wf.hop_ceiling as usize {
                self.fail(self.hop_ceiling_error(node_id));
                return;
            }
            if let Some(task) = self.launch(index) {
                tasks.push(task);
            }
        }
    }

    /// Why a run that reached its hop ceiling fails: the ceiling, the most executed nodes,
    /// and the setting to raise.
    fn hop_ceiling_error(&self, node_id: &str) -> RunError {
        let mut counts: Vec<(&NodeId, &u32)> = self.snapshot.visits.iter().collect();
        counts.sort_by(|a, b| b.1.cmp(a.1));
        let top: Vec<String> = counts
            .iter()
            .take(3)
            .map(|(n, c)| format!("{n} ×{c}"))
            .collect();
        RunError {
            code: ErrorCode::HopCeilingExceeded,
            message: format!(
                "the run reached its hop ceiling of {} {} executions (most executed: {}); raise {} or give the loop an exit",
                self.wf.hop_ceiling,
                if self.wf.dialect == weir_core::Dialect::Pipeline {
                    "step"
                } else {
                    "node"
                },
                top.join(", "),
                if self.wf.dialect == weir_core::Dialect::Graph {
                    "hop_ceiling"
                } else {
                    "hopCeiling"
                },
            ),
            node_id: Some(node_id.to_string()),
        }
    }

    /// Starts node `index`: its step (`running`), its `step_started` event, its context,
    /// and the future that runs its attempts (or replays a reused outcome).
    #[expect(
        clippy::too_many_lines,
        reason = "a node's launch builds its step, event and context in one go: the context takes a dozen fields of the run at this moment"
    )]
    fn launch(&mut self, index: usize) -> Option<Task> {
        let node = &self.wf.nodes[index];
        let node_id = node.id.as_str();
        let visit = self.snapshot.visits.get(node_id).copied().unwrap_or(0) + 1;
        let seq = self.snapshot.next_seq;
        self.snapshot.next_seq += 1;
        let public = self.snapshot.state.clone();
        // Graph state is its own view; only the variables layout adds the id shortcuts.
        let state = match self.wf.layout {
            StateLayout::Flat => public.clone(),
            StateLayout::Variables => Arc::new(view(self.wf.layout, &public)),
        };
        let step = Box::new(StepRecord {
            seq,
            node_id: self.wf.node_id(index).clone(),
            node_type: node.type_name().into(),
            visit,
            status: StepStatus::Running,
            route: None,
            input: if matches!(
                node.kind,
                NodeKind::Agent(_) | NodeKind::Judge(_) | NodeKind::Consensus(_)
            ) {
                Value::Null
            } else {
                Value::Object(public.as_ref().clone())
            },
            output: weir_core::record::no_output(),
            error: None,
            cost_usd: 0.0,
            tokens: Tokens::default(),
            attempts: Vec::new(),
            started_at: Stamp::now(),
            finished_at: None,
            duration_ms: None,
        });
        self.events.push(EventKind::StepStarted {
            step: seq,
            node_id: self.wf.node_id(index).clone(),
            node_type: step.node_type.clone(),
            visit,
        });
        self.started.push(seq);
        let loop_count = self.snapshot.loops.get(node_id).copied().unwrap_or(0) + 1;
        let resume = if matches!(node.kind, NodeKind::Agent(_)) {
            let id = self.wf.node_id(index).clone();
            self.take_resume(&id, visit)
        } else {
            None
        };
        let launched = Instant::now();
        let ctx = NodeCtx {
            run_id: self.run_id.clone(),
            wf: self.wf.clone(),
            index,
            scope: weir_core::expr::Scope::new(state.clone())
                .with_template_bytes(self.engine.limits.template_bytes),
            state,
            public,
            layout: self.wf.layout,
            pass: self.snapshot.pass.max(1),
            history: if self.snapshot.history.is_empty() {
                no_history()
            } else {
                Arc::new(self.snapshot.history.clone())
            },
            visit,
            loop_count,
            seq,
            progress: self.progress.clone(),
            lease: self.held.clone(),
            services: self.engine.services.clone(),
            tool_request_bytes: self.engine.limits.tool_request_bytes,
            replay: self.engine.replay,
            launched,
            started_at: step.started_at.clone(),
            attempt: std::sync::atomic::AtomicU32::new(1),
            resume: std::sync::Mutex::new(resume),
            limits: self.limits(index),
            sink: self.engine.sink.clone(),
            replies: Arc::default(),
        };
        self.in_flight.insert(
            index,
            InFlight {
                step,
                started: launched,
            },
        );
        let wf = self.wf.clone();
        // A reused outcome is a future of its own: the node's future does not carry
        // room for one.
        if let Some(outcome) = self.take_reused(&wf.nodes[index], seq) {
            let done = Attempts {
                result: Ok(Box::new(outcome)),
                attempts: Vec::new(),
                spent: Default::default(),
            };
            return Some(Box::pin(std::future::ready((index, Ok(Box::new(done))))));
        }
        Some(Box::pin(async move {
            let result = std::panic::AssertUnwindSafe(async { Box::new(attempt::run(&ctx).await) })
                .catch_unwind()
                .await;
            (index, result)
        }))
    }

    /// The budgets node `index` runs under (none when neither it nor the workflow has one).
    fn limits(&self, index: usize) -> Option<Box<crate::budget::Limits>> {
        let node = &self.wf.nodes[index];
        if self.wf.budget.is_none() && node.policy.budget.is_none() {
            return None;
        }
        let raised = |key: &str, b: weir_core::ir::Budget| match self.snapshot.raised.get(key) {
            Some(r) => b.raised(r),
            None => b,
        };
        Some(Box::new(crate::budget::Limits {
            run: self
                .wf
                .budget
                .map(|b| (raised("", b), self.snapshot.cost_usd, self.snapshot.usage)),
            node: node.policy.budget.map(|b| raised(&node.id, b)),
        }))
    }

    /// The tool-use loop an agent goes on from, if it stopped in this visit (its driver
    /// died, or it parked at a tool call that was decided since).
    fn take_resume(&mut self, node_id: &str, visit: u32) -> Option<Box<weir_core::record::Resume>> {
        if self.snapshot.resume.is_empty() {
            return None;
        }
        let r = self.snapshot.resume.remove(node_id)?;
        if let Some(t) = &mut self.stored {
            t.touch_resume();
        }
        (r.visit == visit).then(|| Box::new(r))
    }

    /// A re-run: the next recorded outcome of this node, if the run reuses one.
    fn take_reused(&mut self, node: &weir_core::Node, seq: u32) -> Option<crate::nodes::Outcome> {
        if matches!(node.kind, NodeKind::HumanGate(_)) {
            return None;
        }
        let queue = self.snapshot.reuse.get_mut(&node.id)?;
        let reused = queue.remove(0);
        if queue.is_empty() {
            self.snapshot.reuse.remove(&node.id);
        }
        if let Some(t) = &mut self.stored {
            t.touch_reuse();
        }
        let outcome = crate::nodes::recorded(node, self.wf.layout, &reused)?;
        self.events.push(EventKind::StepReused {
            step: seq,
            node_id: node.id.clone(),
            from_run: reused.from_run,
            from_step: reused.seq,
        });
        Some(outcome)
    }

    /// Records a finished node and routes from it, in one committed step.
    /// The result stays in its box: read in place, not moved out of it (it is a few hundred
    /// bytes).
    #[expect(
        clippy::too_many_lines,
        reason = "a finished node recorded and routed in one committed step: record, route, state, loop counters, events; split, the commit's parts would be built in several places"
    )]
    fn finish(&mut self, index: usize, mut result: Box<Attempts>) {
        let wf = self.wf.clone();
        let node = &wf.nodes[index];
        let node_id = node.id.as_str();
        let Some(InFlight { mut step, started }) = self.in_flight.remove(index) else {
            return;
        };
        if let Some(i) = self.snapshot.pending.iter().position(|p| **p == *node_id) {
            self.snapshot.pending.remove(i);
        }
        self.snapshot.hops += 1;
        // An agent parked at a tool call goes on in the same visit once decided (its tool
        // calls' idempotency keys stay the same).
        let parked_loop = matches!(&result.result, Ok(o) if matches!(o.route, Route::Park { kind, .. } if !kind.is_human()));
        if !parked_loop {
            self.count_visit(wf.node_id(index));
        }
        // One clock reading: the end is the start plus the time it took on the monotonic
        // clock (which the duration is too), not a second reading of the wall clock.
        let took = started.elapsed().as_millis() as u64;
        step.duration_ms = Some(took);
        step.finished_at = Some(match step.started_at.millis() {
            Some(ms) => Stamp::from_millis(ms.saturating_add(took as i64)),
            None => Stamp::now(),
        });
        step.attempts = std::mem::take(&mut result.attempts);
        // Every attempt's model calls are charged, failed attempts included.
        step.cost_usd = result.spent.cost_usd;
        step.tokens = result.spent.tokens.clone();
        self.snapshot.cost_usd += result.spent.cost_usd;
        let usage = &mut self.snapshot.usage;
        usage.tokens += result.spent.tokens.input + result.spent.tokens.output;
        usage.model_calls += result.spent.model_calls;
        usage.tool_calls += result.spent.tools_made;
        // Governance events go in the step's own transaction.
        for event in &result.spent.events {
            self.events.push(EventKind::governance(node_id, event));
        }
        let redactor = &self.engine.redactor;
        match &mut result.result {
            Ok(outcome) => {
                redactor.output(&mut outcome.output);
                if let Some(w) = &mut outcome.write {
                    redactor.value(w);
                }
            }
            Err(f) => redactor.string(&mut f.message),
        }
        if let Ok(outcome) = &result.result
            && let Some(message) = self.over_budget(node, outcome)
        {
            result.result = Err(crate::nodes::Failure::fatal("too_big", message));
        }
        match &mut result.result {
            Err(f) => {
                step.status = StepStatus::Failed;
                step.error = Some(f.message.clone());
                self.fail(RunError {
                    code: if f.class == "budget_exceeded" {
                        ErrorCode::BudgetExceeded
                    } else {
                        ErrorCode::NodeFailed
                    },
                    message: format!("node `{node_id}` failed: {}", f.message),
                    node_id: Some(node_id.to_string()),
                });
            }
            Ok(outcome) => {
                step.status = StepStatus::Succeeded;
                step.route = outcome.route.label();
                self.write(node, outcome);
                if let NodeKind::Step(_) = node.kind {
                    self.record_pass(node, outcome);
                }
                // One value for the record and the snapshot's last output.
                let output = Arc::new(std::mem::take(&mut outcome.output));
                match &outcome.route {
                    Route::End(status) => {
                        if !output.is_null() {
                            self.snapshot.output = output.clone();
                            if let Some(t) = &mut self.stored {
                                t.touch_output();
                            }
                        }
                        self.set_completed(wf.node_id(index), true);
                        self.ending = Some(Ending::End(*status));
                    }
                    Route::Park {
                        prompt,
                        kind,
                        detail,
                    } => {
                        step.status = StepStatus::Waiting;
                        step.finished_at = None;
                        self.snapshot.gates.push(PendingGate {
                            node_id: node_id.to_string(),
                            prompt: prompt.clone(),
                            seq: step.seq,
                            kind: *kind,
                            detail: detail.as_deref().cloned(),
                        });
                    }
                    Route::All | Route::Key(_) => {
                        if let Some(t) = &mut self.stored {
                            t.touch_output();
                        }
                        self.snapshot.output = match (self.wf.layout, &outcome.write) {
                            (StateLayout::Variables, Some(w))
                                if matches!(node.kind, NodeKind::Step(_)) =>
                            {
                                Arc::new(w.clone().into())
                            }
                            _ => output.clone(),
                        };
                        if let NodeKind::Loop(_) = node.kind {
                            self.route_loop(index, &outcome.route);
                        } else {
                            self.set_completed(wf.node_id(index), true);
                        }
                        fire(&self.wf, &mut self.snapshot, index, &outcome.route);
                        self.fired = true;
                    }
                }
                step.output = output;
            }
        }
        self.engine.redactor.step(&mut step);
        self.events
            .push(finished_event_of(&step, wf.node_id(index).clone()));
        // Room for one at first, which a chain never outgrows: a first push would reserve
        // four records (1.1 KB), kept for the whole run (BENCHMARKS.md, memory per run).
        if self.unsaved.capacity() == 0 {
            self.unsaved.reserve_exact(1);
        }
        self.unsaved.push(step);
    }
}

/// An agent step that committed turns of its tool-use loop before its driver stopped: its
/// next run goes on from them (no tool call made twice), and what its model calls cost is
/// charged to it, the interrupted step.
fn resume_loop(snapshot: &mut Snapshot, s: &mut StepRecord) {
    let Some(attempt) = s.attempts.pop() else {
        return;
    };
    if attempt.tool_calls.is_empty() && attempt.calls.is_empty() {
        return;
    }
    for c in attempt
        .calls
        .iter()
        .filter(|c| c.get("carried_over").is_none())
    {
        s.tokens.input += c.get("input_tokens").and_then(Value::as_u64).unwrap_or(0);
        s.tokens.output += c.get("output_tokens").and_then(Value::as_u64).unwrap_or(0);
    }
    s.cost_usd = attempt.cost_usd;
    snapshot.cost_usd += attempt.cost_usd;
    s.error = Some(format!(
        "interrupted: the driver of this step stopped after {} tool call{}; the agent goes on from there",
        attempt.tool_calls.len(),
        if attempt.tool_calls.len() == 1 {
            ""
        } else {
            "s"
        }
    ));
    s.attempts.push(attempt.clone());
    snapshot.resume.insert(
        String::from(&*s.node_id),
        weir_core::record::Resume {
            visit: s.visit,
            attempt,
            decision: None,
        },
    );
}

/// The pipeline history of a run that has none, shared: most nodes of most runs see it.
fn no_history() -> Arc<std::collections::BTreeMap<String, Vec<weir_core::record::StepPass>>> {
    static EMPTY: std::sync::OnceLock<
        Arc<std::collections::BTreeMap<String, Vec<weir_core::record::StepPass>>>,
    > = std::sync::OnceLock::new();
    EMPTY.get_or_init(Arc::default).clone()
}

/// The `step_finished` event of a step record.
fn finished_event(s: &StepRecord) -> EventKind {
    finished_event_of(s, s.node_id.clone())
}

/// The same, with its node's id shared with the workflow (a step of this driver).
fn finished_event_of(s: &StepRecord, node_id: NodeId) -> EventKind {
    EventKind::StepFinished {
        step: s.seq,
        node_id,
        node_type: s.node_type.clone(),
        status: s.status,
        route: s.route.clone(),
        error: s.error.clone(),
        duration_ms: s.duration_ms.unwrap_or(0),
        cost_usd: s.cost_usd,
        attempts: s.attempts.len() as u32,
    }
}

/// How many times in a row the run was taken over from a driver that stopped (its lease
/// expired), counting back to the last step that finished (other than the steps cancelled
/// by the takeovers themselves).
async fn takeovers_in_a_row(engine: &Engine, run_id: &str) -> Result<u32, Error> {
    let events = engine.services.store.events_after(run_id, 0).await?;
    let mut n = 0;
    for e in events.iter().rev() {
        match &e.kind {
            EventKind::RunResumed {
                took_over_from: Some(_),
                ..
            } => n += 1,
            EventKind::StepFinished { status, .. } if *status != StepStatus::Cancelled => break,
            _ => {}
        }
    }
    Ok(n)
}
