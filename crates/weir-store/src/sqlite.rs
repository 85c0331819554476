//! The SQLite store (embedded default): WAL journal, one transaction per finished step.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use weir_core::record::{
    Attempt, RunError, RunRecord, RunStatus, RunSummary, Snapshot, StepRecord, StepStatus, Tokens,
};
use weir_core::store::{NewRun, RunStore, RunUpdate, StoreError, StoredRun};

use crate::schema::MIGRATIONS;

pub struct Sqlite {
    pool: SqlitePool,
    /// One connection with `synchronous=OFF` for writes that only make progress visible (a
    /// step's `running` row, events): they ride along with the next synced commit instead of
    /// paying an fsync of their own. Completed steps always go through `pool`.
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
        let mut tx = self.pool.begin().await.map_err(backend)?;
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
            let status: String = r.get("status");
            steps.push(StepRecord {
                seq: seq as u32,
                node_id: r.get("node_id"),
                node_type: r.get("node_type"),
                visit: r.get::<i64, _>("visit") as u32,
                status: StepStatus::parse(&status).unwrap_or(StepStatus::Failed),
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

fn duration_between(start: &str, end: &str) -> Option<u64> {
    let a = chrono::DateTime::parse_from_rfc3339(start).ok()?;
    let b = chrono::DateTime::parse_from_rfc3339(end).ok()?;
    u64::try_from((b - a).num_milliseconds()).ok()
}

#[async_trait]
impl RunStore for Sqlite {
    async fn create_run(&self, run: &NewRun) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO runs (id, workflow, dialect, status, source_path, source_text, input,
                               snapshot, cost_usd, started_at)
             VALUES (?, ?, ?, 'running', ?, ?, ?, ?, 0, ?)",
        )
        .bind(run.run_id.clone())
        .bind(run.workflow.clone())
        .bind(run.dialect.clone())
        .bind(run.source_path.clone())
        .bind(run.source_text.clone())
        .bind(json(&run.input)?)
        .bind(json(&run.snapshot)?)
        .bind(run.started_at.clone())
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn start_step(&self, run_id: &str, step: &StepRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT OR REPLACE INTO steps (run_id, seq, node_id, node_type, visit, status, route,
                 input, output, error, cost_usd, tokens_in, tokens_out, started_at)
             VALUES (?, ?, ?, ?, ?, ?, NULL, ?, 'null', NULL, 0, 0, 0, ?)",
        )
        .bind(run_id.to_string())
        .bind(i64::from(step.seq))
        .bind(step.node_id.clone())
        .bind(step.node_type.clone())
        .bind(i64::from(step.visit))
        .bind(step.status.as_str())
        .bind(json(&step.input)?)
        .bind(step.started_at.clone())
        .execute(&self.visible)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn finish_step(
        &self,
        run_id: &str,
        step: &StepRecord,
        started: &[StepRecord],
        snapshot: &Snapshot,
    ) -> Result<(), StoreError> {
        // One statement: the `step_commit` trigger (migrations 2 and 3) writes the step, its
        // attempts, the started steps' `running` rows and the run's snapshot atomically.
        sqlx::query(
            "INSERT INTO step_commits (run_id, seq, step, started, snapshot, cost_usd) VALUES (?, ?, ?, ?, ?, ?)",
        )
            .bind(run_id.to_string())
            .bind(i64::from(step.seq))
            .bind(json(step)?)
            .bind(json(&started)?)
            .bind(json(snapshot)?)
            .bind(snapshot.cost_usd)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn update_run(&self, run_id: &str, u: &RunUpdate) -> Result<(), StoreError> {
        let error = u.error.as_ref().map(json).transpose()?;
        let done = sqlx::query(
            "UPDATE runs SET status = ?, error = ?, finished_at = ?, snapshot = ?, cost_usd = ?
             WHERE id = ?",
        )
        .bind(u.status.as_str())
        .bind(error)
        .bind(u.finished_at.clone())
        .bind(json(&u.snapshot)?)
        .bind(u.snapshot.cost_usd)
        .bind(run_id.to_string())
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(run_id.to_string()));
        }
        Ok(())
    }

    async fn add_event(&self, run_id: &str, event: &Value) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO events (run_id, body) VALUES (?, ?)")
            .bind(run_id.to_string())
            .bind(json(event)?)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn load_run(&self, run_id: &str) -> Result<StoredRun, StoreError> {
        let row =
            sqlx::query("SELECT status, source_path, source_text, snapshot FROM runs WHERE id = ?")
                .bind(run_id.to_string())
                .fetch_optional(&self.pool)
                .await
                .map_err(backend)?
                .ok_or_else(|| StoreError::NotFound(run_id.to_string()))?;
        let status: String = row.get("status");
        Ok(StoredRun {
            run_id: run_id.to_string(),
            status: RunStatus::parse(&status).unwrap_or(RunStatus::Failed),
            source_path: row.get("source_path"),
            source_text: row.get("source_text"),
            snapshot: parse(row.get::<String, _>("snapshot").as_str())?,
        })
    }

    async fn get_step(&self, run_id: &str, seq: u32) -> Result<StepRecord, StoreError> {
        self.steps(run_id, Some(seq))
            .await?
            .pop()
            .ok_or_else(|| StoreError::NotFound(format!("{run_id} step {seq}")))
    }

    async fn get_record(&self, run_id: &str) -> Result<RunRecord, StoreError> {
        let row = sqlx::query(
            "SELECT workflow, dialect, status, input, snapshot, error, started_at, finished_at
             FROM runs WHERE id = ?",
        )
        .bind(run_id.to_string())
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?
        .ok_or_else(|| StoreError::NotFound(run_id.to_string()))?;
        let snapshot: Snapshot = parse(row.get::<String, _>("snapshot").as_str())?;
        let status: String = row.get("status");
        let status = RunStatus::parse(&status).unwrap_or(RunStatus::Failed);
        let error: Option<String> = row.get("error");
        let error: Option<RunError> = error.as_deref().map(parse).transpose()?;
        let events = sqlx::query("SELECT body FROM events WHERE run_id = ? ORDER BY id")
            .bind(run_id.to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?
            .iter()
            .map(|r| parse::<Value>(r.get::<String, _>("body").as_str()))
            .collect::<Result<Vec<_>, _>>()?;
        let started_at: String = row.get("started_at");
        let finished_at: Option<String> = row.get("finished_at");
        let duration_ms = finished_at
            .as_deref()
            .and_then(|f| duration_between(&started_at, f));
        Ok(RunRecord {
            run_id: run_id.to_string(),
            workflow: row.get("workflow"),
            dialect: row.get("dialect"),
            status,
            input: parse(row.get::<String, _>("input").as_str())?,
            state: Value::Object(snapshot.state.as_ref().clone()),
            output: snapshot.output.clone(),
            error,
            pending_gate: if status == RunStatus::Paused {
                snapshot.gates.first().cloned()
            } else {
                None
            },
            cost_usd: snapshot.cost_usd,
            events,
            started_at,
            finished_at,
            duration_ms,
            steps: self.steps(run_id, None).await?,
        })
    }

    async fn list_runs(&self, limit: u32) -> Result<Vec<RunSummary>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, workflow, status, started_at, cost_usd FROM runs
             ORDER BY started_at DESC, rowid DESC LIMIT ?",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        Ok(rows
            .iter()
            .map(|r| {
                let status: String = r.get("status");
                RunSummary {
                    run_id: r.get("id"),
                    workflow: r.get("workflow"),
                    status: RunStatus::parse(&status).unwrap_or(RunStatus::Failed),
                    started_at: r.get("started_at"),
                    cost_usd: r.get("cost_usd"),
                }
            })
            .collect())
    }
}
