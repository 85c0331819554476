//! The benchmark's stand-ins, as the peer benchmark has them: a model that answers a fixed
//! reply after an optional delay, and (for the workloads without persistence, like the peer's
//! runs without a checkpointer) an in-memory run store.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use weir_core::model::Usage;
use weir_core::record::{RunRecord, RunStatus, RunSummary, Snapshot, StepRecord};
use weir_core::script::{ScriptCall, ScriptError, ScriptResult, ScriptRunner};
use weir_core::store::{NewRun, RunStore, RunUpdate, StoreError, StoredRun};
use weir_core::{
    ModelClient, ModelError, ModelRequest, ModelResponse, ToolCall, ToolError, ToolRunner,
};

pub struct FakeModel {
    pub latency: Duration,
}

#[async_trait]
impl ModelClient for FakeModel {
    async fn complete(&self, req: ModelRequest) -> Result<ModelResponse, ModelError> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        Ok(ModelResponse {
            text: "fake llm reply".into(),
            model: req.model,
            provider: "fake".into(),
            usage: Usage::default(),
            cost_usd: Some(0.0),
            fallback_used: false,
            calls: Vec::new(),
            events: Vec::new(),
        })
    }

    fn check_model(&self, _: &str) -> Result<(), String> {
        Ok(())
    }
}

pub struct NoTools;

#[async_trait]
impl ToolRunner for NoTools {
    fn has_tool(&self, _: &str) -> bool {
        false
    }
    fn tool_names(&self) -> Vec<String> {
        Vec::new()
    }
    async fn call(&self, _: ToolCall) -> Result<Value, ToolError> {
        Err(ToolError::fatal("no tools in the benchmark"))
    }
}

pub struct NoScripts;

#[async_trait]
impl ScriptRunner for NoScripts {
    async fn run(&self, _: ScriptCall) -> Result<ScriptResult, ScriptError> {
        Err(ScriptError::Runtime("no scripts in the benchmark".into()))
    }
}

struct Run {
    status: RunStatus,
    snapshot: Snapshot,
    steps: Vec<StepRecord>,
}

/// Keeps each run in memory while it runs and forgets it when it ends (a run without a
/// checkpointer keeps nothing either); `keeping()` keeps finished runs for `get_record`.
#[derive(Default)]
pub struct MemStore {
    runs: Mutex<HashMap<String, Run>>,
    keep: bool,
}

impl MemStore {
    pub fn keeping() -> Self {
        Self {
            runs: Mutex::default(),
            keep: true,
        }
    }
}

fn missing(id: &str) -> StoreError {
    StoreError::NotFound(id.to_string())
}

#[async_trait]
impl RunStore for MemStore {
    async fn create_run(&self, run: &NewRun) -> Result<(), StoreError> {
        self.runs.lock().expect("lock").insert(
            run.run_id.clone(),
            Run {
                status: RunStatus::Running,
                snapshot: run.snapshot.clone(),
                steps: Vec::new(),
            },
        );
        Ok(())
    }
    async fn start_step(&self, _: &str, _: &StepRecord) -> Result<(), StoreError> {
        // Nothing is persisted while a step runs (like the peer's runs without a checkpointer).
        Ok(())
    }
    async fn finish_step(
        &self,
        id: &str,
        step: &StepRecord,
        _: &[StepRecord],
        _: &Snapshot,
    ) -> Result<(), StoreError> {
        // Finished steps are kept for the run record; the final snapshot arrives with
        // `update_run`.
        let mut runs = self.runs.lock().expect("lock");
        runs.get_mut(id)
            .ok_or_else(|| missing(id))?
            .steps
            .push(step.clone());
        Ok(())
    }
    async fn update_run(&self, id: &str, u: &RunUpdate) -> Result<(), StoreError> {
        let mut runs = self.runs.lock().expect("lock");
        if !self.keep && u.status.is_terminal() {
            runs.remove(id);
            return Ok(());
        }
        let run = runs.get_mut(id).ok_or_else(|| missing(id))?;
        run.status = u.status;
        run.snapshot = u.snapshot.clone();
        Ok(())
    }
    async fn add_event(&self, _: &str, _: &Value) -> Result<(), StoreError> {
        Ok(())
    }
    async fn load_run(&self, id: &str) -> Result<StoredRun, StoreError> {
        Err(missing(id))
    }
    async fn get_step(&self, id: &str, _: u32) -> Result<StepRecord, StoreError> {
        Err(missing(id))
    }
    async fn get_record(&self, id: &str) -> Result<RunRecord, StoreError> {
        let run = self
            .runs
            .lock()
            .expect("lock")
            .remove(id)
            .ok_or_else(|| missing(id))?;
        Ok(RunRecord {
            run_id: id.to_string(),
            workflow: String::new(),
            dialect: "graph".into(),
            status: run.status,
            input: Value::Null,
            state: Value::Object(std::sync::Arc::unwrap_or_clone(run.snapshot.state)),
            output: run.snapshot.output,
            error: None,
            pending_gate: None,
            cost_usd: run.snapshot.cost_usd,
            events: Vec::new(),
            started_at: String::new(),
            finished_at: None,
            duration_ms: None,
            steps: run.steps,
        })
    }
    async fn list_runs(&self, _: u32) -> Result<Vec<RunSummary>, StoreError> {
        Ok(Vec::new())
    }
}
