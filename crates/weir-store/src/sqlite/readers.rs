//! The SQLite store's reads: rusqlite connections of their own, taken from an idle list
//! (opened when none is free, at most [`READERS`] at a time), each read one hop to a
//! blocking thread and back. In WAL mode a reader never waits for the writer, nor the
//! writer for it; a read of several statements runs in one read transaction, so it sees
//! one commit.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::Connection;
use tokio::sync::Semaphore;
use weir_core::store::{Fault, StoreError};

use super::writer::connect;

/// The most reads at once; more wait for one to end.
const READERS: usize = 8;

pub struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
}

impl Readers {
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(READERS),
        }
    }

    /// Runs `f` on a reader connection, inside one read transaction.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::backend(Fault::Other, "the SQLite readers were closed"))?;
        let held = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let path = self.path.clone();
        let (conn, out) = tokio::task::spawn_blocking(move || {
            let conn = match held {
                Some(c) => c,
                None => match connect(&path, "NORMAL") {
                    Ok(c) => c,
                    Err(e) => return (None, Err(e)),
                },
            };
            let out = in_read_tx(&conn, f);
            (Some(conn), out)
        })
        .await
        .map_err(|e| StoreError::backend(Fault::Other, format!("a SQLite read stopped: {e}")))?;
        if let Some(conn) = conn.filter(Connection::is_autocommit) {
            self.idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(conn);
        }
        out
    }
}

fn in_read_tx<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    super::writer::control(conn, "BEGIN")?;
    let out = f(conn);
    let end = super::writer::control(conn, if out.is_ok() { "COMMIT" } else { "ROLLBACK" });
    let out = out?;
    end.map(|()| out)
}
