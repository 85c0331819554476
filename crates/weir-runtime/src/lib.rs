//! weir-runtime: what keeps runs moving in a long-lived process. `weir serve` is this
//! runtime plus the HTTP API; `weir worker` is this runtime alone.
//!
//! It owns the worker loop (claim runnable runs under leases, drive them, drain on
//! shutdown), the wake-up [`Hub`], the process's [`Metrics`], the compile cache of a
//! [`Generation`], the retention schedule and the export of ended runs' traces over OTLP.
//! It never names a concrete provider, tool, script runtime or store: the binary hands them
//! over as [`Services`], and the runtime builds each generation of the engine through the
//! [`Implementations`] it was given.
//!
//! Start reading at [`Runtime::new`] and [`Runtime::start_workers`] (`worker.rs`).

#![warn(missing_docs)]

pub mod hub;
pub mod metrics;
pub mod otel;
pub mod retention;
pub mod triggers;

mod generation;
mod start;
mod worker;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::Notify;
use weir_core::catalog::Catalog;
use weir_core::settings::{CustomTool, RetentionSettings, Settings};
use weir_core::store::Wake;
use weir_core::{ModelClient, RunStore, ScriptRunner, ToolRunner};

use generation::Builder;
pub use generation::Generation;
pub use hub::Hub;
pub use metrics::{BUCKETS, Metrics};
pub use start::{StartError, doc_path};
pub use worker::Workers;

/// The concrete implementations of one generation, built by [`Implementations::build`].
pub struct Parts {
    /// The model client drives call.
    pub models: Arc<dyn ModelClient>,
    /// The tool runner drives call, under the workspace's network policy.
    pub tools: Arc<dyn ToolRunner>,
    /// The script runner of `script` nodes.
    pub scripts: Arc<dyn ScriptRunner>,
    /// What the compiler checks model names and policy against (offline: no requests).
    pub check_models: Arc<dyn ModelClient>,
    /// What the compiler checks tool names against (no connections are made).
    pub check_tools: Arc<dyn ToolRunner>,
}

/// How the binary's chosen implementations are built for a set of settings; called once at
/// start and again whenever the custom tools saved over the API change.
pub trait Implementations: Send + Sync {
    /// The model client, tool runner and script runner for `settings`; `Err` says what in
    /// the settings is wrong.
    fn build(&self, settings: &Settings) -> Result<Parts, String>;

    /// The model names whose prices are known (the workflow builder's model picker).
    fn known_models(&self) -> Vec<String>;
}

/// Everything the binary hands the runtime (and, through it, the server).
pub struct Services {
    /// Where runs, steps and events are kept.
    pub store: Arc<dyn RunStore>,
    /// Where saved workflows, custom tools and tokens are kept.
    pub catalog: Arc<dyn Catalog>,
    /// `weir.toml`.
    pub settings: Settings,
    /// How models, tools and scripts are built.
    pub implementations: Arc<dyn Implementations>,
}

/// How the process was started.
#[derive(Clone)]
pub struct Options {
    /// Worker loops; each claims and drives up to `runs_per_worker` runs at once.
    pub workers: usize,
    /// Runs each worker loop drives at once.
    pub runs_per_worker: usize,
    /// How long a graceful shutdown lets in-flight steps finish.
    pub grace: Duration,
    /// How often idle workers look for runnable runs that no wake-up announced (runs
    /// created by other processes, expired leases).
    pub poll: Duration,
    /// The name leases are held under.
    pub owner: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            workers: 4,
            runs_per_worker: 8,
            grace: Duration::from_secs(10),
            poll: Duration::from_millis(500),
            owner: weir_engine::process_owner(),
        }
    }
}

/// The long-lived part of `weir serve` and `weir worker`.
pub struct Runtime {
    /// Runs, steps and events.
    pub store: Arc<dyn RunStore>,
    /// Workflows, custom tools and tokens.
    pub catalog: Arc<dyn Catalog>,
    /// Wakes event streams and idle workers.
    pub hub: Arc<Hub>,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// How the process was started.
    pub options: Options,
    builder: Builder,
    generation: RwLock<Arc<Generation>>,
}

impl Runtime {
    /// Builds the first generation of the engine and listens to the store's announcements.
    pub async fn new(services: Services, options: Options) -> Result<Arc<Self>, String> {
        let Services {
            store,
            catalog,
            settings,
            implementations,
        } = services;
        let hub = Arc::new(Hub::default());
        // A store shared with other processes (Postgres) announces their changes: runs to
        // claim for the workers, new events for the event streams. Polling stays the fallback.
        let heard = Arc::downgrade(&hub);
        store.watch(Arc::new(move |w| {
            let Some(hub) = heard.upgrade() else { return };
            match w {
                Wake::Work | Wake::Lost => hub.work.notify_one(),
                Wake::Run(id) => hub.changed(&id),
            }
        }));
        let metrics = Arc::new(Metrics::default());
        let builder = Builder {
            base: settings,
            implementations,
            store: store.clone(),
            hub: hub.clone(),
            metrics: metrics.clone(),
            owner: options.owner.clone(),
            interrupt: Arc::new(Notify::new()),
            drain: Arc::new(AtomicBool::new(false)),
        };
        let saved = catalog.tools().await.map_err(|e| e.to_string())?;
        let first = builder.build(&saved)?;
        Ok(Arc::new(Self {
            store,
            catalog,
            hub,
            metrics,
            options,
            builder,
            generation: RwLock::new(Arc::new(first)),
        }))
    }

    /// The current generation of the engine and compiler.
    pub fn generation(&self) -> Arc<Generation> {
        self.generation.read().expect("generation lock").clone()
    }

    /// Rebuilds the generation after the API's custom tools changed.
    pub async fn reload_tools(&self) -> Result<(), String> {
        let saved = self.catalog.tools().await.map_err(|e| e.to_string())?;
        let next = self.builder.build(&saved)?;
        *self.generation.write().expect("generation lock") = Arc::new(next);
        Ok(())
    }

    /// `[retention]` of weir.toml.
    pub fn retention(&self) -> Option<&RetentionSettings> {
        self.builder.base.retention.as_ref()
    }

    /// The custom tools of weir.toml (which the API cannot change).
    pub fn file_tools(&self) -> &BTreeMap<String, CustomTool> {
        &self.builder.base.tools
    }

    /// The model names whose prices are known.
    pub fn known_models(&self) -> Vec<String> {
        self.builder.implementations.known_models()
    }

    /// Wakes an idle worker: a run became runnable. With none waiting, the wake-up is kept
    /// for the next worker that waits (one between a claim and its wait does not miss it);
    /// a worker with no free slot does not wait for wake-ups, so it never swallows one.
    pub fn wake(&self) {
        self.hub.work.notify_one();
    }
}
