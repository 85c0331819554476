//! Starting a run of a saved workflow version: what the API's `POST …/runs`, a schedule's
//! tick, a webhook's delivery and an MCP call all do. The run pins the version it was
//! created from and records what started it; a worker drives it.

use serde_json::Value;
use weir_core::catalog::WorkflowVersion;
use weir_core::store::Pin;
use weir_engine::{CreateOptions, CreatedRun, Reuse, Source};

use crate::Runtime;

/// Why a saved version could not be started.
#[derive(Debug)]
pub enum StartError {
    /// The version no longer compiles with this server's settings (the message says why).
    Compile(String),
    /// The engine refused the run (bad input, the store away, …).
    Engine(weir_engine::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Compile(m) => f.write_str(m),
            Self::Engine(e) => e.fmt(f),
        }
    }
}

impl From<weir_engine::Error> for StartError {
    fn from(e: weir_engine::Error) -> Self {
        Self::Engine(e)
    }
}

/// The file name a saved version is compiled under (what its diagnostics name).
pub fn doc_path(id: &str, format: &str) -> String {
    format!("{id}.{format}")
}

impl Runtime {
    /// The compiled workflow of a saved version, against this process's settings.
    pub fn saved_workflow(
        &self,
        saved: &WorkflowVersion,
    ) -> Result<std::sync::Arc<weir_core::ir::Workflow>, StartError> {
        let path = doc_path(&saved.workflow_id, &saved.format);
        self.generation()
            .workflow(&path, &saved.source)
            .map_err(|diags| {
                StartError::Compile(format!(
                    "workflow {} version {} no longer compiles with the server's settings: {}",
                    saved.workflow_id,
                    saved.version,
                    diags
                        .iter()
                        .find(|d| d.is_error())
                        .map_or("", |d| d.message.as_str())
                ))
            })
    }

    /// Creates a queued run of `saved` (reusing recorded steps for a re-run) and wakes a
    /// worker when it is new.
    pub async fn start_saved(
        &self,
        saved: &WorkflowVersion,
        input: Value,
        opts: CreateOptions,
        reuse: Option<Reuse>,
    ) -> Result<CreatedRun, StartError> {
        let wf = self.saved_workflow(saved)?;
        let source = Source {
            path: doc_path(&saved.workflow_id, &saved.format),
            text: saved.source.as_str().into(),
            pin: Some(Pin {
                workflow_id: saved.workflow_id.clone(),
                version: saved.version,
            }),
        };
        let engine = self.generation().engine.clone();
        let created = match reuse {
            Some(reuse) if !reuse.steps.is_empty() => {
                engine
                    .create_reusing(&wf, source, input, reuse, opts.trigger)
                    .await?
            }
            _ => engine.create(&wf, source, input, opts).await?,
        };
        if created.created {
            self.wake();
        }
        Ok(created)
    }
}
