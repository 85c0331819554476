//! The statements of a drive's writes, run by the writer (`writer.rs`) inside a group
//! commit or a job of their own: the fenced writes (step commits, started steps, events,
//! the end of a drive), run creation, claims and lease renewals.

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use weir_core::record::RunStatus;
use weir_core::store::{Fault, StoreError};

use super::stmts::Conn;
use super::writer::{Conns, backend};
use crate::rules;

/// One step row, owned, ready to bind.
pub struct StepRow {
    pub seq: i64,
    pub node_id: weir_core::record::NodeId,
    pub node_type: weir_core::record::NodeType,
    pub visit: i64,
    pub status: &'static str,
    pub route: Option<String>,
    pub input: String,
    pub output: String,
    pub error: Option<String>,
    pub cost_usd: f64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub duration_ms: Option<i64>,
    /// The attempts, a JSON array in attempt order (migration 11).
    pub attempts: String,
}

/// How a write ends the drive, if it does.
pub enum EndRow {
    Finish {
        status: &'static str,
        error: Option<String>,
        finished_at: Option<String>,
    },
    Release,
}

/// What the last write of a drive left in the run's row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seen {
    /// The run's integer key (its child rows carry it).
    pub key: i64,
    /// The run's last event number, and its cancel flag, as that write left them.
    pub event_seq: i64,
    pub cancel: bool,
    /// The run's newest step row (migration 18), as that write left it.
    pub last_row: Option<i64>,
}

/// One fenced write of a drive, owned so it can travel to the writer thread.
pub struct FencedWrite {
    pub run_id: String,
    /// The run's row as the drive's last write left it, when there was one: the fence then
    /// finds the row through the integer primary key instead of the text index on `id`,
    /// and, when the row's event number is still the one seen (no one else wrote to the
    /// run since: every other write, a cancel request included, adds an event), it needs
    /// no read of the row after its `UPDATE`.
    pub seen: Option<Seen>,
    pub epoch: i64,
    /// The lease's owner and what the write is, for the event a refusal leaves.
    pub owner: String,
    pub write: &'static str,
    /// Progress only: committed without a sync (`Conns::visible`).
    pub visible: bool,
    /// The whole snapshot, or a patch of it, and the run's cost with either.
    pub snapshot: Option<String>,
    pub patch: Option<String>,
    pub cost_usd: Option<f64>,
    /// Delete the patches the whole snapshot covers (only when some may have been written).
    pub clear: bool,
    /// The steps the write ends (or writes whole); a step that only started is a line of
    /// `running_add` instead (`running.rs`).
    pub steps: Vec<StepRow>,
    /// For the run's `running` column, when the write has steps: the step numbers that
    /// leave it (comma-separated) and the lines that join it.
    pub running: Option<(String, String)>,
    /// How many events the write appends, numbered from the reserved range, and their
    /// bodies (`crate::event_batch`).
    pub event_count: i64,
    pub events: String,
    pub end: Option<EndRow>,
}

/// What a fenced write reports: the row as it left it, and the cancel flag.
pub struct Fenced {
    /// The row as this write left it, for the drive's next writes.
    pub seen: Seen,
    pub cancel_requested: bool,
}

/// One fenced write, inside a group commit's savepoint: the write's statements, or, when
/// the fence refuses it (nothing was changed), the `stale_write_refused` event and
/// `Ok(Err(LeaseLost))`, so the event is kept.
pub fn fenced(conn: &Conn<'_>, w: &FencedWrite) -> Result<Result<Fenced, StoreError>, StoreError> {
    Ok(match apply(conn, w)? {
        Some(done) => Ok(done),
        None => Err(refuse(conn, &w.run_id, w.epoch, &w.owner, w.write)),
    })
}

/// One fenced write's statements: the fence first (it reserves the event numbers and writes
/// the snapshot, only while the run's epoch is the lease's and the lease is held), then the
/// rows. `None`: the fence refused the write (nothing was changed).
fn apply(tx: &Conn<'_>, w: &FencedWrite) -> Result<Option<Fenced>, StoreError> {
    let n = w.event_count;
    let Some(Fence {
        key,
        event_seq: last,
        cancel,
        last_row,
    }) = fence(tx, w)?
    else {
        return Ok(None);
    };
    let first = last - n + 1;
    count_rewritten(tx, w, key, last_row)?;
    let head = write_rows(tx, w, key, first, last_row)?;
    end(tx, w, key)?;
    Ok(Some(Fenced {
        seen: Seen {
            key,
            event_seq: last,
            cancel: cancel != 0,
            last_row: head,
        },
        cancel_requested: cancel != 0,
    }))
}

/// The fence's three statements for a write's shape: by id, by the run's key, and by the
/// key with the row as the drive last left it.
fn fence_statements(snapshot: bool, cost: bool) -> [&'static str; 3] {
    // One statement per shape, so none evaluates what it does not change.
    // Each by id, or by the run's key when the drive knows it (the id checked too: a key
    // can be reused once its run is pruned, an id cannot).
    macro_rules! fence {
        ($set:literal, $also:literal) => {
            fence!(@ concat!(
                $set,
                ", running = CASE WHEN ?8 IS NULL THEN running ELSE weir_running(running, ?8, ?9) END,
                 step_count = step_count + CASE WHEN ?8 IS NULL THEN 0
                                                ELSE weir_ended(running, ?8) END,
                 last_row = CASE WHEN ?10 = 0 THEN last_row
                                 ELSE COALESCE((SELECT MAX(row) FROM steps), 0) + ?10 END"
            ), $also)
        };
        (@ $set:expr, $also:literal) => {
            [
                concat!(
                    "UPDATE runs SET ",
                    $set,
                    " WHERE id = ?4 AND epoch = ?5 AND lease_expires_at IS NOT NULL",
                    $also
                ),
                concat!(
                    "UPDATE runs SET ",
                    $set,
                    " WHERE key = ?6 AND id = ?4 AND epoch = ?5 AND lease_expires_at IS NOT NULL",
                    $also
                ),
                concat!(
                    "UPDATE runs SET ",
                    $set,
                    " WHERE key = ?6 AND id = ?4 AND epoch = ?5 AND lease_expires_at IS NOT NULL
                        AND event_seq = ?7",
                    $also
                ),
            ]
        };
    }
    // The steps in flight change with the write's steps (`running.rs`): ?8 the step numbers
    // that leave the run's `running` column, ?9 the lines that join it; NULL without steps.
    if snapshot {
        fence!(
            "event_seq = event_seq + ?1, snapshot = ?2, cost_usd = ?3",
            ""
        )
    } else if cost {
        fence!(
            "event_seq = event_seq + ?1, cost_usd = ?3",
            " AND ?2 IS NULL"
        )
    } else {
        fence!(
            "event_seq = event_seq + ?1",
            " AND ?2 IS NULL AND ?3 IS NULL"
        )
    }
}

/// The fence: the run's row updated only while the write's lease holds it, with the event
/// numbers reserved, the snapshot (or cost) and the steps in flight; the row as it left it.
fn fence(tx: &Conn<'_>, w: &FencedWrite) -> Result<Option<Fence>, StoreError> {
    let n = w.event_count;
    let (snapshot, cost) = (w.snapshot.as_deref(), w.cost_usd);
    let [by_id, by_key, unchanged] = fence_statements(snapshot.is_some(), cost.is_some());
    let (done, add) = match &w.running {
        Some((d, a)) => (Some(d.as_str()), Some(a.as_str())),
        None => (None, None),
    };
    // ?10: the step rows the write appends. Each takes the table's largest rowid plus one,
    // so the last of them, the run's newest (`last_row`), is the largest now plus their
    // number; each links to the one before it (`prev`), the first to the run's newest.
    let appended = w.steps.len() as i64;
    let none: Option<i64> = None;
    // The fence counts the steps that were in flight (`weir_ended`); what it did not find
    // is read after it.
    super::running::take_not_found();
    // The row as the drive last left it: one `UPDATE`, nothing to read back.
    let same = match w.seen {
        Some(seen) => {
            let changed = tx
                .prepare(unchanged)?
                .execute(params![
                    n,
                    snapshot,
                    cost,
                    w.run_id,
                    w.epoch,
                    seen.key,
                    seen.event_seq,
                    done,
                    add,
                    appended
                ])
                .map_err(backend)?;
            (changed == 1).then_some(Fence {
                key: seen.key,
                event_seq: seen.event_seq + n,
                cancel: i64::from(seen.cancel),
                last_row: seen.last_row,
            })
        }
        None => None,
    };
    let fence = match (same, w.seen) {
        (Some(f), _) => Some(f),
        (None, Some(seen)) => read_then_update(
            tx,
            by_key,
            params![
                n, snapshot, cost, w.run_id, w.epoch, seen.key, none, done, add, appended
            ],
            Known::Key(seen.key),
            n,
        )?,
        (None, None) => read_then_update(
            tx,
            by_id,
            params![
                n, snapshot, cost, w.run_id, w.epoch, none, none, done, add, appended
            ],
            Known::Id(&w.run_id),
            n,
        )?,
    };
    Ok(fence)
}

/// Steps the write ends that were not in flight (written whole, or written again): those
/// without a row in the run's chain yet are new to `step_count` too.
fn count_rewritten(
    tx: &Conn<'_>,
    w: &FencedWrite,
    key: i64,
    last_row: Option<i64>,
) -> Result<(), StoreError> {
    let appended = w.steps.len() as i64;
    let not_found = super::running::take_not_found();
    if not_found > 0 {
        let mut new = 0;
        for s in &w.steps {
            let id = step_id(key, s.seq)?;
            let has: bool = tx
                .prepare(HAS_ROW)?
                .query_row(params![last_row, id], |r| r.get(0))
                .map_err(backend)?;
            new += i64::from(!has);
        }
        let counted = appended - not_found;
        if new != counted {
            tx.prepare("UPDATE runs SET step_count = step_count + ?1 WHERE key = ?2")?
                .execute(params![new - counted, key])
                .map_err(backend)?;
        }
    }
    Ok(())
}

/// The write's step rows, its patch and its events; the run's newest step row after them.
fn write_rows(
    tx: &Conn<'_>,
    w: &FencedWrite,
    key: i64,
    first: i64,
    last_row: Option<i64>,
) -> Result<Option<i64>, StoreError> {
    let n = w.event_count;
    // A step is written to `steps` when it ends (its start is a line of the run's `running`
    // column, migration 15), appended in time order (migration 14) to the run's chain of
    // step rows (migration 18). The write's events go in its first step's row (migration
    // 17): two B-tree pages fewer per commit than a row of `run_events`. A step written
    // again is a new row of the chain; readers take the newest.
    let mut head = last_row;
    for (i, s) in w.steps.iter().enumerate() {
        let id = step_id(key, s.seq)?;
        let row = step_params(&id, s);
        let linked = [&head as &dyn rusqlite::ToSql];
        head = Some(if i == 0 && n > 0 {
            let holder = [&first as &dyn rusqlite::ToSql, &w.events];
            tx.prepare(STEP_HOLDING_EVENTS)?
                .insert(rusqlite::params_from_iter(
                    row.iter().chain(&linked).chain(&holder),
                ))
                .map_err(backend)?
        } else {
            tx.prepare(STEP_INSERT)?
                .insert(rusqlite::params_from_iter(row.iter().chain(&linked)))
                .map_err(backend)?
        });
    }
    let held = n > 0 && !w.steps.is_empty();
    if w.clear {
        // The whole snapshot covers every patch written before it.
        tx.prepare("DELETE FROM run_patches WHERE run_key = ?1")?
            .execute(params![key])
            .map_err(backend)?;
    }
    if let Some(patch) = &w.patch {
        // Numbered by the write's first event: patches apply in commit order.
        tx.prepare("INSERT INTO run_patches (run_key, seq, patch) VALUES (?1, ?2, ?3)")?
            .execute(params![key, first, patch])
            .map_err(backend)?;
    }
    if n > 0 && !held {
        // One row for the write's events (migration 12).
        tx.prepare("INSERT INTO run_events (run_key, seq, bodies) VALUES (?1, ?2, ?3)")?
            .execute(params![key, first, w.events])
            .map_err(backend)?;
    }
    Ok(head)
}

/// How the write ends the drive, if it does: the run's status, and its lease let go.
fn end(tx: &Conn<'_>, w: &FencedWrite, key: i64) -> Result<(), StoreError> {
    match &w.end {
        Some(EndRow::Finish {
            status,
            error,
            finished_at,
        }) => {
            tx.prepare(
                "UPDATE runs SET status = ?1, error = ?2, finished_at = ?3, lease_expires_at = NULL
                 WHERE key = ?4",
            )?
            .execute(params![status, error, finished_at, key])
            .map_err(backend)?;
        }
        Some(EndRow::Release) => {
            tx.prepare(
                "UPDATE runs SET status = 'queued', lease_expires_at = NULL WHERE key = ?1",
            )?
            .execute(params![key])
            .map_err(backend)?;
        }
        None => {}
    }
    Ok(())
}

/// The columns of a step row a write sets, with the row it links to (`prev`, migration
/// 18): all but the events it may hold (migration 17).
macro_rules! step_columns {
    () => {
        "id, node_id, node_type, visit, status, route, input, output, error, cost_usd,
         tokens_in, tokens_out, started_at, finished_at, duration_ms, attempts, prev"
    };
}

/// Whether the chain of step rows from `?1` (the run's newest) holds a row of step `?2`.
/// Also for `rows::insert_steps`.
pub(super) const HAS_ROW: &str = "WITH RECURSIVE chain(r) AS (
        SELECT ?1 WHERE ?1 IS NOT NULL
        UNION ALL
        SELECT steps.prev FROM steps, chain WHERE steps.row = chain.r AND steps.prev IS NOT NULL)
    SELECT EXISTS (SELECT 1 FROM steps, chain WHERE steps.row = chain.r AND steps.id = ?2)";

/// A step row, linked to the run's newest (`?17`).
pub(super) const STEP_INSERT: &str = concat!(
    "INSERT INTO steps (",
    step_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
);

/// A step row that holds its write's events.
const STEP_HOLDING_EVENTS: &str = concat!(
    "INSERT INTO steps (",
    step_columns!(),
    ", event_seq, events)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
             ?19)"
);

/// A step row's values, in `step_columns!` order.
pub(super) fn step_params<'a>(id: &'a i64, s: &'a StepRow) -> [&'a dyn rusqlite::ToSql; 16] {
    [
        id,
        &s.node_id,
        &s.node_type,
        &s.visit,
        &s.status,
        &s.route,
        &s.input,
        &s.output,
        &s.error,
        &s.cost_usd,
        &s.tokens_in,
        &s.tokens_out,
        &s.started_at,
        &s.finished_at,
        &s.duration_ms,
        &s.attempts,
    ]
}

/// A step row's key: the run's key times 2^32 plus the step's sequence number (a `u32`).
/// Run keys below 2^31 fit, two billion runs in one database.
pub(super) fn step_id(run_key: i64, seq: i64) -> Result<i64, StoreError> {
    run_key
        .checked_mul(1 << 32)
        .and_then(|k| k.checked_add(seq))
        .ok_or_else(|| {
            StoreError::backend(Fault::Other, format!("run key {run_key} is beyond 2^31"))
        })
}

/// A run's row as a fenced write leaves it.
struct Fence {
    /// The run's integer key, which its child rows carry (migration 10).
    key: i64,
    event_seq: i64,
    cancel: i64,
    /// The run's newest step row before the write (migration 18).
    last_row: Option<i64>,
}

/// Runs `update`, a single-row `UPDATE runs … WHERE id = …`, and when it changed the row
/// reads back its key, `event_seq` and `cancel_requested`. Not `RETURNING`: SQLite gathers a
/// `RETURNING` statement's rows in an ephemeral table, a B-tree opened, zeroed and closed per
/// statement, which cost more than the whole second lookup by primary key.
fn update_then_read(
    tx: &Conn<'_>,
    update: &'static str,
    params: &[&dyn rusqlite::ToSql],
    row: Known<'_>,
) -> Result<Option<Fence>, StoreError> {
    let changed = tx.prepare(update)?.execute(params).map_err(backend)?;
    if changed == 0 {
        return Ok(None);
    }
    read_fence(tx, row)
}

/// The run's row as it stands, named by id or key; `None` when there is none.
fn read_fence(tx: &Conn<'_>, row: Known<'_>) -> Result<Option<Fence>, StoreError> {
    let (read, by): (&'static str, &dyn rusqlite::ToSql) = match &row {
        Known::Id(id) => (
            "SELECT key, event_seq, cancel_requested, last_row FROM runs WHERE id = ?1",
            id,
        ),
        Known::Key(k) => (
            "SELECT key, event_seq, cancel_requested, last_row FROM runs WHERE key = ?1",
            k,
        ),
    };
    tx.prepare(read)?
        .query_row([by], fence_row)
        .optional()
        .map_err(backend)
}

/// A fenced write's `UPDATE`, `update`, when the drive does not know the run's row as it
/// stands: the row is read first (the run's newest step row, which the write links its
/// step rows to, is the one before the `UPDATE`), then updated; `None` when the `UPDATE`
/// changed nothing (the fence refused). `n`: the events the `UPDATE` adds. Nothing else
/// writes in between: the write holds the database's write lock.
fn read_then_update(
    tx: &Conn<'_>,
    update: &'static str,
    params: &[&dyn rusqlite::ToSql],
    row: Known<'_>,
    n: i64,
) -> Result<Option<Fence>, StoreError> {
    let Some(before) = read_fence(tx, row)? else {
        return Ok(None);
    };
    let changed = tx.prepare(update)?.execute(params).map_err(backend)?;
    Ok((changed == 1).then_some(Fence {
        event_seq: before.event_seq + n,
        ..before
    }))
}

/// How a fenced write names the run's row: by id, or by the key the drive learnt.
#[derive(Clone, Copy)]
enum Known<'a> {
    Id(&'a str),
    Key(i64),
}

fn fence_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Fence> {
    Ok(Fence {
        key: r.get(0)?,
        event_seq: r.get(1)?,
        cancel: r.get(2)?,
        last_row: r.get(3)?,
    })
}

/// Refuses a stale write: leaves a `stale_write_refused` event on the run's timeline (in the
/// write's own transaction, which changed nothing else) and returns the `LeaseLost`.
fn refuse(tx: &Conn<'_>, run_id: &str, epoch: i64, owner: &str, write: &str) -> StoreError {
    let current = match holder(tx, run_id) {
        Ok(c) => c,
        Err(e) => return e,
    };
    if let Some(kind) = current
        .as_ref()
        .and_then(|cur| rules::stale_write(owner, epoch as u64, cur, write))
    {
        let noted = update_then_read(
            tx,
            "UPDATE runs SET event_seq = event_seq + 1 WHERE id = ?1",
            params![run_id],
            Known::Id(run_id),
        )
        .and_then(|row| {
            let f = row.ok_or_else(|| StoreError::NotFound(format!("no run {run_id}")))?;
            insert_events(
                tx,
                f.key,
                f.event_seq,
                &weir_core::store::Stamp::now(),
                vec![kind],
            )
        })
        .map(|_| ());
        if let Err(e) = noted {
            return e;
        }
    }
    rules::lease_lost(run_id, epoch as u64, current)
}

/// Who holds the run now, for the message of a refused write.
fn holder(
    conn: &Conn<'_>,
    run_id: &str,
) -> Result<Option<(u64, Option<String>, RunStatus)>, StoreError> {
    conn.query_row(
        "SELECT epoch, owner, status FROM runs WHERE id = ?1",
        params![run_id],
        |r| {
            Ok((
                r.get::<_, i64>(0)? as u64,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, String>(2)?,
            ))
        },
    )
    .optional()
    .map_err(backend)
    .map(|row| row.map(|(e, o, s)| (e, o, RunStatus::parse(&s).unwrap_or(RunStatus::Failed))))
}

/// Extends a lease (a write that only makes progress visible: a lost renewal only shortens
/// the lease).
/// Returns the cancel flag, or `LeaseLost`.
pub fn renew(
    conns: &mut Conns,
    run_id: &str,
    epoch: i64,
    owner: &str,
    expires: i64,
) -> Result<bool, StoreError> {
    conns.visible(|conn| {
        let row = update_then_read(
            &Conn::new(conn),
            "UPDATE runs SET lease_expires_at = ?1
             WHERE id = ?2 AND epoch = ?3 AND lease_expires_at IS NOT NULL",
            params![expires, run_id, epoch],
            Known::Id(run_id),
        )?;
        match row {
            Some(f) => Ok(f.cancel != 0),
            None => {
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(backend)?;
                let lost = refuse(&Conn::new(&tx), run_id, epoch, owner, "heartbeat");
                let _ = tx.commit();
                Err(lost)
            }
        }
    })
}

/// Claims up to `limit` runnable runs (queued, or with an expired lease), oldest first, in
/// one transaction on the synced connection: one hand-off to this thread for the whole
/// claim instead of a round trip per statement.
pub fn claim_next(
    conns: &mut Conns,
    claim: &weir_core::store::Claim,
    limit: u32,
) -> Result<Vec<(weir_core::store::Lease, weir_core::store::Written)>, StoreError> {
    use crate::rules::ClaimRow;
    let tx = conns
        .synced
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend)?;
    let held = Conn::new(&tx);
    let now = weir_core::store::now_ms();
    // Queued runs and expired leases come from their own partial indexes; the two lists
    // merge oldest first.
    let mut found: Vec<(String, i64, ClaimRow)> = Vec::new();
    for sql in [
        "SELECT id, status, epoch, owner, lease_expires_at, started_at, rowid FROM runs
         WHERE status = 'queued' ORDER BY started_at, rowid LIMIT ?2",
        "SELECT id, status, epoch, owner, lease_expires_at, started_at, rowid FROM runs
         WHERE status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= ?1)
         ORDER BY started_at, rowid LIMIT ?2",
    ] {
        let mut st = held.prepare(sql)?;
        let rows = st
            .query_map(params![now, i64::from(limit)], |r| {
                Ok((r.get::<_, String>(5)?, r.get::<_, i64>(6)?, claim_row(r)?))
            })
            .map_err(backend)?;
        for row in rows {
            found.push(row.map_err(backend)?);
        }
    }
    found.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let at = weir_core::store::Stamp::now();
    let mut out = Vec::new();
    for (_, _, row) in found.into_iter().take(limit as usize) {
        out.extend(claim_one(&held, &row, claim, &at)?);
    }
    drop(held);
    tx.commit().map_err(backend)?;
    Ok(out)
}

/// `id, status, epoch, owner, lease_expires_at` (the first five columns) as a claim row.
fn claim_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<rules::ClaimRow> {
    Ok(rules::ClaimRow {
        id: r.get(0)?,
        status: RunStatus::parse(&r.get::<_, String>(1)?).unwrap_or(RunStatus::Failed),
        epoch: r.get::<_, i64>(2)? as u64,
        owner: r.get(3)?,
        lease_expires_at: r.get(4)?,
    })
}

/// Claims one run checked claimable, inside the caller's transaction; `None` when another
/// claim moved its epoch first.
fn claim_one(
    tx: &Conn<'_>,
    row: &rules::ClaimRow,
    claim: &weir_core::store::Claim,
    at: &weir_core::store::Stamp,
) -> Result<Option<(weir_core::store::Lease, weir_core::store::Written)>, StoreError> {
    let epoch = row.epoch + 1;
    let kind = rules::claim_event(&row.view(), &claim.owner, epoch);
    let expires_at = weir_core::store::now_ms() + claim.ttl.as_millis() as i64;
    let claimed = update_then_read(
        tx,
        "UPDATE runs SET status = 'running', epoch = ?1, owner = ?2, lease_expires_at = ?3,
                         event_seq = event_seq + 1
         WHERE id = ?4 AND epoch = ?5",
        params![
            epoch as i64,
            claim.owner,
            expires_at,
            row.id,
            row.epoch as i64
        ],
        Known::Id(&row.id),
    )?;
    let Some(Fence {
        key,
        event_seq,
        cancel,
        ..
    }) = claimed
    else {
        return Ok(None);
    };
    let events = insert_events(tx, key, event_seq, at, vec![kind])?;
    Ok(Some((
        weir_core::store::Lease {
            run_id: row.id.clone(),
            owner: claim.owner.clone(),
            epoch,
            expires_at,
        },
        weir_core::store::Written {
            events,
            cancel_requested: cancel != 0,
        },
    )))
}

/// Appends `kinds` as one row of events numbered from `first` (reserved by the caller).
pub(super) fn insert_events(
    tx: &Conn<'_>,
    run_key: i64,
    first: i64,
    at: &weir_core::store::Stamp,
    kinds: Vec<weir_core::event::EventKind>,
) -> Result<Vec<weir_core::event::EventKind>, StoreError> {
    tx.prepare("INSERT INTO run_events (run_key, seq, bodies) VALUES (?1, ?2, ?3)")?
        .execute(params![run_key, first, crate::event_batch(at, &kinds)?])
        .map_err(backend)?;
    Ok(kinds)
}

/// Creates a run (`queued`, or claimed in the same transaction), or returns the run an
/// earlier request with the same idempotency key created; inside a group commit's
/// savepoint. A run claimed as it is created is inserted claimed (`running`, epoch 1, its
/// lease), with its `run_created` and `run_started` events: no `UPDATE` of the new row and
/// no read-back. Also returns the row as the write left it, for the drive's first fence
/// (`rows::Keys`).
#[expect(
    clippy::too_many_lines,
    reason = "a run's creation in one savepoint: the idempotency check, the row (claimed or queued), its source and input, its first events"
)]
pub fn create_run(
    tx: &Conn<'_>,
    run: &weir_core::store::NewRun,
    input: &str,
    snapshot: &str,
) -> Result<(weir_core::store::Created, Option<Seen>), StoreError> {
    if let Some(key) = &run.idempotency_key {
        let existing: Option<String> = tx
            .prepare("SELECT id FROM runs WHERE idempotency_key = ?1")?
            .query_row(params![key], |r| r.get(0))
            .optional()
            .map_err(backend)?;
        if let Some(id) = existing {
            let created = weir_core::store::Created {
                run_id: id,
                created: false,
                lease: None,
                events: Vec::new(),
            };
            return Ok((created, None));
        }
    }
    let lease = run.claim.as_ref().map(|c| weir_core::store::Lease {
        run_id: run.run_id.clone(),
        owner: c.owner.clone(),
        epoch: 1,
        expires_at: weir_core::store::now_ms() + c.ttl.as_millis() as i64,
    });
    let (trigger_kind, trigger_json) = crate::cols::trigger_cols(&run.trigger);
    let (status, event_seq) = match lease {
        Some(_) => ("running", 2),
        None => ("queued", 1),
    };
    tx.prepare(
        "INSERT INTO runs (id, workflow, dialect, status, source_path, snapshot, cost_usd,
                           started_at, idempotency_key, event_seq, workflow_id, workflow_version,
                           epoch, owner, lease_expires_at, trigger_kind, trigger_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
    )?
    .execute(params![
        run.run_id,
        run.workflow,
        run.dialect,
        status,
        run.source_path,
        snapshot,
        run.created_at,
        run.idempotency_key,
        event_seq,
        run.pin.as_ref().map(|p| p.workflow_id.as_str()),
        run.pin.as_ref().map(|p| i64::from(p.version)),
        lease.as_ref().map_or(0, |l| l.epoch as i64),
        lease.as_ref().map(|l| l.owner.as_str()),
        lease.as_ref().map(|l| l.expires_at),
        trigger_kind,
        trigger_json,
    ])
    .map_err(|e| match e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            StoreError::Conflict(format!("run {} already exists", run.run_id))
        }
        other => backend(other),
    })?;
    let key = tx.last_insert_rowid();
    // Written once, beside the row every step commit updates (migration 9); the source
    // once per distinct text, shared by the runs of a workflow (migration 19).
    tx.prepare("INSERT INTO sources (text) VALUES (?1) ON CONFLICT (text) DO NOTHING")?
        .execute(params![run.source_text])
        .map_err(backend)?;
    tx.prepare(
        "INSERT INTO run_sources (run_key, source_key, input)
         VALUES (?1, (SELECT key FROM sources WHERE text = ?2), ?3)",
    )?
    .execute(params![key, run.source_text, input])
    .map_err(backend)?;
    let at = weir_core::store::Stamp::now();
    let mut kinds = vec![weir_core::event::EventKind::RunCreated {
        workflow: run.workflow.clone(),
    }];
    if let Some(l) = &lease {
        let queued = rules::ClaimRow {
            id: run.run_id.clone(),
            status: RunStatus::Queued,
            epoch: 0,
            owner: None,
            lease_expires_at: None,
        };
        kinds.push(rules::claim_event(&queued.view(), &l.owner, l.epoch));
    }
    let events = insert_events(tx, key, 1, &at, kinds)?;
    let seen = lease.is_some().then_some(Seen {
        key,
        event_seq,
        cancel: false,
        last_row: None,
    });
    let created = weir_core::store::Created {
        run_id: run.run_id.clone(),
        created: true,
        lease,
        events,
    };
    Ok((created, seen))
}

/// Claims one named run if it is claimable (queued, or its lease expired), else the
/// refusal of `rules::claim_refusal`.
pub fn claim_run(
    conns: &mut Conns,
    run_id: &str,
    claim: &weir_core::store::Claim,
) -> Result<(weir_core::store::Lease, weir_core::store::Written), StoreError> {
    let tx = conns
        .synced
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend)?;
    let row = tx
        .prepare_cached("SELECT id, status, epoch, owner, lease_expires_at FROM runs WHERE id = ?1")
        .map_err(backend)?
        .query_row(params![run_id], claim_row)
        .optional()
        .map_err(backend)?
        .ok_or_else(|| StoreError::NotFound(format!("no run with id {run_id}")))?;
    if let Some(refusal) = rules::claim_refusal(&row.view(), weir_core::store::now_ms()) {
        return Err(refusal);
    }
    let at = weir_core::store::Stamp::now();
    let out = claim_one(&Conn::new(&tx), &row, claim, &at)?
        .ok_or_else(|| StoreError::Conflict(format!("run {run_id} was claimed by someone else")))?;
    tx.commit().map_err(backend)?;
    Ok(out)
}
