//! The Postgres store itself: connecting, migrating, and the writes of a drive.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{PgConnection, Row};
use weir_core::record::StepRecord;
use weir_core::store::{Fault, Lease, StoreError, Written, now_ms};

use crate::backend;

use super::notify::{self, Faults};
use super::schema;

/// Connections to one weir database on a Postgres server.
pub struct Postgres {
    /// Durable writes (the server's `synchronous_commit`) and reads.
    pub(super) pool: PgPool,
    /// Progress-only writes, with `synchronous_commit=off`.
    pub(super) fast: PgPool,
    pub(super) notes: notify::Notifier,
    /// Statement-level fault injection for the crash tests (inert unless armed).
    pub faults: Faults,
}

/// The connection options of a `postgres://` URL.
pub(super) fn options(url: &str) -> Result<PgConnectOptions, StoreError> {
    PgConnectOptions::from_str(url)
        .map_err(|e| StoreError::backend(Fault::Other, format!("bad Postgres URL: {e}")))
}

pub(super) fn not_found(run_id: &str) -> StoreError {
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
        let unreachable = |e: sqlx::Error| {
            StoreError::backend(
                Fault::Unavailable,
                format!("cannot connect to Postgres: {e}"),
            )
        };
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(
                opts.clone()
                    .options([("plan_cache_mode", "force_generic_plan")]),
            )
            .await
            .map_err(unreachable)?;
        let fast = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts.options([
                ("synchronous_commit", "off"),
                ("plan_cache_mode", "force_generic_plan"),
            ]))
            .await
            .map_err(unreachable)?;
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
    pub(super) async fn snapshot(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        self.pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(backend)
    }

    /// A run's steps with their attempts, read on `conn` (in a [`Self::snapshot`], so that
    /// both queries see the same moment).
    pub(super) async fn steps(
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

crate::rules::fenced_drive_writes!(Postgres {
    fn keeps_patches(&self) -> bool {
        true
    }

    async fn renew(&self, lease: &mut Lease, ttl: Duration) -> Result<Written, StoreError> {
        let expires = now_ms() + ttl.as_millis() as i64;
        let row = sqlx::query(concat!(
            "UPDATE queue SET visible_at = ",
            super::sql::db_now!(),
            " + $3 WHERE run_id = $1 AND epoch = $2 AND leased
             RETURNING (SELECT cancel_requested FROM runs WHERE id = $1)"
        ))
        .bind(lease.run_id.as_str())
        .bind(lease.epoch as i64)
        .bind(ttl.as_millis() as i64)
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
});

/// Whether `url` names a Postgres database.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// A whole snapshot was written: it covers every patch written before it.
/// Whether `e` is a race over a source text: a creation's text deleted under it by retention
/// (the foreign key, or the key it found gone: a `NULL` key), or retention's deletion of a
/// text a new run names (the foreign key). The statement changed nothing and may run again.
pub(super) fn lost_source(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(sqlx::error::DatabaseError::code)
        .is_some_and(|c| c == "23503" || c == "23502")
}

pub(super) async fn snapshot_written(
    tx: &mut PgConnection,
    run_id: &str,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM run_patches WHERE run_id = $1")
        .bind(run_id)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    Ok(())
}
