//! The catalog on Postgres: the shared statements of `crate::catalog`, run through sqlx.

use sqlx::Row;
use weir_core::catalog::{
    Catalog, NewVersion, TokenRow, ToolRow, TriggerState, WorkflowEntry, WorkflowVersion,
};
use weir_core::store::StoreError;

use super::Postgres;
use crate::catalog::{self as sql, no_token, no_tool, no_workflow};
use crate::{backend, cols, parse};

#[async_trait::async_trait]
impl Catalog for Postgres {
    async fn put_workflow(&self, v: &NewVersion) -> Result<WorkflowVersion, StoreError> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let existing = sqlx::query(sql::HEAD_FOR_UPDATE)
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
        let head = if existing.is_some() {
            sqlx::query(sql::MOVE_HEAD)
                .bind(version)
                .bind(v.workflow_id.as_str())
        } else {
            sqlx::query(sql::NEW_WORKFLOW)
                .bind(v.workflow_id.as_str())
                .bind(version)
                .bind(v.created_at.as_str())
        };
        head.execute(&mut *tx).await.map_err(backend)?;
        sqlx::query(sql::NEW_VERSION)
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
        Ok(sql::written(v, version))
    }

    async fn workflow(&self, id: &str) -> Result<WorkflowEntry, StoreError> {
        let row = sqlx::query(sql::LATEST)
            .bind(Some(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?
            .ok_or_else(|| no_workflow(id))?;
        Ok(WorkflowEntry {
            latest: cols::version(&row),
            created_at: row.get("first_at"),
        })
    }

    async fn workflows(&self) -> Result<Vec<WorkflowEntry>, StoreError> {
        Ok(sqlx::query(sql::LATEST)
            .bind(None::<&str>)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?
            .iter()
            .map(|r| WorkflowEntry {
                latest: cols::version(r),
                created_at: r.get("first_at"),
            })
            .collect())
    }

    async fn version(&self, id: &str, version: u32) -> Result<WorkflowVersion, StoreError> {
        sqlx::query(sql::VERSION)
            .bind(id)
            .bind(i64::from(version))
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?
            .map(|r| cols::version(&r))
            .ok_or_else(|| sql::no_version(id, version))
    }

    async fn versions(&self, id: &str) -> Result<Vec<WorkflowVersion>, StoreError> {
        self.workflow(id).await?;
        Ok(sqlx::query(sql::VERSIONS)
            .bind(id)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?
            .iter()
            .map(cols::version)
            .collect())
    }

    async fn delete_workflow(&self, id: &str) -> Result<(), StoreError> {
        let done = sqlx::query(sql::DELETE_WORKFLOW)
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
        Ok(sqlx::query(sql::ANY_WORKFLOW)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?
            .is_some())
    }

    async fn create_token(&self, t: &TokenRow) -> Result<(), StoreError> {
        sqlx::query(sql::NEW_TOKEN)
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
        Ok(sqlx::query(sql::TOKENS)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?
            .iter()
            .map(cols::token)
            .collect())
    }

    async fn token(&self, id: &str) -> Result<Option<TokenRow>, StoreError> {
        Ok(sqlx::query(sql::TOKEN)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?
            .map(|r| cols::token(&r)))
    }

    async fn revoke_token(&self, id: &str, at: &str) -> Result<(), StoreError> {
        let done = sqlx::query(sql::REVOKE_TOKEN)
            .bind(at)
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        if done.rows_affected() == 0 {
            return Err(no_token(id));
        }
        Ok(())
    }

    async fn put_tool(&self, t: &ToolRow) -> Result<(), StoreError> {
        sqlx::query(sql::PUT_TOOL)
            .bind(t.name.as_str())
            .bind(t.definition.to_string())
            .bind(t.created_at.as_str())
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn tools(&self) -> Result<Vec<ToolRow>, StoreError> {
        sqlx::query(sql::TOOLS)
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
        let done = sqlx::query(sql::DELETE_TOOL)
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        if done.rows_affected() == 0 {
            return Err(no_tool(name));
        }
        Ok(())
    }

    async fn pause_trigger(
        &self,
        workflow_id: &str,
        name: &str,
        paused: bool,
        at: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(sql::PAUSE_TRIGGER)
            .bind(workflow_id)
            .bind(name)
            .bind(paused)
            .bind(at)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn set_hook_token(
        &self,
        workflow_id: &str,
        name: &str,
        hash: &[u8],
        at: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(sql::HOOK_TOKEN)
            .bind(workflow_id)
            .bind(name)
            .bind(hash)
            .bind(at)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn trigger_states(
        &self,
        workflow_id: Option<&str>,
    ) -> Result<Vec<TriggerState>, StoreError> {
        Ok(sqlx::query(sql::TRIGGER_STATES)
            .bind(workflow_id)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?
            .iter()
            .map(cols::trigger_state)
            .collect())
    }
}
