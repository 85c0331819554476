//! A drive's write tried again while the database is busy or out of reach, with backoff,
//! for as long as [`RETRY_FOR`]: a locked SQLite file, a full disk that an operator frees,
//! a Postgres server restarting or a connection cut by the network. Only a write the
//! database surely did not apply is tried again (its transaction rolled back, or it never
//! left this process), so a retry can never write a step twice.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use weir_core::store::{Fault, StoreError};

/// How long one write is tried again before its failure becomes the drive's. Shorter than
/// a lease, so a driver that gives up lets go well before another may take the run over.
pub(crate) const RETRY_FOR: Duration = Duration::from_secs(10);

/// The first wait; each next one doubles, up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(50);
const MAX_WAIT: Duration = Duration::from_secs(2);

/// How one try of a write failed.
pub(crate) enum Failed {
    /// The database did not apply it: trying again is safe if the fault is transient.
    Unapplied(StoreError),
    /// It may have been applied (the connection broke after the statement was sent):
    /// never tried again; the run is left to the next driver, which reads what committed.
    Unknown(StoreError),
}

impl Failed {
    /// A failure after the statement was sent: a transaction the database aborted (busy,
    /// a serialization failure, a deadlock) was not applied; anything else may have been.
    pub(crate) fn after_sending(e: StoreError) -> Self {
        if e.fault() == Some(Fault::Busy) {
            Self::Unapplied(e)
        } else {
            Self::Unknown(e)
        }
    }
}

impl From<StoreError> for Failed {
    fn from(e: StoreError) -> Self {
        Self::Unapplied(e)
    }
}

/// Runs `write` until it succeeds, fails for good, or [`RETRY_FOR`] has passed; `what` names
/// the write in the log line each retry leaves.
pub(crate) async fn retrying<T, F, Fut>(what: &str, mut write: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failed>>,
{
    let started = Instant::now();
    let mut wait = FIRST_WAIT;
    let mut tries = 1u32;
    loop {
        let e = match write().await {
            Ok(v) => return Ok(v),
            Err(Failed::Unknown(e)) => return Err(e),
            Err(Failed::Unapplied(e)) => e,
        };
        let transient = e.fault().is_some_and(Fault::transient);
        if !transient || started.elapsed() + wait > RETRY_FOR {
            if transient {
                tracing::debug!(write = what, tries, "{e}: gave up");
            }
            return Err(e);
        }
        // Said once per write: the ones after are the same wait, longer.
        if tries == 1 {
            tracing::warn!(
                write = what,
                "{e}: trying again for up to {} s",
                RETRY_FOR.as_secs()
            );
        } else {
            tracing::debug!(write = what, tries, "{e}: trying again in {wait:?}");
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_WAIT);
        tries += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use weir_core::store::BackendError;

    fn busy() -> StoreError {
        StoreError::Backend(BackendError::new(Fault::Busy, "locked"))
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_write_is_tried_again_until_it_succeeds() {
        let tries = AtomicU32::new(0);
        let out = retrying("commit", || async {
            if tries.fetch_add(1, Ordering::SeqCst) < 3 {
                Err(Failed::from(busy()))
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!(out.unwrap(), 7);
        assert_eq!(tries.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_may_have_been_applied_is_never_tried_again() {
        let tries = AtomicU32::new(0);
        let out: Result<(), _> = retrying("commit", || async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err(Failed::after_sending(StoreError::Backend(
                BackendError::new(Fault::Unavailable, "connection reset"),
            )))
        })
        .await;
        assert!(out.is_err());
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_permanent_fault_fails_at_once_and_a_transient_one_gives_up_in_time() {
        let tries = AtomicU32::new(0);
        let out: Result<(), _> = retrying("commit", || async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err(Failed::from(StoreError::Backend(BackendError::new(
                Fault::TooBig,
                "too big",
            ))))
        })
        .await;
        assert!(out.is_err());
        assert_eq!(tries.load(Ordering::SeqCst), 1);

        let started = Instant::now();
        let out: Result<(), _> = retrying("commit", || async { Err(Failed::from(busy())) }).await;
        assert_eq!(out.unwrap_err().fault(), Some(Fault::Busy));
        assert!(started.elapsed() <= RETRY_FOR, "{:?}", started.elapsed());
        assert!(
            started.elapsed() >= RETRY_FOR - MAX_WAIT,
            "{:?}",
            started.elapsed()
        );
    }
}
