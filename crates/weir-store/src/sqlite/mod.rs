//! The SQLite store (embedded default): WAL journal, explicit statements, one `BEGIN
//! IMMEDIATE` transaction per change. Every write of a drive is fenced by the run's epoch:
//! the first statement of its transaction is an `UPDATE … WHERE id = ? AND epoch = ?` that
//! also reserves the event sequence numbers, so a stale driver's write changes nothing. A
//! drive's writes (a step commit, started steps, events, the end of the drive, lease
//! renewals) go to a dedicated writer thread (`writer.rs`, rusqlite, cached statements): one
//! hand-off per write. Reads, migrations and the per-run changes (create, claim, decide,
//! cancel) go through sqlx.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use weir_core::event::{EventKind, RunEvent};
use weir_core::record::{RunRecord, RunStatus, RunSummary, Snapshot, StepRecord, StepStatus};
use weir_core::store::{
    Admin, CancelOutcome, Claim, Created, DriveWrites, GateDecision, Lease, Lifecycle, NewRun,
    RunFilter, RunReads, RunUpdate, StepCommit, StoreError, StoredRun, Written, now_ms,
};

use crate::rules;
use crate::schema::MIGRATIONS;
mod catalog;
mod drive;
mod rows;
mod running;
mod stmts;
#[cfg(test)]
mod tests;
mod wal;
mod writer;

use crate::{backend, json};
use rows::{End, Fenced, insert_events, insert_steps};
use writer::Writer;

/// The step rows of one run, for the run whose id is the statement's first parameter: the
/// table `chain` (`r`: a row of `steps`) of a `WITH RECURSIVE` clause, walked from the run's
/// newest step row back through each row's `prev` (migration 18). A step written more than
/// once has a row for each write; [`newest_steps`] takes the last.
macro_rules! chain_of {
    () => {
        "chain(r) AS (
             SELECT last_row FROM runs WHERE runs.id = ?1 AND last_row IS NOT NULL
             UNION ALL
             SELECT steps.prev FROM steps, chain
             WHERE steps.row = chain.r AND steps.prev IS NOT NULL)"
    };
}

/// The newest row of each of a run's steps (the table `newest`, `r`: a row of `steps`),
/// after [`chain_of`] in the same `WITH RECURSIVE` clause.
macro_rules! newest_steps {
    () => {
        "newest(r) AS (SELECT MAX(steps.row) FROM steps, chain
                       WHERE steps.row = chain.r GROUP BY steps.id)"
    };
}

/// A run's batches of events (`seq`, `bodies`: one write's events, numbered from `seq`), for
/// the run whose id is the statement's first parameter: the rows of `run_events` and the
/// batches step rows hold (migration 17), as the table `batches` of a `WITH` clause. For a
/// whole record, which reads every step row anyway (`events_after` walks back only over the
/// newest).
macro_rules! event_batches {
    () => {
        concat!(
            "WITH RECURSIVE run(key) AS (SELECT key FROM runs WHERE id = ?1), ",
            chain_of!(),
            ", batches(seq, bodies) AS (
                 SELECT seq, bodies FROM run_events, run WHERE run_events.run_key = run.key
                 UNION ALL
                 SELECT event_seq, events FROM steps, chain
                 WHERE steps.row = chain.r AND events IS NOT NULL)"
        )
    };
}

/// The patches written after a run's whole snapshot, as one JSON array in commit order: a
/// column of the statement that reads the snapshot, so both come from one read.
macro_rules! patches {
    () => {
        "(SELECT json_group_array(json(p.patch) ORDER BY p.seq) FROM run_patches p
          WHERE p.run_key = runs.key) AS patches"
    };
}

/// The page size of a database this store creates (one it opens keeps its own). A step
/// commit writes three pages (the run's row, the step's row, the step key's index entry) and
/// each is a frame of the write-ahead log, checksummed and synced whole: at 2 KiB a durable
/// step alone costs 11% less (`durable_normal`) and a database of 1 KB replies is 28%
/// smaller than at SQLite's default 4 KiB, while rows of more than 2 KB spill into more
/// overflow pages (a first read of a 2,000-step run's events 9% slower; BENCHMARKS.md).
const PAGE_SIZE: u32 = 2048;

/// The embedded store: one SQLite file in WAL mode.
pub struct Sqlite {
    pool: SqlitePool,
    /// The drive's writes. Those that only make progress visible (a step's start, an
    /// attempt's failure, a renewal) are not synced: they ride along with the next synced
    /// commit instead of paying an fsync of their own.
    writer: Writer,
    /// The keys of the runs this process drives (`rows::Keys`).
    keys: rows::Keys,
    /// The folder of a throwaway database (`sqlite::memory:`), removed with the store.
    _scratch: Option<tempfile::TempDir>,
}

const BEGIN: &str = "BEGIN IMMEDIATE";

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
                StoreError::Backend(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let opts = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .page_size(PAGE_SIZE)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if full_sync {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            })
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts)
            .await
            .map_err(backend)?;
        let store = Self {
            writer: Writer::open(&path, full_sync)
                .map_err(|e| StoreError::Backend(format!("cannot open {}: {e}", path.display())))?,
            pool,
            keys: rows::Keys::default(),
            _scratch: scratch,
        };
        store.migrate().await?;
        // Best effort: a log that grows is slower to sync, not wrong.
        if let Err(e) = store.writer.preallocate_log(&path).await {
            tracing::warn!("{e}; commits sync a growing log until it reaches its size");
        }
        Ok(store)
    }

    /// A write transaction on the pool. (Serialising these with the writer thread's jobs in
    /// process was measured: the drive's commits then queue behind bursts of creations, and
    /// API throughput fell by a sixth; SQLite's busy handler lets the writer thread through.)
    async fn write_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        self.pool.begin_with(BEGIN).await.map_err(backend)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut tx = self.write_tx().await?;
        sqlx::query("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY)")
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        let current: i64 = sqlx::query("SELECT COALESCE(MAX(version), 0) FROM schema_version")
            .fetch_one(&mut *tx)
            .await
            .map_err(backend)?
            .get(0);
        for (version, sql) in MIGRATIONS {
            if *version > current {
                sqlx::raw_sql(*sql)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                sqlx::query("INSERT INTO schema_version (version) VALUES (?)")
                    .bind(*version)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
            }
        }
        tx.commit().await.map_err(backend)
    }

    /// A run's steps with their attempts (a column of the step's row), read on `conn`.
    async fn steps(
        conn: &mut sqlx::SqliteConnection,
        run_id: &str,
        only_seq: Option<u32>,
    ) -> Result<Vec<StepRecord>, StoreError> {
        let rows = sqlx::query(concat!(
            "WITH RECURSIVE ",
            chain_of!(),
            ", ",
            newest_steps!(),
            " SELECT seq, node_id, node_type, visit, status, route, input, output, error,
                     cost_usd, tokens_in, tokens_out, started_at, finished_at, duration_ms,
                     attempts
              FROM steps, newest WHERE steps.row = newest.r AND (?2 IS NULL OR seq = ?2)
              ORDER BY steps.id"
        ))
        .bind(run_id.to_string())
        .bind(only_seq.map(i64::from))
        .fetch_all(&mut *conn)
        .await
        .map_err(backend)?;
        let mut steps = crate::cols::steps(&rows, |r, _, text| {
            crate::attempts::from_json(&crate::cols::Cols::text(r, "attempts"), text)
        })?;
        // The steps in flight are lines of the run's row (migration 15).
        let running = Self::running(conn, run_id, only_seq).await?;
        if !running.is_empty() {
            steps.extend(running);
            steps.sort_by_key(|s| s.seq);
        }
        Ok(steps)
    }

    /// The run's steps in flight (its `running` column), read on `conn`.
    async fn running(
        conn: &mut sqlx::SqliteConnection,
        run_id: &str,
        only_seq: Option<u32>,
    ) -> Result<Vec<StepRecord>, StoreError> {
        let text: Option<String> = sqlx::query_scalar("SELECT running FROM runs WHERE id = ?")
            .bind(run_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(backend)?
            .flatten();
        running::steps(text.as_deref(), only_seq)
    }
}

fn not_found(run_id: &str) -> StoreError {
    StoreError::NotFound(format!("no run with id {run_id}"))
}

#[async_trait]
impl DriveWrites for Sqlite {
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

    async fn start_steps(
        &self,
        lease: &Lease,
        steps: &[&StepRecord],
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(Fenced {
            lease,
            write: "start_steps",
            visible: true,
            snapshot: None,
            patch: None,
            clear: false,
            steps: steps.to_vec(),
            events,
            end: None,
        })
        .await
    }

    async fn commit_step(&self, lease: &Lease, c: StepCommit<'_>) -> Result<Written, StoreError> {
        let mut steps: Vec<&StepRecord> = c.started.to_vec();
        steps.push(c.step);
        self.fenced(Fenced {
            lease,
            write: "commit_step",
            visible: false,
            snapshot: Some(c.snapshot),
            patch: c.patch,
            clear: c.covers_patches,
            steps,
            events: c.events,
            end: None,
        })
        .await
    }

    async fn append_events(
        &self,
        lease: &Lease,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(Fenced {
            lease,
            write: "append_events",
            visible: true,
            snapshot: None,
            patch: None,
            clear: false,
            steps: Vec::new(),
            events,
            end: None,
        })
        .await
    }

    async fn finish_run(
        &self,
        lease: &Lease,
        steps: &[&StepRecord],
        u: &RunUpdate,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(Fenced {
            lease,
            write: "finish_run",
            visible: false,
            snapshot: Some(&u.snapshot),
            patch: None,
            clear: true,
            steps: steps.to_vec(),
            events,
            end: Some(End::Finish(u)),
        })
        .await
    }

    async fn release(
        &self,
        lease: &Lease,
        snapshot: &Snapshot,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(Fenced {
            lease,
            write: "release",
            visible: false,
            snapshot: Some(snapshot),
            patch: None,
            clear: true,
            steps: Vec::new(),
            events,
            end: Some(End::Release),
        })
        .await
    }
}

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
        let mut tx = self.write_tx().await?;
        let row = sqlx::query(
            "UPDATE runs SET epoch = epoch + 1, status = ?, error = ?, finished_at = ?,
                             snapshot = ?, cost_usd = ?, event_seq = event_seq + ?
             WHERE id = ? AND status = 'paused' AND epoch = ?
             RETURNING event_seq",
        )
        .bind(d.status.as_str())
        .bind(d.error.as_ref().map(json).transpose()?)
        .bind(d.finished_at.as_deref())
        .bind(json(&d.snapshot)?)
        .bind(d.snapshot.cost_usd)
        .bind(d.events.len() as i64)
        .bind(d.run_id.as_str())
        .bind(d.expect_epoch as i64)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?;
        if row.is_some() {
            snapshot_written(&mut tx, &d.run_id).await?;
        }
        let Some(row) = row else {
            let cur = sqlx::query("SELECT status, epoch FROM runs WHERE id = ?")
                .bind(d.run_id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?
                .ok_or_else(|| not_found(&d.run_id))?;
            return Err(rules::decision_conflict(
                &d.run_id,
                crate::cols::status(&cur, "status"),
                cur.get::<i64, _>("epoch") as u64,
                d.expect_epoch,
            ));
        };
        let last: i64 = row.get(0);
        let mut steps: Vec<&StepRecord> = vec![&d.step];
        steps.extend(d.also.iter());
        insert_steps(&mut tx, &d.run_id, &steps).await?;
        let events = insert_events(
            &mut tx,
            &d.run_id,
            last - d.events.len() as i64 + 1,
            d.events.clone(),
        )
        .await?;
        tx.commit().await.map_err(backend)?;
        Ok(Written {
            events,
            cancel_requested: false,
        })
    }

    async fn request_cancel(
        &self,
        run_id: &str,
        by: &str,
    ) -> Result<(CancelOutcome, Written), StoreError> {
        let mut tx = self.write_tx().await?;
        let row = sqlx::query(concat!(
            "SELECT status, lease_expires_at, cancel_requested, snapshot, ",
            patches!(),
            " FROM runs
             WHERE id = ?"
        ))
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?
        .ok_or_else(|| not_found(run_id))?;
        let plan = rules::cancel_plan(
            run_id,
            crate::cols::status(&row, "status"),
            row.get("lease_expires_at"),
            row.get::<i64, _>("cancel_requested") != 0,
            by,
            now_ms(),
        )?;
        let now = match plan {
            rules::CancelPlan::Request(events) => {
                let events = if events.is_empty() {
                    events
                } else {
                    let r = sqlx::query(
                        "UPDATE runs SET cancel_requested = 1, event_seq = event_seq + 1
                         WHERE id = ? RETURNING event_seq",
                    )
                    .bind(run_id)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(backend)?;
                    insert_events(&mut tx, run_id, r.get(0), events).await?
                };
                tx.commit().await.map_err(backend)?;
                return Ok((
                    CancelOutcome::Requested,
                    Written {
                        events,
                        cancel_requested: true,
                    },
                ));
            }
            rules::CancelPlan::Now(now) => now,
        };
        let mut snapshot = crate::cols::snapshot(&row)?;
        now.snapshot(&mut snapshot);
        let r = sqlx::query(
            "UPDATE runs SET status = 'cancelled', error = ?, finished_at = ?, snapshot = ?,
                             lease_expires_at = NULL, event_seq = event_seq + 2
             WHERE id = ? RETURNING event_seq",
        )
        .bind(json(&now.error)?)
        .bind(now.at.to_string())
        .bind(json(&snapshot)?)
        .bind(run_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(backend)?;
        snapshot_written(&mut tx, run_id).await?;
        // Steps a driver that stopped left in flight become rows of their own, cancelled
        // with the others below.
        let left = Self::running(&mut tx, run_id, None).await?;
        if !left.is_empty() {
            insert_steps(&mut tx, run_id, &left.iter().collect::<Vec<_>>()).await?;
            sqlx::query("UPDATE runs SET running = NULL WHERE id = ?")
                .bind(run_id)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
        }
        // Older rows of a step written again are updated too; readers take the newest.
        sqlx::query(concat!(
            "WITH RECURSIVE ",
            chain_of!(),
            " UPDATE steps SET status = 'cancelled', error = ?2, finished_at = ?3
              WHERE row IN (SELECT r FROM chain) AND status IN ('running', 'waiting')"
        ))
        .bind(run_id)
        .bind(now.step_error.as_str())
        .bind(now.at.to_string())
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        let events = insert_events(&mut tx, run_id, r.get::<i64, _>(0) - 1, now.events).await?;
        tx.commit().await.map_err(backend)?;
        Ok((
            CancelOutcome::Cancelled,
            Written {
                events,
                cancel_requested: true,
            },
        ))
    }
}

#[async_trait]
impl RunReads for Sqlite {
    async fn load_run(&self, run_id: &str) -> Result<StoredRun, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT workflow, status, source_path, sources.text AS source_text, snapshot, ",
            patches!(),
            ", epoch, owner,
                    lease_expires_at, cancel_requested, workflow_id, workflow_version, input
             FROM runs JOIN run_sources ON run_sources.run_key = runs.key
                  JOIN sources ON sources.key = run_sources.source_key
             WHERE id = ?"
        ))
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?
        .ok_or_else(|| not_found(run_id))?;
        crate::cols::stored_run(run_id, &row)
    }

    async fn get_step(&self, run_id: &str, seq: u32) -> Result<StepRecord, StoreError> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let step = Self::steps(&mut tx, run_id, Some(seq)).await?.pop();
        tx.commit().await.map_err(backend)?;
        step.ok_or_else(|| StoreError::NotFound(format!("run {run_id} has no step {seq}")))
    }

    async fn get_record(&self, run_id: &str) -> Result<RunRecord, StoreError> {
        // One read transaction: the run row, its log and its steps as of one commit (read
        // apart, a run could show as running beside the event that paused it).
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let row = sqlx::query(concat!(
            "SELECT workflow, dialect, status, input, snapshot, ",
            patches!(),
            ", error, started_at, finished_at
             FROM runs JOIN run_sources ON run_sources.run_key = runs.key WHERE id = ?"
        ))
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?
        .ok_or_else(|| not_found(run_id))?;
        let mut events = Vec::new();
        for r in sqlx::query(concat!(
            event_batches!(),
            " SELECT seq, bodies FROM batches ORDER BY seq"
        ))
        .bind(run_id)
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?
        {
            events.extend(crate::batch_values(r.get(0), r.get::<&str, _>(1), 0)?);
        }
        let steps = Self::steps(&mut tx, run_id, None).await?;
        tx.commit().await.map_err(backend)?;
        crate::cols::record(run_id, &row, events, steps)
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        let (like, after_at, after_id) = crate::cols::list_params(filter);
        let rows = sqlx::query(
            "SELECT id, workflow, status, started_at, finished_at, cost_usd, workflow_id,
                    workflow_version,
                    step_count + length(coalesce(running, '')) - length(replace(coalesce(running, ''), char(10), ''))
                      AS steps,
                    json_extract(error, '$.code') AS error_code
             FROM runs
             WHERE (?1 IS NULL OR status = ?1)
               AND (?2 IS NULL OR workflow = ?2 OR workflow_id = ?2)
               AND (?3 IS NULL OR started_at >= ?3)
               AND (?4 IS NULL OR id LIKE ?4 ESCAPE '\\' OR workflow LIKE ?4 ESCAPE '\\')
               AND (?5 IS NULL OR started_at < ?5 OR (started_at = ?5 AND id < ?6))
             ORDER BY started_at DESC, id DESC LIMIT ?7",
        )
        .bind(filter.status.map(RunStatus::as_str))
        .bind(filter.workflow.as_deref())
        .bind(filter.since.as_deref())
        .bind(like)
        .bind(after_at)
        .bind(after_id)
        .bind(i64::from(filter.limit))
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        Ok(rows.iter().map(crate::cols::summary).collect())
    }

    async fn run_ids_with_prefix(
        &self,
        prefix: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        // A range on the id's unique index: every id with the prefix sorts from the prefix
        // itself up to the prefix followed by the highest character.
        let upper = format!("{prefix}{}", char::MAX);
        let rows =
            sqlx::query("SELECT id FROM runs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3")
                .bind(prefix)
                .bind(upper)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .map_err(backend)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<RunEvent>, StoreError> {
        let after = after as i64;
        // One statement, so one moment: the row of `run_events` holding event `after` (a row
        // holds one write's events, numbered from its `seq`) and every row after it, through
        // its index by run; and the batches the run's step rows hold (migration 17), walking
        // back from the run's newest step row (migration 18) only as far as the first batch
        // that starts at or below `after`. The chain is in commit order, so every batch
        // before that one holds older events: a follower's read costs what was written
        // since it last read, not the run's length.
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "WITH RECURSIVE run(key, head) AS (SELECT key, last_row FROM runs WHERE id = ?1),
             chain(r) AS (
                 SELECT head FROM run WHERE head IS NOT NULL
                 UNION ALL
                 SELECT steps.prev FROM steps, chain
                 WHERE steps.row = chain.r AND steps.prev IS NOT NULL
                   AND (steps.event_seq IS NULL OR steps.event_seq > ?2))
             SELECT seq, bodies FROM run_events, run
             WHERE run_events.run_key = run.key
               AND seq >= COALESCE((SELECT MAX(e.seq) FROM run_events e, run
                                    WHERE e.run_key = run.key AND e.seq <= ?2), 0)
             UNION ALL
             SELECT event_seq, events FROM steps, chain
             WHERE steps.row = chain.r AND events IS NOT NULL",
        )
        .bind(run_id)
        .bind(after)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        // The batch holding `after` is the last one, of either table, that starts at or
        // below it; the events up to `after` are skipped.
        let from = rows
            .iter()
            .map(|(seq, _)| *seq)
            .filter(|seq| *seq <= after)
            .max()
            .unwrap_or(0);
        let mut batches: Vec<&(i64, String)> =
            rows.iter().filter(|(seq, _)| *seq >= from).collect();
        batches.sort_unstable_by_key(|(seq, _)| *seq);
        let mut events = Vec::new();
        for (seq, bodies) in batches {
            for v in crate::batch_values(*seq, bodies, after)? {
                events.push(crate::typed_event(v)?);
            }
        }
        Ok(events)
    }

    async fn open_steps(&self, run_id: &str) -> Result<(u32, Vec<StepRecord>), StoreError> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let rows = sqlx::query(concat!(
            "WITH RECURSIVE ",
            chain_of!(),
            ", ",
            newest_steps!(),
            " SELECT seq, status FROM steps, newest WHERE steps.row = newest.r
              ORDER BY steps.id DESC"
        ))
        .bind(run_id)
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?;
        let mut last = rows.first().map_or(0, |r| r.get::<i64, _>(0) as u32);
        // In flight: the lines of the run's row (migration 15), and any `running` row a
        // step was written whole as.
        let mut running = Self::running(&mut tx, run_id, None).await?;
        for r in rows.iter().rev() {
            if r.get::<&str, _>(1) == StepStatus::Running.as_str() {
                running
                    .extend(Self::steps(&mut tx, run_id, Some(r.get::<i64, _>(0) as u32)).await?);
            }
        }
        tx.commit().await.map_err(backend)?;
        running.sort_by_key(|s| s.seq);
        running.dedup_by_key(|s| s.seq);
        last = last.max(running.last().map_or(0, |s| s.seq));
        Ok((last, running))
    }

    async fn count_by_status(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        Ok(
            sqlx::query("SELECT status, COUNT(*) FROM runs GROUP BY status ORDER BY status")
                .fetch_all(&self.pool)
                .await
                .map_err(backend)?
                .iter()
                .map(|r| (crate::cols::status(r, "status"), r.get::<i64, _>(1) as u64))
                .collect(),
        )
    }
}

#[async_trait]
impl Admin for Sqlite {
    async fn prune(&self, before: &str, statuses: &[RunStatus]) -> Result<Vec<String>, StoreError> {
        let ended = rules::ended_statuses(statuses);
        let list = serde_json::to_string(&ended).map_err(backend)?;
        let mut tx = self.write_tx().await?;
        let ids: Vec<String> = sqlx::query(
            "SELECT id FROM runs WHERE finished_at IS NOT NULL AND finished_at < ?
               AND status IN (SELECT value FROM json_each(?))",
        )
        .bind(before)
        .bind(list.as_str())
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?
        .iter()
        .map(|r| r.get(0))
        .collect();
        // The sources of the pruned runs, to delete those no run names any more.
        let mut sources: Vec<i64> = Vec::new();
        for id in &ids {
            let source: Option<i64> = sqlx::query(
                "SELECT source_key FROM run_sources WHERE run_key = (SELECT key FROM runs WHERE id = ?)",
            )
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?
            .map(|r| r.get(0));
            sources.extend(source);
            for sql in [
                concat!(
                    "WITH RECURSIVE ",
                    chain_of!(),
                    " DELETE FROM steps WHERE row IN (SELECT r FROM chain)"
                ),
                "DELETE FROM run_events WHERE run_key = (SELECT key FROM runs WHERE id = ?)",
                "DELETE FROM run_patches WHERE run_key = (SELECT key FROM runs WHERE id = ?)",
                "DELETE FROM run_sources WHERE run_key = (SELECT key FROM runs WHERE id = ?)",
                "DELETE FROM runs WHERE id = ?",
            ] {
                sqlx::query(sql)
                    .bind(id.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
            }
        }
        sources.sort_unstable();
        sources.dedup();
        for key in sources {
            sqlx::query(
                "DELETE FROM sources WHERE key = ?1
                   AND NOT EXISTS (SELECT 1 FROM run_sources WHERE source_key = ?1)",
            )
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(ids)
    }
}

/// A whole snapshot was written: it covers every patch written before it.
async fn snapshot_written(tx: &mut sqlx::SqliteConnection, run_id: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM run_patches WHERE run_key = (SELECT key FROM runs WHERE id = ?)")
        .bind(run_id)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    Ok(())
}
