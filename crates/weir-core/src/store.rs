//! The run-store trait. Every step is committed atomically with the snapshot it produced, so
//! a crash loses at most the steps in flight.

use async_trait::async_trait;
use serde_json::Value;

use crate::record::{RunError, RunRecord, RunStatus, RunSummary, Snapshot, StepRecord};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("run {0} not found")]
    NotFound(String),
    #[error("store error: {0}")]
    Backend(String),
}

/// What a new run stores: enough to reload the exact workflow version it started with.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub run_id: String,
    pub workflow: String,
    pub dialect: String,
    pub source_path: String,
    pub source_text: String,
    pub input: Value,
    pub started_at: String,
    pub snapshot: Snapshot,
}

/// A stored run as the engine needs it to continue.
#[derive(Debug, Clone)]
pub struct StoredRun {
    pub run_id: String,
    pub status: RunStatus,
    pub source_path: String,
    pub source_text: String,
    pub snapshot: Snapshot,
}

/// A change of a run's status, written with the final snapshot.
#[derive(Debug, Clone)]
pub struct RunUpdate {
    pub status: RunStatus,
    pub error: Option<RunError>,
    pub finished_at: Option<String>,
    pub snapshot: Snapshot,
}

#[async_trait]
pub trait RunStore: Send + Sync {
    async fn create_run(&self, run: &NewRun) -> Result<(), StoreError>;
    /// Records a step as it starts (status `running`), so a crash leaves a trace.
    async fn start_step(&self, run_id: &str, step: &StepRecord) -> Result<(), StoreError>;
    /// Commits a finished step, the `running` rows of the steps started since the last
    /// commit, and the snapshot, in one transaction.
    async fn finish_step(
        &self,
        run_id: &str,
        step: &StepRecord,
        started: &[StepRecord],
        snapshot: &Snapshot,
    ) -> Result<(), StoreError>;
    async fn update_run(&self, run_id: &str, update: &RunUpdate) -> Result<(), StoreError>;
    async fn add_event(&self, run_id: &str, event: &Value) -> Result<(), StoreError>;
    async fn load_run(&self, run_id: &str) -> Result<StoredRun, StoreError>;
    async fn get_step(&self, run_id: &str, seq: u32) -> Result<StepRecord, StoreError>;
    async fn get_record(&self, run_id: &str) -> Result<RunRecord, StoreError>;
    async fn list_runs(&self, limit: u32) -> Result<Vec<RunSummary>, StoreError>;
}
