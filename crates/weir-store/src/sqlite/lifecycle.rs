//! The changes to a run from outside a drive that are not claims: a gate decision, a
//! cancel, retention's prune. Each is one job of the writer (`writer.rs`): a transaction of
//! its own inside a group commit, where a refusal rolls back that job's statements alone.
//! What to write and what to refuse is decided in `crate::rules`.

use rusqlite::{OptionalExtension, params};
use weir_core::event::EventKind;
use weir_core::record::{RunStatus, StepRecord};
use weir_core::store::{CancelOutcome, GateDecision, Stamp, StoreError, Written, now_ms};

use super::drive::{self, HAS_ROW, STEP_INSERT};
use super::sql::{chain_of, patches};
use super::stmts::Conn;
use super::writer::backend;
use crate::cols::Cols;
use crate::{json, rules};

pub(super) fn not_found(run_id: &str) -> StoreError {
    StoreError::NotFound(format!("no run with id {run_id}"))
}

/// Writes steps whole, each a new row at the head of the run's chain of step rows
/// (migration 18); a step written again is a new row, and readers take the newest. A
/// statement per row: these writes are rare (a decision, a cancel).
fn insert_steps(tx: &Conn<'_>, key: i64, steps: &[&StepRecord]) -> Result<(), StoreError> {
    for s in steps {
        let row = super::rows::step_row(s)?;
        let id = drive::step_id(key, row.seq)?;
        let head: Option<i64> = tx
            .prepare("SELECT last_row FROM runs WHERE key = ?1")?
            .query_row(params![key], |r| r.get(0))
            .map_err(backend)?;
        // A step without a row yet is one more for the run's `step_count`.
        let has: bool = tx
            .prepare(HAS_ROW)?
            .query_row(params![head, id], |r| r.get(0))
            .map_err(backend)?;
        let values = drive::step_params(&id, &row);
        let linked = [&head as &dyn rusqlite::ToSql];
        tx.prepare(STEP_INSERT)?
            .execute(rusqlite::params_from_iter(values.iter().chain(&linked)))
            .map_err(backend)?;
        tx.prepare(
            "UPDATE runs SET last_row = last_insert_rowid(), step_count = step_count + ?1
             WHERE key = ?2",
        )?
        .execute(params![i64::from(!has), key])
        .map_err(backend)?;
    }
    Ok(())
}

/// Appends `kinds` from sequence number `first` on (reserved by the caller's `UPDATE`).
fn insert_events(
    tx: &Conn<'_>,
    key: i64,
    first: i64,
    kinds: Vec<EventKind>,
) -> Result<Vec<EventKind>, StoreError> {
    if kinds.is_empty() {
        return Ok(kinds);
    }
    drive::insert_events(tx, key, first, &Stamp::now(), kinds)
}

/// A whole snapshot was written: it covers every patch written before it.
fn snapshot_written(tx: &Conn<'_>, key: i64) -> Result<(), StoreError> {
    tx.prepare("DELETE FROM run_patches WHERE run_key = ?1")?
        .execute(params![key])
        .map_err(backend)?;
    Ok(())
}

/// A gate decision: the run, paused at the epoch the decider read, moves on (a new epoch,
/// so a driver still holding the old one is refused), or the refusal of
/// `rules::decision_conflict`.
pub(super) fn decide(tx: &Conn<'_>, d: &GateDecision) -> Result<Written, StoreError> {
    let changed = tx
        .prepare(
            "UPDATE runs SET epoch = epoch + 1, status = ?1, error = ?2, finished_at = ?3,
                             snapshot = ?4, cost_usd = ?5, event_seq = event_seq + ?6
             WHERE id = ?7 AND status = 'paused' AND epoch = ?8",
        )?
        .execute(params![
            d.status.as_str(),
            d.error.as_ref().map(json).transpose()?,
            d.finished_at.as_deref(),
            json(&d.snapshot)?,
            d.snapshot.cost_usd,
            d.events.len() as i64,
            d.run_id,
            d.expect_epoch as i64,
        ])
        .map_err(backend)?;
    let (key, last, status, epoch): (i64, i64, String, i64) = tx
        .prepare("SELECT key, event_seq, status, epoch FROM runs WHERE id = ?1")?
        .query_row(params![d.run_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()
        .map_err(backend)?
        .ok_or_else(|| not_found(&d.run_id))?;
    if changed == 0 {
        return Err(rules::decision_conflict(
            &d.run_id,
            RunStatus::parse(&status).unwrap_or(RunStatus::Failed),
            epoch as u64,
            d.expect_epoch,
        ));
    }
    snapshot_written(tx, key)?;
    let mut steps: Vec<&StepRecord> = vec![&d.step];
    steps.extend(d.also.iter());
    insert_steps(tx, key, &steps)?;
    let events = insert_events(tx, key, last - d.events.len() as i64 + 1, d.events.clone())?;
    Ok(Written {
        events,
        cancel_requested: false,
    })
}

/// Cancels a queued or paused run at once, or flags a running one for its driver, as
/// `rules::cancel_plan` says.
pub(super) fn cancel(
    tx: &Conn<'_>,
    run_id: &str,
    by: &str,
) -> Result<(CancelOutcome, Written), StoreError> {
    let mut stmt = tx.prepare(concat!(
        "SELECT key, status, lease_expires_at, cancel_requested, snapshot, running, ",
        patches!(),
        " FROM runs WHERE id = ?1"
    ))?;
    let mut rows = stmt.query(params![run_id]).map_err(backend)?;
    let row = rows
        .next()
        .map_err(backend)?
        .ok_or_else(|| not_found(run_id))?;
    let key = row.int("key");
    let plan = rules::cancel_plan(
        run_id,
        crate::cols::status(row, "status"),
        row.opt_int("lease_expires_at"),
        row.flag("cancel_requested"),
        by,
        now_ms(),
    )?;
    let now = match plan {
        rules::CancelPlan::Request(events) => {
            let events = if events.is_empty() {
                events
            } else {
                tx.prepare(
                    "UPDATE runs SET cancel_requested = 1, event_seq = event_seq + 1
                     WHERE key = ?1",
                )?
                .execute(params![key])
                .map_err(backend)?;
                let seq = event_seq(tx, key)?;
                insert_events(tx, key, seq, events)?
            };
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
    let mut snapshot = crate::cols::snapshot(row)?;
    let running = row.opt_text("running");
    drop(rows);
    drop(stmt);
    now.snapshot(&mut snapshot);
    tx.prepare(
        "UPDATE runs SET status = 'cancelled', error = ?1, finished_at = ?2, snapshot = ?3,
                         lease_expires_at = NULL, event_seq = event_seq + 2, running = NULL
         WHERE key = ?4",
    )?
    .execute(params![
        json(&now.error)?,
        now.at.to_string(),
        json(&snapshot)?,
        key
    ])
    .map_err(backend)?;
    snapshot_written(tx, key)?;
    // Steps a driver that stopped left in flight become rows of their own, cancelled
    // with the others below.
    let left = super::running::steps(running.as_deref(), None)?;
    insert_steps(tx, key, &left.iter().collect::<Vec<_>>())?;
    // Older rows of a step written again are updated too; readers take the newest.
    tx.prepare(concat!(
        "WITH RECURSIVE ",
        chain_of!(),
        " UPDATE steps SET status = 'cancelled', error = ?2, finished_at = ?3
          WHERE row IN (SELECT r FROM chain) AND status IN ('running', 'waiting')"
    ))?
    .execute(params![run_id, now.step_error, now.at.to_string()])
    .map_err(backend)?;
    let seq = event_seq(tx, key)?;
    let events = insert_events(tx, key, seq - 1, now.events)?;
    Ok((
        CancelOutcome::Cancelled,
        Written {
            events,
            cancel_requested: true,
        },
    ))
}

fn event_seq(tx: &Conn<'_>, key: i64) -> Result<i64, StoreError> {
    tx.prepare("SELECT event_seq FROM runs WHERE key = ?1")?
        .query_row(params![key], |r| r.get(0))
        .map_err(backend)
}

/// Retention: deletes the runs that ended before `before` (of `statuses`), their rows in
/// every table, and the sources no run names any more; their ids.
pub(super) fn prune(
    tx: &Conn<'_>,
    before: &str,
    statuses: &[RunStatus],
) -> Result<Vec<String>, StoreError> {
    let list = serde_json::to_string(&rules::ended_statuses(statuses)).map_err(backend)?;
    let runs: Vec<(i64, String)> = tx
        .prepare(
            "SELECT key, id FROM runs WHERE finished_at IS NOT NULL AND finished_at < ?1
               AND status IN (SELECT value FROM json_each(?2))",
        )?
        .query_map(params![before, list], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(backend)?
        .collect::<Result<_, _>>()
        .map_err(backend)?;
    let mut sources: Vec<i64> = Vec::new();
    for (key, id) in &runs {
        let source: Option<i64> = tx
            .prepare("SELECT source_key FROM run_sources WHERE run_key = ?1")?
            .query_row(params![key], |r| r.get(0))
            .optional()
            .map_err(backend)?;
        sources.extend(source);
        tx.prepare(concat!(
            "WITH RECURSIVE ",
            chain_of!(),
            " DELETE FROM steps WHERE row IN (SELECT r FROM chain)"
        ))?
        .execute(params![id])
        .map_err(backend)?;
        for sql in [
            "DELETE FROM run_events WHERE run_key = ?1",
            "DELETE FROM run_patches WHERE run_key = ?1",
            "DELETE FROM run_sources WHERE run_key = ?1",
            "DELETE FROM runs WHERE key = ?1",
        ] {
            tx.prepare(sql)?.execute(params![key]).map_err(backend)?;
        }
    }
    sources.sort_unstable();
    sources.dedup();
    for key in sources {
        tx.prepare(
            "DELETE FROM sources WHERE key = ?1
               AND NOT EXISTS (SELECT 1 FROM run_sources WHERE source_key = ?1)",
        )?
        .execute(params![key])
        .map_err(backend)?;
    }
    Ok(runs.into_iter().map(|(_, id)| id).collect())
}
