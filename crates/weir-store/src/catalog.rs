//! The catalog of both SQL stores (saved workflows and versions, tokens, custom tools):
//! each statement written once here, in the placeholders (`$1`, `$2`, …) SQLite and
//! Postgres both take, each row read once in `cols.rs`; a backend only runs them
//! (`sqlite/catalog.rs`, `postgres/catalog.rs`). The rules (which version comes next, what
//! a missing row is) are in `rules.rs` and below.

use weir_core::catalog::{NewVersion, WorkflowVersion};
use weir_core::store::StoreError;

/// The workflow a new version updates: its latest version and whether it was deleted.
macro_rules! head {
    () => {
        "SELECT latest, deleted_at FROM workflows WHERE id = $1"
    };
}

/// The workflow's head, for a transaction that already holds the write lock (SQLite's
/// `BEGIN IMMEDIATE`).
pub(crate) const HEAD: &str = head!();
/// The workflow's head, locked until the transaction ends (Postgres).
pub(crate) const HEAD_FOR_UPDATE: &str = concat!(head!(), " FOR UPDATE");
pub(crate) const MOVE_HEAD: &str =
    "UPDATE workflows SET latest = $1, deleted_at = NULL WHERE id = $2";
pub(crate) const NEW_WORKFLOW: &str =
    "INSERT INTO workflows (id, latest, created_at) VALUES ($1, $2, $3)";
pub(crate) const NEW_VERSION: &str =
    "INSERT INTO workflow_versions (workflow_id, version, name, dialect, format, source, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7)";
/// Each workflow's latest version with the time the workflow was first saved (`first_at`);
/// `$1`: one workflow's id, or NULL for all.
pub(crate) const LATEST: &str =
    "SELECT v.workflow_id, v.version, v.name, v.dialect, v.format, v.source,
        v.created_at, w.created_at AS first_at
     FROM workflows w JOIN workflow_versions v ON v.workflow_id = w.id AND v.version = w.latest
     WHERE w.deleted_at IS NULL AND (CAST($1 AS TEXT) IS NULL OR w.id = $1)
     ORDER BY w.id";
pub(crate) const VERSION: &str =
    "SELECT * FROM workflow_versions WHERE workflow_id = $1 AND version = $2";
pub(crate) const VERSIONS: &str =
    "SELECT * FROM workflow_versions WHERE workflow_id = $1 ORDER BY version";
pub(crate) const DELETE_WORKFLOW: &str =
    "UPDATE workflows SET deleted_at = $1 WHERE id = $2 AND deleted_at IS NULL";
pub(crate) const ANY_WORKFLOW: &str = "SELECT 1 FROM workflows LIMIT 1";
pub(crate) const NEW_TOKEN: &str =
    "INSERT INTO tokens (id, name, scope, hash, created_at) VALUES ($1, $2, $3, $4, $5)";
pub(crate) const TOKENS: &str = "SELECT * FROM tokens ORDER BY created_at, id";
pub(crate) const TOKEN: &str = "SELECT * FROM tokens WHERE id = $1";
pub(crate) const REVOKE_TOKEN: &str =
    "UPDATE tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2";
pub(crate) const PUT_TOOL: &str =
    "INSERT INTO tools (name, definition, created_at) VALUES ($1, $2, $3)
     ON CONFLICT (name) DO UPDATE SET definition = excluded.definition";
pub(crate) const TOOLS: &str = "SELECT name, definition, created_at FROM tools ORDER BY name";
pub(crate) const DELETE_TOOL: &str = "DELETE FROM tools WHERE name = $1";

pub(crate) const PAUSE_TRIGGER: &str =
    "INSERT INTO trigger_states (workflow_id, name, paused, updated_at) VALUES ($1, $2, $3, $4)
     ON CONFLICT (workflow_id, name)
     DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at";
pub(crate) const HOOK_TOKEN: &str =
    "INSERT INTO trigger_states (workflow_id, name, token_hash, updated_at)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (workflow_id, name)
     DO UPDATE SET token_hash = excluded.token_hash, updated_at = excluded.updated_at";
/// `$1`: one workflow's id, or NULL for all.
pub(crate) const TRIGGER_STATES: &str = "SELECT * FROM trigger_states
     WHERE CAST($1 AS TEXT) IS NULL OR workflow_id = $1 ORDER BY workflow_id, name";

pub(crate) fn no_workflow(id: &str) -> StoreError {
    StoreError::NotFound(format!("no workflow with id {id}"))
}

pub(crate) fn no_version(id: &str, version: u32) -> StoreError {
    StoreError::NotFound(format!("workflow {id} has no version {version}"))
}

pub(crate) fn no_token(id: &str) -> StoreError {
    StoreError::NotFound(format!("no token with id {id}"))
}

pub(crate) fn no_tool(name: &str) -> StoreError {
    StoreError::NotFound(format!("no custom tool named {name}"))
}

/// The version a put wrote, as it reads back.
pub(crate) fn written(v: &NewVersion, version: i64) -> WorkflowVersion {
    WorkflowVersion {
        workflow_id: v.workflow_id.clone(),
        version: version as u32,
        name: v.name.clone(),
        dialect: v.dialect.clone(),
        format: v.format.clone(),
        source: v.source.clone(),
        created_at: v.created_at.clone(),
    }
}
