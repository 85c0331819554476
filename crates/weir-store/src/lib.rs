//! weir-store: the stores behind [`weir_core::RunStore`] and [`weir_core::catalog::Catalog`].
//!
//! Three backends: [`Sqlite`], the embedded default (WAL, one file); [`Postgres`], for
//! several `weir serve` and `weir worker` processes on one database; [`Memory`], for tests
//! and benchmarks. All three apply the same lifecycle (the rules in `rules.rs`): runs are
//! claimed under a lease whose epoch fences every write of a drive; each finished step is
//! committed in one transaction with the run's scheduler snapshot and the events reporting
//! it, so a crash loses at most the steps in flight and a resumed run never repeats a
//! completed step. All three pass the conformance suite in `tests/conformance.rs`; why the
//! SQL backends are shaped as they are is in `docs/dev/storage.md`.

#![warn(missing_docs)]

mod attempts;
mod catalog;
mod cols;
mod fault;
mod memory;
mod postgres;
mod retry;
mod rules;
mod schema;
mod sqlite;
pub mod testdb;

pub use memory::Memory;
pub use postgres::{Faults, Postgres, is_postgres_url};
pub use sqlite::Sqlite;

use std::path::PathBuf;

use serde_json::Value;
use weir_core::event::{EventKind, RunEvent};
use weir_core::record::{RunError, RunRecord, RunStatus, Snapshot, StepRecord};
use weir_core::store::{Fault, StoreError};

pub(crate) use fault::backend;

/// A value's JSON as the stores write it. Written by sonic-rs, which scans a string for the
/// characters to escape sixteen bytes at a time where serde_json takes them one by one
/// (a durable step that keeps a 1 KB reply: 20% fewer instructions, BENCHMARKS.md); read back
/// by serde_json ([`parse`]).
pub(crate) fn json<T: serde::Serialize>(v: &T) -> Result<String, StoreError> {
    sonic_rs::to_string(v).map_err(backend)
}

pub(crate) fn parse<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, StoreError> {
    serde_json::from_str(s)
        .map_err(|e| StoreError::backend(Fault::Corrupt, format!("corrupt stored JSON: {e}")))
}

/// The stored body of an event: everything but its sequence number, which is the row's key.
#[derive(serde::Serialize)]
pub(crate) struct Body<'a> {
    pub(crate) at: &'a weir_core::store::Stamp,
    #[serde(flatten)]
    pub(crate) kind: &'a EventKind,
}

/// An event as readers see it, `{"seq", "at", "type", …}`, from its row.
pub(crate) fn event_value(seq: i64, body: &str) -> Result<Value, StoreError> {
    let Value::Object(rest) = parse::<Value>(body)? else {
        return Err(StoreError::backend(Fault::Corrupt, "corrupt stored event"));
    };
    Ok(numbered_value(seq, rest))
}

/// An event's body with its number first, as readers see it.
fn numbered_value(seq: i64, rest: serde_json::Map<String, Value>) -> Value {
    let mut m = serde_json::Map::with_capacity(rest.len() + 1);
    m.insert("seq".into(), Value::from(seq));
    m.extend(rest);
    Value::Object(m)
}

/// The events of a stored batch (SQLite's `run_events` row: the bodies of one write's
/// events as a JSON array, the first numbered `first`), those numbered above `after` only.
pub(crate) fn batch_values(first: i64, bodies: &str, after: i64) -> Result<Vec<Value>, StoreError> {
    let all: Vec<serde_json::Map<String, Value>> = parse(bodies)?;
    Ok(all
        .into_iter()
        .enumerate()
        .map(|(i, rest)| (first + i as i64, rest))
        .filter(|(seq, _)| *seq > after)
        .map(|(seq, rest)| numbered_value(seq, rest))
        .collect())
}

/// One write's events, all stamped `at`, as the JSON array of bodies SQLite stores them in
/// (`batch_values` reads it back).
pub(crate) fn event_batch(
    at: &weir_core::store::Stamp,
    kinds: &[EventKind],
) -> Result<String, StoreError> {
    json(
        &kinds
            .iter()
            .map(|kind| Body { at, kind })
            .collect::<Vec<_>>(),
    )
}

pub(crate) fn event_of(seq: i64, body: &str) -> Result<RunEvent, StoreError> {
    typed_event(event_value(seq, body)?)
}

/// An event as readers see it (`event_value`), typed.
pub(crate) fn typed_event(v: Value) -> Result<RunEvent, StoreError> {
    serde_json::from_value(v)
        .map_err(|e| StoreError::backend(Fault::Corrupt, format!("corrupt stored event: {e}")))
}

/// Everything a run record is built from, whichever store read it.
pub(crate) struct RecordParts<'a> {
    pub run_id: &'a str,
    pub workflow: &'a str,
    pub dialect: &'a str,
    pub status: RunStatus,
    pub trigger: weir_core::record::RunTrigger,
    pub input: Value,
    pub snapshot: &'a Snapshot,
    pub error: Option<RunError>,
    pub events: Vec<Value>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub steps: Vec<StepRecord>,
}

pub(crate) fn record(p: RecordParts<'_>) -> RunRecord {
    let duration_ms = p
        .finished_at
        .as_deref()
        .and_then(|f| duration_between(&p.started_at, f));
    RunRecord {
        schema_version: weir_core::record::SCHEMA_VERSION,
        run_id: p.run_id.to_string(),
        workflow: p.workflow.to_string(),
        dialect: p.dialect.to_string(),
        status: p.status,
        trigger: p.trigger,
        input: p.input,
        state: Value::Object(p.snapshot.state.as_ref().clone()),
        output: Value::clone(&p.snapshot.output),
        error: p.error,
        pending_gate: if p.status == RunStatus::Paused {
            p.snapshot.gates.first().cloned()
        } else {
            None
        },
        cost_usd: p.snapshot.cost_usd,
        events: p.events,
        started_at: p.started_at,
        finished_at: p.finished_at,
        duration_ms,
        steps: p.steps,
    }
}

fn duration_between(start: &str, end: &str) -> Option<u64> {
    let a = chrono::DateTime::parse_from_rfc3339(start).ok()?;
    let b = chrono::DateTime::parse_from_rfc3339(end).ok()?;
    u64::try_from((b - a).num_milliseconds()).ok()
}

/// A store with its catalog: what `weir serve`, `weir worker` and the CLI open.
pub trait Backend: weir_core::RunStore + weir_core::catalog::Catalog {}
impl<T: weir_core::RunStore + weir_core::catalog::Catalog> Backend for T {}

/// Where a SQLite store lives, from `--db` / `WEIR_DB`: `sqlite://path`, `sqlite::memory:`
/// or a plain file path (`postgres://…` URLs are opened with [`Postgres::open`]), with
/// `?sync=full` or not.
pub fn sqlite_path(url: &str) -> Result<Option<PathBuf>, String> {
    sqlite_url(url).map(|u| u.path)
}

/// A SQLite store's URL, read.
#[derive(Debug, Clone, PartialEq)]
pub struct SqliteUrl {
    /// `None`: a throwaway database (`sqlite::memory:`).
    pub path: Option<PathBuf>,
    /// `?sync=full`: every commit is on disk before it returns, power loss included (the
    /// default, `?sync=normal`, survives a crash of the process, not of the machine).
    pub full_sync: bool,
}

/// Reads a SQLite store's URL: [`sqlite_path`]'s forms, each optionally followed by
/// `?sync=full` or `?sync=normal`.
pub fn sqlite_url(url: &str) -> Result<SqliteUrl, String> {
    let (url, full_sync) = match url.rsplit_once("?sync=") {
        Some((rest, "full")) => (rest, true),
        Some((rest, "normal")) => (rest, false),
        Some((_, other)) => {
            return Err(format!(
                "unknown sync mode `{other}` (use `?sync=full` or `?sync=normal`)"
            ));
        }
        None => (url, false),
    };
    if url == "sqlite::memory:" || url == ":memory:" {
        return Ok(SqliteUrl {
            path: None,
            full_sync,
        });
    }
    if is_postgres_url(url) {
        return Err("a Postgres URL is not a SQLite path".into());
    }
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    if path.is_empty() {
        return Err("empty database path".into());
    }
    Ok(SqliteUrl {
        path: Some(PathBuf::from(path)),
        full_sync,
    })
}

/// The default database: `$WEIR_DB`, else `$XDG_DATA_HOME/weir/weir.db`, else
/// `~/.local/share/weir/weir.db`.
pub fn default_url() -> String {
    if let Ok(db) = std::env::var("WEIR_DB")
        && !db.is_empty()
    {
        return db;
    }
    let base = std::env::var("XDG_DATA_HOME")
        .ok()
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var("HOME")
                .ok()
                .map(|h| PathBuf::from(h).join(".local/share"))
        })
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("weir")
        .join("weir.db")
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod url_tests {
    use super::*;

    #[test]
    fn a_sqlite_url_may_ask_for_full_sync() {
        let url = |u: &str| sqlite_url(u).map(|u| (u.path, u.full_sync));
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(url("/data/w.db"), Ok((p("/data/w.db"), false)));
        assert_eq!(
            url("sqlite:///data/w.db?sync=full"),
            Ok((p("/data/w.db"), true))
        );
        assert_eq!(url("sqlite://w.db?sync=normal"), Ok((p("w.db"), false)));
        assert_eq!(url("sqlite::memory:?sync=full"), Ok((None, true)));
        assert_eq!(
            url("w.db?sync=fast"),
            Err("unknown sync mode `fast` (use `?sync=full` or `?sync=normal`)".into())
        );
        assert_eq!(sqlite_path("sqlite://w.db?sync=full"), Ok(p("w.db")));
    }
}

#[cfg(test)]
mod json_tests {
    use super::*;
    use serde_json::json;

    /// What the stores write (sonic-rs) reads back (serde_json) as it was, whatever the
    /// strings hold; a number JSON cannot hold is written as serde_json writes it, `null`.
    #[test]
    fn written_json_reads_back_equal() {
        let long = "a reply with \"quotes\", a \\ and\ttabs\nand ünïcödé 🦀 ".repeat(40);
        let v = json!({
            "plain": "fake llm reply",
            "escapes": "\u{0}\u{1f}\u{7f}\"\\/\r\n\t\u{8}\u{c}",
            "unicode": "日本語 \u{2028}\u{2029} é",
            "long": long,
            "numbers": [0, -1, 1.5, 0.1, 1e300, u64::MAX, i64::MIN, 0.000_001_234_567_89],
            "nested": {"z": [true, false, null], "a": {}},
        });
        let written = json(&v).unwrap();
        assert_eq!(parse::<Value>(&written).unwrap(), v);
        assert_eq!(
            json(&f64::NAN).unwrap(),
            serde_json::to_string(&f64::NAN).unwrap()
        );
        assert_eq!(json(&f64::INFINITY).unwrap(), "null");
        // Keys keep their order (serde_json's `preserve_order`).
        assert!(written.find("\"plain\"").unwrap() < written.find("\"nested\"").unwrap());
    }
}
