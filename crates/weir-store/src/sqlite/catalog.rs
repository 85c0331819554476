//! The catalog on Sqlite: its statements and code are the SQL stores' shared ones
//! (`crate::catalog`).

use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use weir_core::catalog::{Catalog, NewVersion, TokenRow, ToolRow, WorkflowEntry, WorkflowVersion};
use weir_core::store::StoreError;

use super::Sqlite;
use crate::{backend, parse};

impl Sqlite {
    /// A transaction for a new workflow version.
    async fn catalog_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        self.write_tx().await
    }
}

crate::catalog::sql_catalog!(Sqlite, SqliteRow, "");
