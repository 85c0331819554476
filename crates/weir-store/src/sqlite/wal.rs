//! The write-ahead log, kept by the store itself on two counts.
//!
//! **Checkpoints off the commit path.** SQLite's own auto-checkpoint runs inside the commit
//! that takes the log past 1,000 pages: that commit, and every write queued behind it, waits
//! while the log's pages are copied into the database file and both are synced (17–20 ms on
//! this VM, BENCHMARKS.md). Here the writer's connections report the log's size after each
//! commit (`sqlite3_wal_hook`), and a thread of the store's own checkpoints the log in the
//! background (`PASSIVE`: it copies what is committed while writers go on). Only when the log
//! outgrows [`BACKSTOP_PAGES`] does a commit checkpoint in place (what the thread's last
//! checkpoint left), so that the log starts again from its beginning.
//!
//! **The sync of `synchronous=FULL` outside the write lock.** With `FULL`, SQLite syncs the
//! log inside `COMMIT`, holding the database's one write lock, so the next group of writes
//! cannot start its statements until the disk has answered. A store opened with `full_sync`
//! commits with `NORMAL` instead (the log is written, not synced, and a crash still never
//! corrupts it: recovery stops at the first frame whose checksum fails) and then syncs the
//! log file itself ([`WalFile`]) before anyone hears that the write is done. A write alone
//! syncs on its own thread, as `FULL` would; the writer thread's group commits hand their
//! answers to a thread that syncs once for all the groups waiting, while the writer goes on
//! with the next group. A step is still on disk before its driver goes on. What changes is
//! that a committed write is visible to readers for the length of that sync before it is
//! durable, as every write is under `NORMAL`.
//!
//! **The log's working size given up front.** A log that grows makes each sync of it write
//! the file's new size too (the filesystem's journal: on this VM such a sync takes up to
//! twice as long as one that only overwrites the file). A new database's log starts empty,
//! and SQLite deletes the log when a last connection closes and checkpoints it, so a
//! `full_sync` store that opens may find it short and would pay that on every commit of its
//! first few thousand. It extends the log with zeros to the size it
//! keeps between checkpoints ([`preallocate`]) instead; frames then overwrite blocks that
//! are already the file's. A zeroed frame ends the log for SQLite as the end of the file
//! does (its checksum fails), so the zeros change nothing it reads.

use std::cell::Cell;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};

use rusqlite::Connection;
use rusqlite::hooks::{CheckpointMode, Wal};
use weir_core::store::{Fault, StoreError};

/// The log's size, in pages, at which the background thread checkpoints it: SQLite's
/// default auto-checkpoint threshold.
const CHECKPOINT_PAGES: i32 = 1000;

/// The log's size at which a commit checkpoints it itself. The log starts again from its
/// beginning only when a write begins while nothing in it is left to copy, which a
/// checkpoint running beside a steady stream of commits seldom leaves; the commit's own
/// checkpoint (what is left since the thread's last one) lets the next write start it again.
const BACKSTOP_PAGES: i32 = 2 * CHECKPOINT_PAGES;

/// What this thread's commits on the writer's connections did since [`take_commits`].
#[derive(Clone, Copy, Default)]
pub struct Commits {
    /// The log's size after the last one, in pages (0: no commit).
    pub pages: i32,
    /// One of them was on a connection whose commits must be synced (`full_sync`).
    pub to_sync: bool,
}

thread_local! {
    static COMMITS: Cell<Commits> = const { Cell::new(Commits { pages: 0, to_sync: false }) };
}

/// What this thread's commits did since the last call.
pub fn take_commits() -> Commits {
    COMMITS.with(Cell::take)
}

/// Commits on the writers' synced connections, and on their unsynced ones, in this process
/// ([`commits`]).
static SYNCED_COMMITS: AtomicU64 = AtomicU64::new(0);
static UNSYNCED_COMMITS: AtomicU64 = AtomicU64::new(0);

/// How many transactions every SQLite store of this process has committed on its synced
/// connection (with `full_sync`, each synced before it is answered), and on its unsynced one (the
/// writes that only make progress visible), since the process started: what a benchmark
/// counts per run.
pub fn commits() -> (u64, u64) {
    (
        SYNCED_COMMITS.load(Ordering::Relaxed),
        UNSYNCED_COMMITS.load(Ordering::Relaxed),
    )
}

thread_local! {
    static VISIBLE_ONLY: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, whose commits on the synced connection only make progress visible: they are
/// counted as unsynced commits, and the store does not sync them (a later synced commit's
/// sync covers them, as it covers everything in the log before it).
pub fn visible_only<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            VISIBLE_ONLY.with(|v| v.set(self.0));
        }
    }
    let _restore = Restore(VISIBLE_ONLY.with(|v| v.replace(true)));
    f()
}

fn noted(wal: &Wal, pages: i32, to_sync: bool, backstop: bool) -> rusqlite::Result<()> {
    let visible = VISIBLE_ONLY.with(Cell::get);
    let to_sync = to_sync && !visible;
    // `backstop`: the synced connection's hooks (the unsynced one never checkpoints).
    let counter = if backstop && !visible {
        &SYNCED_COMMITS
    } else {
        &UNSYNCED_COMMITS
    };
    counter.fetch_add(1, Ordering::Relaxed);
    COMMITS.with(|c| {
        let before = c.get();
        c.set(Commits {
            pages,
            to_sync: before.to_sync || to_sync,
        });
    });
    if backstop && pages >= BACKSTOP_PAGES {
        // Best effort, as SQLite's own: a checkpoint already going on makes this one busy.
        let _ = wal.checkpoint_v2(CheckpointMode::PASSIVE);
    }
    Ok(())
}

/// The hook on the synced connection of a store without `full_sync`.
fn hook(wal: &Wal, pages: i32) -> rusqlite::Result<()> {
    noted(wal, pages, false, true)
}

/// The hook on the synced connection of a `full_sync` store.
fn hook_to_sync(wal: &Wal, pages: i32) -> rusqlite::Result<()> {
    noted(wal, pages, true, true)
}

/// The hook on the unsynced connection (`synchronous=OFF`), which never checkpoints: a
/// checkpoint takes its connection's sync setting, and one that copied the log into the
/// database without syncing either could let the log start again over frames whose pages
/// are not on disk yet.
fn hook_unsynced(wal: &Wal, pages: i32) -> rusqlite::Result<()> {
    noted(wal, pages, false, false)
}

/// Which of the writer's connections a hook watches.
#[derive(Clone, Copy, PartialEq)]
pub enum Watched {
    /// The synced connection; `to_sync`: its commits are synced by the store ([`WalFile`]).
    Synced { to_sync: bool },
    /// The connection with `synchronous=OFF`.
    Unsynced,
}

/// Puts the hook on one of the writer's connections, in place of SQLite's auto-checkpoint.
/// The unsynced connection does not checkpoint when it closes either (for the same reason
/// as its hook: the log is left for the next connection to open, which recovers it).
pub fn watch(conn: &Connection, watched: Watched) -> Result<(), StoreError> {
    conn.wal_hook(Some(match watched {
        Watched::Synced { to_sync: false } => hook,
        Watched::Synced { to_sync: true } => hook_to_sync,
        Watched::Unsynced => hook_unsynced,
    }));
    if watched == Watched::Unsynced {
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .map_err(super::writer::backend)?;
    }
    Ok(())
}

/// Hands the log's size from commits to the background checkpoint thread.
#[derive(Clone)]
pub struct Checkpointer {
    /// One pending request at most: a checkpoint copies everything committed before it.
    wake: mpsc::SyncSender<()>,
    /// The frames of the log the thread's last checkpoint copied: a checkpoint is due when
    /// as many again are in the log (or the log started again and holds that many).
    copied: Arc<AtomicI32>,
}

impl Checkpointer {
    /// Starts the thread; it opens a connection of its own when first asked for a
    /// checkpoint (a short `weir run` never is), and ends when the store is dropped.
    pub fn start(path: &Path, synchronous: &'static str) -> Result<Self, StoreError> {
        let path = path.to_path_buf();
        let (wake, rx) = mpsc::sync_channel::<()>(1);
        let copied = Arc::new(AtomicI32::new(0));
        let thread_copied = copied.clone();
        std::thread::Builder::new()
            .name("weir-sqlite-checkpoint".into())
            .spawn(move || {
                let mut conn = None;
                while rx.recv().is_ok() {
                    if conn.is_none() {
                        // Without a connection the commits' own backstop checkpoints the log.
                        conn = super::writer::connect(&path, synchronous).ok();
                    }
                    let Some(conn) = &conn else { continue };
                    // (busy, frames in the log, frames copied). Busy (another checkpoint
                    // going on) or failed: the next commit past the threshold asks again;
                    // the log is still whole meanwhile.
                    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                        Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(2)?))
                    });
                    if let Ok((0, copied)) = done {
                        thread_copied.store(copied.try_into().unwrap_or(0), Ordering::Relaxed);
                    }
                }
            })
            .map_err(super::writer::backend)?;
        Ok(Self { wake, copied })
    }

    /// After commits: wakes the checkpoint thread when the log holds enough frames its
    /// last checkpoint did not copy.
    pub fn after(&self, commits: Commits) {
        let copied = self.copied.load(Ordering::Relaxed);
        let new = if commits.pages < copied {
            commits.pages
        } else {
            commits.pages - copied
        };
        if new >= CHECKPOINT_PAGES {
            let _ = self.wake.try_send(());
        }
    }
}

/// The size in bytes of a log that holds `frames` frames of `page_size` pages: the header
/// (32 bytes), and per frame its header (24 bytes) and page.
fn log_bytes(frames: i32, page_size: i64) -> u64 {
    (32 + i64::from(frames) * (24 + page_size))
        .try_into()
        .unwrap_or(0)
}

/// Extends the log of the database `conn` is open on, with zeros, to what it holds at the
/// backstop ([`BACKSTOP_PAGES`] frames), and syncs it: a `full_sync` store's commits then
/// sync what they overwrite, not a file that grows (module docs). It holds the write lock
/// meanwhile (`BEGIN IMMEDIATE`), so no writer appends a frame where the zeros go; what is
/// past the file's end holds no frame any reader may read.
pub fn preallocate(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let page_size: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .map_err(super::writer::backend)?;
    // At most 16 MiB: a database made elsewhere with large pages gets part of its log.
    let want = log_bytes(BACKSTOP_PAGES, page_size).min(16 << 20);
    // A log already that long (another process has the database open) needs no lock.
    if std::fs::metadata(log_path(path)).is_ok_and(|m| m.len() >= want) {
        return Ok(());
    }
    super::writer::control(conn, "BEGIN IMMEDIATE")?;
    let extended = extend_with_zeros(&log_path(path), want);
    // The transaction wrote nothing: its end only lets the lock go.
    super::writer::control(conn, "ROLLBACK")?;
    extended.map_err(|e| {
        StoreError::backend(
            Fault::Unavailable,
            format!(
                "cannot extend the write-ahead log {}: {e}",
                log_path(path).display()
            ),
        )
    })
}

/// Appends zeros to the file at `path` up to `want` bytes, and syncs it.
fn extend_with_zeros(path: &Path, want: u64) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    let len = f.metadata()?.len();
    if len >= want {
        return Ok(());
    }
    f.seek(SeekFrom::Start(len))?;
    let zeros = vec![0u8; 64 * 1024];
    let mut left = want - len;
    while left > 0 {
        let n = left.min(zeros.len() as u64);
        f.write_all(&zeros[..n as usize])?;
        left -= n;
    }
    f.sync_data()
}

/// The log file of the database at `path`: its name with `-wal`.
fn log_path(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// The log file, open for syncing. SQLite keeps one log file for as long as any connection
/// to the database is open (it deletes it when the last one closes), and the store's own
/// connections stay open as long as this does: the file synced is the one SQLite writes.
pub struct WalFile(File);

impl WalFile {
    /// The log of the database at `path`, which a connection in WAL mode has opened.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let name = log_path(path);
        File::open(&name).map(Self).map_err(|e| {
            StoreError::backend(
                Fault::Unavailable,
                format!("cannot open the write-ahead log {}: {e}", name.display()),
            )
        })
    }

    /// Syncs everything written to the log so far (and the log's size) to disk.
    pub fn sync(&self) -> Result<(), StoreError> {
        self.0.sync_data().map_err(|e| {
            StoreError::backend(
                Fault::Unavailable,
                format!("syncing the write-ahead log failed: {e}"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write that only makes progress visible goes through the synced connection without
    /// asking for a sync; every other commit there still asks for one.
    #[test]
    fn a_visible_only_commit_on_the_synced_connection_is_not_synced() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("t.db")).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x)")
            .unwrap();
        watch(&conn, Watched::Synced { to_sync: true }).unwrap();
        take_commits();
        let (synced, unsynced) = commits();
        visible_only(|| conn.execute("INSERT INTO t VALUES (1)", []).unwrap());
        let c = take_commits();
        assert!(c.pages > 0, "the commit was seen");
        assert!(!c.to_sync, "a visible-only commit is not synced");
        assert!(commits().1 > unsynced, "and counts as unsynced");
        conn.execute("INSERT INTO t VALUES (2)", []).unwrap();
        assert!(take_commits().to_sync, "the next commit is synced again");
        assert!(commits().0 > synced);
    }
}
