//! Wake-up hints over `LISTEN/NOTIFY`, and the crash tests' fault injection.
//!
//! `NOTIFY` inside a write's transaction would take Postgres's global notification lock at
//! every commit, serialising the hot path across all workers. Instead the store hands hints
//! to one task, which sends whatever gathered while its previous send was in flight as one
//! statement in a transaction of its own: at most one send in flight per process, however
//! many writes there are.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::mpsc;
use weir_core::store::{StoreError, Wake, WakeFn};

/// A channel for runnable work, and one for changed runs (the payload: run ids, comma
/// separated).
const WORK: &str = "weir_work";
const RUNS: &str = "weir_runs";
/// The least time between two sends.
const DEBOUNCE: Duration = Duration::from_millis(4);
/// Keeps each payload under Postgres's 8,000-byte limit.
const PAYLOAD: usize = 7_000;

enum Note {
    Work,
    Run(String),
}

pub struct Notifier {
    tx: mpsc::UnboundedSender<Note>,
}

impl Notifier {
    pub fn start(pool: PgPool) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Note>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let (mut work, mut runs) = (false, BTreeSet::new());
                let mut take = |n: Note| match n {
                    Note::Work => work = true,
                    Note::Run(id) => {
                        runs.insert(id);
                    }
                };
                take(first);
                while let Ok(n) = rx.try_recv() {
                    take(n);
                }
                let (mut channels, mut payloads) = (Vec::new(), Vec::new());
                if work {
                    channels.push(WORK);
                    payloads.push(String::new());
                }
                let mut chunk = String::new();
                for id in runs {
                    if !chunk.is_empty() && chunk.len() + id.len() + 1 > PAYLOAD {
                        channels.push(RUNS);
                        payloads.push(std::mem::take(&mut chunk));
                    }
                    if !chunk.is_empty() {
                        chunk.push(',');
                    }
                    chunk.push_str(&id);
                }
                if !chunk.is_empty() {
                    channels.push(RUNS);
                    payloads.push(chunk);
                }
                // A hint that cannot be sent is dropped: listeners poll as well.
                if let Err(e) = sqlx::query(
                    "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS x(c, p)",
                )
                .bind(channels)
                .bind(payloads)
                .execute(&pool)
                .await
                {
                    tracing::debug!("postgres: wake-up hint not sent: {e}");
                }
                // Debounce: what arrives in the next few milliseconds goes out together, so
                // a busy process sends a couple of hundred notifications a second, not one
                // per write; the first hint after a quiet spell goes out at once.
                tokio::time::sleep(DEBOUNCE).await;
            }
        });
        Self { tx }
    }

    pub fn work(&self) {
        let _ = self.tx.send(Note::Work);
    }

    pub fn run(&self, run_id: &str) {
        let _ = self.tx.send(Note::Run(run_id.to_string()));
    }
}

/// Listens for hints and hands them to `on`; reconnects with backoff when the connection
/// drops, announcing [`Wake::Lost`] once it is back.
pub fn listen(pool: PgPool, on: WakeFn) {
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(100);
        loop {
            let mut listener = match PgListener::connect_with(&pool).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!("postgres: cannot listen for wake-ups: {e}; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            if let Err(e) = listener.listen_all([WORK, RUNS]).await {
                tracing::warn!("postgres: cannot listen for wake-ups: {e}; retrying");
                tokio::time::sleep(backoff).await;
                continue;
            }
            backoff = Duration::from_millis(100);
            on(Wake::Lost);
            loop {
                match listener.try_recv().await {
                    Ok(Some(n)) if n.channel() == WORK => on(Wake::Work),
                    Ok(Some(n)) => {
                        for id in n.payload().split(',').filter(|s| !s.is_empty()) {
                            on(Wake::Run(id.to_string()));
                        }
                    }
                    // The connection dropped; the next receive reconnects.
                    Ok(None) => on(Wake::Lost),
                    Err(e) => {
                        tracing::warn!("postgres: wake-ups interrupted: {e}");
                        break;
                    }
                }
            }
        }
    });
}

/// Fault injection for the crash tests: armed with an operation (`claim`, `commit`,
/// `decide`) and a statement index, the store fails that operation right after that many
/// statements of its transaction, which is then rolled back, as when the process dies there.
/// Compiled in only with the `faults` feature (the store's own tests turn it on); without it
/// `hit` is nothing. Fires once per arming.
#[derive(Default)]
pub struct Faults {
    armed: Mutex<Option<(&'static str, usize)>>,
    fired: AtomicUsize,
}

impl Faults {
    /// Arms a fault: the next `op` fails right after its statement number `after`.
    pub fn arm(&self, op: &'static str, after: usize) {
        *self.armed.lock().expect("faults lock") = Some((op, after));
    }

    /// How many faults fired so far.
    pub fn fired(&self) -> usize {
        self.fired.load(Ordering::Relaxed)
    }

    #[cfg(not(feature = "faults"))]
    #[inline(always)]
    pub(super) fn hit(&self, _op: &'static str, _at: usize) -> Result<(), StoreError> {
        Ok(())
    }

    #[cfg(feature = "faults")]
    pub(super) fn hit(&self, op: &'static str, at: usize) -> Result<(), StoreError> {
        let mut armed = self.armed.lock().expect("faults lock");
        if *armed == Some((op, at)) {
            *armed = None;
            self.fired.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::backend(
                weir_core::store::Fault::Unavailable,
                format!("injected fault: {op} stopped after statement {at}"),
            ));
        }
        Ok(())
    }
}
