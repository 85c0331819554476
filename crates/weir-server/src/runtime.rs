//! What the server runs workflows with: the engine (built from the workspace settings plus
//! the custom tools saved over the API), the compiler, the in-process workers, the wake-up
//! hub that SSE streams and workers wait on, and the metrics the engine's events feed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{Notify, broadcast, watch};
use weir_core::catalog::Catalog;
use weir_core::event::EventKind;
use weir_core::record::{ErrorCode, RunError, RunStatus};
use weir_core::settings::{CustomTool, Settings};
use weir_core::store::{Lease, RunUpdate, Wake};
use weir_core::{Diagnostic, RunStore, Workflow};
use weir_dialects::Capabilities;
use weir_engine::{Engine, EventSink, LeaseTiming, Services};

/// Wakes whoever waits on a run: SSE streams (by run id) and idle workers.
pub struct Hub {
    runs: broadcast::Sender<Arc<str>>,
    pub work: Notify,
}

impl Hub {
    fn new() -> Self {
        Self {
            runs: broadcast::channel(4096).0,
            work: Notify::new(),
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.runs.subscribe()
    }

    pub fn changed(&self, run_id: &str) {
        let _ = self.runs.send(Arc::from(run_id));
    }
}

/// Step latency buckets (seconds) of the `weir_step_duration_seconds` histogram.
pub const BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

#[derive(Default)]
pub struct Metrics {
    pub step_buckets: [AtomicU64; 12],
    pub step_count: AtomicU64,
    pub step_sum_ms: AtomicU64,
    pub takeovers: AtomicU64,
    pub runs_finished: Mutex<HashMap<&'static str, u64>>,
}

impl Metrics {
    fn observe(&self, events: &[EventKind]) {
        for e in events {
            match e {
                EventKind::StepFinished { duration_ms, .. } => {
                    let secs = *duration_ms as f64 / 1000.0;
                    for (i, b) in BUCKETS.iter().enumerate() {
                        if secs <= *b {
                            self.step_buckets[i].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    self.step_count.fetch_add(1, Ordering::Relaxed);
                    self.step_sum_ms.fetch_add(*duration_ms, Ordering::Relaxed);
                }
                EventKind::RunResumed {
                    took_over_from: Some(_),
                    ..
                } => {
                    self.takeovers.fetch_add(1, Ordering::Relaxed);
                }
                EventKind::RunFinished { status, .. } => {
                    *self
                        .runs_finished
                        .lock()
                        .expect("metrics lock")
                        .entry(status.as_str())
                        .or_default() += 1;
                }
                _ => {}
            }
        }
    }
}

/// The engine's event sink: wakes SSE streams and counts metrics.
struct Sink {
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
}

impl EventSink for Sink {
    fn publish(&self, run_id: &str, events: &[EventKind]) {
        self.metrics.observe(events);
        self.hub.changed(run_id);
    }
}

/// One generation of the engine and compiler; rebuilt when custom tools change (drives in
/// flight keep the generation they started with).
pub struct Runtime {
    pub engine: Arc<Engine>,
    pub settings: Settings,
    tools: weir_tools::Registry,
    models: weir_providers::Router,
    compiled: Mutex<HashMap<(String, String), Arc<Workflow>>>,
}

impl Runtime {
    /// Compiles a workflow document against this workspace (the CLI's diagnostics).
    pub fn compile(
        &self,
        path: &str,
        text: &str,
    ) -> Result<weir_dialects::Validated, Vec<Diagnostic>> {
        weir_dialects::compile(
            path,
            text,
            &Capabilities {
                tools: &self.tools,
                models: &self.models,
                secrets: &self.settings,
            },
        )
    }

    /// A compiled workflow for a stored source, compiled once per text.
    pub fn workflow(&self, path: &str, text: &str) -> Result<Arc<Workflow>, Vec<Diagnostic>> {
        let key = (path.to_string(), text.to_string());
        if let Some(wf) = self.compiled.lock().expect("compile cache").get(&key) {
            return Ok(wf.clone());
        }
        let wf = self.compile(path, text)?.workflow;
        let mut cache = self.compiled.lock().expect("compile cache");
        if cache.len() > 512 {
            cache.clear();
        }
        cache.insert(key, wf.clone());
        Ok(wf)
    }
}

/// How the server was started.
#[derive(Clone)]
pub struct Options {
    /// Worker loops; each claims and drives up to `runs_per_worker` runs at once.
    pub workers: usize,
    pub runs_per_worker: usize,
    pub max_body: usize,
    /// How long a graceful shutdown lets in-flight steps finish.
    pub grace: Duration,
    /// How often idle workers look for runnable runs that no wake-up announced (runs
    /// created by other processes, expired leases).
    pub poll: Duration,
    pub owner: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            workers: 4,
            runs_per_worker: 8,
            max_body: 1 << 20,
            grace: Duration::from_secs(10),
            poll: Duration::from_millis(500),
            owner: weir_engine::process_owner(),
        }
    }
}

/// Everything the routes and workers share.
pub struct App {
    pub store: Arc<dyn RunStore>,
    pub catalog: Arc<dyn Catalog>,
    pub hub: Arc<Hub>,
    pub metrics: Arc<Metrics>,
    pub tokens: crate::auth::Tokens,
    pub options: Options,
    /// The settings of weir.toml, before the API's custom tools are added.
    base: Settings,
    runtime: RwLock<Arc<Runtime>>,
    interrupt: Arc<Notify>,
    drain: Arc<std::sync::atomic::AtomicBool>,
    /// Turns true when the server shuts down: open event streams end, so the graceful
    /// shutdown does not wait for their clients.
    pub closing: watch::Sender<bool>,
    /// The JSON of ended runs' records, which never change again.
    pub records: Records,
}

/// A bounded cache of ended runs' record JSON (by run id), oldest out first.
#[derive(Default)]
pub struct Records {
    inner: Mutex<(
        HashMap<String, axum::body::Bytes>,
        std::collections::VecDeque<String>,
        usize,
    )>,
}

impl Records {
    const MAX_BYTES: usize = 64 << 20;

    pub fn get(&self, run_id: &str) -> Option<axum::body::Bytes> {
        self.inner
            .lock()
            .expect("record cache")
            .0
            .get(run_id)
            .cloned()
    }

    pub fn put(&self, run_id: &str, json: axum::body::Bytes) {
        let mut guard = self.inner.lock().expect("record cache");
        let (map, order, bytes) = &mut *guard;
        if json.len() > Self::MAX_BYTES / 16 || map.contains_key(run_id) {
            return;
        }
        *bytes += json.len();
        map.insert(run_id.to_string(), json);
        order.push_back(run_id.to_string());
        while *bytes > Self::MAX_BYTES {
            let Some(old) = order.pop_front() else { break };
            if let Some(b) = map.remove(&old) {
                *bytes -= b.len();
            }
        }
    }

    /// Forgets a run (deleted by retention).
    pub fn forget(&self, run_id: &str) {
        let mut guard = self.inner.lock().expect("record cache");
        let (map, order, bytes) = &mut *guard;
        if let Some(b) = map.remove(run_id) {
            *bytes -= b.len();
            order.retain(|id| id != run_id);
        }
    }
}

impl App {
    pub async fn new(
        store: Arc<dyn RunStore>,
        catalog: Arc<dyn Catalog>,
        settings: Settings,
        options: Options,
    ) -> Result<Arc<Self>, String> {
        let hub = Arc::new(Hub::new());
        let metrics = Arc::new(Metrics::default());
        let interrupt = Arc::new(Notify::new());
        let drain = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // A store shared with other processes (Postgres) announces their changes: runs to
        // claim for the workers, new events for the SSE streams. Polling stays the fallback.
        let heard = Arc::downgrade(&hub);
        store.watch(Arc::new(move |w| {
            let Some(hub) = heard.upgrade() else { return };
            match w {
                Wake::Work | Wake::Lost => hub.work.notify_one(),
                Wake::Run(id) => hub.changed(&id),
            }
        }));
        let saved = catalog.tools().await.map_err(|e| e.to_string())?;
        let runtime = build(
            &settings, &saved, &store, &hub, &metrics, &options, &interrupt, &drain,
        )?;
        Ok(Arc::new(Self {
            store,
            catalog,
            hub,
            metrics,
            tokens: crate::auth::Tokens::default(),
            options,
            base: settings,
            runtime: RwLock::new(Arc::new(runtime)),
            interrupt,
            drain,
            closing: watch::channel(false).0,
            records: Records::default(),
        }))
    }

    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime.read().expect("runtime lock").clone()
    }

    /// Rebuilds the runtime after the API's custom tools changed.
    pub async fn reload_tools(&self) -> Result<(), String> {
        let saved = self.catalog.tools().await.map_err(|e| e.to_string())?;
        let runtime = build(
            &self.base,
            &saved,
            &self.store,
            &self.hub,
            &self.metrics,
            &self.options,
            &self.interrupt,
            &self.drain,
        )?;
        *self.runtime.write().expect("runtime lock") = Arc::new(runtime);
        Ok(())
    }

    /// `[retention]` of weir.toml.
    pub fn retention(&self) -> &Option<weir_core::settings::RetentionSettings> {
        &self.base.retention
    }

    /// The custom tools of weir.toml (which the API cannot change).
    pub fn file_tools(&self) -> &std::collections::BTreeMap<String, CustomTool> {
        &self.base.tools
    }

    /// Wakes an idle worker: a run became runnable. With none waiting, the wake-up is kept
    /// for the next worker that waits (one between a claim and its wait does not miss it);
    /// a worker with no free slot does not wait for wake-ups, so it never swallows one.
    pub fn wake(&self) {
        self.hub.work.notify_one();
    }

    /// Starts the in-process workers; they stop when `stop` turns true.
    pub fn start_workers(
        self: &Arc<Self>,
        stop: watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        (0..self.options.workers)
            .map(|_| {
                let app = self.clone();
                let stop = stop.clone();
                tokio::spawn(async move { app.work(stop).await })
            })
            .collect()
    }

    /// One worker: claims up to `runs_per_worker` runs at a time and drives them
    /// concurrently; claims more as they finish or when woken.
    async fn work(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut drives = tokio::task::JoinSet::new();
        let most = self.options.runs_per_worker.max(1);
        // After a failed claim (the database restarting, unreachable), wait longer each time,
        // up to 5 s, then carry on where the store left off.
        let mut backoff: Option<Duration> = None;
        loop {
            if *stop.borrow() {
                break;
            }
            while drives.try_join_next().is_some() {}
            let free = most.saturating_sub(drives.len());
            if free > 0 {
                let rt = self.runtime();
                let claimed = rt.engine.claim_next(free as u32).await;
                if claimed.is_ok()
                    && let Some(b) = backoff.take()
                {
                    tracing::warn!("worker: the store answers again (after backing off {b:?})");
                }
                match claimed {
                    Ok(leases) if !leases.is_empty() => {
                        for lease in leases {
                            let (app, rt) = (self.clone(), rt.clone());
                            drives.spawn(async move { app.drive(&rt, lease).await });
                        }
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let wait = backoff.map_or(Duration::from_millis(250), |b| {
                            (b * 2).min(Duration::from_secs(5))
                        });
                        tracing::warn!("worker: cannot claim runs: {e}; retrying in {wait:?}");
                        backoff = Some(wait);
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = stop.changed() => {}
                        }
                        continue;
                    }
                }
                tokio::select! {
                    _ = self.hub.work.notified() => {}
                    _ = tokio::time::sleep(self.options.poll) => {}
                    _ = stop.changed() => {}
                    Some(_) = drives.join_next(), if !drives.is_empty() => {}
                }
            } else {
                tokio::select! {
                    _ = stop.changed() => {}
                    Some(_) = drives.join_next() => {}
                }
            }
        }
        while drives.join_next().await.is_some() {}
    }

    async fn drive(&self, rt: &Runtime, lease: Lease) {
        let run_id = lease.run_id.clone();
        let stored = match self.store.load_run(&run_id).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("worker: cannot load run {run_id}: {e}");
                return;
            }
        };
        match rt.workflow(&stored.source_path, &stored.source_text) {
            Ok(wf) => match rt.engine.drive_loaded(wf, lease, stored).await {
                Ok(o) if o.status.is_terminal() && crate::otel::enabled() => {
                    if let Ok(record) = self.store.get_record(&run_id).await {
                        crate::otel::export(&record).await;
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("worker: run {run_id}: {e}"),
            },
            Err(diags) => {
                // A run whose pinned workflow no longer compiles (a tool or model removed
                // from the workspace) fails once, instead of being claimed forever.
                let first = diags
                    .iter()
                    .find(|d| d.is_error())
                    .map_or_else(String::new, |d| d.message.clone());
                let error = RunError {
                    code: ErrorCode::Internal,
                    message: format!(
                        "the workflow version this run pins no longer compiles with the server's settings: {first}"
                    ),
                    node_id: None,
                };
                let update = RunUpdate {
                    status: RunStatus::Failed,
                    error: Some(error.clone()),
                    finished_at: Some(weir_engine::now()),
                    snapshot: stored.snapshot,
                };
                let events = vec![EventKind::RunFinished {
                    status: RunStatus::Failed,
                    error: Some(error),
                }];
                match self.store.finish_run(&lease, &[], &update, events).await {
                    Ok(w) => {
                        self.metrics.observe(&w.events);
                        self.hub.changed(&run_id);
                    }
                    Err(e) => tracing::warn!("worker: run {run_id}: {e}"),
                }
            }
        }
    }

    /// Graceful shutdown of the workers: no new claims, no new steps; in-flight steps get
    /// the grace period to finish, then are interrupted. Every run is released `queued` for
    /// the next server or worker.
    pub async fn drain(&self, workers: Vec<tokio::task::JoinHandle<()>>) {
        self.drain.store(true, Ordering::Relaxed);
        let all = futures_util::future::join_all(workers);
        tokio::pin!(all);
        if tokio::time::timeout(self.options.grace, &mut all)
            .await
            .is_err()
        {
            // Keep interrupting until every drive has released its run: a drive between two
            // awaits misses one notification.
            loop {
                self.interrupt.notify_waiters();
                if tokio::time::timeout(Duration::from_millis(100), &mut all)
                    .await
                    .is_ok()
                {
                    break;
                }
            }
        }
        self.runtime().engine.shutdown_tools().await;
    }
}

#[allow(clippy::too_many_arguments)]
fn build(
    base: &Settings,
    saved: &[weir_core::catalog::ToolRow],
    store: &Arc<dyn RunStore>,
    hub: &Arc<Hub>,
    metrics: &Arc<Metrics>,
    options: &Options,
    interrupt: &Arc<Notify>,
    drain: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<Runtime, String> {
    let mut settings = base.clone();
    for t in saved {
        let tool: CustomTool = serde_json::from_value(t.definition.clone())
            .map_err(|e| format!("saved custom tool {}: {e}", t.name))?;
        settings.tools.entry(t.name.clone()).or_insert(tool);
    }
    let services = Services {
        models: Arc::new(weir_providers::Router::new(settings.clone())?),
        tools: Arc::new(weir_tools::Registry::serving(settings.clone())?),
        scripts: Arc::new(weir_script::Bun::from_env().with_env(settings.scripts.env.clone())),
        store: store.clone(),
        secrets: Arc::new(settings.clone()),
    };
    let mut engine = Engine::new(
        services,
        Arc::new(Sink {
            hub: hub.clone(),
            metrics: metrics.clone(),
        }),
    );
    engine.owner = options.owner.clone();
    engine.lease = LeaseTiming::of(&settings.lease);
    engine.max_input_bytes = settings.limits.input_bytes;
    engine.interrupt = Some(interrupt.clone());
    engine.drain = drain.clone();
    Ok(Runtime {
        engine: Arc::new(engine),
        tools: weir_tools::Registry::new(settings.clone()),
        models: weir_providers::Router::offline(settings.clone()),
        settings,
        compiled: Mutex::new(HashMap::new()),
    })
}
