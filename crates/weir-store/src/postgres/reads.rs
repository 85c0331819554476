//! Reading runs back, and retention's prune.

use async_trait::async_trait;
use sqlx::Row;
use weir_core::event::RunEvent;
use weir_core::record::{RunRecord, RunStatus, RunSummary, StepRecord, StepStatus};
use weir_core::store::{Admin, RunFilter, RunReads, StoreError, StoredRun};

use crate::rules::{self};
use crate::{backend, event_of, event_value};

use super::sql::patches;
use super::store::{Postgres, lost_source, not_found};

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
                        finished_at, workflow_id, trigger_json
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
        let (kind, name) = crate::cols::trigger_filter(filter);
        let rows = sqlx::query(
            "SELECT id, workflow, status, started_at, finished_at, cost_usd, workflow_id,
                    workflow_version,
                    (SELECT count(*) FROM steps WHERE steps.run_id = runs.id) AS steps,
                    error::jsonb ->> 'code' AS error_code, trigger_json
             FROM runs
             WHERE ($1::text IS NULL OR status = $1)
               AND ($2::text IS NULL OR workflow = $2 OR workflow_id = $2)
               AND ($3::text IS NULL OR started_at >= $3)
               AND ($4::text IS NULL OR id ILIKE $4 OR workflow ILIKE $4)
               AND ($5::text IS NULL OR started_at < $5 OR (started_at = $5 AND id < $6))
               AND ($8::text IS NULL OR coalesce(trigger_kind,
                        CASE WHEN workflow_id IS NULL THEN 'cli' ELSE 'api' END) = $8)
               AND ($9::text IS NULL OR trigger_json::jsonb ->> 'name' = $9)
             ORDER BY started_at DESC, id DESC LIMIT $7",
        )
        .bind(filter.status.map(RunStatus::as_str))
        .bind(filter.workflow.as_deref())
        .bind(filter.since.as_deref())
        .bind(like)
        .bind(after_at)
        .bind(after_id)
        .bind(i64::from(filter.limit))
        .bind(kind)
        .bind(name)
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
