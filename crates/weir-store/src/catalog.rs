//! The catalog of both SQL stores (saved workflows and versions, tokens, custom tools):
//! each statement written once, in the placeholders (`$1`, `$2`, …) SQLite and Postgres
//! both take, and one body of Rust that [`sql_catalog!`] expands for each backend.

/// Implements `Catalog` for a SQL store: `$store` with its row type `$row`, an inherent
/// `catalog_tx()` that begins a write transaction, and `$lock` appended to the read of a
/// workflow that a new version updates (`" FOR UPDATE"` where a transaction does not
/// already hold the write lock).
macro_rules! sql_catalog {
    ($store:ty, $row:ty, $lock:literal) => {
        fn version_of(r: &$row) -> WorkflowVersion {
            WorkflowVersion {
                workflow_id: r.get("workflow_id"),
                version: r.get::<i64, _>("version") as u32,
                name: r.get("name"),
                dialect: r.get("dialect"),
                format: r.get("format"),
                source: r.get("source"),
                created_at: r.get("created_at"),
            }
        }

        fn token_of(r: &$row) -> TokenRow {
            TokenRow {
                id: r.get("id"),
                name: r.get("name"),
                scope: r.get("scope"),
                hash: r.get("hash"),
                created_at: r.get("created_at"),
                revoked_at: r.get("revoked_at"),
            }
        }

        fn no_workflow(id: &str) -> StoreError {
            StoreError::NotFound(format!("no workflow with id {id}"))
        }

        const LATEST: &str = "SELECT v.workflow_id, v.version, v.name, v.dialect, v.format, v.source,
                v.created_at, w.created_at AS first_at
             FROM workflows w JOIN workflow_versions v ON v.workflow_id = w.id AND v.version = w.latest
             WHERE w.deleted_at IS NULL AND (CAST($1 AS TEXT) IS NULL OR w.id = $1)
             ORDER BY w.id";

        #[async_trait::async_trait]
        impl Catalog for $store {
            async fn put_workflow(&self, v: &NewVersion) -> Result<WorkflowVersion, StoreError> {
                let mut tx = self.catalog_tx().await?;
                let existing = sqlx::query(concat!(
                    "SELECT latest, deleted_at FROM workflows WHERE id = $1",
                    $lock
                ))
                .bind(v.workflow_id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?;
                let version = crate::rules::next_version(
                    &v.workflow_id,
                    existing.as_ref().map(|r| {
                        (
                            r.get::<i64, _>("latest"),
                            r.get::<Option<String>, _>("deleted_at").is_some(),
                        )
                    }),
                    v.create_only,
                )?;
                if existing.is_some() {
                    sqlx::query("UPDATE workflows SET latest = $1, deleted_at = NULL WHERE id = $2")
                        .bind(version)
                        .bind(v.workflow_id.as_str())
                        .execute(&mut *tx)
                        .await
                        .map_err(backend)?;
                } else {
                    sqlx::query("INSERT INTO workflows (id, latest, created_at) VALUES ($1, $2, $3)")
                        .bind(v.workflow_id.as_str())
                        .bind(version)
                        .bind(v.created_at.as_str())
                        .execute(&mut *tx)
                        .await
                        .map_err(backend)?;
                }
                sqlx::query(
                    "INSERT INTO workflow_versions (workflow_id, version, name, dialect, format, source,
                                                    created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(v.workflow_id.as_str())
                .bind(version)
                .bind(v.name.as_str())
                .bind(v.dialect.as_str())
                .bind(v.format.as_str())
                .bind(v.source.as_str())
                .bind(v.created_at.as_str())
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
                tx.commit().await.map_err(backend)?;
                Ok(WorkflowVersion {
                    workflow_id: v.workflow_id.clone(),
                    version: version as u32,
                    name: v.name.clone(),
                    dialect: v.dialect.clone(),
                    format: v.format.clone(),
                    source: v.source.clone(),
                    created_at: v.created_at.clone(),
                })
            }

            async fn workflow(&self, id: &str) -> Result<WorkflowEntry, StoreError> {
                let row = sqlx::query(LATEST)
                    .bind(Some(id))
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(backend)?
                    .ok_or_else(|| no_workflow(id))?;
                Ok(WorkflowEntry {
                    latest: version_of(&row),
                    created_at: row.get("first_at"),
                })
            }

            async fn workflows(&self) -> Result<Vec<WorkflowEntry>, StoreError> {
                Ok(sqlx::query(LATEST)
                    .bind(None::<&str>)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend)?
                    .iter()
                    .map(|r| WorkflowEntry {
                        latest: version_of(r),
                        created_at: r.get("first_at"),
                    })
                    .collect())
            }

            async fn version(&self, id: &str, version: u32) -> Result<WorkflowVersion, StoreError> {
                sqlx::query("SELECT * FROM workflow_versions WHERE workflow_id = $1 AND version = $2")
                    .bind(id)
                    .bind(i64::from(version))
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(backend)?
                    .map(|r| version_of(&r))
                    .ok_or_else(|| StoreError::NotFound(format!("workflow {id} has no version {version}")))
            }

            async fn versions(&self, id: &str) -> Result<Vec<WorkflowVersion>, StoreError> {
                self.workflow(id).await?;
                Ok(
                    sqlx::query("SELECT * FROM workflow_versions WHERE workflow_id = $1 ORDER BY version")
                        .bind(id)
                        .fetch_all(&self.pool)
                        .await
                        .map_err(backend)?
                        .iter()
                        .map(version_of)
                        .collect(),
                )
            }

            async fn delete_workflow(&self, id: &str) -> Result<(), StoreError> {
                let done = sqlx::query(
                    "UPDATE workflows SET deleted_at = $1 WHERE id = $2 AND deleted_at IS NULL",
                )
                .bind(weir_core::store::now_rfc3339())
                .bind(id)
                .execute(&self.pool)
                .await
                .map_err(backend)?;
                if done.rows_affected() == 0 {
                    return Err(no_workflow(id));
                }
                Ok(())
            }

            async fn any_workflow_ever(&self) -> Result<bool, StoreError> {
                Ok(sqlx::query("SELECT 1 FROM workflows LIMIT 1")
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(backend)?
                    .is_some())
            }

            async fn create_token(&self, t: &TokenRow) -> Result<(), StoreError> {
                sqlx::query(
                    "INSERT INTO tokens (id, name, scope, hash, created_at) VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(t.id.as_str())
                .bind(t.name.as_str())
                .bind(t.scope.as_str())
                .bind(t.hash.as_slice())
                .bind(t.created_at.as_str())
                .execute(&self.pool)
                .await
                .map_err(backend)?;
                Ok(())
            }

            async fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
                Ok(sqlx::query("SELECT * FROM tokens ORDER BY created_at, id")
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend)?
                    .iter()
                    .map(token_of)
                    .collect())
            }

            async fn token(&self, id: &str) -> Result<Option<TokenRow>, StoreError> {
                Ok(sqlx::query("SELECT * FROM tokens WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(backend)?
                    .map(|r| token_of(&r)))
            }

            async fn revoke_token(&self, id: &str, at: &str) -> Result<(), StoreError> {
                let done =
                    sqlx::query("UPDATE tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2")
                        .bind(at)
                        .bind(id)
                        .execute(&self.pool)
                        .await
                        .map_err(backend)?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("no token with id {id}")));
                }
                Ok(())
            }

            async fn put_tool(&self, t: &ToolRow) -> Result<(), StoreError> {
                sqlx::query(
                    "INSERT INTO tools (name, definition, created_at) VALUES ($1, $2, $3)
                     ON CONFLICT (name) DO UPDATE SET definition = excluded.definition",
                )
                .bind(t.name.as_str())
                .bind(t.definition.to_string())
                .bind(t.created_at.as_str())
                .execute(&self.pool)
                .await
                .map_err(backend)?;
                Ok(())
            }

            async fn tools(&self) -> Result<Vec<ToolRow>, StoreError> {
                sqlx::query("SELECT name, definition, created_at FROM tools ORDER BY name")
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend)?
                    .iter()
                    .map(|r| {
                        Ok(ToolRow {
                            name: r.get("name"),
                            definition: parse(r.get::<&str, _>("definition"))?,
                            created_at: r.get("created_at"),
                        })
                    })
                    .collect()
            }

            async fn delete_tool(&self, name: &str) -> Result<(), StoreError> {
                let done = sqlx::query("DELETE FROM tools WHERE name = $1")
                    .bind(name)
                    .execute(&self.pool)
                    .await
                    .map_err(backend)?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("no custom tool named {name}")));
                }
                Ok(())
            }
        }
    };
}

pub(crate) use sql_catalog;
