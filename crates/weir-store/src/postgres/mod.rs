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
//!   as SQLite commits them without a sync.
//! - **Wake-ups**: `NOTIFY` is sent by a task of its own, batched, from its own transaction,
//!   so it never serialises the commits of the hot path; `LISTEN` feeds [`RunStore::watch`].
//!   Workers and readers also poll: a lost notification only delays.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{PgConnection, Row};
use weir_core::event::{EventKind, RunEvent};
use weir_core::record::{RunRecord, RunStatus, RunSummary, Snapshot, StepRecord, StepStatus};
use weir_core::store::{
    Admin, CancelOutcome, Claim, Created, DriveWrites, Fault, GateDecision, Lease, Lifecycle,
    NewRun, RunFilter, RunReads, RunUpdate, StepCommit, StoreError, StoredRun, WakeFn, Written,
    now_ms,
};

use crate::rules::{self};
use crate::{backend, event_of, event_value, json};

mod catalog;
mod claims;
mod notify;
mod schema;
#[cfg(test)]
mod tests;
mod write;

use write::{Fence, StepArrays, bodies, insert_events, upsert_sql};

/// The patches written after a run's whole snapshot (`r`), as one JSON array in commit
/// order: a column of the statement that reads the snapshot, so both come from one read.
macro_rules! patches {
    () => {
        "(SELECT COALESCE(json_agg(p.patch::json ORDER BY p.seq), '[]')::text
          FROM run_patches p WHERE p.run_id = r.id) AS patches"
    };
}

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
        .map_err(|e| StoreError::backend(Fault::Other, format!("bad Postgres URL: {e}")))
}

fn not_found(run_id: &str) -> StoreError {
    StoreError::NotFound(format!("no run with id {run_id}"))
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
            .map_err(|e| {
                StoreError::backend(
                    Fault::Unavailable,
                    format!("cannot connect to Postgres: {e}"),
                )
            })?;
        let fast = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts.options([
                ("synchronous_commit", "off"),
                ("plan_cache_mode", "force_generic_plan"),
            ]))
            .await
            .map_err(|e| {
                StoreError::backend(
                    Fault::Unavailable,
                    format!("cannot connect to Postgres: {e}"),
                )
            })?;
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

    /// A read transaction whose statements all see one snapshot (Postgres' default, read
    /// committed, takes a new one per statement).
    async fn snapshot(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        self.pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(backend)
    }

    /// A run's steps with their attempts, read on `conn` (in a [`Self::snapshot`], so that
    /// both queries see the same moment).
    async fn steps(
        conn: &mut PgConnection,
        run_id: &str,
        only: Option<u32>,
    ) -> Result<Vec<StepRecord>, StoreError> {
        let only = only.map(i64::from);
        let rows = sqlx::query(
            "SELECT seq, node_id, node_type, visit, status, route, input, output, error, cost_usd,
                    tokens_in, tokens_out, started_at, finished_at, duration_ms
             FROM steps WHERE run_id = $1 AND ($2::int8 IS NULL OR seq = $2) ORDER BY seq",
        )
        .bind(run_id)
        .bind(only)
        .fetch_all(&mut *conn)
        .await
        .map_err(backend)?;
        let attempt_rows = sqlx::query(
            "SELECT seq, body FROM attempts WHERE run_id = $1 AND ($2::int8 IS NULL OR seq = $2)
             ORDER BY seq, n",
        )
        .bind(run_id)
        .bind(only)
        .fetch_all(&mut *conn)
        .await
        .map_err(backend)?;
        crate::cols::steps(&rows, |_, seq, text| {
            attempt_rows
                .iter()
                .filter(|a| a.get::<i64, _>("seq") == seq)
                .map(|a| crate::attempts::one_from_json(&a.get::<String, _>("body"), text))
                .collect()
        })
    }
}

#[async_trait]
impl DriveWrites for Postgres {
    fn keeps_patches(&self) -> bool {
        true
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
        steps: &[&StepRecord],
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(Fence {
            lease,
            write: "start_steps",
            visible: true,
            snapshot: None,
            patch: None,
            clear: false,
            steps: steps.to_vec(),
            events,
            status: None,
            error: None,
            finished_at: None,
            end: 0,
        })
        .await
    }

    async fn commit_step(&self, lease: &Lease, c: StepCommit<'_>) -> Result<Written, StoreError> {
        let mut steps: Vec<&StepRecord> = c.started.to_vec();
        steps.push(c.step);
        self.fenced(Fence {
            lease,
            write: "commit_step",
            visible: false,
            snapshot: Some(c.snapshot),
            patch: c.patch,
            clear: c.covers_patches,
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
            patch: None,
            clear: false,
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
        steps: &[&StepRecord],
        u: &RunUpdate,
        events: Vec<EventKind>,
    ) -> Result<Written, StoreError> {
        self.fenced(Fence {
            lease,
            write: "finish_run",
            visible: false,
            snapshot: Some(&u.snapshot),
            patch: None,
            clear: true,
            steps: steps.to_vec(),
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
            patch: None,
            clear: true,
            steps: Vec::new(),
            events,
            status: Some(RunStatus::Queued),
            error: None,
            finished_at: None,
            end: 2,
        })
        .await
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "create_run (an idempotent insert, optionally claimed, with its source and events) and request_cancel (rules::cancel_plan turned into its statements) are each one transaction whose statements read in order"
)]
#[async_trait]
impl Lifecycle for Postgres {
    fn watch(&self, on: WakeFn) -> bool {
        notify::listen(self.pool.clone(), on);
        true
    }

    async fn create_run(&self, run: NewRun) -> Result<Created, StoreError> {
        let now = now_ms();
        let at = weir_core::store::Stamp::now();
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
        let (input, snapshot, bodies) = (
            json(&run.input)?,
            json(&run.snapshot)?,
            bodies(&at, &kinds)?,
        );
        // The run names its workflow's source by key (migration 3): the text's row is
        // inserted, or found by its hash. A retention that deletes the text between the two
        // (no other run named it) makes the foreign key, or the key found, fail; the
        // statement, which changed nothing then, is run again and inserts the text anew.
        let mut tries = 0;
        let row = loop {
            tries += 1;
            let got = sqlx::query(
                "WITH ins AS (
                    INSERT INTO sources (hash, text) VALUES (sha256(convert_to($6, 'UTF8')), $6)
                    ON CONFLICT (hash) DO NOTHING RETURNING key
                ), s AS (
                    SELECT key FROM ins
                    UNION ALL
                    SELECT key FROM sources WHERE hash = sha256(convert_to($6, 'UTF8'))
                    LIMIT 1
                ), r AS (
                    INSERT INTO runs (id, workflow, dialect, status, source_path, source_key,
                                      input, snapshot, started_at, idempotency_key, workflow_id,
                                      workflow_version, epoch, owner, event_seq)
                    VALUES ($1, $2, $3, $4, $5, (SELECT key FROM s), $7, $8, $9, $10, $11, $12,
                            $13, $14, $15)
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
            .bind(&*run.source_text)
            .bind(input.as_str())
            .bind(snapshot.as_str())
            .bind(run.created_at.as_str())
            .bind(run.idempotency_key.as_deref())
            .bind(run.pin.as_ref().map(|p| p.workflow_id.as_str()))
            .bind(run.pin.as_ref().map(|p| i64::from(p.version)))
            .bind(i64::from(lease.is_some()))
            .bind(lease.as_ref().map(|l| l.owner.as_str()))
            .bind(kinds.len() as i64)
            .bind(lease.as_ref().map_or(now, |l| l.expires_at))
            .bind(lease.is_some())
            .bind(&bodies)
            .fetch_optional(&self.pool)
            .await;
            match got {
                Err(e) if tries < 5 && lost_source(&e) => continue,
                got => break got.map_err(backend)?,
            }
        };
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
            events: kinds,
        })
    }

    async fn claim_run(&self, run_id: &str, claim: &Claim) -> Result<(Lease, Written), StoreError> {
        self.claim_named(run_id, claim).await
    }

    async fn claim_next(
        &self,
        claim: &Claim,
        limit: u32,
    ) -> Result<Vec<(Lease, Written)>, StoreError> {
        self.claim_batch(claim, limit).await
    }

    async fn decide(&self, d: &GateDecision) -> Result<Written, StoreError> {
        in_tx(&self.pool, async |tx: &mut PgConnection| {
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
            if row.is_some() {
                snapshot_written(&mut *tx, &d.run_id).await?;
            }
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
            let at = weir_core::store::Stamp::now();
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
            Ok(())
        })
        .await?;
        if d.status == RunStatus::Queued {
            self.notes.work();
        }
        self.notes.run(&d.run_id);
        Ok(Written {
            events: d.events.clone(),
            cancel_requested: false,
        })
    }

    async fn request_cancel(
        &self,
        run_id: &str,
        by: &str,
    ) -> Result<(CancelOutcome, Written), StoreError> {
        let out = in_tx(&self.pool, async |tx: &mut PgConnection| {
            let row = sqlx::query(concat!(
                "SELECT r.status, CASE WHEN q.leased THEN q.visible_at END AS lease,
                            r.cancel_requested, r.snapshot, ",
                patches!(),
                "
                     FROM runs r LEFT JOIN queue q ON q.run_id = r.id WHERE r.id = $1
                     FOR UPDATE OF r"
            ))
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?
            .ok_or_else(|| not_found(run_id))?;
            let plan = rules::cancel_plan(
                run_id,
                crate::cols::status(&row, "status"),
                row.get("lease"),
                row.get::<bool, _>("cancel_requested"),
                by,
                now_ms(),
            )?;
            let now = match plan {
                rules::CancelPlan::Request(events) => {
                    if !events.is_empty() {
                        let seq: i64 = sqlx::query(
                            "UPDATE runs SET cancel_requested = TRUE, event_seq = event_seq + 1
                             WHERE id = $1 RETURNING event_seq",
                        )
                        .bind(run_id)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(backend)?
                        .get(0);
                        let at = weir_core::store::Stamp::now();
                        insert_events(&mut *tx, run_id, seq, &at, &events).await?;
                    }
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
            let last: i64 = sqlx::query(
                "UPDATE runs SET status = 'cancelled', error = $1, finished_at = $2, snapshot = $3,
                                 event_seq = event_seq + 2
                 WHERE id = $4 RETURNING event_seq",
            )
            .bind(json(&now.error)?)
            .bind(now.at.to_string())
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
                    q = q.bind(now.step_error.as_str()).bind(now.at.to_string());
                }
                q.execute(&mut *tx).await.map_err(backend)?;
            }
            snapshot_written(&mut *tx, run_id).await?;
            insert_events(&mut *tx, run_id, last - 1, &now.at, &now.events).await?;
            Ok((
                CancelOutcome::Cancelled,
                Written {
                    events: now.events,
                    cancel_requested: true,
                },
            ))
        })
        .await?;
        self.notes.run(run_id);
        Ok(out)
    }
}

#[async_trait]
impl RunReads for Postgres {
    async fn load_run(&self, run_id: &str) -> Result<StoredRun, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT r.workflow, r.status, r.source_path, s.text AS source_text, r.snapshot, ",
            patches!(),
            ", r.epoch, r.owner,
                        CASE WHEN q.leased THEN q.visible_at END AS lease_expires_at,
                        r.cancel_requested, r.workflow_id, r.workflow_version, r.input
                 FROM runs r JOIN sources s ON s.key = r.source_key
                 LEFT JOIN queue q ON q.run_id = r.id WHERE r.id = $1"
        ))
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?
        .ok_or_else(|| not_found(run_id))?;
        crate::cols::stored_run(run_id, &row)
    }

    async fn get_step(&self, run_id: &str, seq: u32) -> Result<StepRecord, StoreError> {
        let mut tx = self.snapshot().await?;
        let step = Self::steps(&mut tx, run_id, Some(seq)).await?.pop();
        tx.commit().await.map_err(backend)?;
        step.ok_or_else(|| StoreError::NotFound(format!("run {run_id} has no step {seq}")))
    }

    async fn get_record(&self, run_id: &str) -> Result<RunRecord, StoreError> {
        // One snapshot: the run row, its log and its steps as of one commit (read apart, a
        // run could show as running beside the event that paused it).
        let mut tx = self.snapshot().await?;
        let row = sqlx::query(concat!(
            "SELECT workflow, dialect, status, input, snapshot, ",
            patches!(),
            ", error, started_at,
                        finished_at
                 FROM runs r WHERE id = $1"
        ))
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?
        .ok_or_else(|| not_found(run_id))?;
        let events = sqlx::query("SELECT seq, body FROM run_events WHERE run_id = $1 ORDER BY seq")
            .bind(run_id)
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?
            .iter()
            .map(|r| event_value(r.get(0), r.get::<&str, _>(1)))
            .collect::<Result<Vec<_>, _>>()?;
        let steps = Self::steps(&mut tx, run_id, None).await?;
        tx.commit().await.map_err(backend)?;
        crate::cols::record(run_id, &row, events, steps)
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        let (like, after_at, after_id) = crate::cols::list_params(filter);
        let rows = sqlx::query(
            "SELECT id, workflow, status, started_at, finished_at, cost_usd, workflow_id,
                    workflow_version,
                    (SELECT count(*) FROM steps WHERE steps.run_id = runs.id) AS steps,
                    error::jsonb ->> 'code' AS error_code
             FROM runs
             WHERE ($1::text IS NULL OR status = $1)
               AND ($2::text IS NULL OR workflow = $2 OR workflow_id = $2)
               AND ($3::text IS NULL OR started_at >= $3)
               AND ($4::text IS NULL OR id ILIKE $4 OR workflow ILIKE $4)
               AND ($5::text IS NULL OR started_at < $5 OR (started_at = $5 AND id < $6))
             ORDER BY started_at DESC, id DESC LIMIT $7",
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
        let rows =
            sqlx::query("SELECT id FROM runs WHERE starts_with(id, $1) ORDER BY id LIMIT $2")
                .bind(prefix)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .map_err(backend)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
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
        let mut tx = self.snapshot().await?;
        let rows = sqlx::query("SELECT seq, status FROM steps WHERE run_id = $1 ORDER BY seq DESC")
            .bind(run_id)
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
        let last = rows.first().map_or(0, |r| r.get::<i64, _>(0) as u32);
        let mut running = Vec::new();
        for r in rows.iter().rev() {
            if r.get::<&str, _>(1) == StepStatus::Running.as_str() {
                running
                    .extend(Self::steps(&mut tx, run_id, Some(r.get::<i64, _>(0) as u32)).await?);
            }
        }
        tx.commit().await.map_err(backend)?;
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
impl Admin for Postgres {
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
            "DELETE FROM run_patches WHERE run_id = ANY($1)",
        ] {
            sqlx::query(sql)
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
        }
        // The source texts no run names any more, these runs' and any an earlier prune left.
        // A run created meanwhile may name one the statement's snapshot saw unnamed: the
        // foreign key refuses that deletion, and the statement, rolled back to its savepoint,
        // runs again and sees the new run (after a few tries the texts wait for the next
        // prune; the runs' deletion stands).
        for _ in 0..3 {
            sqlx::query("SAVEPOINT sources")
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
            let gone = sqlx::query(
                "DELETE FROM sources s WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.source_key = s.key)",
            )
            .execute(&mut *tx)
            .await;
            match gone {
                Err(e) if lost_source(&e) => {
                    sqlx::query("ROLLBACK TO SAVEPOINT sources")
                        .execute(&mut *tx)
                        .await
                        .map_err(backend)?;
                }
                gone => {
                    gone.map_err(backend)?;
                    break;
                }
            }
        }
        tx.commit().await.map_err(backend)?;
        Ok(ids)
    }
}

/// Whether `url` names a Postgres database.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// A whole snapshot was written: it covers every patch written before it.
/// Whether `e` is a race over a source text: a creation's text deleted under it by retention
/// (the foreign key, or the key it found gone: a `NULL` key), or retention's deletion of a
/// text a new run names (the foreign key). The statement changed nothing and may run again.
fn lost_source(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(sqlx::error::DatabaseError::code)
        .is_some_and(|c| c == "23503" || c == "23502")
}

async fn snapshot_written(tx: &mut PgConnection, run_id: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM run_patches WHERE run_id = $1")
        .bind(run_id)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    Ok(())
}
