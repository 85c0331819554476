//! weir-store: run stores behind [`weir_core::RunStore`].
//!
//! SQLite is the embedded default (WAL, one file). Each finished step is committed in one
//! transaction together with the run's scheduler snapshot, so a crash loses at most the steps
//! in flight and a resumed run never repeats a completed step.

mod schema;
mod sqlite;

pub use sqlite::Sqlite;

use std::path::PathBuf;

/// Where the store lives, from `--db` / `WEIR_DB`: `sqlite://path`, `sqlite::memory:` or a
/// plain file path.
pub fn sqlite_path(url: &str) -> Result<Option<PathBuf>, String> {
    if url == "sqlite::memory:" || url == ":memory:" {
        return Ok(None);
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Err(
            "the Postgres store is not available in this version of weir; use a SQLite path".into(),
        );
    }
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    if path.is_empty() {
        return Err("empty database path".into());
    }
    Ok(Some(PathBuf::from(path)))
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
