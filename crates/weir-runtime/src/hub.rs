//! The wake-up hub: who waits on a run (event streams, by run id) and idle workers (any
//! runnable run) are woken here, by this process's drives and by the store's announcements
//! of other processes' changes.

use std::sync::Arc;

use tokio::sync::{Notify, broadcast};

/// Wakes whoever waits on a run: event streams (by run id) and idle workers.
pub struct Hub {
    runs: broadcast::Sender<Arc<str>>,
    /// Notified when a run became runnable; an idle worker claims.
    pub work: Notify,
}

impl Default for Hub {
    fn default() -> Self {
        Self {
            runs: broadcast::channel(4096).0,
            work: Notify::new(),
        }
    }
}

impl Hub {
    /// Run ids as their runs change (new events, a new status).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.runs.subscribe()
    }

    /// Announces that `run_id` changed.
    pub fn changed(&self, run_id: &str) {
        let _ = self.runs.send(Arc::from(run_id));
    }
}
