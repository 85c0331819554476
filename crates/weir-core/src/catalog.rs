//! What the server keeps beside runs (DESIGN §8, §10): saved workflows and every version of
//! them, API tokens (hashed) and custom tools. A run pins the exact version it was created
//! from by copying its text into the run row, so deleting or editing a workflow never
//! changes a run.
//!
//! Every implementation passes the catalog cases of the conformance suite in
//! `weir-store/tests/conformance.rs`.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::StoreError;

/// One saved version of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowVersion {
    pub workflow_id: String,
    pub version: u32,
    /// The workflow's own name (from the document).
    pub name: String,
    pub dialect: String,
    /// `json` or `yaml`: how the source was written.
    pub format: String,
    pub source: String,
    pub created_at: String,
}

/// A saved workflow: its latest version and when it was first saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowEntry {
    pub latest: WorkflowVersion,
    pub created_at: String,
}

/// A new version to save.
#[derive(Debug, Clone)]
pub struct NewVersion {
    pub workflow_id: String,
    pub name: String,
    pub dialect: String,
    pub format: String,
    pub source: String,
    pub created_at: String,
    /// Refuse with [`StoreError::Conflict`] when the workflow exists already (a POST).
    pub create_only: bool,
}

/// An API token as stored: never its value, only the SHA-256 of its secret part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenRow {
    pub id: String,
    pub name: String,
    pub scope: String,
    #[serde(skip)]
    pub hash: Vec<u8>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
}

/// What an operator set on one trigger of a saved workflow, kept apart from its versions so
/// a new version does not undo it: a pause, and the hash of a `token` webhook's URL token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriggerState {
    pub workflow_id: String,
    pub name: String,
    pub paused: bool,
    /// SHA-256 of the URL token of a webhook with the `token` scheme.
    #[serde(skip)]
    pub token_hash: Option<Vec<u8>>,
    pub updated_at: String,
}

/// A custom tool saved through the API: `definition` is the `[tools.NAME]` table of
/// `weir.toml` written as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRow {
    pub name: String,
    pub definition: Value,
    pub created_at: String,
}

#[async_trait]
pub trait Catalog: Send + Sync {
    /// Saves a new version (1 for a new workflow, latest + 1 otherwise) and returns it. A
    /// deleted workflow saved again starts a new history after its old versions.
    async fn put_workflow(&self, v: &NewVersion) -> Result<WorkflowVersion, StoreError>;
    /// The latest version of a workflow that is not deleted.
    async fn workflow(&self, id: &str) -> Result<WorkflowEntry, StoreError>;
    /// Every workflow that is not deleted, by id.
    async fn workflows(&self) -> Result<Vec<WorkflowEntry>, StoreError>;
    async fn version(&self, id: &str, version: u32) -> Result<WorkflowVersion, StoreError>;
    /// Every version of a workflow that is not deleted, oldest first.
    async fn versions(&self, id: &str) -> Result<Vec<WorkflowVersion>, StoreError>;
    /// Hides a workflow; its versions stay readable by the runs that pinned them.
    async fn delete_workflow(&self, id: &str) -> Result<(), StoreError>;
    /// Whether any workflow was ever saved (the examples are added to an empty store only).
    async fn any_workflow_ever(&self) -> Result<bool, StoreError>;

    async fn create_token(&self, token: &TokenRow) -> Result<(), StoreError>;
    /// Every token, revoked ones included, oldest first.
    async fn tokens(&self) -> Result<Vec<TokenRow>, StoreError>;
    /// The token with this id, revoked or not.
    async fn token(&self, id: &str) -> Result<Option<TokenRow>, StoreError>;
    async fn revoke_token(&self, id: &str, at: &str) -> Result<(), StoreError>;

    async fn put_tool(&self, tool: &ToolRow) -> Result<(), StoreError>;
    async fn tools(&self) -> Result<Vec<ToolRow>, StoreError>;
    async fn delete_tool(&self, name: &str) -> Result<(), StoreError>;

    /// Pauses or resumes a trigger (kept across the workflow's versions).
    async fn pause_trigger(
        &self,
        workflow_id: &str,
        name: &str,
        paused: bool,
        at: &str,
    ) -> Result<(), StoreError>;
    /// Sets the hash of a `token` webhook's URL token.
    async fn set_hook_token(
        &self,
        workflow_id: &str,
        name: &str,
        hash: &[u8],
        at: &str,
    ) -> Result<(), StoreError>;
    /// The trigger states of one workflow, or of all with `None`.
    async fn trigger_states(
        &self,
        workflow_id: Option<&str>,
    ) -> Result<Vec<TriggerState>, StoreError>;
}
