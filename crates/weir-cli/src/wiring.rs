//! The one place concrete implementations are chosen.

use std::sync::Arc;

use anyhow::{Context, Result};

use weir_core::settings::Settings;
use weir_engine::Services;

/// What every command runs with: the store URL and the workspace settings.
pub struct Env {
    pub db: String,
    /// No `--db` and no `$WEIR_DB`: printed commands need no `--db`.
    pub db_is_default: bool,
    pub settings: Settings,
}

/// Lease timing from `[lease]` in weir.toml.
pub fn lease_timing(s: &Settings) -> weir_engine::LeaseTiming {
    weir_engine::LeaseTiming::of(&s.lease)
}

/// Reads `weir.toml`: `--config`, else `$WEIR_CONFIG`, else `./weir.toml` when it exists.
pub fn settings(flag: Option<&str>) -> Result<Settings> {
    let path = match flag
        .map(str::to_string)
        .or_else(|| std::env::var("WEIR_CONFIG").ok().filter(|s| !s.is_empty()))
    {
        Some(p) => p,
        None if std::path::Path::new("weir.toml").exists() => "weir.toml".to_string(),
        None => return Ok(Settings::default()),
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading settings {path}"))?;
    Settings::parse(&text).map_err(|e| anyhow::anyhow!("{path}: {e}"))
}

pub fn models(env: &Env) -> Result<weir_providers::Router> {
    weir_providers::Router::new(env.settings.clone()).map_err(anyhow::Error::msg)
}

/// Whether a command may create the database (only `weir run` does: reading, deciding,
/// resuming or cancelling a run in a database that does not exist is a mistyped `--db`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Open {
    CreateIfMissing,
    MustExist,
}

/// The database a command named does not exist (and was not created).
#[derive(Debug, thiserror::Error)]
#[error("no weir database at {0} (check --db or WEIR_DB; `weir run` creates one)")]
pub struct NoDatabase(pub String);

/// Opens the store a command named (`--db`, `$WEIR_DB`, the default): Postgres for a
/// `postgres://` URL, else SQLite.
pub async fn store(env: &Env, open: Open) -> Result<Arc<dyn weir_store::Backend>> {
    let db = &env.db;
    if weir_store::is_postgres_url(db) {
        let store = weir_store::Postgres::open(db).await.map_err(|e| {
            crate::Usage(format!(
                "cannot open the run store at {}: {e} (is the Postgres server up, and does the database exist?)",
                redact_url(db)
            ))
        })?;
        return Ok(Arc::new(store));
    }
    let path = weir_store::sqlite_path(db).map_err(|e| crate::Usage(format!("--db {db}: {e}")))?;
    if open == Open::MustExist
        && let Some(p) = &path
        && !p.exists()
    {
        return Err(NoDatabase(p.display().to_string()).into());
    }
    let store = weir_store::Sqlite::open(path.as_deref())
        .await
        .map_err(|e| {
            crate::Usage(format!(
                "cannot open the run store at {db}: {e} (it must be a weir SQLite database, or a path where one can be created)"
            ))
        })?;
    Ok(Arc::new(store))
}

/// A database URL without its password, for messages.
pub fn redact_url(db: &str) -> String {
    match url::Url::parse(db) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => db.to_string(),
    }
}

pub async fn services(env: &Env, open: Open) -> Result<Services> {
    let store = store(env, open).await?;
    Ok(Services {
        models: Arc::new(models(env)?),
        tools: Arc::new(weir_tools::Registry::new(env.settings.clone())),
        scripts: Arc::new(weir_script::Bun::from_env().with_env(env.settings.scripts.env.clone())),
        store,
        secrets: Arc::new(env.settings.clone()),
    })
}
