//! The catalog on SQLite: the shared statements of `crate::catalog`, writes run by the
//! writer, reads on a reader connection.

use async_trait::async_trait;
use rusqlite::params;
use weir_core::catalog::{
    Catalog, NewVersion, TokenRow, ToolRow, TriggerState, WorkflowEntry, WorkflowVersion,
};
use weir_core::store::StoreError;

use super::Sqlite;
use super::reads::all;
use super::writer::backend;
use crate::catalog::{self as sql, no_token, no_tool, no_workflow};
use crate::cols::{self, Cols};

fn entry(r: &rusqlite::Row<'_>) -> Result<WorkflowEntry, StoreError> {
    Ok(WorkflowEntry {
        latest: cols::version(r),
        created_at: r.text("first_at"),
    })
}

impl Sqlite {
    /// Runs one catalog statement on the writer; how many rows it changed.
    async fn change(
        &self,
        stmt: &'static str,
        values: Vec<rusqlite::types::Value>,
    ) -> Result<usize, StoreError> {
        self.writer
            .grouped(true, move |c| {
                c.prepare(stmt)?
                    .execute(rusqlite::params_from_iter(&values))
                    .map_err(backend)
            })
            .await
    }
}

#[async_trait]
impl Catalog for Sqlite {
    async fn put_workflow(&self, v: &NewVersion) -> Result<WorkflowVersion, StoreError> {
        let new = v.clone();
        let version = self
            .writer
            .grouped(true, move |c| {
                let v = &new;
                let existing: Option<(i64, bool)> =
                    all(c, sql::HEAD, params![v.workflow_id], |r| {
                        Ok((r.int("latest"), r.opt_text("deleted_at").is_some()))
                    })?
                    .pop();
                let version = crate::rules::next_version(&v.workflow_id, existing, v.create_only)?;
                if existing.is_some() {
                    c.prepare(sql::MOVE_HEAD)?
                        .execute(params![version, v.workflow_id])
                } else {
                    c.prepare(sql::NEW_WORKFLOW)?.execute(params![
                        v.workflow_id,
                        version,
                        v.created_at
                    ])
                }
                .map_err(backend)?;
                c.prepare(sql::NEW_VERSION)?
                    .execute(params![
                        v.workflow_id,
                        version,
                        v.name,
                        v.dialect,
                        v.format,
                        v.source,
                        v.created_at
                    ])
                    .map_err(backend)?;
                Ok(version)
            })
            .await?;
        Ok(sql::written(v, version))
    }

    async fn workflow(&self, id: &str) -> Result<WorkflowEntry, StoreError> {
        let id = id.to_string();
        self.readers
            .read(move |c| {
                all(c, sql::LATEST, params![id], entry)?
                    .pop()
                    .ok_or_else(|| no_workflow(&id))
            })
            .await
    }

    async fn workflows(&self) -> Result<Vec<WorkflowEntry>, StoreError> {
        self.readers
            .read(|c| all(c, sql::LATEST, params![None::<String>], entry))
            .await
    }

    async fn version(&self, id: &str, version: u32) -> Result<WorkflowVersion, StoreError> {
        let id = id.to_string();
        self.readers
            .read(move |c| {
                all(c, sql::VERSION, params![id, i64::from(version)], |r| {
                    Ok(cols::version(r))
                })?
                .pop()
                .ok_or_else(|| sql::no_version(&id, version))
            })
            .await
    }

    async fn versions(&self, id: &str) -> Result<Vec<WorkflowVersion>, StoreError> {
        self.workflow(id).await?;
        let id = id.to_string();
        self.readers
            .read(move |c| all(c, sql::VERSIONS, params![id], |r| Ok(cols::version(r))))
            .await
    }

    async fn delete_workflow(&self, id: &str) -> Result<(), StoreError> {
        let at = weir_core::store::now_rfc3339();
        match self
            .change(sql::DELETE_WORKFLOW, vec![at.into(), id.to_string().into()])
            .await?
        {
            0 => Err(no_workflow(id)),
            _ => Ok(()),
        }
    }

    async fn any_workflow_ever(&self) -> Result<bool, StoreError> {
        self.readers
            .read(|c| Ok(!all(c, sql::ANY_WORKFLOW, [], |_| Ok(()))?.is_empty()))
            .await
    }

    async fn create_token(&self, t: &TokenRow) -> Result<(), StoreError> {
        self.change(
            sql::NEW_TOKEN,
            vec![
                t.id.clone().into(),
                t.name.clone().into(),
                t.scope.clone().into(),
                t.hash.clone().into(),
                t.created_at.clone().into(),
            ],
        )
        .await?;
        Ok(())
    }

    async fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        self.readers
            .read(|c| all(c, sql::TOKENS, [], |r| Ok(cols::token(r))))
            .await
    }

    async fn token(&self, id: &str) -> Result<Option<TokenRow>, StoreError> {
        let id = id.to_string();
        self.readers
            .read(move |c| Ok(all(c, sql::TOKEN, params![id], |r| Ok(cols::token(r)))?.pop()))
            .await
    }

    async fn revoke_token(&self, id: &str, at: &str) -> Result<(), StoreError> {
        match self
            .change(
                sql::REVOKE_TOKEN,
                vec![at.to_string().into(), id.to_string().into()],
            )
            .await?
        {
            0 => Err(no_token(id)),
            _ => Ok(()),
        }
    }

    async fn put_tool(&self, t: &ToolRow) -> Result<(), StoreError> {
        self.change(
            sql::PUT_TOOL,
            vec![
                t.name.clone().into(),
                t.definition.to_string().into(),
                t.created_at.clone().into(),
            ],
        )
        .await?;
        Ok(())
    }

    async fn tools(&self) -> Result<Vec<ToolRow>, StoreError> {
        self.readers
            .read(|c| {
                all(c, sql::TOOLS, [], |r| {
                    Ok(ToolRow {
                        name: r.text("name"),
                        definition: crate::parse(&r.text("definition"))?,
                        created_at: r.text("created_at"),
                    })
                })
            })
            .await
    }

    async fn delete_tool(&self, name: &str) -> Result<(), StoreError> {
        match self
            .change(sql::DELETE_TOOL, vec![name.to_string().into()])
            .await?
        {
            0 => Err(no_tool(name)),
            _ => Ok(()),
        }
    }

    async fn pause_trigger(
        &self,
        workflow_id: &str,
        name: &str,
        paused: bool,
        at: &str,
    ) -> Result<(), StoreError> {
        self.change(
            sql::PAUSE_TRIGGER,
            vec![
                workflow_id.to_string().into(),
                name.to_string().into(),
                i64::from(paused).into(),
                at.to_string().into(),
            ],
        )
        .await?;
        Ok(())
    }

    async fn set_hook_token(
        &self,
        workflow_id: &str,
        name: &str,
        hash: &[u8],
        at: &str,
    ) -> Result<(), StoreError> {
        self.change(
            sql::HOOK_TOKEN,
            vec![
                workflow_id.to_string().into(),
                name.to_string().into(),
                hash.to_vec().into(),
                at.to_string().into(),
            ],
        )
        .await?;
        Ok(())
    }

    async fn trigger_states(
        &self,
        workflow_id: Option<&str>,
    ) -> Result<Vec<TriggerState>, StoreError> {
        let id = workflow_id.map(str::to_string);
        self.readers
            .read(move |c| {
                all(c, sql::TRIGGER_STATES, params![id], |r| {
                    Ok(cols::trigger_state(r))
                })
            })
            .await
    }
}
