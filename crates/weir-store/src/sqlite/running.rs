//! The steps a run has in flight, kept in its own row (`runs.running`, migration 15) rather
//! than as rows of `steps`: a step is then written to `steps` once, when it ends, and the
//! run row that holds its `running` entry is one every write of the drive rewrites anyway.
//! (A `running` row cost a B-tree insert at its start and a delete at its end, 17% of a
//! durable step's instructions: BENCHMARKS.md.)
//!
//! The column holds one JSON object per line, each beginning `{"seq":N,` so that the writer
//! can drop a finished step's line without parsing the others (`weir_running`, an SQL
//! function of the writer's connections); readers parse the lines into step records.
//!
//! The text is padded with spaces after its last line to a multiple of [`PAD`] bytes. The
//! run row holds the snapshot too, and SQLite rewrites a row in place, only the pages that
//! changed, when its size stays the same; when it changes, every page of the row is
//! written again, and a long run's snapshot spans dozens of overflow pages (a 64 KB
//! snapshot: 67 log frames for a commit whose step names differ in length, against one).

use rusqlite::Connection;
use rusqlite::functions::FunctionFlags;
use serde::Serialize;
use serde_json::{Map, Value};
use weir_core::record::{StepRecord, StepStatus};
use weir_core::store::StoreError;

use crate::cols::Cols;
use crate::{backend, json};

/// One running step's line, as written (readers parse it as a map: [`steps`]).
#[derive(Serialize)]
struct Line<'a> {
    seq: i64,
    node_id: &'a str,
    node_type: &'a str,
    visit: i64,
    /// The step's input and output as JSON text, as the `steps` columns hold them.
    input: &'a str,
    output: &'a str,
    started_at: &'a weir_core::store::Stamp,
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
    let (input, output) = (json(&s.input)?, json(&s.output)?);
    let line = Line {
        seq: i64::from(s.seq),
        node_id: &s.node_id,
        node_type: s.node_type.as_ref(),
        visit: i64::from(s.visit),
        input: &input,
        output: &output,
        started_at: &s.started_at,
    };
    out.push_str(&json(&line)?);
    out.push('\n');
    Ok(())
}

/// The `running` text is padded to a multiple of this many bytes.
const PAD: usize = 256;

/// Spaces to pad with.
const SPACES: &str = match std::str::from_utf8(&[b' '; PAD]) {
    Ok(s) => s,
    Err(_) => "",
};

/// The lines of a `running` text, without the padding after the last of them (every line
/// ends with a newline, so a text that ends with a space is padded).
fn unpadded(text: &str) -> &str {
    if !text.ends_with(' ') {
        return text;
    }
    text.rfind('\n').map_or("", |end| &text[..=end])
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
    let mut out = String::with_capacity(old.map_or(0, str::len) + add.len() + PAD);
    for line in unpadded(old.unwrap_or_default()).lines() {
        if !seq_of(line).is_some_and(gone) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(add);
    if out.is_empty() {
        return None;
    }
    let padded = out.len().div_ceil(PAD) * PAD;
    out.push_str(&SPACES[..padded - out.len()]);
    Some(out)
}

/// How many of the steps in `done` (step numbers, comma-separated) have a line in `old`,
/// and how many do not.
fn ended(old: Option<&str>, done: &str) -> (i64, i64) {
    let (mut found, mut not) = (0, 0);
    for d in done.split(',').filter(|d| !d.is_empty()) {
        if unpadded(old.unwrap_or_default())
            .lines()
            .any(|l| seq_of(l) == Some(d))
        {
            found += 1;
        } else {
            not += 1;
        }
    }
    (found, not)
}

thread_local! {
    /// What the last `weir_ended` of this thread's statement did not find (see [`register`]).
    static NOT_FOUND: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// The steps of `done` that the last `weir_ended` run on this thread did not find among the
/// lines it was given; 0 from then on.
pub(super) fn take_not_found() -> i64 {
    NOT_FOUND.with(|n| n.replace(0))
}

/// Registers on a writer connection `weir_running(running, done, add)` ([`merge`]) and
/// `weir_ended(running, done)`: how many of the steps a write ends were in flight (a step
/// in flight has no row of `steps` yet, so its row is its first: the run's `step_count`
/// grows by it). It leaves the number of the others for [`take_not_found`]: a step written
/// whole, or written again, which the writer looks up in the run's chain of rows.
pub(super) fn register(conn: &Connection) -> Result<(), StoreError> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_scalar_function("weir_running", 3, flags, |ctx| {
        Ok(merge(
            text(ctx, 0)?,
            text(ctx, 1)?.unwrap_or_default(),
            text(ctx, 2)?.unwrap_or_default(),
        ))
    })
    .map_err(backend)?;
    conn.create_scalar_function("weir_ended", 2, flags, |ctx| {
        let (found, not) = ended(text(ctx, 0)?, text(ctx, 1)?.unwrap_or_default());
        NOT_FOUND.with(|n| n.set(n.get() + not));
        Ok(found)
    })
    .map_err(backend)
}

/// Argument `i` of an SQL function call as text, borrowed from SQLite (not copied, as
/// `Context::get::<String>` would: the `running` column holds the inputs of the steps in
/// flight); `None` for NULL.
fn text<'a>(
    ctx: &'a rusqlite::functions::Context<'_>,
    i: usize,
) -> rusqlite::Result<Option<&'a str>> {
    use rusqlite::types::{FromSqlError, ValueRef};
    match ctx.get_raw(i) {
        ValueRef::Null => Ok(None),
        ValueRef::Text(t) => std::str::from_utf8(t)
            .map(Some)
            .map_err(|e| rusqlite::Error::UserFunctionError(Box::new(e))),
        _ => Err(rusqlite::Error::FromSqlConversionFailure(
            i,
            rusqlite::types::Type::Text,
            Box::new(FromSqlError::InvalidType),
        )),
    }
}

/// The running steps a `running` column holds, by step number; `only` keeps one of them.
pub(super) fn steps(
    running: Option<&str>,
    only: Option<u32>,
) -> Result<Vec<StepRecord>, StoreError> {
    let mut lines = Vec::new();
    for line in unpadded(running.unwrap_or_default()).lines() {
        let map: Map<String, Value> = crate::parse(line)?;
        if only.is_none_or(|seq| map.get("seq").and_then(Value::as_u64) == Some(u64::from(seq))) {
            lines.push(Entry(map));
        }
    }
    let mut steps = crate::cols::steps(&lines, |_, _, _| Ok(Vec::new()))?;
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
    use super::{PAD, ended, merge};

    #[test]
    fn the_steps_a_write_ends_are_told_apart_by_whether_they_were_in_flight() {
        let old = "{\"seq\":1,\"a\":1}\n{\"seq\":12,\"a\":2}\n";
        assert_eq!(ended(Some(old), "12"), (1, 0));
        assert_eq!(ended(Some(old), "2,12,1"), (2, 1), "2 is not 12's prefix");
        assert_eq!(ended(None, "3"), (0, 1));
        assert_eq!(ended(Some(old), ""), (0, 0));
    }

    #[test]
    fn a_finished_step_leaves_and_a_started_one_joins() {
        let old = "{\"seq\":1,\"a\":1}\n{\"seq\":12,\"a\":2}\n";
        let merged = |old, done, add| merge(old, done, add).map(|m| lines(&m));
        assert_eq!(
            merged(Some(old), "1", "{\"seq\":13,\"a\":3}\n").as_deref(),
            Some("{\"seq\":12,\"a\":2}\n{\"seq\":13,\"a\":3}\n"),
            "step 1 gone, 12 (not 1) kept, 13 added"
        );
        assert_eq!(merged(Some(old), "1,12", ""), None, "none left");
        assert_eq!(
            merged(Some(old), "", "{\"seq\":12,\"a\":9}\n").as_deref(),
            Some("{\"seq\":1,\"a\":1}\n{\"seq\":12,\"a\":9}\n"),
            "a step written running again keeps one line, the new one"
        );
        assert_eq!(merged(None, "", ""), None);
    }

    /// The text without its padding, which this checks first.
    fn lines(text: &str) -> String {
        assert_eq!(text.len() % PAD, 0, "{text:?}");
        text.trim_end_matches(' ').to_string()
    }

    /// A line that changes length (a step named otherwise, a longer input) leaves the text's
    /// length, so the run row's, as it was: SQLite rewrites only the pages that changed.
    /// Readers skip the padding.
    #[test]
    fn the_text_keeps_its_length_while_its_lines_change_theirs() {
        let a = merge(None, "", "{\"seq\":1,\"node_id\":\"a\"}\n").unwrap();
        let b = merge(Some(&a), "1", "{\"seq\":2,\"node_id\":\"summarize\"}\n").unwrap();
        assert_eq!((a.len(), b.len()), (PAD, PAD));
        assert_eq!(lines(&b), "{\"seq\":2,\"node_id\":\"summarize\"}\n");
        assert_eq!(ended(Some(&b), "2"), (1, 0));
        let long = format!("{{\"seq\":3,\"input\":\"{}\"}}\n", "x".repeat(300));
        assert_eq!(merge(Some(&b), "", &long).unwrap().len(), 2 * PAD);
    }
}
