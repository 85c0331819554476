//! The Postgres store (scale-out, DESIGN §8): any number of `weir serve` and `weir worker`
//! processes share one database. `READ COMMITTED` throughout.
//!
//! - **Queue**: a small hot table (`queue`) holds a row per queued or leased run and nothing
//!   else; `visible_at` is when a row may be claimed (its enqueue time, or its lease's expiry),
//!   and two partial indexes serve the claim (expired leases first, then queued runs oldest
//!   first), which takes a batch with `FOR UPDATE SKIP LOCKED`.
//! - **Fencing**: every write of a drive is one statement whose first part is
//!   `UPDATE runs … WHERE id = $1 AND epoch = $2 AND status = 'running'`; the step rows,
//!   attempts, events and queue change only happen when that matched, so a stale driver's
//!   write changes nothing. A refusal leaves a `stale_write_refused` event. Heartbeats renew
//!   through the lease row (`queue … WHERE run_id = $1 AND epoch = $2`).
//! - **Durability**: step commits, claims, decisions and ends of drives commit with the
//!   server's `synchronous_commit`; writes that only make progress visible (a step's
//!   `running` row, a failed attempt, a heartbeat) use a pool with `synchronous_commit=off`,
//!   as SQLite's unsynced connection does.
//! - **Wake-ups**: `NOTIFY` is sent by a task of its own, batched, from its own transaction,
//!   so it never serialises the commits of the hot path; `LISTEN` feeds [`RunStore::watch`].
//!   Workers and readers also poll: a lost notification only delays.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{PgConnection, Row};
use weir_core::event::{EventKind, RunEvent};
use weir_core::record::{
    ErrorCode, RunError, RunRecord, RunStatus, RunSummary, Snapshot, StepRecord, StepStatus,
};
use weir_core::store::{
    CancelOutcome, Claim, Created, GateDecision, Lease, NewRun, RunFilter, RunStore, RunUpdate,
    StepCommit, StoreError, StoredRun, WakeFn, Written, now_ms, now_rfc3339,
};

use crate::rules::{self, ClaimView};
use crate::{Body, backend, event_of, event_value, json, numbered, parse};

mod catalog;
mod notify;
mod schema;

pub use notify::Faults;

/// Connections to one weir database on a Postgres server.
pub struct Postgres {
    /// Durable writes (the server's `synchronous_commit`) and reads.
    pool: PgPool,
    /// Progress-only writes, with `synchronous_commit=off`.
    fast: PgPool,
    notes: notify::Notifier,
    /// Statement-level fault injection for the crash tests (inert unless armed).
    pub faults: Faults,
}

/// The connection options of a `postgres://` URL.
fn options(url: &str) -> Result<PgConnectOptions, StoreError> {
    PgConnectOptions::from_str(url)
        .map_err(|e| StoreError::Backend(format!("bad Postgres URL: {e}")))
}

fn not_found(run_id: &str) -> StoreError {
    StoreError::NotFound(format!("no run with id {run_id}"))
}

/// Event bodies for `kinds`, all stamped `at`.
fn bodies(at: &str, kinds: &[EventKind]) -> Result<Vec<String>, StoreError> {
    kinds.iter().map(|kind| json(&Body { at, kind })).collect()
}

/// Step rows as parallel arrays, for `unnest`.
#[derive(Default)]
struct StepArrays {
    seq: Vec<i64>,
    node_id: Vec<String>,
    node_type: Vec<String>,
    visit: Vec<i64>,
    status: Vec<&'static str>,
    route: Vec<Option<String>>,
    input: Vec<String>,
    output: Vec<String>,
    error: Vec<Option<String>>,
    cost_usd: Vec<f64>,
    tokens_in: Vec<i64>,
    tokens_out: Vec<i64>,
    started_at: Vec<String>,
    finished_at: Vec<Option<String>>,
    duration_ms: Vec<Option<i64>>,
    a_seq: Vec<i64>,
    a_n: Vec<i64>,
    a_body: Vec<String>,
}

impl StepArrays {
    fn of(steps: &[&StepRecord]) -> Result<Self, StoreError> {
        let mut a = Self::default();
        for s in steps {
            a.seq.push(i64::from(s.seq));
            a.node_id.push(s.node_id.clone());
            a.node_type.push(s.node_type.clone());
            a.visit.push(i64::from(s.visit));
            a.status.push(s.status.as_str());
            a.route.push(s.route.clone());
            a.input.push(json(&s.input)?);
            a.output.push(json(&s.output)?);
            a.error.push(s.error.clone());
            a.cost_usd.push(s.cost_usd);
            a.tokens_in.push(s.tokens.input as i64);
            a.tokens_out.push(s.tokens.output as i64);
            a.started_at.push(s.started_at.clone());
            a.finished_at.push(s.finished_at.clone());
            a.duration_ms.push(s.duration_ms.map(|d| d as i64));
            for at in &s.attempts {
                a.a_seq.push(i64::from(s.seq));
                a.a_n.push(i64::from(at.n));
                a.a_body.push(json(at)?);
            }
        }
        Ok(a)
    }

    /// Binds the arrays in the order of [`STEPS_FROM`] and [`ATTEMPTS_FROM`], starting at
    /// parameter `$k` (the caller's numbering).
    fn bind<'q>(
        self,
        q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        q.bind(self.seq)
            .bind(self.node_id)
            .bind(self.node_type)
            .bind(self.visit)
            .bind(self.status)
            .bind(self.route)
            .bind(self.input)
            .bind(self.output)
            .bind(self.error)
            .bind(self.cost_usd)
            .bind(self.tokens_in)
            .bind(self.tokens_out)
            .bind(self.started_at)
            .bind(self.finished_at)
            .bind(self.duration_ms)
            .bind(self.a_seq)
            .bind(self.a_n)
            .bind(self.a_body)
    }
}

/// The upsert of step rows from arrays `$P0 … $P14` and of attempts from `$P15 … $P17`,
/// where `P` is the first parameter number; `guard` is a `FROM` item that must yield a row
/// (the fence) or nothing.
fn step_upserts(p: usize, guard: &str) -> String {
    let n = |k: usize| format!("${}", p + k);
    format!(
        "st AS (
            INSERT INTO steps (run_id, seq, node_id, node_type, visit, status, route, input,
                               output, error, cost_usd, tokens_in, tokens_out, started_at,
                               finished_at, duration_ms)
            SELECT $1, x.* FROM {guard}, unnest({}::int8[], {}::text[], {}::text[], {}::int8[],
                {}::text[], {}::text[], {}::text[], {}::text[], {}::text[], {}::float8[],
                {}::int8[], {}::int8[], {}::text[], {}::text[], {}::int8[]) AS x
            ON CONFLICT (run_id, seq) DO UPDATE SET node_id = EXCLUDED.node_id,
                node_type = EXCLUDED.node_type, visit = EXCLUDED.visit,
                status = EXCLUDED.status, route = EXCLUDED.route, input = EXCLUDED.input,
                output = EXCLUDED.output, error = EXCLUDED.error, cost_usd = EXCLUDED.cost_usd,
                tokens_in = EXCLUDED.tokens_in, tokens_out = EXCLUDED.tokens_out,
                started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at,
                duration_ms = EXCLUDED.duration_ms
        ), att AS (
            INSERT INTO attempts (run_id, seq, n, body)
            SELECT $1, x.* FROM {guard}, unnest({}::int8[], {}::int8[], {}::text[]) AS x
            ON CONFLICT (run_id, seq, n) DO UPDATE SET body = EXCLUDED.body
        )",
        n(0),
        n(1),
        n(2),
        n(3),
        n(4),
        n(5),
        n(6),
        n(7),
        n(8),
        n(9),
        n(10),
        n(11),
        n(12),
        n(13),
        n(14),
        n(15),
        n(16),
        n(17),
    )
}

/// One write of a drive. `end`: 0 none, 1 finish (or park), 2 release.
struct Fence<'a> {
    lease: &'a Lease,
    write: &'static str,
    visible: bool,
    snapshot: Option<&'a Snapshot>,
    steps: Vec<&'a StepRecord>,
    events: Vec<EventKind>,
    status: Option<RunStatus>,
    error: Option<&'a RunError>,
    finished_at: Option<&'a str>,
    end: i32,
}

/// The fenced write: the fence `UPDATE` (which also reserves the event numbers and ends the
/// drive when asked), then everything else only where the fence matched. One statement per
/// shape of write (with or without steps, events, an end), each prepared once per
/// connection: a part with nothing to do still costs the server its planning and execution.
fn fenced_sql(steps: bool, events: bool, end: i32) -> &'static str {
    static SQL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let all = SQL.get_or_init(|| {
        let mut all = Vec::new();
        for shape in 0..12 {
            let (steps, events, end) = (shape & 1 != 0, shape & 2 != 0, shape >> 2);
            let mut parts = vec![
                "fence AS (
                UPDATE runs SET event_seq = event_seq + $3,
                    snapshot = COALESCE($4, snapshot), cost_usd = COALESCE($5, cost_usd),
                    status = COALESCE($6, status),
                    error = CASE WHEN $6::text IS NULL THEN error ELSE $7 END,
                    finished_at = CASE WHEN $6::text IS NULL THEN finished_at ELSE $8 END
                WHERE id = $1 AND epoch = $2 AND status = 'running' AND $9::int4 >= 0
                RETURNING event_seq, cancel_requested
            )"
                .to_string(),
            ];
            if steps {
                parts.push(step_upserts(10, "fence"));
            }
            if events {
                parts.push(
                    "ev AS (
                        INSERT INTO run_events (run_id, seq, body)
                        SELECT $1, fence.event_seq - $3 + x.k, x.body
                        FROM fence, unnest($28::text[]) WITH ORDINALITY AS x(body, k)
                    )"
                    .into(),
                );
            }
            match end {
                1 => parts.push(
                    "gone AS (DELETE FROM queue WHERE run_id = $1 AND EXISTS (SELECT 1 FROM fence))"
                        .into(),
                ),
                2 => parts.push(
                    "back AS (UPDATE queue SET visible_at = $29, leased = FALSE
                              WHERE run_id = $1 AND EXISTS (SELECT 1 FROM fence))"
                        .into(),
                ),
                _ => {}
            }
            all.push(format!(
                "WITH {} SELECT event_seq, cancel_requested FROM fence",
                parts.join(", ")
            ));
        }
        all
    });
    &all[usize::from(steps) | usize::from(events) << 1 | (end as usize) << 2]
}

/// Step rows and attempts on their own (a decision's transaction): `$1` the run, then the
/// arrays.
fn upsert_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "WITH one AS (SELECT 1), {} SELECT 1",
            step_upserts(2, "one")
        )
    })
}

/// Runs `f` in a transaction: committed when it returns `Ok`, rolled back at once when it
/// fails (not left to the pool, where the transaction's row locks would outlive the error
/// until the connection is next used, and make `SKIP LOCKED` claims skip those rows).
pub(super) async fn in_tx<T>(
    pool: &PgPool,
    f: impl AsyncFnOnce(&mut PgConnection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let mut tx = pool.begin().await.map_err(backend)?;
    match f(&mut tx).await {
        Ok(v) => {
            tx.commit().await.map_err(backend)?;
            Ok(v)
        }
        Err(e) => {
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

impl Postgres {
    /// Connects to the database of `url` (`postgres://user@host:port/db`), applying the
    /// migrations it lacks.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let opts = options(url)?;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(
                opts.clone()
                    .options([("plan_cache_mode", "force_generic_plan")]),
            )
            .await
            .map_err(|e| StoreError::Backend(format!("cannot connect to Postgres: {e}")))?;
        let fast = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts.options([
                ("synchronous_commit", "off"),
                ("plan_cache_mode", "force_generic_plan"),
            ]))
            .await
            .map_err(|e| StoreError::Backend(format!("cannot connect to Postgres: {e}")))?;
        let store = Self {
            notes: notify::Notifier::start(fast.clone()),
            pool,
            fast,
            faults: Faults::default(),
        };
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        // One migrator at a time across every process starting against this database.
        sqlx::query("SELECT pg_advisory_xact_lock(7265836201)")
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        sqlx::query("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT PRIMARY KEY)")
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        let current: i64 = sqlx::query("SELECT COALESCE(MAX(version), 0) FROM schema_version")
            .fetch_one(&mut *tx)
            .await
            .map_err(backend)?
            .get(0);
        for (version, sql) in schema::MIGRATIONS {
            if *version > current {
                sqlx::raw_sql(*sql)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                sqlx::query("INSERT INTO schema_version (version) VALUES ($1)")
                    .bind(*version)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
            }
        }
        tx.commit().await.map_err(backend)
    }

    /// Dead tuples and live rows of the hot queue table (the benchmark's bloat figure).
    pub async fn queue_tuples(&self) -> Result<(i64, i64), StoreError> {
        let r = sqlx::query(
            "SELECT COALESCE(n_dead_tup, 0), COALESCE(n_live_tup, 0) FROM pg_stat_user_tables
             WHERE relname = 'queue'",
        )
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        Ok(r.map_or((0, 0), |r| (r.get(0), r.get(1))))
    }

    async fn fenced(&self, w: Fence<'_>) -> Result<Written, StoreError> {
        self.faults.hit("commit", 0)?;
        let at = now_rfc3339();
        let n = w.events.len() as i64;
        let sql = fenced_sql(!w.steps.is_empty(), !w.events.is_empty(), w.end);
        let q = sqlx::query(sql)
            .bind(w.lease.run_id.as_str())
            .bind(w.lease.epoch as i64)
            .bind(n)
            .bind(w.snapshot.map(json).transpose()?)
            .bind(w.snapshot.map(|s| s.cost_usd))
            .bind(w.status.map(RunStatus::as_str))
            .bind(w.error.map(json).transpose()?)
            .bind(w.finished_at)
            .bind(w.end);
        let q = StepArrays::of(&w.steps)?
            .bind(q)
            .bind(bodies(&at, &w.events)?)
            .bind(now_ms());
        let pool = if w.visible { &self.fast } else { &self.pool };
        let row = q.fetch_optional(pool).await.map_err(backend)?;
        let Some(row) = row else {
            return Err(self.refuse(w.lease, w.write).await);
        };
        let last: i64 = row.get(0);
        self.notes.run(&w.lease.run_id);
        if w.end == 2 {
            self.notes.work();
        }
        Ok(Written {
            events: numbered(last - n + 1, &at, w.events),
            cancel_requested: row.get(1),
        })
    }

    /// Refuses a stale write: the `LeaseLost`, after a `stale_write_refused` event on the
    /// run's timeline (when the run still exists).
    async fn refuse(&self, lease: &Lease, write: &str) -> StoreError {
        match self.note_refusal(lease, write).await {
            Ok(current) => rules::lease_lost(&lease.run_id, lease.epoch, current),
            Err(e) => e,
        }
    }

    async fn note_refusal(
        &self,
        lease: &Lease,
        write: &str,
    ) -> Result<Option<(u64, Option<String>, RunStatus)>, StoreError> {
        // Whether an event was written: only then are readers woken.
        let noted = in_tx(&self.fast, async |tx: &mut PgConnection| {
            let Some(row) =
                sqlx::query("SELECT epoch, owner, status FROM runs WHERE id = $1 FOR UPDATE")
                    .bind(lease.run_id.as_str())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(backend)?
            else {
                return Ok(None);
            };
            let current = (
                row.get::<i64, _>(0) as u64,
                row.get::<Option<String>, _>(1),
                crate::cols::status(&row, "status"),
            );
            let Some(kind) = rules::stale_write(&lease.owner, lease.epoch, &current, write) else {
                return Ok(Some((current, false)));
            };
            let seq: i64 = sqlx::query(
                "UPDATE runs SET event_seq = event_seq + 1 WHERE id = $1 RETURNING event_seq",
            )
            .bind(lease.run_id.as_str())
            .fetch_one(&mut *tx)
            .await
            .map_err(backend)?
            .get(0);
            insert_events(&mut *tx, &lease.run_id, seq, &now_rfc3339(), &[kind]).await?;
            Ok(Some((current, true)))
        })
        .await?;
        Ok(noted.map(|(current, written)| {
            if written {
                self.notes.run(&lease.run_id);
            }
            current
        }))
    }

    async fn steps(&self, run_id: &str, only: Option<u32>) -> Result<Vec<StepRecord>, StoreError> {
        let only = only.map(i64::from);
        let rows = sqlx::query(
            "SELECT seq, node_id, node_type, visit, status, route, input, output, error, cost_usd,
                    tokens_in, tokens_out, started_at, finished_at, duration_ms
             FROM steps WHERE run_id = $1 AND ($2::int8 IS NULL OR seq = $2) ORDER BY seq",
        )
        .bind(run_id)
        .bind(only)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        let attempt_rows = sqlx::query(
            "SELECT seq, body FROM attempts WHERE run_id = $1 AND ($2::int8 IS NULL OR seq = $2)
             ORDER BY seq, n",
        )
        .bind(run_id)
        .bind(only)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        crate::cols::steps(&rows, &attempt_rows)
    }

    /// Claims one run already checked claimable and locked, inside the caller's transaction.
    async fn claim_one(
        &self,
        tx: &mut PgConnection,
        row: &ClaimRow,
        claim: &Claim,
    ) -> Result<Option<(Lease, Written)>, StoreError> {
        let epoch = row.epoch + 1;
        let kind = rules::claim_event(&row.view(), &claim.owner, epoch);
        let expires_at = now_ms() + claim.ttl.as_millis() as i64;
        let Some(r) = sqlx::query(
            "UPDATE runs SET status = 'running', epoch = $2, owner = $3, event_seq = event_seq + 1
             WHERE id = $1 AND epoch = $4 RETURNING event_seq, cancel_requested",
        )
        .bind(row.id.as_str())
        .bind(epoch as i64)
        .bind(claim.owner.as_str())
        .bind(row.epoch as i64)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?
        else {
            return Ok(None);
        };
        self.faults.hit("claim", 1)?;
        sqlx::query(
            "INSERT INTO queue (run_id, visible_at, leased, epoch) VALUES ($1, $2, TRUE, $3)
             ON CONFLICT (run_id) DO UPDATE SET visible_at = EXCLUDED.visible_at, leased = TRUE,
                                                epoch = EXCLUDED.epoch",
        )
        .bind(row.id.as_str())
        .bind(expires_at)
        .bind(epoch as i64)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        self.faults.hit("claim", 2)?;
        let at = now_rfc3339();
        let seq: i64 = r.get(0);
        insert_events(tx, &row.id, seq, &at, std::slice::from_ref(&kind)).await?;
        Ok(Some((
            Lease {
                run_id: row.id.clone(),
                owner: claim.owner.clone(),
                epoch,
                expires_at,
            },
            Written {
                events: numbered(seq, &at, vec![kind]),
                cancel_requested: r.get(1),
            },
        )))
    }
}

/// Appends events numbered from `first` (reserved by the caller's `UPDATE`).
async fn insert_events(
    conn: &mut PgConnection,
    run_id: &str,
    first: i64,
    at: &str,
    kinds: &[EventKind],
) -> Result<(), StoreError> {
    if kinds.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO run_events (run_id, seq, body)
         SELECT $1, $2 - 1 + x.k, x.body FROM unnest($3::text[]) WITH ORDINALITY AS x(body, k)",
    )
    .bind(run_id)
    .bind(first)
    .bind(bodies(at, kinds)?)
    .execute(&mut *conn)
    .await
    .map_err(backend)?;
    Ok(())
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

#[async_trait]
impl RunStore for Postgres {
    fn watch(&self, on: WakeFn) -> bool {
        notify::listen(self.pool.clone(), on);
        true
    }

    async fn create_run(&self, run: &NewRun) -> Result<Created, StoreError> {
        let now = now_ms();
        let at = now_rfc3339();
        let mut kinds = vec![EventKind::RunCreated {
            workflow: run.workflow.clone(),
        }];
        let lease = run.claim.as_ref().map(|c| Lease {
            run_id: run.run_id.clone(),
            owner: c.owner.clone(),
            epoch: 1,
            expires_at: now + c.ttl.as_millis() as i64,
        });
        if let Some(l) = &lease {
            kinds.push(EventKind::RunStarted {
                owner: l.owner.clone(),
                epoch: 1,
            });
        }
        let row = sqlx::query(
            "WITH r AS (
                INSERT INTO runs (id, workflow, dialect, status, source_path, source_text, input,
                                  snapshot, started_at, idempotency_key, workflow_id,
                                  workflow_version, epoch, owner, event_seq)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
                ON CONFLICT DO NOTHING RETURNING id
            ), q AS (
                INSERT INTO queue (run_id, visible_at, leased, epoch)
                SELECT id, $16, $17, $13 FROM r
            ), e AS (
                INSERT INTO run_events (run_id, seq, body)
                SELECT r.id, x.k, x.body FROM r, unnest($18::text[]) WITH ORDINALITY AS x(body, k)
            )
            SELECT id FROM r",
        )
        .bind(run.run_id.as_str())
        .bind(run.workflow.as_str())
        .bind(run.dialect.as_str())
        .bind(if lease.is_some() { "running" } else { "queued" })
        .bind(run.source_path.as_str())
        .bind(run.source_text.as_str())
        .bind(json(&run.input)?)
        .bind(json(&run.snapshot)?)
        .bind(run.created_at.as_str())
        .bind(run.idempotency_key.as_deref())
        .bind(run.pin.as_ref().map(|p| p.workflow_id.as_str()))
        .bind(run.pin.as_ref().map(|p| i64::from(p.version)))
        .bind(i64::from(lease.is_some()))
        .bind(lease.as_ref().map(|l| l.owner.as_str()))
        .bind(kinds.len() as i64)
        .bind(lease.as_ref().map_or(now, |l| l.expires_at))
        .bind(lease.is_some())
        .bind(bodies(&at, &kinds)?)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        if row.is_none() {
            if let Some(key) = &run.idempotency_key
                && let Some(r) = sqlx::query("SELECT id FROM runs WHERE idempotency_key = $1")
                    .bind(key.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(backend)?
            {
                return Ok(Created {
                    run_id: r.get(0),
                    created: false,
                    lease: None,
                    events: Vec::new(),
                });
            }
            return Err(StoreError::Conflict(format!(
                "run {} already exists",
                run.run_id
            )));
        }
        if lease.is_none() {
            self.notes.work();
        }
        self.notes.run(&run.run_id);
        Ok(Created {
            run_id: run.run_id.clone(),
            created: true,
            lease,
            events: numbered(1, &at, kinds),
        })
    }

    async fn claim_run(&self, run_id: &str, claim: &Claim) -> Result<(Lease, Written), StoreError> {
        let out = in_tx(&self.pool, async |tx: &mut PgConnection| {
            let r = sqlx::query(
                "SELECT r.status, r.epoch, r.owner, CASE WHEN q.leased THEN q.visible_at END AS lease
                 FROM runs r LEFT JOIN queue q ON q.run_id = r.id WHERE r.id = $1 FOR UPDATE OF r",
            )
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?
            .ok_or_else(|| not_found(run_id))?;
            let row = ClaimRow {
                id: run_id.to_string(),
                status: crate::cols::status(&r, "status"),
                epoch: r.get::<i64, _>("epoch") as u64,
                owner: r.get("owner"),
                lease_expires_at: r.get("lease"),
            };
            if let Some(refusal) = rules::claim_refusal(&row.view(), now_ms()) {
                return Err(refusal);
            }
            self.faults.hit("claim", 0)?;
            let out = self.claim_one(&mut *tx, &row, claim).await?.ok_or_else(|| {
                StoreError::Conflict(format!("run {run_id} was claimed by someone else"))
            })?;
            Ok(out)
        })
        .await?;
        self.notes.run(run_id);
        Ok(out)
    }

    async fn claim_next(
        &self,
        claim: &Claim,
        limit: u32,
    ) -> Result<Vec<(Lease, Written)>, StoreError> {
        let now = now_ms();
        let expires_at = now + claim.ttl.as_millis() as i64;
        let out = in_tx(&self.pool, async |tx: &mut PgConnection| {
            // Expired leases first (runs under way whose driver died: their successors should not
            // wait behind a backlog), then queued runs oldest first. Queue rows first, then their
            // runs, both skipping what others hold: a claim never waits on a lock, so it cannot
            // deadlock with a drive's write (runs, then queue).
            let rows = sqlx::query(
                "WITH expired AS (
                    SELECT run_id, 0 AS pri, visible_at, n FROM queue
                    WHERE leased AND visible_at <= $1
                    ORDER BY visible_at LIMIT $2 FOR UPDATE SKIP LOCKED
                ), ready AS (
                    SELECT run_id, 1 AS pri, visible_at, n FROM queue
                    WHERE NOT leased AND visible_at <= $1
                    ORDER BY visible_at, n LIMIT ($2 - (SELECT COUNT(*) FROM expired))
                    FOR UPDATE SKIP LOCKED
                ), picked AS (
                    SELECT * FROM expired UNION ALL SELECT * FROM ready
                ), old AS (
                    SELECT r.id, r.status, r.epoch, r.owner, p.pri, p.visible_at, p.n
                    FROM runs r JOIN picked p ON r.id = p.run_id
                    WHERE r.status IN ('queued', 'running') FOR UPDATE OF r SKIP LOCKED
                ), upd AS (
                    UPDATE runs r SET status = 'running', epoch = r.epoch + 1, owner = $3,
                                      event_seq = r.event_seq + 1
                    FROM old WHERE r.id = old.id
                    RETURNING r.id, r.epoch, r.event_seq, r.cancel_requested
                ), uq AS (
                    UPDATE queue q SET visible_at = $4, leased = TRUE, epoch = upd.epoch
                    FROM upd WHERE q.run_id = upd.id
                )
                SELECT upd.id, upd.epoch, upd.event_seq, upd.cancel_requested, old.status,
                       old.owner, old.epoch AS old_epoch
                FROM upd JOIN old ON old.id = upd.id ORDER BY old.pri, old.visible_at, old.n",
            )
            .bind(now)
            .bind(i64::from(limit))
            .bind(claim.owner.as_str())
            .bind(expires_at)
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
            if rows.is_empty() {
                return Ok(Vec::new());
            }
            self.faults.hit("claim", 1)?;
            let at = now_rfc3339();
            let mut out = Vec::with_capacity(rows.len());
            let (mut ids, mut seqs, mut bodies_) = (Vec::new(), Vec::new(), Vec::new());
            for r in &rows {
                let id: String = r.get("id");
                let was = ClaimRow {
                    id: id.clone(),
                    status: crate::cols::status(r, "status"),
                    epoch: r.get::<i64, _>("old_epoch") as u64,
                    owner: r.get("owner"),
                    lease_expires_at: None,
                };
                let epoch = r.get::<i64, _>("epoch") as u64;
                let kind = rules::claim_event(&was.view(), &claim.owner, epoch);
                let seq: i64 = r.get("event_seq");
                ids.push(id.clone());
                seqs.push(seq);
                bodies_.push(json(&Body {
                    at: &at,
                    kind: &kind,
                })?);
                out.push((
                    Lease {
                        run_id: id,
                        owner: claim.owner.clone(),
                        epoch,
                        expires_at,
                    },
                    Written {
                        events: numbered(seq, &at, vec![kind]),
                        cancel_requested: r.get("cancel_requested"),
                    },
                ));
            }
            sqlx::query(
                "INSERT INTO run_events (run_id, seq, body)
                 SELECT * FROM unnest($1::text[], $2::int8[], $3::text[])",
            )
            .bind(ids)
            .bind(seqs)
            .bind(bodies_)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
            self.faults.hit("claim", 2)?;
            Ok(out)
        })
        .await?;
        for (l, _) in &out {
            self.notes.run(&l.run_id);
        }
        Ok(out)
    }

    async fn renew(&self, lease: &mut Lease, ttl: Duration) -> Result<Written, StoreError> {
        let expires = now_ms() + ttl.as_millis() as i64;
        let row = sqlx::query(
            "UPDATE queue SET visible_at = $3 WHERE run_id = $1 AND epoch = $2 AND leased
             RETURNING (SELECT cancel_requested FROM runs WHERE id = $1)",
        )
        .bind(lease.run_id.as_str())
        .bind(lease.epoch as i64)
        .bind(expires)
        .fetch_optional(&self.fast)
        .await
        .map_err(backend)?;
        let Some(row) = row else {
            return Err(self.refuse(lease, "heartbeat").await);
        };
        lease.expires_at = expires;
        Ok(Written {
            events: Vec::new(),
            cancel_requested: row.get::<Option<bool>, _>(0).unwrap_or(false),
        })
    }

    async fn start_steps(
        &self,
        lease: &Lease,
        steps: &[StepRecord],
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(Fence {
            lease,
            write: "start_steps",
            visible: true,
            snapshot: None,
            steps: steps.iter().collect(),
            events,
            status: None,
            error: None,
            finished_at: None,
            end: 0,
        })
        .await
    }

    async fn commit_step(&self, lease: &Lease, c: StepCommit<'_>) -> Result<Written, StoreError> {
        let mut steps: Vec<&StepRecord> = c.started.iter().collect();
        steps.push(c.step);
        self.fenced(Fence {
            lease,
            write: "commit_step",
            visible: false,
            snapshot: Some(c.snapshot),
            steps,
            events: c.events,
            status: None,
            error: None,
            finished_at: None,
            end: 0,
        })
        .await
    }

    async fn append_events(
        &self,
        lease: &Lease,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(Fence {
            lease,
            write: "append_events",
            visible: true,
            snapshot: None,
            steps: Vec::new(),
            events,
            status: None,
            error: None,
            finished_at: None,
            end: 0,
        })
        .await
    }

    async fn finish_run(
        &self,
        lease: &Lease,
        u: &RunUpdate,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(Fence {
            lease,
            write: "finish_run",
            visible: false,
            snapshot: Some(&u.snapshot),
            steps: Vec::new(),
            events,
            status: Some(u.status),
            error: u.error.as_ref(),
            finished_at: u.finished_at.as_deref(),
            end: 1,
        })
        .await
    }

    async fn release(
        &self,
        lease: &Lease,
        snapshot: &Snapshot,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(Fence {
            lease,
            write: "release",
            visible: false,
            snapshot: Some(snapshot),
            steps: Vec::new(),
            events,
            status: Some(RunStatus::Queued),
            error: None,
            finished_at: None,
            end: 2,
        })
        .await
    }

    async fn decide(&self, d: &GateDecision) -> Result<Written, StoreError> {
        let (last, at) = in_tx(&self.pool, async |tx: &mut PgConnection| {
            let n = d.events.len() as i64;
            let row = sqlx::query(
                "UPDATE runs SET epoch = epoch + 1, status = $1, error = $2, finished_at = $3,
                                 snapshot = $4, cost_usd = $5, event_seq = event_seq + $6
                 WHERE id = $7 AND status = 'paused' AND epoch = $8
                 RETURNING event_seq, epoch",
            )
            .bind(d.status.as_str())
            .bind(d.error.as_ref().map(json).transpose()?)
            .bind(d.finished_at.as_deref())
            .bind(json(&d.snapshot)?)
            .bind(d.snapshot.cost_usd)
            .bind(n)
            .bind(d.run_id.as_str())
            .bind(d.expect_epoch as i64)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
            let Some(row) = row else {
                let cur = sqlx::query("SELECT status, epoch FROM runs WHERE id = $1")
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
            self.faults.hit("decide", 1)?;
            let (last, epoch): (i64, i64) = (row.get(0), row.get(1));
            let mut steps: Vec<&StepRecord> = vec![&d.step];
            steps.extend(d.also.iter());
            StepArrays::of(&steps)?
                .bind(sqlx::query(upsert_sql()).bind(d.run_id.as_str()))
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
            self.faults.hit("decide", 2)?;
            let at = now_rfc3339();
            insert_events(&mut *tx, &d.run_id, last - n + 1, &at, &d.events).await?;
            self.faults.hit("decide", 3)?;
            if d.status == RunStatus::Queued {
                sqlx::query(
                    "INSERT INTO queue (run_id, visible_at, leased, epoch) VALUES ($1, $2, FALSE, $3)
                     ON CONFLICT (run_id) DO UPDATE SET visible_at = EXCLUDED.visible_at,
                                                        leased = FALSE, epoch = EXCLUDED.epoch",
                )
                .bind(d.run_id.as_str())
                .bind(now_ms())
                .bind(epoch)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
                self.faults.hit("decide", 4)?;
            }
            Ok((last, at))
        })
        .await?;
        if d.status == RunStatus::Queued {
            self.notes.work();
        }
        self.notes.run(&d.run_id);
        Ok(Written {
            events: numbered(last - d.events.len() as i64 + 1, &at, d.events.clone()),
            cancel_requested: false,
        })
    }

    async fn request_cancel(
        &self,
        run_id: &str,
        by: &str,
    ) -> Result<(CancelOutcome, Written), StoreError> {
        let out = in_tx(&self.pool, async |tx: &mut PgConnection| {
            let row = sqlx::query(
                "SELECT r.status, CASE WHEN q.leased THEN q.visible_at END AS lease,
                        r.cancel_requested, r.snapshot
                 FROM runs r LEFT JOIN queue q ON q.run_id = r.id WHERE r.id = $1 FOR UPDATE OF r",
            )
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?
            .ok_or_else(|| not_found(run_id))?;
            let status = crate::cols::status(&row, "status");
            if status.is_terminal() {
                return Err(rules::cancel_conflict(run_id, status));
            }
            let live = row
                .get::<Option<i64>, _>("lease")
                .is_some_and(|at| at > now_ms());
            let requested = EventKind::CancelRequested { by: by.to_string() };
            let at = now_rfc3339();
            if status == RunStatus::Running && live {
                let events = if row.get::<bool, _>("cancel_requested") {
                    Vec::new()
                } else {
                    let seq: i64 = sqlx::query(
                        "UPDATE runs SET cancel_requested = TRUE, event_seq = event_seq + 1
                         WHERE id = $1 RETURNING event_seq",
                    )
                    .bind(run_id)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(backend)?
                    .get(0);
                    insert_events(&mut *tx, run_id, seq, &at, std::slice::from_ref(&requested))
                        .await?;
                    numbered(seq, &at, vec![requested])
                };
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
            let error = RunError {
                code: ErrorCode::Cancelled,
                message: format!("cancelled by {by}"),
                node_id: None,
            };
            let last: i64 = sqlx::query(
                "UPDATE runs SET status = 'cancelled', error = $1, finished_at = $2, snapshot = $3,
                                 event_seq = event_seq + 2
                 WHERE id = $4 RETURNING event_seq",
            )
            .bind(json(&error)?)
            .bind(at.as_str())
            .bind(json(&snapshot)?)
            .bind(run_id)
            .fetch_one(&mut *tx)
            .await
            .map_err(backend)?
            .get(0);
            for (sql, bind) in [
                (
                    "UPDATE steps SET status = 'cancelled', error = $2, finished_at = $3
                     WHERE run_id = $1 AND status IN ('running', 'waiting')",
                    true,
                ),
                ("DELETE FROM queue WHERE run_id = $1", false),
            ] {
                let mut q = sqlx::query(sql).bind(run_id);
                if bind {
                    q = q.bind(format!("cancelled by {by}")).bind(at.as_str());
                }
                q.execute(&mut *tx).await.map_err(backend)?;
            }
            let kinds = vec![
                requested,
                EventKind::RunFinished {
                    status: RunStatus::Cancelled,
                    error: Some(error),
                },
            ];
            insert_events(&mut *tx, run_id, last - 1, &at, &kinds).await?;
            Ok((
                CancelOutcome::Cancelled,
                Written {
                    events: numbered(last - 1, &at, kinds),
                    cancel_requested: true,
                },
            ))
        })
        .await?;
        self.notes.run(run_id);
        Ok(out)
    }

    async fn load_run(&self, run_id: &str) -> Result<StoredRun, StoreError> {
        let row = sqlx::query(
            "SELECT r.workflow, r.status, r.source_path, r.source_text, r.snapshot, r.epoch,
                    r.owner, CASE WHEN q.leased THEN q.visible_at END AS lease_expires_at,
                    r.cancel_requested, r.workflow_id, r.workflow_version, r.input
             FROM runs r LEFT JOIN queue q ON q.run_id = r.id WHERE r.id = $1",
        )
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?
        .ok_or_else(|| not_found(run_id))?;
        crate::cols::stored_run(run_id, &row)
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
             FROM runs WHERE id = $1",
        )
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?
        .ok_or_else(|| not_found(run_id))?;
        let events = sqlx::query("SELECT seq, body FROM run_events WHERE run_id = $1 ORDER BY seq")
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?
            .iter()
            .map(|r| event_value(r.get(0), r.get::<&str, _>(1)))
            .collect::<Result<Vec<_>, _>>()?;
        let steps = self.steps(run_id, None).await?;
        crate::cols::record(run_id, &row, events, steps)
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        let (like, after_at, after_id) = crate::cols::list_params(filter);
        let rows = sqlx::query(
            "SELECT id, workflow, status, started_at, finished_at, cost_usd, workflow_id,
                    workflow_version
             FROM runs
             WHERE ($1::text IS NULL OR status = $1)
               AND ($2::text IS NULL OR workflow = $2 OR workflow_id = $2)
               AND ($3::text IS NULL OR started_at >= $3)
               AND ($4::text IS NULL OR id ILIKE $4 OR workflow ILIKE $4)
               AND ($5::text IS NULL OR started_at < $5 OR (started_at = $5 AND id < $6))
             ORDER BY started_at DESC, id DESC LIMIT $7",
        )
        .bind(filter.status.map(|s| s.as_str()))
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

    async fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<RunEvent>, StoreError> {
        sqlx::query("SELECT seq, body FROM run_events WHERE run_id = $1 AND seq > $2 ORDER BY seq")
            .bind(run_id)
            .bind(after as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?
            .iter()
            .map(|r| event_of(r.get(0), r.get::<&str, _>(1)))
            .collect()
    }

    async fn open_steps(&self, run_id: &str) -> Result<(u32, Vec<StepRecord>), StoreError> {
        let rows = sqlx::query("SELECT seq, status FROM steps WHERE run_id = $1 ORDER BY seq DESC")
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        let last = rows.first().map_or(0, |r| r.get::<i64, _>(0) as u32);
        let mut running = Vec::new();
        for r in rows.iter().rev() {
            if r.get::<&str, _>(1) == StepStatus::Running.as_str() {
                running.extend(self.steps(run_id, Some(r.get::<i64, _>(0) as u32)).await?);
            }
        }
        Ok((last, running))
    }

    async fn prune(&self, before: &str, statuses: &[RunStatus]) -> Result<Vec<String>, StoreError> {
        let ended = rules::ended_statuses(statuses);
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let ids: Vec<String> = sqlx::query(
            "DELETE FROM runs WHERE finished_at IS NOT NULL AND finished_at < $1
               AND status = ANY($2::text[]) RETURNING id",
        )
        .bind(before)
        .bind(ended)
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?
        .iter()
        .map(|r| r.get(0))
        .collect();
        for sql in [
            "DELETE FROM attempts WHERE run_id = ANY($1)",
            "DELETE FROM steps WHERE run_id = ANY($1)",
            "DELETE FROM run_events WHERE run_id = ANY($1)",
        ] {
            sqlx::query(sql)
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(ids)
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

/// Whether `url` names a Postgres database.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}
