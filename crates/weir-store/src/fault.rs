//! Database library errors as typed store errors: each keeps the library's error as its
//! source and says what kind of failure it is ([`Fault`]), so a caller can tell a busy
//! database (try again) from a value too big to ever be written (end the run).

use std::any::Any;
use std::error::Error;

use weir_core::store::{BackendError, Fault, StoreError};

/// A failure of the database library (rusqlite, sqlx), of the file system, or of reading
/// JSON back, as a store error of the right [`Fault`].
pub(crate) fn backend<E: Error + Send + Sync + 'static>(e: E) -> StoreError {
    let fault = classify(&e);
    StoreError::Backend(BackendError::caused_by(fault, e))
}

fn classify(e: &(dyn Any + Send + Sync)) -> Fault {
    if let Some(e) = e.downcast_ref::<rusqlite::Error>() {
        return sqlite(e);
    }
    if let Some(e) = e.downcast_ref::<sqlx::Error>() {
        return postgres(e);
    }
    if e.is::<std::io::Error>() {
        return Fault::Unavailable;
    }
    if e.is::<serde_json::Error>() || e.is::<sonic_rs::Error>() {
        return Fault::Corrupt;
    }
    Fault::Other
}

fn sqlite(e: &rusqlite::Error) -> Fault {
    use rusqlite::ErrorCode as C;
    match e {
        rusqlite::Error::SqliteFailure(f, _) => match f.code {
            C::DatabaseBusy | C::DatabaseLocked => Fault::Busy,
            C::TooBig => Fault::TooBig,
            C::DatabaseCorrupt | C::NotADatabase => Fault::Corrupt,
            C::CannotOpen
            | C::ReadOnly
            | C::DiskFull
            | C::SystemIoFailure
            | C::PermissionDenied => Fault::Unavailable,
            _ => Fault::Other,
        },
        rusqlite::Error::FromSqlConversionFailure(..) | rusqlite::Error::InvalidColumnType(..) => {
            Fault::Corrupt
        }
        _ => Fault::Other,
    }
}

fn postgres(e: &sqlx::Error) -> Fault {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Fault::Unavailable,
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => Fault::Corrupt,
        sqlx::Error::Database(db) => match db.code().as_deref() {
            // serialization_failure, deadlock_detected, lock_not_available
            Some("40001" | "40P01" | "55P03") => Fault::Busy,
            // program_limit_exceeded (a row or value over Postgres's limits)
            Some(c) if c.starts_with("54") => Fault::TooBig,
            // insufficient resources; the server shutting down; connection exceptions
            Some(c) if c.starts_with("53") || c.starts_with("57P") || c.starts_with("08") => {
                Fault::Unavailable
            }
            Some("XX001" | "XX002") => Fault::Corrupt,
            _ => Fault::Other,
        },
        _ => Fault::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_failures_are_told_apart() {
        let too_big = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_TOOBIG),
            Some("string or blob too big".into()),
        );
        let e = backend(too_big);
        assert_eq!(e.fault(), Some(Fault::TooBig));
        assert!(e.to_string().contains("string or blob too big"), "{e}");
        assert!(
            Error::source(&BackendError::caused_by(
                Fault::Busy,
                std::io::Error::other("x")
            ))
            .is_some()
        );
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        assert!(backend(busy).fault().is_some_and(Fault::transient));
        assert_eq!(
            backend(std::io::Error::other("gone")).fault(),
            Some(Fault::Unavailable)
        );
    }
}
