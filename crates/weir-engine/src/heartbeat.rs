//! Lease renewal: one background task per engine renews the leases of every drive it is
//! running, every `heartbeat`, and tells a drive when its lease was lost or its run
//! cancelled. One task for all drives, rather than one per drive: starting and stopping a
//! task per run costs cross-thread wake-ups that show in the engine's per-run overhead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::Notify;
use weir_core::RunStore;
use weir_core::store::{Lease, StoreError};

use crate::{Error, LeaseTiming};

/// What the heartbeat found for one drive.
pub(crate) enum Signal {
    Lost(Error),
    Cancel,
}

/// A lease being renewed, and the drive's mailbox.
pub(crate) struct Held {
    lease: Mutex<Lease>,
    signal: Mutex<Option<Signal>>,
    notify: Notify,
}

impl Held {
    /// Waits until the heartbeat has something to say.
    pub(crate) async fn wait(&self) -> Signal {
        loop {
            if let Some(s) = self.signal.lock().expect("heartbeat lock").take() {
                return s;
            }
            self.notify.notified().await;
        }
    }

    fn send(&self, s: Signal) {
        *self.signal.lock().expect("heartbeat lock") = Some(s);
        self.notify.notify_one();
    }
}

#[derive(Default)]
pub(crate) struct Leases {
    active: Mutex<HashMap<u64, Arc<Held>>>,
    next: AtomicU64,
    task: OnceLock<()>,
}

/// Deregisters a drive's lease when the drive ends, however it ends.
pub(crate) struct Holding {
    leases: Arc<Leases>,
    id: u64,
    pub held: Arc<Held>,
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.leases
            .active
            .lock()
            .expect("heartbeat lock")
            .remove(&self.id);
    }
}

impl Leases {
    /// Starts renewing `lease` (spawning this engine's heartbeat task on first use).
    pub(crate) fn hold(
        self: &Arc<Self>,
        lease: &Lease,
        store: &Arc<dyn RunStore>,
        timing: LeaseTiming,
    ) -> Holding {
        self.task.get_or_init(|| {
            tokio::spawn(beat(Arc::downgrade(self), store.clone(), timing));
        });
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let held = Arc::new(Held {
            lease: Mutex::new(lease.clone()),
            signal: Mutex::new(None),
            notify: Notify::new(),
        });
        self.active
            .lock()
            .expect("heartbeat lock")
            .insert(id, held.clone());
        Holding {
            leases: self.clone(),
            id,
            held,
        }
    }
}

async fn beat(leases: Weak<Leases>, store: Arc<dyn RunStore>, timing: LeaseTiming) {
    loop {
        tokio::time::sleep(timing.heartbeat).await;
        let Some(l) = leases.upgrade() else { return };
        let held: Vec<Arc<Held>> = l
            .active
            .lock()
            .expect("heartbeat lock")
            .values()
            .cloned()
            .collect();
        drop(l);
        for h in held {
            let mut lease = h.lease.lock().expect("heartbeat lock").clone();
            match store.renew(&mut lease, timing.ttl).await {
                Ok(w) => {
                    *h.lease.lock().expect("heartbeat lock") = lease;
                    if w.cancel_requested {
                        h.send(Signal::Cancel);
                    }
                }
                Err(e @ StoreError::LeaseLost { .. }) => h.send(Signal::Lost(e.into())),
                // Retried at the next beat; if the store stays down the lease expires and
                // the drive's next write is refused.
                Err(e) => tracing::warn!(run_id = %lease.run_id, "lease renewal failed: {e}"),
            }
        }
    }
}
