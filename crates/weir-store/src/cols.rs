//! Reading runs, steps, summaries and catalog entries from rows the same way in both SQL
//! stores: each store says how its rows give a column as an integer, text, real, flag or
//! bytes ([`Cols`]); the mapping to records is written once here.

use sqlx::Row;
use sqlx::postgres::PgRow;
use weir_core::catalog::{TokenRow, WorkflowVersion};
use weir_core::patch::SnapshotPatch;
use weir_core::record::{
    Attempt, RunRecord, RunStatus, RunSummary, Snapshot, StepRecord, StepStatus, Tokens,
};
use weir_core::store::{Pin, StoreError, StoredRun};

use crate::parse;

/// A row's columns by name (every integer column is 64-bit in both schemas).
pub(crate) trait Cols {
    fn int(&self, col: &str) -> i64;
    fn opt_int(&self, col: &str) -> Option<i64>;
    fn text(&self, col: &str) -> String;
    fn opt_text(&self, col: &str) -> Option<String>;
    fn real(&self, col: &str) -> f64;
    fn flag(&self, col: &str) -> bool;
    fn bytes(&self, col: &str) -> Vec<u8> {
        let _ = col;
        Vec::new()
    }
}

/// Postgres rows (sqlx).
impl Cols for PgRow {
    fn int(&self, col: &str) -> i64 {
        self.get(col)
    }
    fn opt_int(&self, col: &str) -> Option<i64> {
        self.get(col)
    }
    fn text(&self, col: &str) -> String {
        self.get(col)
    }
    fn opt_text(&self, col: &str) -> Option<String> {
        self.get(col)
    }
    fn real(&self, col: &str) -> f64 {
        self.get(col)
    }
    fn flag(&self, col: &str) -> bool {
        self.get(col)
    }
    fn bytes(&self, col: &str) -> Vec<u8> {
        self.get::<Option<Vec<u8>>, _>(col).unwrap_or_default()
    }
}

/// SQLite rows (rusqlite): a boolean column holds 0 or 1. A column that is missing or of
/// another type reads as empty, as the schema never makes one.
impl Cols for rusqlite::Row<'_> {
    fn int(&self, col: &str) -> i64 {
        self.get(col).unwrap_or_default()
    }
    fn opt_int(&self, col: &str) -> Option<i64> {
        self.get(col).unwrap_or_default()
    }
    fn text(&self, col: &str) -> String {
        self.get(col).unwrap_or_default()
    }
    fn opt_text(&self, col: &str) -> Option<String> {
        self.get(col).unwrap_or_default()
    }
    fn real(&self, col: &str) -> f64 {
        self.get(col).unwrap_or_default()
    }
    fn flag(&self, col: &str) -> bool {
        self.get::<_, i64>(col).unwrap_or_default() != 0
    }
    fn bytes(&self, col: &str) -> Vec<u8> {
        self.get(col).unwrap_or_default()
    }
}

pub(crate) fn status(r: &impl Cols, col: &str) -> RunStatus {
    RunStatus::parse(&r.text(col)).unwrap_or(RunStatus::Failed)
}

/// The saved workflow version a run pins (`workflow_id`, `workflow_version`).
pub(crate) fn pin(r: &impl Cols) -> Option<Pin> {
    Some(Pin {
        workflow_id: r.opt_text("workflow_id")?,
        version: r.opt_int("workflow_version")? as u32,
    })
}

/// What started a run, from `trigger_json` (or, for runs stored before it was kept, inferred
/// from `workflow_id`).
pub(crate) fn trigger(r: &impl Cols) -> weir_core::record::RunTrigger {
    r.opt_text("trigger_json")
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| {
            weir_core::record::RunTrigger::inferred(r.opt_text("workflow_id").is_some())
        })
}

/// `trigger_kind` and `trigger_json` of a new run's row.
pub(crate) fn trigger_cols(t: &weir_core::record::RunTrigger) -> (&'static str, String) {
    (
        t.kind.as_str(),
        serde_json::to_string(t).unwrap_or_default(),
    )
}

/// The kind and name of a run list's trigger filter.
pub(crate) fn trigger_filter(f: &weir_core::store::RunFilter) -> (Option<&str>, Option<&str>) {
    match &f.trigger {
        Some((kind, name)) => (Some(kind.as_str()), name.as_deref()),
        None => (None, None),
    }
}

/// Step records from the rows of `steps`, by `seq`; `attempts` gives a row's attempts (from
/// its own column in SQLite, from the `attempts` table in Postgres), given the row and `seq`.
pub(crate) fn steps<R: Cols>(
    rows: &[R],
    attempts: impl Fn(&R, i64, Option<&str>) -> Result<Vec<Attempt>, StoreError>,
) -> Result<Vec<StepRecord>, StoreError> {
    rows.iter().map(|r| step(r, &attempts)).collect()
}

/// One step record from a row of `steps` (see [`steps`]).
pub(crate) fn step<R: Cols>(
    r: &R,
    attempts: impl Fn(&R, i64, Option<&str>) -> Result<Vec<Attempt>, StoreError>,
) -> Result<StepRecord, StoreError> {
    let seq = r.int("seq");
    let output: weir_core::record::Output = parse::<serde_json::Value>(&r.text("output"))?.into();
    let attempts = attempts(r, seq, crate::attempts::output_text(&output))?;
    Ok(StepRecord {
        seq: seq as u32,
        node_id: r.text("node_id").into(),
        node_type: r.text("node_type").into(),
        visit: r.int("visit") as u32,
        status: StepStatus::parse(&r.text("status")).unwrap_or(StepStatus::Failed),
        route: r.opt_text("route"),
        input: parse(&r.text("input"))?,
        output: std::sync::Arc::new(output),
        error: r.opt_text("error"),
        cost_usd: r.real("cost_usd"),
        tokens: Tokens {
            input: r.int("tokens_in") as u64,
            output: r.int("tokens_out") as u64,
        },
        attempts,
        started_at: r.text("started_at").into(),
        finished_at: r.opt_text("finished_at").map(Into::into),
        duration_ms: r.opt_int("duration_ms").map(|d| d as u64),
    })
}

/// A run's snapshot as of its last commit, from `snapshot` (the whole snapshot written
/// last) and `patches` (a JSON array of the patches written after it, in commit order).
pub(crate) fn snapshot(r: &impl Cols) -> Result<Snapshot, StoreError> {
    let mut s: Snapshot = parse(&r.text("snapshot"))?;
    let patches: Vec<SnapshotPatch> = parse(&r.text("patches"))?;
    for p in patches {
        p.apply(&mut s);
    }
    Ok(s)
}

/// A run as a driver needs it, from `workflow, status, source_path, source_text, snapshot,
/// patches, epoch, owner, lease_expires_at, cancel_requested, workflow_id, workflow_version, input`.
pub(crate) fn stored_run(run_id: &str, r: &impl Cols) -> Result<StoredRun, StoreError> {
    Ok(StoredRun {
        run_id: run_id.to_string(),
        workflow: r.text("workflow"),
        status: status(r, "status"),
        source_path: r.text("source_path"),
        source_text: r.text("source_text"),
        snapshot: snapshot(r)?,
        epoch: r.int("epoch") as u64,
        owner: r.opt_text("owner"),
        lease_expires_at: r.opt_int("lease_expires_at"),
        cancel_requested: r.flag("cancel_requested"),
        pin: pin(r),
        input: parse(&r.text("input"))?,
    })
}

/// A run's record from `workflow, dialect, status, input, snapshot, patches, error, started_at,
/// finished_at, workflow_id, trigger_json`, its events (as readers see them) and its steps.
pub(crate) fn record(
    run_id: &str,
    r: &impl Cols,
    events: Vec<serde_json::Value>,
    steps: Vec<StepRecord>,
) -> Result<RunRecord, StoreError> {
    let snapshot = snapshot(r)?;
    Ok(crate::record(crate::RecordParts {
        run_id,
        workflow: &r.text("workflow"),
        dialect: &r.text("dialect"),
        status: status(r, "status"),
        trigger: trigger(r),
        input: parse(&r.text("input"))?,
        snapshot: &snapshot,
        error: r.opt_text("error").as_deref().map(parse).transpose()?,
        events,
        started_at: r.text("started_at"),
        finished_at: r.opt_text("finished_at"),
        steps,
    }))
}

/// The `LIKE` pattern of a run list's text filter (`\\` escapes), and the cursor's two
/// halves.
pub(crate) fn list_params(
    f: &weir_core::store::RunFilter,
) -> (Option<String>, Option<&str>, Option<&str>) {
    let like = f.text.as_ref().map(|q| {
        let escaped = q
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        format!("%{escaped}%")
    });
    match &f.after {
        Some(c) => (like, Some(c.started_at.as_str()), Some(c.run_id.as_str())),
        None => (like, None, None),
    }
}

/// A line of the run list, from `id, workflow, status, started_at, finished_at, cost_usd,
/// workflow_id, workflow_version, steps, error_code, trigger_json`.
pub(crate) fn summary(r: &impl Cols) -> RunSummary {
    RunSummary {
        steps: r.int("steps").max(0) as u32,
        error_code: r.opt_text("error_code"),
        run_id: r.text("id"),
        workflow: r.text("workflow"),
        status: status(r, "status"),
        started_at: r.text("started_at"),
        cost_usd: r.real("cost_usd"),
        finished_at: r.opt_text("finished_at"),
        pin: pin(r),
        trigger: trigger(r),
    }
}

/// A saved workflow version, from a row of `workflow_versions`.
pub(crate) fn version(r: &impl Cols) -> WorkflowVersion {
    WorkflowVersion {
        workflow_id: r.text("workflow_id"),
        version: r.int("version") as u32,
        name: r.text("name"),
        dialect: r.text("dialect"),
        format: r.text("format"),
        source: r.text("source"),
        created_at: r.text("created_at"),
    }
}

/// A trigger's state, from a row of `trigger_states`.
pub(crate) fn trigger_state(r: &impl Cols) -> weir_core::catalog::TriggerState {
    weir_core::catalog::TriggerState {
        workflow_id: r.text("workflow_id"),
        name: r.text("name"),
        paused: r.flag("paused"),
        token_hash: Some(r.bytes("token_hash")).filter(|h| !h.is_empty()),
        updated_at: r.text("updated_at"),
    }
}

/// An API token, from a row of `tokens`.
pub(crate) fn token(r: &impl Cols) -> TokenRow {
    TokenRow {
        id: r.text("id"),
        name: r.text("name"),
        scope: r.text("scope"),
        hash: r.bytes("hash"),
        created_at: r.text("created_at"),
        revoked_at: r.opt_text("revoked_at"),
    }
}
