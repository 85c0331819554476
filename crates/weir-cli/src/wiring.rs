//! The one place concrete implementations are chosen.

use std::sync::Arc;

use anyhow::{Context, Result};
use weir_engine::Services;

pub async fn services(db: &str) -> Result<Services> {
    let path = weir_store::sqlite_path(db).map_err(|e| crate::Usage(format!("--db {db}: {e}")))?;
    let store = weir_store::Sqlite::open(path.as_deref())
        .await
        .with_context(|| format!("opening the run store at {db}"))?;
    let models = weir_providers::Router::from_env().map_err(anyhow::Error::msg)?;
    Ok(Services {
        models: Arc::new(models),
        tools: Arc::new(weir_tools::Registry::new()),
        store: Arc::new(store),
    })
}
