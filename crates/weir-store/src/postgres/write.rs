//! The writes of a drive: each one statement behind the fence (`fenced_sql`), with the step
//! rows bound as parallel arrays; and the refusal of a stale write, noted on the timeline.

use sqlx::{PgConnection, Row};
use weir_core::event::EventKind;
use weir_core::record::{RunStatus, StepRecord};
use weir_core::store::{Lease, StoreError, Written};

use super::sql::db_now;
use super::store::{Postgres, in_tx};
use crate::retry::{self, Failed};
use crate::rules::{self, DriveWrite, End};
use crate::{Body, backend, json};

/// Event bodies for `kinds`, all stamped `at`.
pub(super) fn bodies(
    at: &weir_core::store::Stamp,
    kinds: &[EventKind],
) -> Result<Vec<String>, StoreError> {
    kinds.iter().map(|kind| json(&Body { at, kind })).collect()
}

/// Step rows as parallel arrays, for `unnest`.
#[derive(Default)]
pub(super) struct StepArrays {
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
    pub(super) fn of(steps: &[&StepRecord]) -> Result<Self, StoreError> {
        let mut a = Self::default();
        for s in steps {
            a.seq.push(i64::from(s.seq));
            a.node_id.push(String::from(&*s.node_id));
            a.node_type.push(s.node_type.to_string());
            a.visit.push(i64::from(s.visit));
            a.status.push(s.status.as_str());
            a.route.push(s.route.clone());
            a.input.push(json(&s.input)?);
            a.output.push(json(&s.output)?);
            a.error.push(s.error.clone());
            a.cost_usd.push(s.cost_usd);
            a.tokens_in.push(s.tokens.input as i64);
            a.tokens_out.push(s.tokens.output as i64);
            a.started_at.push(s.started_at.to_string());
            a.finished_at
                .push(s.finished_at.as_ref().map(ToString::to_string));
            a.duration_ms.push(s.duration_ms.map(|d| d as i64));
            for at in &s.attempts {
                a.a_seq.push(i64::from(s.seq));
                a.a_n.push(i64::from(at.n));
                a.a_body.push(crate::attempts::one_to_json(
                    at,
                    crate::attempts::output_text(&s.output),
                )?);
            }
        }
        Ok(a)
    }

    /// Binds the arrays in the order of [`STEPS_FROM`] and [`ATTEMPTS_FROM`], starting at
    /// parameter `$k` (the caller's numbering).
    pub(super) fn bind<'q>(
        &'q self,
        q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        q.bind(&self.seq)
            .bind(&self.node_id)
            .bind(&self.node_type)
            .bind(&self.visit)
            .bind(&self.status)
            .bind(&self.route)
            .bind(&self.input)
            .bind(&self.output)
            .bind(&self.error)
            .bind(&self.cost_usd)
            .bind(&self.tokens_in)
            .bind(&self.tokens_out)
            .bind(&self.started_at)
            .bind(&self.finished_at)
            .bind(&self.duration_ms)
            .bind(&self.a_seq)
            .bind(&self.a_n)
            .bind(&self.a_body)
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

/// The fenced write: the fence `UPDATE` (which also reserves the event numbers and ends the
/// drive when asked), then everything else only where the fence matched. One statement per
/// shape of write (with or without steps, events, an end), each prepared once per
/// connection: a part with nothing to do still costs the server its planning and execution.
/// `snap`: 0 nothing of the run's patches, 1 a whole snapshot that covers (deletes) them, 2 a
/// patch (inserted).
fn fenced_sql(steps: bool, events: bool, snap: usize, end: i32) -> &'static str {
    static SQL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let all = SQL.get_or_init(|| {
        let mut all = Vec::new();
        for shape in 0..36 {
            let (steps, events) = (shape & 1 != 0, shape & 2 != 0);
            let (snap, end) = ((shape >> 2) % 3, (shape >> 2) / 3);
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
            match snap {
                1 => parts.push(
                    // The whole snapshot covers every patch written before it.
                    "pd AS (DELETE FROM run_patches
                            WHERE run_id = $1 AND EXISTS (SELECT 1 FROM fence))"
                        .into(),
                ),
                2 => parts.push(
                    // Numbered by the write's first event: patches apply in commit order.
                    "pa AS (INSERT INTO run_patches (run_id, seq, patch)
                            SELECT $1, fence.event_seq - $3 + 1, $30 FROM fence)"
                        .into(),
                ),
                _ => {}
            }
            match end {
                1 => parts.push(
                    "gone AS (DELETE FROM queue WHERE run_id = $1 AND EXISTS (SELECT 1 FROM fence))"
                        .into(),
                ),
                2 => parts.push(
                    concat!(
                        "back AS (UPDATE queue SET visible_at = ",
                        db_now!(),
                        " + $29, leased = FALSE
                              WHERE run_id = $1 AND EXISTS (SELECT 1 FROM fence))"
                    )
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
    &all[usize::from(steps) | usize::from(events) << 1 | (snap + 3 * end as usize) << 2]
}

/// Step rows and attempts on their own (a decision's transaction): `$1` the run, then the
/// arrays.
pub(super) fn upsert_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "WITH one AS (SELECT 1), {} SELECT 1",
            step_upserts(2, "one")
        )
    })
}

impl Postgres {
    pub(super) async fn fenced(&self, w: DriveWrite<'_>) -> Result<Written, StoreError> {
        self.faults.hit("commit", 0)?;
        let at = weir_core::store::Stamp::now();
        let n = w.events.len() as i64;
        let (patch, clear) = rules::snapshot_write(w.snapshot.is_some(), w.patch, w.clear, n > 0);
        let patch = patch.map(json).transpose()?;
        let whole = if patch.is_some() { None } else { w.snapshot };
        let snap = match (&patch, clear) {
            (Some(_), _) => 2,
            (None, true) => 1,
            (None, false) => 0,
        };
        // 0: the drive goes on, 1: it ends (or parks), 2: the run is released.
        let (end, finish) = match &w.end {
            None => (0, None),
            Some(End::Finish(u)) => (1, Some(*u)),
            Some(End::Release) => (2, None),
        };
        let sql = fenced_sql(!w.steps.is_empty(), n > 0, snap, end);
        let whole = whole.map(json).transpose()?;
        let error = finish
            .and_then(|u| u.error.as_ref())
            .map(json)
            .transpose()?;
        let (arrays, bodies) = (StepArrays::of(&w.steps)?, bodies(&at, &w.events)?);
        let pool = if w.visible { &self.fast } else { &self.pool };
        let (whole, error, arrays, bodies, patch) = (&whole, &error, &arrays, &bodies, &patch);
        // A connection that cannot be had (the server restarting, the network cut) leaves
        // nothing sent, and an aborted transaction nothing applied: both are tried again.
        let row = retry::retrying(w.write, || async move {
            let mut conn = pool.acquire().await.map_err(backend)?;
            let q = sqlx::query(sql)
                .bind(w.lease.run_id.as_str())
                .bind(w.lease.epoch as i64)
                .bind(n)
                .bind(whole.as_deref())
                .bind(w.snapshot.map(|s| s.cost_usd))
                .bind(finish.map(|u| u.status.as_str()))
                .bind(error.as_deref())
                .bind(finish.and_then(|u| u.finished_at.as_deref()))
                .bind(end);
            arrays
                .bind(q)
                .bind(bodies)
                .bind(0_i64)
                .bind(patch.as_deref())
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| Failed::after_sending(backend(e)))
        })
        .await?;
        let Some(row) = row else {
            return Err(self.refuse(w.lease, w.write).await);
        };
        self.notes.run(&w.lease.run_id);
        if end == 2 {
            self.notes.work();
        }
        Ok(Written {
            events: w.events,
            cancel_requested: row.get(1),
        })
    }

    /// Refuses a stale write: the `LeaseLost`, after a `stale_write_refused` event on the
    /// run's timeline (when the run still exists).
    pub(super) async fn refuse(&self, lease: &Lease, write: &str) -> StoreError {
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
            insert_events(
                &mut *tx,
                &lease.run_id,
                seq,
                &weir_core::store::Stamp::now(),
                &[kind],
            )
            .await?;
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
}

/// Appends events numbered from `first` (reserved by the caller's `UPDATE`).
pub(super) async fn insert_events(
    conn: &mut PgConnection,
    run_id: &str,
    first: i64,
    at: &weir_core::store::Stamp,
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
