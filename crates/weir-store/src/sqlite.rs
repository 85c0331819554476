//! The SQLite store (embedded default): WAL journal, explicit statements, one `BEGIN
//! IMMEDIATE` transaction per change. Every write of a drive is fenced by the run's epoch:
//! the first statement of its transaction is an `UPDATE … WHERE id = ? AND epoch = ?` that
//! also reserves the event sequence numbers, and every statement after it is guarded by the
//! same condition, so a stale driver's write changes nothing. A drive's writes (a step
//! commit, started steps, events, the end of the drive) are sent as one multi-statement
//! batch, `BEGIN IMMEDIATE; …; COMMIT`: one round trip to the database thread per write.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{QueryBuilder, Row, Sqlite as Db, SqliteConnection, SqlitePool};
use weir_core::event::{EventKind, RunEvent};
use weir_core::record::{
    Attempt, ErrorCode, RunError, RunRecord, RunStatus, RunSummary, Snapshot, StepRecord,
    StepStatus, Tokens,
};
use weir_core::store::{
    CancelOutcome, Claim, Created, GateDecision, Lease, NewRun, RunFilter, RunStore, RunUpdate,
    StepCommit, StoreError, StoredRun, Written, now_ms, now_rfc3339,
};

use crate::rules::{self, ClaimView};
use crate::schema::MIGRATIONS;

pub struct Sqlite {
    pool: SqlitePool,
    /// One connection with `synchronous=OFF` for writes that only make progress visible (a
    /// step's `running` row, an attempt's failure): they ride along with the next synced
    /// commit instead of paying an fsync of their own. Completed steps always go through
    /// `pool`.
    visible: SqlitePool,
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(backend)
}

fn parse<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Backend(format!("corrupt stored JSON: {e}")))
}

fn status_of(row: &SqliteRow, col: &str) -> RunStatus {
    RunStatus::parse(row.get::<&str, _>(col)).unwrap_or(RunStatus::Failed)
}

const BEGIN: &str = "BEGIN IMMEDIATE";

impl Sqlite {
    /// Opens (creating if needed) the database at `path`, or an in-memory one for `None`, with
    /// `synchronous=NORMAL`: in WAL mode a commit survives the process dying at any point; only
    /// an OS crash or power loss can lose the last commits.
    pub async fn open(path: Option<&Path>) -> Result<Self, StoreError> {
        Self::open_with(path, false).await
    }

    /// Like [`open`](Self::open); `full_sync` sets `synchronous=FULL`, so every commit is on
    /// disk before it returns, even across power loss (the benchmarks' durable mode).
    pub async fn open_with(path: Option<&Path>, full_sync: bool) -> Result<Self, StoreError> {
        let opts = match path {
            Some(p) => {
                if let Some(dir) = p.parent()
                    && !dir.as_os_str().is_empty()
                {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        StoreError::Backend(format!("cannot create {}: {e}", dir.display()))
                    })?;
                }
                SqliteConnectOptions::new()
                    .filename(p)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(if full_sync {
                        SqliteSynchronous::Full
                    } else {
                        SqliteSynchronous::Normal
                    })
            }
            None => SqliteConnectOptions::from_str("sqlite::memory:").map_err(backend)?,
        }
        .busy_timeout(Duration::from_secs(30))
        .foreign_keys(true);
        // One connection for an in-memory database (each connection would get its own).
        let max = if path.is_some() { 4 } else { 1 };
        let pool = SqlitePoolOptions::new()
            .max_connections(max)
            .connect_with(opts.clone())
            .await
            .map_err(backend)?;
        let visible = if path.is_some() {
            SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(opts.synchronous(SqliteSynchronous::Off))
                .await
                .map_err(backend)?
        } else {
            pool.clone()
        };
        let store = Self { pool, visible };
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut tx = self.pool.begin_with(BEGIN).await.map_err(backend)?;
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

    async fn steps(
        &self,
        run_id: &str,
        only_seq: Option<u32>,
    ) -> Result<Vec<StepRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, node_id, node_type, visit, status, route, input, output, error, cost_usd,
                    tokens_in, tokens_out, started_at, finished_at, duration_ms
             FROM steps WHERE run_id = ? AND (? IS NULL OR seq = ?) ORDER BY seq",
        )
        .bind(run_id.to_string())
        .bind(only_seq.map(i64::from))
        .bind(only_seq.map(i64::from))
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        let attempt_rows = sqlx::query(
            "SELECT seq, body FROM attempts WHERE run_id = ? AND (? IS NULL OR seq = ?) ORDER BY seq, n",
        )
        .bind(run_id.to_string())
        .bind(only_seq.map(i64::from))
        .bind(only_seq.map(i64::from))
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        let mut steps = Vec::with_capacity(rows.len());
        for r in rows {
            let seq: i64 = r.get("seq");
            let attempts: Vec<Attempt> = attempt_rows
                .iter()
                .filter(|a| a.get::<i64, _>("seq") == seq)
                .map(|a| parse(a.get::<String, _>("body").as_str()))
                .collect::<Result<_, _>>()?;
            steps.push(StepRecord {
                seq: seq as u32,
                node_id: r.get("node_id"),
                node_type: r.get("node_type"),
                visit: r.get::<i64, _>("visit") as u32,
                status: StepStatus::parse(r.get::<&str, _>("status")).unwrap_or(StepStatus::Failed),
                route: r.get("route"),
                input: parse(r.get::<String, _>("input").as_str())?,
                output: parse(r.get::<String, _>("output").as_str())?,
                error: r.get("error"),
                cost_usd: r.get("cost_usd"),
                tokens: Tokens {
                    input: r.get::<i64, _>("tokens_in") as u64,
                    output: r.get::<i64, _>("tokens_out") as u64,
                },
                attempts,
                started_at: r.get("started_at"),
                finished_at: r.get("finished_at"),
                duration_ms: r.get::<Option<i64>, _>("duration_ms").map(|d| d as u64),
            });
        }
        Ok(steps)
    }
}

/// The fence: bumps the event sequence (and writes the snapshot) only while the run's epoch
/// is the lease's and the lease is held. Returns the first reserved sequence number and the
/// cancel flag; `LeaseLost` when the fence refuses.
async fn fence(
    conn: &mut SqliteConnection,
    lease: &Lease,
    snapshot: Option<&Snapshot>,
    n_events: usize,
) -> Result<(i64, bool), StoreError> {
    let row = sqlx::query(
        "UPDATE runs SET event_seq = event_seq + ?1,
                         snapshot = COALESCE(?2, snapshot), cost_usd = COALESCE(?3, cost_usd)
         WHERE id = ?4 AND epoch = ?5 AND lease_expires_at IS NOT NULL
         RETURNING event_seq, cancel_requested",
    )
    .bind(n_events as i64)
    .bind(snapshot.map(json).transpose()?)
    .bind(snapshot.map(|s| s.cost_usd))
    .bind(lease.run_id.as_str())
    .bind(lease.epoch as i64)
    .fetch_optional(&mut *conn)
    .await
    .map_err(backend)?;
    match row {
        Some(r) => {
            let last: i64 = r.get(0);
            Ok((last - n_events as i64 + 1, r.get::<i64, _>(1) != 0))
        }
        None => {
            let cur = sqlx::query("SELECT epoch, owner, status FROM runs WHERE id = ?")
                .bind(lease.run_id.as_str())
                .fetch_optional(&mut *conn)
                .await
                .map_err(backend)?
                .map(|r| {
                    (
                        r.get::<i64, _>(0) as u64,
                        r.get::<Option<String>, _>(1),
                        status_of(&r, "status"),
                    )
                });
            Err(rules::lease_lost(&lease.run_id, lease.epoch, cur))
        }
    }
}

/// Writes step rows (insert or replace) and their attempts.
async fn insert_steps(
    conn: &mut SqliteConnection,
    run_id: &str,
    steps: &[&StepRecord],
) -> Result<(), StoreError> {
    if steps.is_empty() {
        return Ok(());
    }
    let mut rows = Vec::with_capacity(steps.len());
    for s in steps {
        rows.push((s, json(&s.input)?, json(&s.output)?));
    }
    let mut q: QueryBuilder<Db> = QueryBuilder::new(
        "INSERT OR REPLACE INTO steps (run_id, seq, node_id, node_type, visit, status, route,
             input, output, error, cost_usd, tokens_in, tokens_out, started_at, finished_at,
             duration_ms) ",
    );
    q.push_values(rows, |mut b, (s, input, output)| {
        b.push_bind(run_id)
            .push_bind(i64::from(s.seq))
            .push_bind(s.node_id.as_str())
            .push_bind(s.node_type.as_str())
            .push_bind(i64::from(s.visit))
            .push_bind(s.status.as_str())
            .push_bind(s.route.as_deref())
            .push_bind(input)
            .push_bind(output)
            .push_bind(s.error.as_deref())
            .push_bind(s.cost_usd)
            .push_bind(s.tokens.input as i64)
            .push_bind(s.tokens.output as i64)
            .push_bind(s.started_at.as_str())
            .push_bind(s.finished_at.as_deref())
            .push_bind(s.duration_ms.map(|d| d as i64));
    });
    q.build().execute(&mut *conn).await.map_err(backend)?;
    let mut attempts = Vec::new();
    for s in steps {
        for a in &s.attempts {
            attempts.push((s.seq, a.n, json(a)?));
        }
    }
    if !attempts.is_empty() {
        let mut q: QueryBuilder<Db> =
            QueryBuilder::new("INSERT OR REPLACE INTO attempts (run_id, seq, n, body) ");
        q.push_values(attempts, |mut b, (seq, n, body)| {
            b.push_bind(run_id)
                .push_bind(i64::from(seq))
                .push_bind(i64::from(n))
                .push_bind(body);
        });
        q.build().execute(&mut *conn).await.map_err(backend)?;
    }
    Ok(())
}

/// The stored body of an event: everything but its sequence number, which is the row's key.
#[derive(serde::Serialize)]
struct Body<'a> {
    at: &'a str,
    #[serde(flatten)]
    kind: &'a EventKind,
}

/// An event as readers see it, `{"seq", "at", "type", …}`, from its row.
fn event_value(seq: i64, body: &str) -> Result<Value, StoreError> {
    let Value::Object(rest) = parse::<Value>(body)? else {
        return Err(StoreError::Backend("corrupt stored event".into()));
    };
    let mut m = serde_json::Map::with_capacity(rest.len() + 1);
    m.insert("seq".into(), Value::from(seq));
    m.extend(rest);
    Ok(Value::Object(m))
}

fn event_of(seq: i64, body: &str) -> Result<RunEvent, StoreError> {
    serde_json::from_value(event_value(seq, body)?)
        .map_err(|e| StoreError::Backend(format!("corrupt stored event: {e}")))
}

/// Appends events from sequence number `first` on (reserved by the caller's `UPDATE`).
async fn insert_events(
    conn: &mut SqliteConnection,
    run_id: &str,
    first: i64,
    kinds: Vec<EventKind>,
) -> Result<Vec<RunEvent>, StoreError> {
    if kinds.is_empty() {
        return Ok(Vec::new());
    }
    let at = now_rfc3339();
    let mut rows = Vec::with_capacity(kinds.len());
    for (i, kind) in kinds.iter().enumerate() {
        rows.push((first + i as i64, json(&Body { at: &at, kind })?));
    }
    let mut q: QueryBuilder<Db> = QueryBuilder::new("INSERT INTO run_events (run_id, seq, body) ");
    q.push_values(rows, |mut b, (seq, body)| {
        b.push_bind(run_id).push_bind(seq).push_bind(body);
    });
    q.build().execute(&mut *conn).await.map_err(backend)?;
    Ok(kinds
        .into_iter()
        .enumerate()
        .map(|(i, kind)| RunEvent {
            seq: (first + i as i64) as u64,
            at: at.clone(),
            kind,
        })
        .collect())
}

/// How a fenced batch ends the drive, if it does.
enum End<'a> {
    /// A terminal status or `paused`; the lease is released.
    Finish(&'a RunUpdate),
    /// Back to `queued`; the lease is released.
    Release,
}

/// One write of a drive, sent as a single batch.
struct Fenced<'a> {
    lease: &'a Lease,
    snapshot: Option<&'a Snapshot>,
    steps: Vec<&'a StepRecord>,
    events: Vec<EventKind>,
    end: Option<End<'a>>,
}

/// ` WHERE EXISTS (the lease is still the run's)`: the guard of every statement after the fence.
fn push_guard(q: &mut QueryBuilder<Db>, lease: &Lease) {
    q.push(" WHERE EXISTS (SELECT 1 FROM runs WHERE id = ")
        .push_bind(lease.run_id.clone())
        .push(" AND epoch = ")
        .push_bind(lease.epoch as i64)
        .push(" AND lease_expires_at IS NOT NULL)");
}

fn push_step_rows(
    q: &mut QueryBuilder<Db>,
    run_id: &str,
    steps: &[&StepRecord],
) -> Result<(), StoreError> {
    q.push(
        "INSERT OR REPLACE INTO steps (run_id, seq, node_id, node_type, visit, status, route,
             input, output, error, cost_usd, tokens_in, tokens_out, started_at, finished_at,
             duration_ms) SELECT * FROM (VALUES ",
    );
    for (i, s) in steps.iter().enumerate() {
        if i > 0 {
            q.push(", ");
        }
        let mut b = q.separated(", ");
        b.push_unseparated("(");
        b.push_bind(run_id.to_string())
            .push_bind(i64::from(s.seq))
            .push_bind(s.node_id.clone())
            .push_bind(s.node_type.clone())
            .push_bind(i64::from(s.visit))
            .push_bind(s.status.as_str())
            .push_bind(s.route.clone())
            .push_bind(json(&s.input)?)
            .push_bind(json(&s.output)?)
            .push_bind(s.error.clone())
            .push_bind(s.cost_usd)
            .push_bind(s.tokens.input as i64)
            .push_bind(s.tokens.output as i64)
            .push_bind(s.started_at.clone())
            .push_bind(s.finished_at.clone())
            .push_bind(s.duration_ms.map(|d| d as i64));
        b.push_unseparated(")");
    }
    q.push(")");
    Ok(())
}

impl Sqlite {
    /// Sends one fenced write as a single batch: `BEGIN IMMEDIATE`, the fence (which
    /// reserves the event numbers and writes the snapshot), the guarded inserts, the end of
    /// the drive if any, `COMMIT`. When the fence refuses, every guarded statement changes
    /// nothing and the write is `LeaseLost`.
    async fn fenced(&self, pool: &SqlitePool, w: Fenced<'_>) -> Result<Written, StoreError> {
        let run_id = w.lease.run_id.as_str();
        let n = w.events.len() as i64;
        let mut q: QueryBuilder<Db> =
            QueryBuilder::new("BEGIN IMMEDIATE; UPDATE runs SET event_seq = event_seq + ");
        q.push_bind(n);
        if let Some(s) = w.snapshot {
            q.push(", snapshot = ")
                .push_bind(json(s)?)
                .push(", cost_usd = ")
                .push_bind(s.cost_usd);
        }
        q.push(" WHERE id = ")
            .push_bind(run_id.to_string())
            .push(" AND epoch = ")
            .push_bind(w.lease.epoch as i64)
            .push(" AND lease_expires_at IS NOT NULL RETURNING event_seq, cancel_requested; ");
        if !w.steps.is_empty() {
            push_step_rows(&mut q, run_id, &w.steps)?;
            push_guard(&mut q, w.lease);
            q.push("; ");
            let mut attempts = Vec::new();
            for s in &w.steps {
                for a in &s.attempts {
                    attempts.push((s.seq, a.n, json(a)?));
                }
            }
            if !attempts.is_empty() {
                q.push(
                    "INSERT OR REPLACE INTO attempts (run_id, seq, n, body) SELECT * FROM (VALUES ",
                );
                for (i, (seq, an, body)) in attempts.into_iter().enumerate() {
                    if i > 0 {
                        q.push(", ");
                    }
                    q.push("(")
                        .push_bind(run_id.to_string())
                        .push(", ")
                        .push_bind(i64::from(seq))
                        .push(", ")
                        .push_bind(i64::from(an))
                        .push(", ")
                        .push_bind(body)
                        .push(")");
                }
                q.push(")");
                push_guard(&mut q, w.lease);
                q.push("; ");
            }
        }
        let at = now_rfc3339();
        if n > 0 {
            // Event k of n gets the reserved number `event_seq - (n - 1 - k)`.
            q.push("INSERT INTO run_events (run_id, seq, body) SELECT ")
                .push_bind(run_id.to_string())
                .push(", (SELECT event_seq FROM runs WHERE id = ")
                .push_bind(run_id.to_string())
                .push(") - column1, column2 FROM (VALUES ");
            for (k, kind) in w.events.iter().enumerate() {
                if k > 0 {
                    q.push(", ");
                }
                q.push("(")
                    .push_bind(n - 1 - k as i64)
                    .push(", ")
                    .push_bind(json(&Body { at: &at, kind })?)
                    .push(")");
            }
            q.push(")");
            push_guard(&mut q, w.lease);
            q.push("; ");
        }
        match &w.end {
            Some(End::Finish(u)) => {
                q.push("UPDATE runs SET status = ")
                    .push_bind(u.status.as_str())
                    .push(", error = ")
                    .push_bind(u.error.as_ref().map(json).transpose()?)
                    .push(", finished_at = ")
                    .push_bind(u.finished_at.clone())
                    .push(", lease_expires_at = NULL");
            }
            Some(End::Release) => {
                q.push("UPDATE runs SET status = 'queued', lease_expires_at = NULL");
            }
            None => {}
        }
        if w.end.is_some() {
            q.push(" WHERE id = ")
                .push_bind(run_id.to_string())
                .push(" AND epoch = ")
                .push_bind(w.lease.epoch as i64)
                .push(" AND lease_expires_at IS NOT NULL; ");
        }
        q.push("COMMIT");
        let mut conn = pool.acquire().await.map_err(backend)?;
        let rows = match q.build().fetch_all(&mut *conn).await {
            Ok(rows) => rows,
            Err(e) => {
                // A statement failed inside the batch: closing the connection rolls back
                // whatever the batch had begun.
                conn.close().await.ok();
                return Err(backend(e));
            }
        };
        let Some(row) = rows.first() else {
            return Err(fence(&mut conn, w.lease, None, 0)
                .await
                .err()
                .unwrap_or_else(|| rules::lease_lost(run_id, w.lease.epoch, None)));
        };
        let last: i64 = row.get(0);
        let cancel = row.get::<i64, _>(1) != 0;
        let first = last - n + 1;
        Ok(Written {
            events: w
                .events
                .into_iter()
                .enumerate()
                .map(|(k, kind)| RunEvent {
                    seq: (first + k as i64) as u64,
                    at: at.clone(),
                    kind,
                })
                .collect(),
            cancel_requested: cancel,
        })
    }
}

/// The claim columns of one run.
struct ClaimRow {
    id: String,
    status: RunStatus,
    epoch: u64,
    owner: Option<String>,
    lease_expires_at: Option<i64>,
}

impl ClaimRow {
    fn from_row(r: &SqliteRow) -> Self {
        Self {
            id: r.get("id"),
            status: status_of(r, "status"),
            epoch: r.get::<i64, _>("epoch") as u64,
            owner: r.get("owner"),
            lease_expires_at: r.get("lease_expires_at"),
        }
    }

    fn view(&self) -> ClaimView<'_> {
        ClaimView {
            run_id: &self.id,
            status: self.status,
            epoch: self.epoch,
            owner: self.owner.as_deref(),
            lease_expires_at: self.lease_expires_at,
        }
    }
}

/// Claims a run already checked claimable, inside the caller's transaction.
async fn claim_row(
    conn: &mut SqliteConnection,
    row: &ClaimRow,
    claim: &Claim,
) -> Result<(Lease, Written), StoreError> {
    let epoch = row.epoch + 1;
    let event = rules::claim_event(&row.view(), &claim.owner, epoch);
    let expires_at = now_ms() + claim.ttl.as_millis() as i64;
    let r = sqlx::query(
        "UPDATE runs SET status = 'running', epoch = ?, owner = ?, lease_expires_at = ?,
                         event_seq = event_seq + 1
         WHERE id = ? AND epoch = ? RETURNING event_seq, cancel_requested",
    )
    .bind(epoch as i64)
    .bind(claim.owner.as_str())
    .bind(expires_at)
    .bind(row.id.as_str())
    .bind(row.epoch as i64)
    .fetch_optional(&mut *conn)
    .await
    .map_err(backend)?
    .ok_or_else(|| StoreError::Conflict(format!("run {} was claimed by someone else", row.id)))?;
    let events = insert_events(conn, &row.id, r.get(0), vec![event]).await?;
    Ok((
        Lease {
            run_id: row.id.clone(),
            owner: claim.owner.clone(),
            epoch,
            expires_at,
        },
        Written {
            events,
            cancel_requested: r.get::<i64, _>(1) != 0,
        },
    ))
}

fn not_found(run_id: &str) -> StoreError {
    StoreError::NotFound(format!("no run with id {run_id}"))
}

#[async_trait]
impl RunStore for Sqlite {
    async fn create_run(&self, run: &NewRun) -> Result<Created, StoreError> {
        let mut tx = self.pool.begin_with(BEGIN).await.map_err(backend)?;
        if let Some(key) = &run.idempotency_key
            && let Some(existing) = sqlx::query("SELECT id FROM runs WHERE idempotency_key = ?")
                .bind(key.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?
        {
            return Ok(Created {
                run_id: existing.get(0),
                created: false,
                lease: None,
                events: Vec::new(),
            });
        }
        sqlx::query(
            "INSERT INTO runs (id, workflow, dialect, status, source_path, source_text, input,
                               snapshot, cost_usd, started_at, idempotency_key, event_seq)
             VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, 0, ?, ?, 1)",
        )
        .bind(run.run_id.as_str())
        .bind(run.workflow.as_str())
        .bind(run.dialect.as_str())
        .bind(run.source_path.as_str())
        .bind(run.source_text.as_str())
        .bind(json(&run.input)?)
        .bind(json(&run.snapshot)?)
        .bind(run.created_at.as_str())
        .bind(run.idempotency_key.as_deref())
        .execute(&mut *tx)
        .await
        .map_err(|e| match e {
            sqlx::Error::Database(d) if d.is_unique_violation() => {
                StoreError::Conflict(format!("run {} already exists", run.run_id))
            }
            other => backend(other),
        })?;
        let mut events = insert_events(
            &mut tx,
            &run.run_id,
            1,
            vec![EventKind::RunCreated {
                workflow: run.workflow.clone(),
            }],
        )
        .await?;
        let lease = match &run.claim {
            Some(c) => {
                let row = ClaimRow {
                    id: run.run_id.clone(),
                    status: RunStatus::Queued,
                    epoch: 0,
                    owner: None,
                    lease_expires_at: None,
                };
                let (lease, w) = claim_row(&mut tx, &row, c).await?;
                events.extend(w.events);
                Some(lease)
            }
            None => None,
        };
        tx.commit().await.map_err(backend)?;
        Ok(Created {
            run_id: run.run_id.clone(),
            created: true,
            lease,
            events,
        })
    }

    async fn claim_run(&self, run_id: &str, claim: &Claim) -> Result<(Lease, Written), StoreError> {
        let mut tx = self.pool.begin_with(BEGIN).await.map_err(backend)?;
        let row =
            sqlx::query("SELECT id, status, epoch, owner, lease_expires_at FROM runs WHERE id = ?")
                .bind(run_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?
                .map(|r| ClaimRow::from_row(&r))
                .ok_or_else(|| not_found(run_id))?;
        if let Some(refusal) = rules::claim_refusal(&row.view(), now_ms()) {
            return Err(refusal);
        }
        let out = claim_row(&mut tx, &row, claim).await?;
        tx.commit().await.map_err(backend)?;
        Ok(out)
    }

    async fn claim_next(
        &self,
        claim: &Claim,
        limit: u32,
    ) -> Result<Vec<(Lease, Written)>, StoreError> {
        let mut tx = self.pool.begin_with(BEGIN).await.map_err(backend)?;
        let rows: Vec<ClaimRow> = sqlx::query(
            "SELECT id, status, epoch, owner, lease_expires_at FROM runs
             WHERE status = 'queued'
                OR (status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= ?))
             ORDER BY started_at, rowid LIMIT ?",
        )
        .bind(now_ms())
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?
        .iter()
        .map(ClaimRow::from_row)
        .collect();
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.push(claim_row(&mut tx, row, claim).await?);
        }
        tx.commit().await.map_err(backend)?;
        Ok(out)
    }

    async fn renew(&self, lease: &mut Lease, ttl: Duration) -> Result<Written, StoreError> {
        let expires = now_ms() + ttl.as_millis() as i64;
        let row = sqlx::query(
            "UPDATE runs SET lease_expires_at = ?
             WHERE id = ? AND epoch = ? AND lease_expires_at IS NOT NULL
             RETURNING cancel_requested",
        )
        .bind(expires)
        .bind(lease.run_id.as_str())
        .bind(lease.epoch as i64)
        .fetch_optional(&self.visible)
        .await
        .map_err(backend)?;
        match row {
            Some(r) => {
                lease.expires_at = expires;
                Ok(Written {
                    events: Vec::new(),
                    cancel_requested: r.get::<i64, _>(0) != 0,
                })
            }
            None => {
                let mut conn = self.pool.acquire().await.map_err(backend)?;
                // Reports who holds it now.
                Err(fence(&mut conn, lease, None, 0)
                    .await
                    .err()
                    .unwrap_or_else(|| rules::lease_lost(&lease.run_id, lease.epoch, None)))
            }
        }
    }

    async fn start_steps(
        &self,
        lease: &Lease,
        steps: &[StepRecord],
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(
            &self.visible,
            Fenced {
                lease,
                snapshot: None,
                steps: steps.iter().collect(),
                events,
                end: None,
            },
        )
        .await
    }

    async fn commit_step(&self, lease: &Lease, c: StepCommit<'_>) -> Result<Written, StoreError> {
        let mut steps: Vec<&StepRecord> = c.started.iter().collect();
        steps.push(c.step);
        self.fenced(
            &self.pool,
            Fenced {
                lease,
                snapshot: Some(c.snapshot),
                steps,
                events: c.events,
                end: None,
            },
        )
        .await
    }

    async fn append_events(
        &self,
        lease: &Lease,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(
            &self.visible,
            Fenced {
                lease,
                snapshot: None,
                steps: Vec::new(),
                events,
                end: None,
            },
        )
        .await
    }

    async fn finish_run(
        &self,
        lease: &Lease,
        u: &RunUpdate,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(
            &self.pool,
            Fenced {
                lease,
                snapshot: Some(&u.snapshot),
                steps: Vec::new(),
                events,
                end: Some(End::Finish(u)),
            },
        )
        .await
    }

    async fn release(
        &self,
        lease: &Lease,
        snapshot: &Snapshot,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(
            &self.pool,
            Fenced {
                lease,
                snapshot: Some(snapshot),
                steps: Vec::new(),
                events,
                end: Some(End::Release),
            },
        )
        .await
    }

    async fn decide(&self, d: &GateDecision) -> Result<Written, StoreError> {
        let mut tx = self.pool.begin_with(BEGIN).await.map_err(backend)?;
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
        let Some(row) = row else {
            let cur = sqlx::query("SELECT status, epoch FROM runs WHERE id = ?")
                .bind(d.run_id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?
                .ok_or_else(|| not_found(&d.run_id))?;
            return Err(rules::decision_conflict(
                &d.run_id,
                status_of(&cur, "status"),
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
        let mut tx = self.pool.begin_with(BEGIN).await.map_err(backend)?;
        let row = sqlx::query(
            "SELECT status, lease_expires_at, cancel_requested, snapshot FROM runs WHERE id = ?",
        )
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?
        .ok_or_else(|| not_found(run_id))?;
        let status = status_of(&row, "status");
        let live = row
            .get::<Option<i64>, _>("lease_expires_at")
            .is_some_and(|at| at > now_ms());
        if status.is_terminal() {
            return Err(rules::cancel_conflict(run_id, status));
        }
        let requested = EventKind::CancelRequested { by: by.to_string() };
        if status == RunStatus::Running && live {
            let already = row.get::<i64, _>("cancel_requested") != 0;
            let events = if already {
                Vec::new()
            } else {
                let r = sqlx::query(
                    "UPDATE runs SET cancel_requested = 1, event_seq = event_seq + 1
                     WHERE id = ? RETURNING event_seq",
                )
                .bind(run_id)
                .fetch_one(&mut *tx)
                .await
                .map_err(backend)?;
                insert_events(&mut tx, run_id, r.get(0), vec![requested]).await?
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
        // Nobody drives it: cancel it here and now.
        let mut snapshot: Snapshot = parse(row.get::<&str, _>("snapshot"))?;
        snapshot.gates.clear();
        snapshot.pending.clear();
        let at = now_rfc3339();
        let error = RunError {
            code: ErrorCode::Cancelled,
            message: format!("cancelled by {by}"),
            node_id: None,
        };
        let r = sqlx::query(
            "UPDATE runs SET status = 'cancelled', error = ?, finished_at = ?, snapshot = ?,
                             lease_expires_at = NULL, event_seq = event_seq + 2
             WHERE id = ? RETURNING event_seq",
        )
        .bind(json(&error)?)
        .bind(at.as_str())
        .bind(json(&snapshot)?)
        .bind(run_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(backend)?;
        sqlx::query(
            "UPDATE steps SET status = 'cancelled', error = ?, finished_at = ?
             WHERE run_id = ? AND status IN ('running', 'waiting')",
        )
        .bind(format!("cancelled by {by}"))
        .bind(at.as_str())
        .bind(run_id)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        let events = insert_events(
            &mut tx,
            run_id,
            r.get::<i64, _>(0) - 1,
            vec![
                requested,
                EventKind::RunFinished {
                    status: RunStatus::Cancelled,
                    error: Some(error),
                },
            ],
        )
        .await?;
        tx.commit().await.map_err(backend)?;
        Ok((
            CancelOutcome::Cancelled,
            Written {
                events,
                cancel_requested: true,
            },
        ))
    }

    async fn load_run(&self, run_id: &str) -> Result<StoredRun, StoreError> {
        let row = sqlx::query(
            "SELECT workflow, status, source_path, source_text, snapshot, epoch, owner,
                    lease_expires_at, cancel_requested
             FROM runs WHERE id = ?",
        )
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?
        .ok_or_else(|| not_found(run_id))?;
        Ok(StoredRun {
            run_id: run_id.to_string(),
            workflow: row.get("workflow"),
            status: status_of(&row, "status"),
            source_path: row.get("source_path"),
            source_text: row.get("source_text"),
            snapshot: parse(row.get::<&str, _>("snapshot"))?,
            epoch: row.get::<i64, _>("epoch") as u64,
            owner: row.get("owner"),
            lease_expires_at: row.get("lease_expires_at"),
            cancel_requested: row.get::<i64, _>("cancel_requested") != 0,
        })
    }

    async fn get_step(&self, run_id: &str, seq: u32) -> Result<StepRecord, StoreError> {
        self.steps(run_id, Some(seq))
            .await?
            .pop()
            .ok_or_else(|| StoreError::NotFound(format!("run {run_id} has no step {seq}")))
    }

    async fn get_record(&self, run_id: &str) -> Result<RunRecord, StoreError> {
        let row = sqlx::query(
            "SELECT workflow, dialect, status, input, snapshot, error, started_at, finished_at
             FROM runs WHERE id = ?",
        )
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?
        .ok_or_else(|| not_found(run_id))?;
        let snapshot: Snapshot = parse(row.get::<&str, _>("snapshot"))?;
        let error: Option<String> = row.get("error");
        let events = sqlx::query("SELECT seq, body FROM run_events WHERE run_id = ? ORDER BY seq")
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?
            .iter()
            .map(|r| event_value(r.get(0), r.get::<&str, _>(1)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(crate::record(crate::RecordParts {
            run_id,
            workflow: row.get("workflow"),
            dialect: row.get("dialect"),
            status: status_of(&row, "status"),
            input: parse(row.get::<&str, _>("input"))?,
            snapshot: &snapshot,
            error: error.as_deref().map(parse).transpose()?,
            events,
            started_at: row.get("started_at"),
            finished_at: row.get("finished_at"),
            steps: self.steps(run_id, None).await?,
        }))
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, workflow, status, started_at, finished_at, cost_usd FROM runs
             WHERE (? IS NULL OR status = ?)
             ORDER BY started_at DESC, rowid DESC LIMIT ?",
        )
        .bind(filter.status.map(|s| s.as_str()))
        .bind(filter.status.map(|s| s.as_str()))
        .bind(i64::from(filter.limit))
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        Ok(rows
            .iter()
            .map(|r| RunSummary {
                run_id: r.get("id"),
                workflow: r.get("workflow"),
                status: status_of(r, "status"),
                started_at: r.get("started_at"),
                cost_usd: r.get("cost_usd"),
                finished_at: r.get("finished_at"),
            })
            .collect())
    }

    async fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<RunEvent>, StoreError> {
        sqlx::query("SELECT seq, body FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq")
            .bind(run_id)
            .bind(after as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?
            .iter()
            .map(|r| event_of(r.get(0), r.get::<&str, _>(1)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database written by a weir before leases (schema 3) opens, migrates, and its runs
    /// go on: a run left `running` is claimable, its old events are kept as `legacy`.
    #[tokio::test]
    async fn a_schema_3_database_migrates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let opts = SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true);
            let pool = SqlitePoolOptions::new().connect_with(opts).await.unwrap();
            sqlx::query("CREATE TABLE schema_version (version INTEGER PRIMARY KEY)")
                .execute(&pool)
                .await
                .unwrap();
            for (v, sql) in &MIGRATIONS[..3] {
                sqlx::raw_sql(*sql).execute(&pool).await.unwrap();
                sqlx::query("INSERT INTO schema_version (version) VALUES (?)")
                    .bind(*v)
                    .execute(&pool)
                    .await
                    .unwrap();
            }
            sqlx::raw_sql(
                r#"INSERT INTO runs (id, workflow, dialect, status, source_path, source_text, input, snapshot, started_at)
                   VALUES ('old', 'wf', 'graph', 'running', 'wf.json', '{}', '{}', '{"state": {}, "loops": {}, "pending": ["a"], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 1, "cost_usd": 0.0, "output": null, "gates": [], "owner": "host:1"}', '2026-01-01T00:00:00.000Z');
                   INSERT INTO events (run_id, body) VALUES ('old', '{"type": "run_resumed", "at": "2026-01-01T00:00:01.000Z"}');
                   INSERT INTO events (run_id, body) VALUES ('old', '{"type": "gate_approved", "node_id": "g"}');"#,
            )
            .execute(&pool)
            .await
            .unwrap();
        }
        let store = Sqlite::open(Some(&path)).await.unwrap();
        let events = store.events_after("old", 0).await.unwrap();
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
        assert!(
            matches!(&events[1].kind, EventKind::Legacy { body } if body["type"] == "gate_approved")
        );
        let (lease, w) = store
            .claim_run(
                "old",
                &Claim {
                    owner: "new".into(),
                    ttl: Duration::from_secs(30),
                },
            )
            .await
            .unwrap();
        assert_eq!(lease.epoch, 1);
        assert_eq!(w.events[0].seq, 3);
        assert!(matches!(w.events[0].kind, EventKind::RunResumed { .. }));
    }
}
