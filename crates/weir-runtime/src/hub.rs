//! The wake-up hub: who waits on a run (event streams, by run id) and idle workers (any
//! runnable run) are woken here, by this process's drives and by the store's announcements
//! of other processes' changes.

use std::sync::Arc;

use tokio::sync::{Notify, broadcast};

/// Wakes whoever waits on a run: event streams (by run id) and idle workers.
pub struct Hub {
    runs: broadcast::Sender<Arc<str>>,
    /// Pieces of replies being written, as `(run id, the delta as JSON)`; sent only while
    /// someone listens.
    deltas: broadcast::Sender<(Arc<str>, Arc<str>)>,
    /// Notified when a run became runnable; an idle worker claims.
    pub work: Notify,
}

impl Default for Hub {
    fn default() -> Self {
        Self {
            runs: broadcast::channel(4096).0,
            deltas: broadcast::channel(1024).0,
            work: Notify::new(),
        }
    }
}

impl Hub {
    /// Run ids as their runs change (new events, a new status).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.runs.subscribe()
    }

    /// Pieces of replies being written (see [`Hub::delta`]).
    pub fn subscribe_deltas(&self) -> broadcast::Receiver<(Arc<str>, Arc<str>)> {
        self.deltas.subscribe()
    }

    /// Tells whoever follows `run_id` a piece of a reply; costs nothing while nobody does.
    pub fn delta(&self, run_id: &str, delta: &weir_core::event::Delta<'_>) {
        if self.deltas.receiver_count() == 0 {
            return;
        }
        if let Ok(json) = serde_json::to_string(delta) {
            let _ = self.deltas.send((Arc::from(run_id), Arc::from(json)));
        }
    }

    /// Announces that `run_id` changed.
    pub fn changed(&self, run_id: &str) {
        let _ = self.runs.send(Arc::from(run_id));
    }
}
