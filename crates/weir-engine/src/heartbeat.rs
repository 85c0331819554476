//! Lease renewal: one background task per engine renews the leases of every drive it is
//! running, every `heartbeat`, and tells a drive when its lease was lost or its run
//! cancelled. One task for all drives, rather than one per drive: starting and stopping a
//! task per run costs cross-thread wake-ups that show in the engine's per-run overhead.
//!
//! Fencing refuses a stale driver's writes, but a step's side effect (a model call, a
//! webhook) leaves the process before anything is written. So before each attempt a drive
//! asks [`Held::still_held`]: by this process's own clock the lease must still be good for
//! a heartbeat's time, or be renewed first. A process frozen past its lease (SIGSTOP, a
//! suspended VM) wakes, finds it expired, and learns from the refused renewal that another
//! driver took over, instead of repeating a step its successor already committed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use weir_core::RunStore;
use weir_core::store::{Lease, StoreError, now_ms};

use crate::{Error, LeaseTiming};

/// What the heartbeat found for one drive.
pub(crate) enum Signal {
    Lost(Error),
    Cancel,
}

/// A lease being renewed, and the drive's mailbox.
pub(crate) struct Held {
    lease: Mutex<Lease>,
    /// When the lease expires by this process's monotonic clock: the start of the last
    /// successful claim or renewal plus the time to live (the store computes the expiry
    /// from a clock read after that start, so this is never later than the store's).
    deadline: Mutex<Instant>,
    timing: LeaseTiming,
    signal: Mutex<Option<Signal>>,
    notify: Notify,
}

impl Held {
    /// Whether, at `now`, the lease has at least a heartbeat's time (at most half its
    /// time-to-live) left: the check without an await, for the common case.
    pub(crate) fn fresh(&self, now: Instant) -> bool {
        let margin = self.timing.heartbeat.min(self.timing.ttl / 2);
        now + margin < *self.deadline.lock().expect("heartbeat lock")
    }

    /// The lease as last claimed or renewed (for a write a node makes itself).
    pub(crate) fn current(&self) -> Lease {
        self.lease.lock().expect("heartbeat lock").clone()
    }

    fn renewed(&self, lease: Lease, asked: Instant) {
        *self.lease.lock().expect("heartbeat lock") = lease;
        *self.deadline.lock().expect("heartbeat lock") = asked + self.timing.ttl;
    }

    /// Before an attempt starts: waits until this process may start a side effect under the
    /// lease. Returns at once while the lease (as last written) has at least a heartbeat's
    /// time (at most half its time-to-live) left by this process's clock; otherwise renews it first. When the renewal is
    /// refused the drive is told the lease is lost and this never returns: the attempt is
    /// dropped with the drive, unstarted. A store that cannot be reached is asked again
    /// every heartbeat.
    pub(crate) async fn still_held(&self, store: &dyn RunStore) {
        loop {
            let asked = Instant::now();
            if self.fresh(asked) {
                return;
            }
            let mut lease = self.lease.lock().expect("heartbeat lock").clone();
            match store.renew(&mut lease, self.timing.ttl).await {
                Ok(_) => {
                    // A cancellation seen here reaches the drive at its next commit.
                    self.renewed(lease, asked);
                    return;
                }
                Err(e @ StoreError::LeaseLost { .. }) => {
                    self.send(Signal::Lost(e.into()));
                    std::future::pending::<()>().await;
                }
                Err(e) => {
                    tracing::warn!(run_id = %lease.run_id, "lease renewal before an attempt failed: {e}");
                    tokio::time::sleep(self.timing.heartbeat).await;
                }
            }
        }
    }

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

/// The leases being renewed, in shards by their number: every run's start and end
/// registers and deregisters its lease, and one lock for all of them made the workers of a
/// burst of runs queue on it (BENCHMARKS.md).
#[derive(Default)]
pub(crate) struct Leases {
    active: [Mutex<HashMap<u64, Arc<Held>>>; SHARDS],
    next: AtomicU64,
    task: OnceLock<()>,
}

const SHARDS: usize = 8;

impl Leases {
    fn shard(&self, id: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Held>>> {
        self.active[id as usize % SHARDS]
            .lock()
            .expect("heartbeat lock")
    }
}

/// Deregisters a drive's lease when the drive ends, however it ends.
pub(crate) struct Holding {
    leases: Arc<Leases>,
    id: u64,
    pub held: Arc<Held>,
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.leases.shard(self.id).remove(&self.id);
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
            deadline: Mutex::new(
                Instant::now()
                    + Duration::from_millis(lease.expires_at.saturating_sub(now_ms()).max(0) as u64),
            ),
            timing,
            signal: Mutex::new(None),
            notify: Notify::new(),
        });
        self.shard(id).insert(id, held.clone());
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
        let mut held: Vec<Arc<Held>> = Vec::new();
        for s in &l.active {
            held.extend(s.lock().expect("heartbeat lock").values().cloned());
        }
        drop(l);
        for h in held {
            let mut lease = h.lease.lock().expect("heartbeat lock").clone();
            let asked = Instant::now();
            match store.renew(&mut lease, timing.ttl).await {
                Ok(w) => {
                    h.renewed(lease, asked);
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
