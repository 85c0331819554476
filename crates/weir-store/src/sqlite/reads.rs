//! The SQLite store's reads, each on a reader connection (`readers.rs`) in one read
//! transaction.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use weir_core::event::RunEvent;
use weir_core::record::{RunRecord, RunStatus, RunSummary, StepRecord, StepStatus};
use weir_core::store::{RunFilter, RunReads, StoreError, StoredRun};

use super::Sqlite;
use super::lifecycle::not_found;
use super::sql::{chain_of, event_batches, newest_steps, patches};
use super::writer::backend;
use crate::cols;

/// A run's steps with their attempts (a column of the step's row); with `only_seq`, that
/// step alone.
fn steps(
    conn: &Connection,
    run_id: &str,
    only_seq: Option<u32>,
) -> Result<Vec<StepRecord>, StoreError> {
    let mut stmt = conn
        .prepare_cached(concat!(
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
        .map_err(backend)?;
    let mut rows = stmt
        .query(params![run_id, only_seq.map(i64::from)])
        .map_err(backend)?;
    let mut steps = Vec::new();
    while let Some(r) = rows.next().map_err(backend)? {
        steps.push(cols::step(r, |r, _, text| {
            crate::attempts::from_json(&cols::Cols::text(r, "attempts"), text)
        })?);
    }
    // The steps in flight are lines of the run's row (migration 15).
    let running = running(conn, run_id, only_seq)?;
    if !running.is_empty() {
        steps.extend(running);
        steps.sort_by_key(|s| s.seq);
    }
    Ok(steps)
}

/// The run's steps in flight (its `running` column).
fn running(
    conn: &Connection,
    run_id: &str,
    only_seq: Option<u32>,
) -> Result<Vec<StepRecord>, StoreError> {
    let text: Option<String> = conn
        .prepare_cached("SELECT running FROM runs WHERE id = ?1")
        .map_err(backend)?
        .query_row(params![run_id], |r| r.get(0))
        .optional()
        .map_err(backend)?
        .flatten();
    super::running::steps(text.as_deref(), only_seq)
}

/// Runs a statement of one row and maps the row with `f`; `None` without one.
fn one<T>(
    conn: &Connection,
    sql: &str,
    p: impl rusqlite::Params,
    f: impl FnOnce(&rusqlite::Row<'_>) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(backend)?;
    let mut rows = stmt.query(p).map_err(backend)?;
    rows.next().map_err(backend)?.map(f).transpose()
}

/// Runs a statement and maps each row with `f`.
pub(super) fn all<T>(
    conn: &Connection,
    sql: &str,
    p: impl rusqlite::Params,
    mut f: impl FnMut(&rusqlite::Row<'_>) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(backend)?;
    let mut rows = stmt.query(p).map_err(backend)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(backend)? {
        out.push(f(r)?);
    }
    Ok(out)
}

#[async_trait]
impl RunReads for Sqlite {
    async fn load_run(&self, run_id: &str) -> Result<StoredRun, StoreError> {
        let run_id = run_id.to_string();
        self.readers
            .read(move |c| {
                one(
                    c,
                    concat!(
                        "SELECT workflow, status, source_path, sources.text AS source_text, snapshot, ",
                        patches!(),
                        ", epoch, owner, lease_expires_at, cancel_requested, workflow_id,
                           workflow_version, input
                         FROM runs JOIN run_sources ON run_sources.run_key = runs.key
                              JOIN sources ON sources.key = run_sources.source_key
                         WHERE id = ?1"
                    ),
                    params![run_id],
                    |r| cols::stored_run(&run_id, r),
                )?
                .ok_or_else(|| not_found(&run_id))
            })
            .await
    }

    async fn get_step(&self, run_id: &str, seq: u32) -> Result<StepRecord, StoreError> {
        let run_id = run_id.to_string();
        self.readers
            .read(move |c| {
                steps(c, &run_id, Some(seq))?
                    .pop()
                    .ok_or_else(|| StoreError::NotFound(format!("run {run_id} has no step {seq}")))
            })
            .await
    }

    async fn get_record(&self, run_id: &str) -> Result<RunRecord, StoreError> {
        // One read transaction: the run row, its log and its steps as of one commit (read
        // apart, a run could show as running beside the event that paused it).
        let run_id = run_id.to_string();
        self.readers
            .read(move |c| {
                let mut events = Vec::new();
                for batch in all(
                    c,
                    concat!(
                        event_batches!(),
                        " SELECT seq, bodies FROM batches ORDER BY seq"
                    ),
                    params![run_id],
                    |r| {
                        crate::batch_values(
                            r.get(0).map_err(backend)?,
                            &r.get::<_, String>(1).map_err(backend)?,
                            0,
                        )
                    },
                )? {
                    events.extend(batch);
                }
                let steps = steps(c, &run_id, None)?;
                one(
                    c,
                    concat!(
                        "SELECT workflow, dialect, status, input, snapshot, ",
                        patches!(),
                        ", error, started_at, finished_at, workflow_id, trigger_json
                         FROM runs JOIN run_sources ON run_sources.run_key = runs.key WHERE id = ?1"
                    ),
                    params![run_id],
                    |r| cols::record(&run_id, r, events, steps),
                )?
                .ok_or_else(|| not_found(&run_id))
            })
            .await
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        let (like, after_at, after_id) = cols::list_params(filter);
        let (after_at, after_id) = (after_at.map(str::to_string), after_id.map(str::to_string));
        let filter = filter.clone();
        self.readers
            .read(move |c| {
                let (kind, name) = cols::trigger_filter(&filter);
                all(
                    c,
                    "SELECT id, workflow, status, started_at, finished_at, cost_usd, workflow_id,
                            workflow_version,
                            step_count + length(coalesce(running, '')) - length(replace(coalesce(running, ''), char(10), ''))
                              AS steps,
                            json_extract(error, '$.code') AS error_code, trigger_json
                     FROM runs
                     WHERE (?1 IS NULL OR status = ?1)
                       AND (?2 IS NULL OR workflow = ?2 OR workflow_id = ?2)
                       AND (?3 IS NULL OR started_at >= ?3)
                       AND (?4 IS NULL OR id LIKE ?4 ESCAPE '\\' OR workflow LIKE ?4 ESCAPE '\\')
                       AND (?5 IS NULL OR started_at < ?5 OR (started_at = ?5 AND id < ?6))
                       AND (?8 IS NULL OR coalesce(trigger_kind,
                                CASE WHEN workflow_id IS NULL THEN 'cli' ELSE 'api' END) = ?8)
                       AND (?9 IS NULL OR json_extract(trigger_json, '$.name') = ?9)
                     ORDER BY started_at DESC, id DESC LIMIT ?7",
                    params![
                        filter.status.map(RunStatus::as_str),
                        filter.workflow,
                        filter.since,
                        like,
                        after_at,
                        after_id,
                        i64::from(filter.limit),
                        kind,
                        name,
                    ],
                    |r| Ok(cols::summary(r)),
                )
            })
            .await
    }

    async fn run_ids_with_prefix(
        &self,
        prefix: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        // A range on the id's unique index: every id with the prefix sorts from the prefix
        // itself up to the prefix followed by the highest character.
        let (prefix, upper) = (prefix.to_string(), format!("{prefix}{}", char::MAX));
        self.readers
            .read(move |c| {
                all(
                    c,
                    "SELECT id FROM runs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3",
                    params![prefix, upper, i64::from(limit)],
                    |r| r.get(0).map_err(backend),
                )
            })
            .await
    }

    async fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<RunEvent>, StoreError> {
        let (run_id, after) = (run_id.to_string(), after as i64);
        // One statement, so one moment: the row of `run_events` holding event `after` (a row
        // holds one write's events, numbered from its `seq`) and every row after it, through
        // its index by run; and the batches the run's step rows hold (migration 17), walking
        // back from the run's newest step row (migration 18) only as far as the first batch
        // that starts at or below `after`. The chain is in commit order, so every batch
        // before that one holds older events: a follower's read costs what was written
        // since it last read, not the run's length.
        let rows: Vec<(i64, String)> = self
            .readers
            .read(move |c| {
                all(
                    c,
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
                    params![run_id, after],
                    |r| Ok((r.get(0).map_err(backend)?, r.get(1).map_err(backend)?)),
                )
            })
            .await?;
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
        let run_id = run_id.to_string();
        let (last, mut running) = self
            .readers
            .read(move |c| {
                let rows: Vec<(i64, String)> = all(
                    c,
                    concat!(
                        "WITH RECURSIVE ",
                        chain_of!(),
                        ", ",
                        newest_steps!(),
                        " SELECT seq, status FROM steps, newest WHERE steps.row = newest.r
                          ORDER BY steps.id DESC"
                    ),
                    params![run_id],
                    |r| Ok((r.get(0).map_err(backend)?, r.get(1).map_err(backend)?)),
                )?;
                let last = rows.first().map_or(0, |(seq, _)| *seq as u32);
                // In flight: the lines of the run's row (migration 15), and any `running`
                // row a step was written whole as.
                let mut open = running(c, &run_id, None)?;
                for (seq, status) in rows.iter().rev() {
                    if status == StepStatus::Running.as_str() {
                        open.extend(steps(c, &run_id, Some(*seq as u32))?);
                    }
                }
                Ok((last, open))
            })
            .await?;
        running.sort_by_key(|s| s.seq);
        running.dedup_by_key(|s| s.seq);
        let last = last.max(running.last().map_or(0, |s| s.seq));
        Ok((last, running))
    }

    async fn count_by_status(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        self.readers
            .read(|c| {
                all(
                    c,
                    "SELECT status, COUNT(*) FROM runs GROUP BY status ORDER BY status",
                    [],
                    |r| {
                        Ok((
                            cols::status(r, "status"),
                            r.get::<_, i64>(1).map_err(backend)? as u64,
                        ))
                    },
                )
            })
            .await
    }
}
