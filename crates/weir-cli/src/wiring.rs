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
    /// `--model NAME`: every model call of the drive goes to this model.
    pub model: Option<String>,
    /// How `db` was chosen: `--db`, `WEIR_DB` or the default (errors say so).
    pub db_from: &'static str,
}

impl Env {
    /// The environment of a command: the store from `--db` (`db`), else `$WEIR_DB`, else the
    /// default path; the settings read from weir.toml; `--model`.
    pub fn new(db: Option<String>, settings: Settings, model: Option<String>) -> Self {
        let db_is_default = db.is_none() && std::env::var("WEIR_DB").map_or(true, |v| v.is_empty());
        let db_from = if db.is_some() {
            "--db"
        } else if db_is_default {
            "the default path"
        } else {
            "WEIR_DB"
        };
        Self {
            db: db.unwrap_or_else(weir_store::default_url),
            db_is_default,
            settings,
            model,
            db_from,
        }
    }

    /// The flags a printed command needs to act on the same run the same way (` --db PATH`
    /// for a database other than the default, ` --model NAME` when given), so a hint can be
    /// pasted as it is.
    pub fn hint(&self) -> String {
        let mut flags = self.db_hint();
        if let Some(m) = &self.model {
            flags.push_str(&format!(" --model {}", shell_word(m)));
        }
        flags
    }
}

impl Env {
    /// ` --db PATH` for a database other than the default: the flags of a printed command
    /// that decides or reads a run without driving it (`reject`, `cancel`, `runs show`).
    pub fn db_hint(&self) -> String {
        if self.db_is_default {
            String::new()
        } else {
            format!(" --db {}", shell_word(&self.db))
        }
    }
}

/// `s` quoted for a POSIX shell when it holds anything but safe characters.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@+%,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Lease timing from `[lease]` in weir.toml.
pub fn lease_timing(s: &Settings) -> weir_engine::LeaseTiming {
    weir_engine::LeaseTiming::of(&s.lease)
}

/// Reads `weir.toml`: `--config`, else `$WEIR_CONFIG`, else `./weir.toml` when it exists.
pub fn settings(flag: Option<&str>) -> Result<Settings> {
    let Some(path) = settings_path(flag) else {
        return Ok(Settings::default());
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading settings {path}"))?;
    Settings::parse(&text).map_err(|e| anyhow::anyhow!("{path}: {e}"))
}

/// Which settings file applies: `--config`, else `$WEIR_CONFIG`, else `./weir.toml` when it
/// exists; `None`: the built-in defaults.
pub fn settings_path(flag: Option<&str>) -> Option<String> {
    flag.map(str::to_string)
        .or_else(|| std::env::var("WEIR_CONFIG").ok().filter(|s| !s.is_empty()))
        .or_else(|| {
            std::path::Path::new("weir.toml")
                .exists()
                .then(|| "weir.toml".to_string())
        })
}

/// The model router for a drive of the workflow file `workflow`: the mock scripted by
/// `WEIR_MOCK`, else by the workflow's `NAME.mock.json` sidecar (said on stderr), and every
/// call sent to `--model` when given.
pub fn models(env: &Env, workflow: Option<&str>) -> Result<weir_providers::Router> {
    let (mock, sidecar) = match workflow {
        Some(path) => weir_providers::mock::Mock::for_workflow(std::path::Path::new(path)),
        None => weir_providers::mock::Mock::from_env().map(|m| (m, None)),
    }
    .map_err(crate::Usage)?;
    let mut router = weir_providers::Router::with_mock(env.settings.clone(), mock);
    if let Some(m) = &env.model {
        router = router.forcing(m).map_err(crate::Usage)?;
        if workflow.is_some() {
            eprintln!("every model call goes to `{m}` (--model)");
        }
    }
    if let Some(path) = sidecar {
        eprintln!("mock model scripted by {path} (WEIR_MOCK overrides it)");
    }
    Ok(router)
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
#[error("no weir database at {path} (from {from}; `weir run` creates one)")]
pub struct NoDatabase {
    pub path: String,
    pub from: &'static str,
}

/// The run a command names: its whole id, or a prefix of it that only one run has (`weir
/// approve fb700bbd`). An unknown id and an ambiguous prefix are usage errors (exit 2)
/// naming the database; an ambiguous one lists what it matches.
pub async fn resolve_run(env: &Env, store: &dyn weir_core::RunStore, id: &str) -> Result<String> {
    let id = id.trim();
    if id.is_empty() {
        return Err(crate::Usage("an empty run id".into()).into());
    }
    let found = store.run_ids_with_prefix(id, 6).await?;
    if found.iter().any(|f| f == id) {
        return Ok(id.to_string());
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(crate::Usage(format!(
            "no run {id} in {} (from {}); `weir runs list` shows the runs there",
            redact_url(&env.db),
            env.db_from
        ))
        .into()),
        many => Err(crate::Usage(format!(
            "run id {id} is ambiguous: it starts {}{}; give more of it",
            many.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
            if many.len() > 5 { ", …" } else { "" }
        ))
        .into()),
    }
}

/// Opens the store a command named (`--db`, `$WEIR_DB`, the default): Postgres for a
/// `postgres://` URL, else SQLite.
pub async fn store(env: &Env, open: Open) -> Result<Arc<dyn weir_store::Backend>> {
    let db = &env.db;
    if weir_store::is_postgres_url(db) {
        let store = weir_store::Postgres::open(db).await.map_err(|e| {
            crate::Usage(format!(
                "cannot open the run store at {} (from {}): {e} (is the Postgres server up, and does the database exist?)",
                redact_url(db),
                env.db_from
            ))
        })?;
        return Ok(Arc::new(store));
    }
    let url = weir_store::sqlite_url(db)
        .map_err(|e| crate::Usage(format!("{db} (from {}): {e}", env.db_from)))?;
    let path = url.path;
    if open == Open::MustExist
        && let Some(p) = &path
        && !p.exists()
    {
        return Err(NoDatabase {
            path: p.display().to_string(),
            from: env.db_from,
        }
        .into());
    }
    let store = weir_store::Sqlite::open_with(path.as_deref(), url.full_sync)
        .await
        .map_err(|e| {
            crate::Usage(format!(
                "cannot open the run store at {db} (from {}): {e} (it must be a weir SQLite database, or a path where one can be created)",
                env.db_from
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

/// Everything a drive of `workflow` (its file path, when known) runs with.
pub async fn services(env: &Env, open: Open, workflow: Option<&str>) -> Result<Services> {
    let store = store(env, open).await?;
    services_on(env, store, workflow)
}

/// [`services`] on a store already open (a command that read the run first).
pub fn services_on(
    env: &Env,
    store: Arc<dyn weir_store::Backend>,
    workflow: Option<&str>,
) -> Result<Services> {
    Ok(Services {
        models: Arc::new(models(env, workflow)?),
        tools: Arc::new(weir_tools::Registry::new(env.settings.clone())),
        scripts: Arc::new(weir_script::Bun::from_env().with_env(env.settings.scripts.env.clone())),
        store,
        secrets: Arc::new(env.settings.clone()),
    })
}

/// What `weir serve` and `weir worker` run workflows with: the providers of the environment
/// and weir.toml, the built-in and custom tools under `[network]`, and bun.
pub struct Serving;

impl weir_runtime::Implementations for Serving {
    fn build(&self, settings: &Settings) -> Result<weir_runtime::Parts, String> {
        Ok(weir_runtime::Parts {
            models: Arc::new(weir_providers::Router::new(settings.clone())?),
            tools: Arc::new(weir_tools::Registry::serving(settings.clone())?),
            scripts: Arc::new(weir_script::Bun::from_env().with_env(settings.scripts.env.clone())),
            check_models: Arc::new(weir_providers::Router::offline(settings.clone())),
            check_tools: Arc::new(weir_tools::Registry::new(settings.clone())),
        })
    }

    fn known_models(&self) -> Vec<String> {
        weir_providers::pricing::known_models()
            .map(str::to_string)
            .collect()
    }
}

/// The services of a long-lived process on the store a command named.
pub async fn serving(env: &Env) -> Result<weir_runtime::Services> {
    let store = store(env, Open::CreateIfMissing).await?;
    Ok(weir_runtime::Services {
        store: store.clone(),
        catalog: store,
        settings: env.settings.clone(),
        implementations: Arc::new(Serving),
    })
}
