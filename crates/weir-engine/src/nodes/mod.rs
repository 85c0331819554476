//! One file per node kind; this dispatcher stays thin.

mod agent;
mod condition;
mod end;
mod human_gate;
mod loop_node;
mod merge;
pub mod tool;

use std::sync::Arc;

use serde_json::{Map, Value};
use weir_core::ir::{EndStatus, Node, NodeKind};
use weir_core::record::Tokens;

use crate::Services;

/// What a node sees when it runs.
pub struct NodeCtx {
    pub run_id: String,
    pub node: Node,
    /// Public state at the start of the step.
    pub state: Arc<Map<String, Value>>,
    /// 1-based: how many times this node has run in this run, this time included.
    pub visit: u32,
    /// For loop nodes: the value of `__loop_<id>` for this visit.
    pub loop_count: u32,
    pub services: Services,
}

/// Where the run goes after a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// Fire every outgoing edge.
    All,
    /// Fire edges whose selector matches (case-insensitively), plus edges without one.
    Key(String),
    /// Park the run at a human gate.
    Park { prompt: String },
    /// End the run with a status.
    End(EndStatus),
}

impl Route {
    pub fn label(&self) -> Option<String> {
        match self {
            Route::All => None,
            Route::Key(k) => Some(k.clone()),
            Route::Park { .. } => Some("waiting".into()),
            Route::End(s) => Some(format!("end:{}", serde_json::to_value(s).ok()?.as_str()?)),
        }
    }
}

/// A successful attempt.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The step's output record.
    pub output: Value,
    /// What to write to state under the output key (agent and tool nodes).
    pub write: Option<Value>,
    pub route: Route,
    pub tokens: Tokens,
    pub cost_usd: f64,
    pub request: Option<Value>,
    pub response: Option<String>,
}

impl Outcome {
    pub fn new(output: Value, route: Route) -> Self {
        Self {
            output,
            write: None,
            route,
            tokens: Tokens::default(),
            cost_usd: 0.0,
            request: None,
            response: None,
        }
    }
}

/// A failed attempt.
#[derive(Debug, Clone)]
pub struct Failure {
    pub message: String,
    /// `rate_limit`, `timeout`, …, `tool`, `expression`, `template`.
    pub class: String,
    pub retryable: bool,
    pub retry_after: Option<std::time::Duration>,
    /// Boxed: failures travel through `Result`s and should stay small.
    pub request: Option<Box<Value>>,
}

impl Failure {
    pub fn fatal(class: &str, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            class: class.into(),
            retryable: false,
            retry_after: None,
            request: None,
        }
    }
}

/// Runs one attempt of a node.
pub async fn execute(ctx: &NodeCtx) -> Result<Outcome, Failure> {
    match &ctx.node.kind {
        NodeKind::Agent(spec) => agent::execute(ctx, spec).await,
        NodeKind::Tool(spec) => tool::execute(ctx, spec).await,
        NodeKind::Condition(spec) => condition::execute(ctx, spec),
        NodeKind::Loop(spec) => loop_node::execute(ctx, spec),
        NodeKind::HumanGate(spec) => human_gate::execute(ctx, spec),
        NodeKind::Merge => merge::execute(),
        NodeKind::End(spec) => end::execute(ctx, spec),
    }
}
