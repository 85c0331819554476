//! The catalog on Postgres: its statements and code are the SQL stores' shared ones
//! (`crate::catalog`).

use sqlx::Row;
use sqlx::postgres::PgRow;
use weir_core::catalog::{Catalog, NewVersion, TokenRow, ToolRow, WorkflowEntry, WorkflowVersion};
use weir_core::store::StoreError;

use super::Postgres;
use crate::{backend, parse};

impl Postgres {
    /// A transaction for a new workflow version.
    async fn catalog_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        self.pool.begin().await.map_err(backend)
    }
}

crate::catalog::sql_catalog!(Postgres, PgRow, " FOR UPDATE");
