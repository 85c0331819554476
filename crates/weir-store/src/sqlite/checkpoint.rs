//! WAL checkpoints off the commit path. SQLite's own auto-checkpoint runs inside the commit
//! that takes the write-ahead log past 1,000 pages: that commit, and every write queued
//! behind it, waits while the log's pages are copied into the database file and both are
//! synced (17–20 ms on this VM, BENCHMARKS.md). Here the writer's connections report the
//! log's size after each commit (`sqlite3_wal_hook`), and a thread of the store's own
//! checkpoints the log in the background (`PASSIVE`: it copies what is committed while
//! writers go on). Only when the log outgrows [`BACKSTOP_PAGES`], the checkpointer not
//! keeping up, does a commit checkpoint in place, as SQLite's auto-checkpoint would have.

use std::cell::Cell;
use std::path::Path;
use std::sync::mpsc;

use rusqlite::Connection;
use rusqlite::hooks::{CheckpointMode, Wal};
use weir_core::store::StoreError;

/// The log's size, in pages, at which the background thread checkpoints it: SQLite's
/// default auto-checkpoint threshold.
const CHECKPOINT_PAGES: i32 = 1000;

/// The log's size at which a commit checkpoints it itself (the thread is behind).
const BACKSTOP_PAGES: i32 = 16 * CHECKPOINT_PAGES;

thread_local! {
    /// The log's size after this thread's last commit, as the hook saw it (0: none since
    /// the last [`Checkpointer::after_commit`]).
    static WAL_PAGES: Cell<i32> = const { Cell::new(0) };
}

/// The hook on the writer's connections, in place of SQLite's auto-checkpoint: it notes the
/// log's size for the committing thread, and checkpoints past the backstop.
fn hook(wal: &Wal, pages: i32) -> rusqlite::Result<()> {
    WAL_PAGES.with(|p| p.set(pages));
    if pages >= BACKSTOP_PAGES {
        // Best effort, as SQLite's own: a checkpoint already going on makes this one busy.
        let _ = wal.checkpoint_v2(CheckpointMode::PASSIVE);
    }
    Ok(())
}

/// Hands the log's size from commits to the background checkpoint thread.
#[derive(Clone)]
pub struct Checkpointer {
    /// One pending request at most: a checkpoint copies everything committed before it.
    wake: mpsc::SyncSender<()>,
}

impl Checkpointer {
    /// Starts the thread, on a connection of its own; it ends when the store is dropped.
    pub fn start(path: &Path, synchronous: &str) -> Result<Self, StoreError> {
        let conn = super::writer::connect(path, synchronous)?;
        let (wake, rx) = mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name("weir-sqlite-checkpoint".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    // Busy (another checkpoint going on) or failed: the next commit past the
                    // threshold asks again; the log is still whole meanwhile.
                    let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                }
            })
            .map_err(super::writer::backend)?;
        Ok(Self { wake })
    }

    /// Puts the hook on one of the writer's connections.
    pub fn watch(conn: &Connection) {
        conn.wal_hook(Some(hook));
    }

    /// After a commit on this thread: wakes the checkpoint thread when the log has grown
    /// past the threshold.
    pub fn after_commit(&self) {
        let pages = WAL_PAGES.with(|p| p.replace(0));
        if pages >= CHECKPOINT_PAGES {
            let _ = self.wake.try_send(());
        }
    }
}
