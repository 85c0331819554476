//! The worker loop: claim runnable runs under leases, drive them, and drain on shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;
use weir_core::event::EventKind;
use weir_core::record::{ErrorCode, RunError, RunStatus};
use weir_core::store::{Lease, RunUpdate};

use crate::{Generation, Runtime};

/// The running worker loops of a process; [`Runtime::drain`] ends them.
pub struct Workers(Vec<tokio::task::JoinHandle<()>>);

impl Runtime {
    /// Starts `options.workers` worker loops; they stop claiming when `stop` turns true.
    pub fn start_workers(self: &Arc<Self>, stop: watch::Receiver<bool>) -> Workers {
        Workers(
            (0..self.options.workers)
                .map(|_| {
                    let rt = self.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move { rt.work(stop).await })
                })
                .collect(),
        )
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
            if free == 0 {
                tokio::select! {
                    _ = stop.changed() => {}
                    Some(_) = drives.join_next() => {}
                }
                continue;
            }
            let generation = self.generation();
            let claimed = generation.engine.claim_next(free as u32).await;
            if claimed.is_ok()
                && let Some(b) = backoff.take()
            {
                tracing::warn!("worker: the store answers again (after backing off {b:?})");
            }
            match claimed {
                Ok(leases) if !leases.is_empty() => {
                    for lease in leases {
                        let (rt, generation) = (self.clone(), generation.clone());
                        drives.spawn(async move { rt.drive(&generation, lease).await });
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
        }
        while drives.join_next().await.is_some() {}
    }

    /// Drives one claimed run to its end or its next pause, then exports its trace.
    async fn drive(&self, generation: &Generation, lease: Lease) {
        let run_id = lease.run_id.clone();
        let stored = match self.store.load_run(&run_id).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("worker: cannot load run {run_id}: {e}");
                return;
            }
        };
        let diags = match generation.workflow(&stored.source_path, &stored.source_text) {
            Ok(wf) => {
                match generation.engine.drive_loaded(wf, lease, stored).await {
                    Ok(o) if o.status.is_terminal() => self.export_trace(&run_id).await,
                    Ok(_) => {}
                    Err(e) => tracing::warn!("worker: run {run_id}: {e}"),
                }
                return;
            }
            Err(diags) => diags,
        };
        // A run whose pinned workflow no longer compiles (a tool or model removed from the
        // workspace) fails once, instead of being claimed forever.
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

    /// Exports an ended run's trace when trace export is on (see [`crate::otel`]).
    pub async fn export_trace(&self, run_id: &str) {
        if !crate::otel::enabled() {
            return;
        }
        if let Ok(record) = self.store.get_record(run_id).await {
            crate::otel::export(&record).await;
        }
    }

    /// Graceful shutdown of the workers: no new claims, no new steps; in-flight steps get
    /// the grace period to finish, then are interrupted. Every run is released `queued` for
    /// the next server or worker.
    pub async fn drain(&self, workers: Workers) {
        self.builder.drain.store(true, Ordering::Relaxed);
        let all = futures_util::future::join_all(workers.0);
        tokio::pin!(all);
        if tokio::time::timeout(self.options.grace, &mut all)
            .await
            .is_err()
        {
            // Keep interrupting until every drive has released its run: a drive between two
            // awaits misses one notification.
            loop {
                self.builder.interrupt.notify_waiters();
                if tokio::time::timeout(Duration::from_millis(100), &mut all)
                    .await
                    .is_ok()
                {
                    break;
                }
            }
        }
        self.generation().engine.shutdown_tools().await;
    }
}
