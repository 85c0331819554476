//! The SQLite store itself: opening (and migrating) the database, and the writes that
//! change a run from outside its drive.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, params};
use weir_core::record::RunStatus;
use weir_core::store::{
    Admin, CancelOutcome, Claim, Created, Fault, GateDecision, Lease, Lifecycle, NewRun,
    StoreError, Written, now_ms,
};

use super::readers::Readers;
use super::rows;
use super::writer::{Writer, backend};
use super::{drive, lifecycle, wal};
use crate::json;
use crate::schema::MIGRATIONS;

/// The page size of a database this store creates (one it opens keeps its own). A step
/// commit writes three pages (the run's row, the step's row, the step key's index entry) and
/// each is a frame of the write-ahead log, checksummed and synced whole: at 2 KiB a durable
/// step alone costs 11% less (`durable_normal`) and a database of 1 KB replies is 28%
/// smaller than at SQLite's default 4 KiB, while rows of more than 2 KB spill into more
/// overflow pages (a first read of a 2,000-step run's events 9% slower; BENCHMARKS.md).
const PAGE_SIZE: u32 = 2048;

/// The embedded store: one SQLite file in WAL mode.
pub struct Sqlite {
    /// Reads, on connections of their own.
    pub(super) readers: Readers,
    /// The drive's writes. Those that only make progress visible (a step's start, an
    /// attempt's failure, a renewal) are not synced: they ride along with the next synced
    /// commit instead of paying an fsync of their own.
    pub(super) writer: Writer,
    /// The keys of the runs this process drives (`rows::Keys`).
    pub(super) keys: rows::Keys,
    /// The folder of a throwaway database (`sqlite::memory:`), removed with the store.
    _scratch: Option<tempfile::TempDir>,
}

impl Sqlite {
    /// The transactions the SQLite stores of this process have committed through their
    /// writers: on the synced connection (with `full_sync`, each on disk before its writes
    /// are answered; the sync thread may sync several with one fdatasync) and on the
    /// unsynced one (progress only). Benchmarks count them per run.
    pub fn commits() -> (u64, u64) {
        wal::commits()
    }

    /// Opens (creating if needed) the database at `path`, or an in-memory one for `None`, with
    /// `synchronous=NORMAL`: in WAL mode a commit survives the process dying at any point; only
    /// an OS crash or power loss can lose the last commits.
    pub async fn open(path: Option<&Path>) -> Result<Self, StoreError> {
        Self::open_with(path, false).await
    }

    /// Like [`open`](Self::open); with `full_sync` every commit is on disk before it returns,
    /// even across power loss (`sqlite://path?sync=full`, and the benchmarks' durable mode):
    /// the writer syncs the write-ahead log after its commits (`wal.rs`), the pool's
    /// connections commit with `synchronous=FULL`.
    pub async fn open_with(path: Option<&Path>, full_sync: bool) -> Result<Self, StoreError> {
        // A throwaway database lives in a temporary file: the writer thread and the pool
        // must see the same database, which two connections to `:memory:` would not.
        let scratch = match path {
            Some(_) => None,
            None => Some(tempfile::tempdir().map_err(backend)?),
        };
        let path: std::path::PathBuf = match (&scratch, path) {
            (Some(dir), _) => dir.path().join("weir.db"),
            (None, Some(p)) => p.to_path_buf(),
            (None, None) => unreachable!("a scratch folder exists when there is no path"),
        };
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::backend(
                    Fault::Unavailable,
                    format!("cannot create {}: {e}", dir.display()),
                )
            })?;
        }
        migrate(&path, full_sync).map_err(|e| {
            StoreError::backend(
                Fault::Unavailable,
                format!("cannot open {}: {e}", path.display()),
            )
        })?;
        let store = Self {
            writer: Writer::open(&path, full_sync).map_err(|e| {
                StoreError::backend(
                    Fault::Unavailable,
                    format!("cannot open {}: {e}", path.display()),
                )
            })?,
            readers: Readers::new(&path),
            keys: rows::Keys::default(),
            _scratch: scratch,
        };
        // Best effort: a log that grows is slower to sync, not wrong.
        if let Err(e) = store.writer.preallocate_log(&path).await {
            tracing::warn!("{e}; commits sync a growing log until it reaches its size");
        }
        Ok(store)
    }
}

/// Creates the database when it is new (its page size, WAL mode) and brings its schema up
/// to date, in one `BEGIN IMMEDIATE` transaction: a second process that opens it meanwhile
/// waits, then finds the migrations done.
fn migrate(path: &Path, full_sync: bool) -> Result<(), StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(backend)?;
    conn.busy_timeout(Duration::from_secs(30))
        .map_err(backend)?;
    conn.execute_batch(&format!(
        "PRAGMA page_size = {PAGE_SIZE}; PRAGMA journal_mode = WAL; PRAGMA synchronous = {};
         PRAGMA foreign_keys = ON;",
        if full_sync { "FULL" } else { "NORMAL" }
    ))
    .map_err(backend)?;
    let mut conn = conn;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(backend)?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY)")
        .map_err(backend)?;
    let current: i64 = tx
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_version",
            [],
            |r| r.get(0),
        )
        .map_err(backend)?;
    for (version, sql) in MIGRATIONS {
        if *version > current {
            tx.execute_batch(sql).map_err(backend)?;
            tx.execute(
                "INSERT INTO schema_version (version) VALUES (?1)",
                params![version],
            )
            .map_err(backend)?;
        }
    }
    tx.commit().map_err(backend)
}

crate::rules::fenced_drive_writes!(Sqlite {
    fn keeps_patches(&self) -> bool {
        true
    }

    async fn renew(&self, lease: &mut Lease, ttl: Duration) -> Result<Written, StoreError> {
        let expires = now_ms() + ttl.as_millis() as i64;
        let (run_id, epoch, owner) = (
            lease.run_id.clone(),
            lease.epoch as i64,
            lease.owner.clone(),
        );
        let cancel = self
            .writer
            .run(move |c| drive::renew(c, &run_id, epoch, &owner, expires))
            .await?;
        lease.expires_at = expires;
        Ok(Written {
            events: Vec::new(),
            cancel_requested: cancel,
        })
    }
});

#[async_trait]
impl Lifecycle for Sqlite {
    async fn create_run(&self, run: NewRun) -> Result<Created, StoreError> {
        let (input, snapshot) = (json(&run.input)?, json(&run.snapshot)?);
        let (created, seen) = self
            .writer
            .grouped(true, move |c| drive::create_run(c, &run, &input, &snapshot))
            .await?;
        if let Some(seen) = seen {
            self.keys.learnt(&created.run_id, seen, false);
        }
        Ok(created)
    }

    async fn claim_run(&self, run_id: &str, claim: &Claim) -> Result<(Lease, Written), StoreError> {
        let (run_id, claim) = (run_id.to_string(), claim.clone());
        self.writer
            .run(move |c| drive::claim_run(c, &run_id, &claim))
            .await
    }

    async fn claim_next(
        &self,
        claim: &Claim,
        limit: u32,
    ) -> Result<Vec<(Lease, Written)>, StoreError> {
        let claim = claim.clone();
        self.writer
            .run(move |c| drive::claim_next(c, &claim, limit))
            .await
    }

    async fn decide(&self, d: &GateDecision) -> Result<Written, StoreError> {
        let d = d.clone();
        self.writer
            .grouped(true, move |c| lifecycle::decide(c, &d))
            .await
    }

    async fn request_cancel(
        &self,
        run_id: &str,
        by: &str,
    ) -> Result<(CancelOutcome, Written), StoreError> {
        let (run_id, by) = (run_id.to_string(), by.to_string());
        self.writer
            .grouped(true, move |c| lifecycle::cancel(c, &run_id, &by))
            .await
    }
}

#[async_trait]
impl Admin for Sqlite {
    async fn prune(&self, before: &str, statuses: &[RunStatus]) -> Result<Vec<String>, StoreError> {
        let (before, statuses) = (before.to_string(), statuses.to_vec());
        self.writer
            .grouped(true, move |c| lifecycle::prune(c, &before, &statuses))
            .await
    }
}
