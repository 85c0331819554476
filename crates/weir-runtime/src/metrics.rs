//! The process's counters for `/metrics`, fed by the engine's events through [`Sink`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use weir_core::event::EventKind;
use weir_engine::EventSink;

use crate::Hub;

/// Step latency buckets (seconds) of the `weir_step_duration_seconds` histogram.
pub const BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

/// Step latencies, takeovers and ended runs by status, since the process started.
#[derive(Default)]
pub struct Metrics {
    /// Cumulative counts per bucket of [`BUCKETS`].
    pub step_buckets: [AtomicU64; 12],
    /// Steps finished.
    pub step_count: AtomicU64,
    /// Their summed duration.
    pub step_sum_ms: AtomicU64,
    /// Runs resumed from another owner's expired lease.
    pub takeovers: AtomicU64,
    /// Runs ended, by status name.
    pub runs_finished: Mutex<HashMap<&'static str, u64>>,
    /// Budgets that stopped a call: runs failed with `budget_exceeded`, runs parked at a
    /// `budget` gate.
    pub budget_failed: AtomicU64,
    /// Runs parked at a `budget` gate.
    pub budget_paused: AtomicU64,
}

impl Metrics {
    /// Counts what `events` say.
    pub fn observe(&self, events: &[EventKind]) {
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
                EventKind::RunPaused {
                    kind: weir_core::record::GateKind::Budget,
                    ..
                } => {
                    self.budget_paused.fetch_add(1, Ordering::Relaxed);
                }
                EventKind::RunFinished { status, error } => {
                    if error
                        .as_ref()
                        .is_some_and(|e| e.code == weir_core::record::ErrorCode::BudgetExceeded)
                    {
                        self.budget_failed.fetch_add(1, Ordering::Relaxed);
                    }
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

/// The engine's event sink: wakes event streams and counts metrics.
pub(crate) struct Sink {
    pub hub: Arc<Hub>,
    pub metrics: Arc<Metrics>,
}

impl EventSink for Sink {
    fn publish(&self, run_id: &str, events: &[EventKind]) {
        self.metrics.observe(events);
        self.hub.changed(run_id);
    }

    fn streams(&self) -> bool {
        true
    }

    fn delta(&self, run_id: &str, delta: &weir_core::event::Delta<'_>) {
        self.hub.delta(run_id, delta);
    }
}
