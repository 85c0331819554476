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
use weir_core::model::ModelCall;
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

/// What model calls in one attempt used: every call (priced), tokens, governance events.
#[derive(Debug, Clone, Default)]
pub struct Spent {
    pub cost_usd: f64,
    pub tokens: Tokens,
    /// One JSON record per model reached (see [`ModelCall`]).
    pub calls: Vec<Value>,
    pub events: Vec<Value>,
    /// Models that answered but have no price.
    pub unpriced: Vec<String>,
}

impl Spent {
    pub fn add(&mut self, calls: &[ModelCall], events: &[Value]) {
        for c in calls {
            self.cost_usd += c.cost_usd.unwrap_or(0.0);
            self.tokens.input += c.input_tokens;
            self.tokens.output += c.output_tokens;
            if !c.priced && !self.unpriced.contains(&c.model) {
                self.unpriced.push(c.model.clone());
            }
            self.calls
                .push(serde_json::to_value(c).unwrap_or(Value::Null));
        }
        self.events.extend(events.iter().cloned());
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
    pub request: Option<Value>,
    pub response: Option<String>,
    pub spent: Spent,
}

impl Outcome {
    pub fn new(output: Value, route: Route) -> Self {
        Self {
            output,
            write: None,
            route,
            request: None,
            response: None,
            spent: Spent::default(),
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
    /// Model calls made before the failure (they are charged too).
    pub spent: Option<Box<Spent>>,
}

impl Failure {
    pub fn fatal(class: &str, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            class: class.into(),
            retryable: false,
            retry_after: None,
            request: None,
            spent: None,
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
