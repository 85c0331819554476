//! The steps a run has in flight, kept in its own row (`runs.running`, migration 15) rather
//! than as rows of `steps`: a step is then written to `steps` once, when it ends, and the
//! run row that holds its `running` entry is one every write of the drive rewrites anyway.
//! (A `running` row cost a B-tree insert at its start and a delete at its end, 17% of a
//! durable step's instructions: BENCHMARKS.md.)
//!
//! The column holds one JSON object per line, each beginning `{"seq":N,` so that the writer
//! can drop a finished step's line without parsing the others (`weir_running`, an SQL
//! function of the writer's connections); readers parse the lines into step records.

use rusqlite::Connection;
use rusqlite::functions::FunctionFlags;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weir_core::record::{StepRecord, StepStatus};
use weir_core::store::StoreError;

use crate::cols::Cols;
use crate::{backend, json};

/// One running step's line, as written and read.
#[derive(Serialize, Deserialize)]
struct Line<'a> {
    seq: i64,
    #[serde(borrow)]
    node_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    node_type: std::borrow::Cow<'a, str>,
    visit: i64,
    /// The step's input and output as JSON text, as the `steps` columns hold them.
    #[serde(borrow)]
    input: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    output: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    started_at: std::borrow::Cow<'a, str>,
}

/// Whether `s` is a step that has only started: nothing about it is known but its start,
/// so its line says all of it.
pub(super) fn is_start(s: &StepRecord) -> bool {
    s.status == StepStatus::Running
        && s.route.is_none()
        && s.error.is_none()
        && s.cost_usd == 0.0
        && s.tokens.input == 0
        && s.tokens.output == 0
        && s.finished_at.is_none()
        && s.duration_ms.is_none()
        && s.attempts.is_empty()
}

/// Appends the line of a step that has only started ([`is_start`]) to `out`.
pub(super) fn push_line(out: &mut String, s: &StepRecord) -> Result<(), StoreError> {
    let line = Line {
        seq: i64::from(s.seq),
        node_id: s.node_id.as_str().into(),
        node_type: s.node_type.as_ref().into(),
        visit: i64::from(s.visit),
        input: json(&s.input)?.into(),
        output: json(&s.output)?.into(),
        started_at: s.started_at.to_string().into(),
    };
    out.push_str(&json(&line)?);
    out.push('\n');
    Ok(())
}

/// The step number a line begins with.
fn seq_of(line: &str) -> Option<&str> {
    line.strip_prefix("{\"seq\":")?.split(',').next()
}

/// The lines of `old` whose step is neither in `done` (step numbers, comma-separated) nor
/// written again in `add`, then the lines of `add`; `None` when none is left.
fn merge(old: Option<&str>, done: &str, add: &str) -> Option<String> {
    let gone = |seq: &str| {
        done.split(',').any(|d| d == seq) || add.lines().any(|l| seq_of(l) == Some(seq))
    };
    let mut out = String::with_capacity(old.map_or(0, str::len) + add.len());
    for line in old.unwrap_or_default().lines() {
        if !seq_of(line).is_some_and(gone) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(add);
    (!out.is_empty()).then_some(out)
}

/// Registers `weir_running(running, done, add)` ([`merge`]) on a writer connection.
pub(super) fn register(conn: &Connection) -> Result<(), StoreError> {
    conn.create_scalar_function(
        "weir_running",
        3,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let old: Option<String> = ctx.get(0)?;
            let done: String = ctx.get(1)?;
            let add: String = ctx.get(2)?;
            Ok(merge(old.as_deref(), &done, &add))
        },
    )
    .map_err(backend)
}

/// The running steps a `running` column holds, by step number; `only` keeps one of them.
pub(super) fn steps(
    running: Option<&str>,
    only: Option<u32>,
) -> Result<Vec<StepRecord>, StoreError> {
    let mut lines = Vec::new();
    for line in running.unwrap_or_default().lines() {
        let map: Map<String, Value> = crate::parse(line)?;
        if only.is_none_or(|seq| map.get("seq").and_then(Value::as_u64) == Some(u64::from(seq))) {
            lines.push(Entry(map));
        }
    }
    let mut steps = crate::cols::steps(&lines, |_, _| Ok(Vec::new()))?;
    steps.sort_by_key(|s| s.seq);
    Ok(steps)
}

/// A parsed line as columns of a `steps` row: `running`, and every column it does not
/// hold at the table's default.
struct Entry(Map<String, Value>);

impl Cols for Entry {
    fn int(&self, col: &str) -> i64 {
        self.0.get(col).and_then(Value::as_i64).unwrap_or(0)
    }
    fn opt_int(&self, col: &str) -> Option<i64> {
        self.0.get(col).and_then(Value::as_i64)
    }
    fn text(&self, col: &str) -> String {
        match col {
            "status" => StepStatus::Running.as_str().into(),
            _ => self.opt_text(col).unwrap_or_default(),
        }
    }
    fn opt_text(&self, col: &str) -> Option<String> {
        self.0.get(col).and_then(Value::as_str).map(str::to_string)
    }
    fn real(&self, _: &str) -> f64 {
        0.0
    }
    fn flag(&self, _: &str) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::merge;

    #[test]
    fn a_finished_step_leaves_and_a_started_one_joins() {
        let old = "{\"seq\":1,\"a\":1}\n{\"seq\":12,\"a\":2}\n";
        assert_eq!(
            merge(Some(old), "1", "{\"seq\":13,\"a\":3}\n").as_deref(),
            Some("{\"seq\":12,\"a\":2}\n{\"seq\":13,\"a\":3}\n"),
            "step 1 gone, 12 (not 1) kept, 13 added"
        );
        assert_eq!(merge(Some(old), "1,12", ""), None, "none left");
        assert_eq!(
            merge(Some(old), "", "{\"seq\":12,\"a\":9}\n").as_deref(),
            Some("{\"seq\":1,\"a\":1}\n{\"seq\":12,\"a\":9}\n"),
            "a step written running again keeps one line, the new one"
        );
        assert_eq!(merge(None, "", ""), None);
    }
}
