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
use crate::writer::{self, EndRow, FencedWrite, StepRow, Writer};

pub struct Sqlite {
    pool: SqlitePool,
    /// The drive's writes. Its unsynced connection takes the writes that only make progress
    /// visible (a step's `running` row, an attempt's failure, a renewal): they ride along with
    /// the next synced commit instead of paying an fsync of their own.
    writer: Writer,
    /// The folder of a throwaway database (`sqlite::memory:`), removed with the store.
    _scratch: Option<tempfile::TempDir>,
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
            _scratch: scratch,
        };
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

/// How a fenced write ends the drive, if it does.
enum End<'a> {
    /// A terminal status or `paused`; the lease is released.
    Finish(&'a RunUpdate),
    /// Back to `queued`; the lease is released.
    Release,
}

/// One write of a drive.
struct Fenced<'a> {
    lease: &'a Lease,
    visible: bool,
    snapshot: Option<&'a Snapshot>,
    steps: Vec<&'a StepRecord>,
    events: Vec<EventKind>,
    end: Option<End<'a>>,
}

fn step_row(s: &StepRecord) -> Result<StepRow, StoreError> {
    Ok(StepRow {
        seq: i64::from(s.seq),
        node_id: s.node_id.clone(),
        node_type: s.node_type.clone(),
        visit: i64::from(s.visit),
        status: s.status.as_str(),
        route: s.route.clone(),
        input: json(&s.input)?,
        output: json(&s.output)?,
        error: s.error.clone(),
        cost_usd: s.cost_usd,
        tokens_in: s.tokens.input as i64,
        tokens_out: s.tokens.output as i64,
        started_at: s.started_at.clone(),
        finished_at: s.finished_at.clone(),
        duration_ms: s.duration_ms.map(|d| d as i64),
        attempts: s
            .attempts
            .iter()
            .map(|a| Ok((i64::from(a.n), json(a)?)))
            .collect::<Result<_, StoreError>>()?,
    })
}

impl Sqlite {
    /// Serializes one write of a drive and runs it on the writer thread.
    async fn fenced(&self, w: Fenced<'_>) -> Result<Written, StoreError> {
        let at = now_rfc3339();
        let write = FencedWrite {
            run_id: w.lease.run_id.clone(),
            epoch: w.lease.epoch as i64,
            visible: w.visible,
            snapshot: w.snapshot.map(|s| Ok((json(s)?, s.cost_usd))).transpose()?,
            steps: w
                .steps
                .iter()
                .map(|s| step_row(s))
                .collect::<Result<_, _>>()?,
            events: w
                .events
                .iter()
                .map(|kind| json(&Body { at: &at, kind }))
                .collect::<Result<_, _>>()?,
            end: match w.end {
                Some(End::Finish(u)) => Some(EndRow::Finish {
                    status: u.status.as_str(),
                    error: u.error.as_ref().map(json).transpose()?,
                    finished_at: u.finished_at.clone(),
                }),
                Some(End::Release) => Some(EndRow::Release),
                None => None,
            },
        };
        let done = self.writer.run(move |c| writer::fenced(c, write)).await?;
        Ok(Written {
            events: w
                .events
                .into_iter()
                .enumerate()
                .map(|(k, kind)| RunEvent {
                    seq: (done.first_seq + k as i64) as u64,
                    at: at.clone(),
                    kind,
                })
                .collect(),
            cancel_requested: done.cancel_requested,
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
        let (run_id, epoch) = (lease.run_id.clone(), lease.epoch as i64);
        let cancel = self
            .writer
            .run(move |c| writer::renew(c, &run_id, epoch, expires))
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
        steps: &[StepRecord],
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(Fenced {
            lease,
            visible: true,
            snapshot: None,
            steps: steps.iter().collect(),
            events,
            end: None,
        })
        .await
    }

    async fn commit_step(&self, lease: &Lease, c: StepCommit<'_>) -> Result<Written, StoreError> {
        let mut steps: Vec<&StepRecord> = c.started.iter().collect();
        steps.push(c.step);
        self.fenced(Fenced {
            lease,
            visible: false,
            snapshot: Some(c.snapshot),
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
            visible: true,
            snapshot: None,
            steps: Vec::new(),
            events,
            end: None,
        })
        .await
    }

    async fn finish_run(
        &self,
        lease: &Lease,
        u: &RunUpdate,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(Fenced {
            lease,
            visible: false,
            snapshot: Some(&u.snapshot),
            steps: Vec::new(),
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
            visible: false,
            snapshot: Some(snapshot),
            steps: Vec::new(),
            events,
            end: Some(End::Release),
        })
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
