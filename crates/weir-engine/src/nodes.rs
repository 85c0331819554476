//! One file per node kind; this dispatcher stays thin.

mod agent;
pub(crate) mod agent_loop;
mod condition;
mod consensus;
mod end;
mod human_gate;
mod judge;
mod loop_node;
mod merge;
mod script;
mod step;
pub mod tool;

use std::sync::Arc;

use serde_json::{Map, Value};
use weir_core::ir::{EndStatus, Node, NodeKind, StateLayout};
use weir_core::model::ModelCall;
use weir_core::record::{Request, Tokens};

use crate::Services;

/// What a node sees when it runs.
pub struct NodeCtx {
    /// The run the node belongs to.
    pub run_id: Arc<str>,
    /// The run's workflow.
    pub wf: Arc<weir_core::Workflow>,
    /// Index of this node in `wf.nodes`.
    pub index: usize,
    /// What templates and expressions see at the start of the step: public state, and in the
    /// `Variables` layout each variable under its node id as well.
    pub state: Arc<Map<String, Value>>,
    /// `state` prepared for templates and expressions (converted lazily, key by key).
    pub scope: weir_core::expr::Scope,
    /// Public state itself (what scripts get as `globalThis.weir`).
    pub public: Arc<Map<String, Value>>,
    /// How state is laid out for this workflow's dialect.
    pub layout: StateLayout,
    /// Pipeline: the current pass and every step's executions so far.
    pub pass: u32,
    /// Pipeline: every step's passes so far, by step id.
    pub history: Arc<std::collections::BTreeMap<String, Vec<weir_core::record::StepPass>>>,
    /// 1-based: how many times this node has run in this run, this time included.
    pub visit: u32,
    /// For loop nodes: the value of `__loop_<id>` for this visit.
    pub loop_count: u32,
    /// The step's sequence number in the run.
    pub seq: u32,
    /// Events that must reach the log while the step runs (an attempt that failed and will
    /// be retried, a fallback).
    pub progress: Arc<Progress>,
    /// The drive's lease, checked before each attempt (`Held::still_held`).
    pub(crate) lease: Option<Arc<crate::heartbeat::Held>>,
    /// Shared by every node of every run: one reference count, not one per service.
    pub services: Arc<Services>,
    /// The most bytes a tool call's params may take, as JSON (`[limits] tool_request_bytes`).
    pub tool_request_bytes: usize,
    /// The engine is replaying a recorded run (see [`crate::replay`]).
    pub replay: bool,
    /// When the step was launched: its first attempt's start (one clock reading for the
    /// step's duration, the attempt's and its deadline).
    pub launched: std::time::Instant,
    /// The step's start as recorded (an agent's loop writes its step again as it goes).
    pub started_at: weir_core::store::Stamp,
    /// The attempt running now (1-based).
    pub attempt: std::sync::atomic::AtomicU32,
    /// An agent's tool-use loop to go on from (taken by its first attempt).
    pub resume: std::sync::Mutex<Option<Box<weir_core::record::Resume>>>,
    /// The budgets the node runs under, when the workflow or the node has one.
    pub(crate) limits: Option<Box<crate::budget::Limits>>,
    /// Where the pieces of a streamed reply go.
    pub(crate) sink: Arc<dyn crate::EventSink>,
    /// Replies begun in this attempt (see [`weir_core::event::Delta::reply`]).
    pub(crate) replies: Arc<std::sync::atomic::AtomicU32>,
}

/// Where the run goes after a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// Fire every outgoing edge.
    All,
    /// Fire edges whose selector matches (case-insensitively), plus edges without one.
    Key(String),
    /// Park the run at a gate.
    Park {
        /// What the gate asks its reviewer.
        prompt: String,
        /// A `human_gate` node's gate, an agent's tool call, a budget.
        kind: weir_core::record::GateKind,
        /// What the reviewer decides on (a tool call's tool and arguments).
        detail: Option<Box<Value>>,
    },
    /// End the run with a status.
    End(EndStatus),
}

impl Route {
    /// The route as a step records it (`approved`, `waiting`, `end:failed`); `None` for all edges.
    pub fn label(&self) -> Option<String> {
        match self {
            Route::All => None,
            Route::Key(k) => Some(k.clone()),
            Route::Park { .. } => Some("waiting".into()),
            Route::End(s) => Some(format!("end:{}", serde_json::to_value(s).ok()?.as_str()?)),
        }
    }
}

/// The outcome a node had in a recorded step, rebuilt for a re-run: the output as
/// recorded, the route from its label, and what the node writes to state derived from the
/// output the way the node derives it. `None` for a step that cannot be reused (a gate).
pub fn recorded(
    node: &Node,
    layout: StateLayout,
    step: &weir_core::record::Reused,
) -> Option<Outcome> {
    use weir_core::ir::{EndStatus, StateLayout};
    let route = match step.route.as_deref() {
        None => Route::All,
        Some("waiting") => return None,
        Some(label) => match label.strip_prefix("end:") {
            Some("succeeded") => Route::End(EndStatus::Succeeded),
            Some("failed") => Route::End(EndStatus::Failed),
            Some("aborted") => Route::End(EndStatus::Aborted),
            Some(_) => return None,
            None => Route::Key(label.to_string()),
        },
    };
    let out = &step.output;
    let write = match (&node.kind, layout) {
        (NodeKind::Agent(_), StateLayout::Flat) => Some(
            out.get("parsed")
                .cloned()
                .unwrap_or_else(|| out.get("text").cloned().unwrap_or(Value::Null)),
        ),
        (NodeKind::Agent(_), StateLayout::Variables) => Some(out.clone()),
        (NodeKind::Tool(_), _) => Some(out.clone()),
        (NodeKind::Step(_), _) => Some(out.get("visible").cloned().unwrap_or(Value::Null)),
        _ => None,
    };
    let mut o = Outcome::new(out.clone(), route);
    o.write = write;
    Some(o)
}

/// What model calls in one attempt used: every call (priced), tokens, governance events.
#[derive(Debug, Clone, Default)]
pub struct Spent {
    /// What the calls cost, in US dollars.
    pub cost_usd: f64,
    /// Tokens in and out, summed.
    pub tokens: Tokens,
    /// One record per model reached (see [`ModelCall`]), kept typed until read as JSON.
    pub calls: Vec<weir_core::record::Call>,
    /// Governance events the calls raised (a fallback taken, a model unpriced).
    pub events: Vec<Value>,
    /// Models that answered but have no price.
    pub unpriced: Vec<weir_core::model::ModelName>,
    /// An agent's tool calls (its tool-use loop), in the order the model asked for them.
    pub tool_calls: Vec<weir_core::record::ToolCallRecord>,
    /// Model calls made (not those carried over from before a pause or a crash).
    pub model_calls: u64,
    /// Tool calls made (not carried over, nor rejected by a reviewer).
    pub tools_made: u64,
    /// What the node spent before a pause or a crash its loop goes on from (counted by the
    /// node's budget; charged to the step that spent it).
    pub before: (f64, weir_core::record::Usage),
}

impl Spent {
    /// Adds what another attempt part spent.
    pub fn merge(&mut self, other: Spent) {
        self.cost_usd += other.cost_usd;
        self.tokens.input += other.tokens.input;
        self.tokens.output += other.tokens.output;
        self.calls.extend(other.calls);
        self.tool_calls.extend(other.tool_calls);
        self.model_calls += other.model_calls;
        self.tools_made += other.tools_made;
        self.events.extend(other.events);
        for m in other.unpriced {
            if !self.unpriced.contains(&m) {
                self.unpriced.push(m);
            }
        }
    }

    /// Adds model calls with the events they raised.
    pub fn add(&mut self, calls: Vec<ModelCall>, events: &[Value]) {
        self.model_calls += calls.len() as u64;
        for c in calls {
            self.cost_usd += c.cost_usd.unwrap_or(0.0);
            self.tokens.input += c.input_tokens;
            self.tokens.output += c.output_tokens;
            if !c.priced && !self.unpriced.contains(&c.model) {
                self.unpriced.push(c.model.clone());
            }
            self.calls.push(weir_core::record::Call::typed(c));
        }
        self.events.extend(events.iter().cloned());
    }
}

/// A successful attempt.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The step's output record.
    pub output: weir_core::record::Output,
    /// What to write to state under the output key (agent and tool nodes).
    pub write: Option<Value>,
    /// Where the run goes next.
    pub route: Route,
    /// The request the node made (a model's prompt, a tool's arguments), for the record.
    pub request: Option<Request>,
    /// A model's reply text, for the record.
    pub response: Option<weir_core::model::ReplyText>,
    /// What the attempt's model calls used.
    pub spent: Spent,
}

impl Outcome {
    /// An outcome with `output` going `route`, nothing spent.
    pub fn new(output: Value, route: Route) -> Self {
        Self {
            output: output.into(),
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
    /// What went wrong, for the record and the run's error.
    pub message: String,
    /// `rate_limit`, `timeout`, …, `tool`, `expression`, `template`.
    pub class: String,
    /// Whether the node's retries may try again.
    pub retryable: bool,
    /// How long the service asked to wait before trying again.
    pub retry_after: Option<std::time::Duration>,
    /// Boxed: failures travel through `Result`s and should stay small.
    pub request: Option<Box<Request>>,
    /// Model calls made before the failure (they are charged too).
    pub spent: Option<Box<Spent>>,
}

impl Failure {
    /// A bug in weir (a call that panicked), failing the node instead of passing on a
    /// missing value; the request and what was spent stay on the record.
    pub fn internal(message: impl Into<String>, request: impl Into<Request>, spent: Spent) -> Self {
        let mut f = Self::fatal(
            "internal",
            format!("{}; this is a bug in weir", message.into()),
        );
        f.request = Some(Box::new(request.into()));
        f.spent = Some(Box::new(spent));
        f
    }

    /// A failure no retry can mend (bad arguments, a missing tool).
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
///
/// A future is as large as the largest of its states, and every layer that awaits it
/// (timeout, panic guard, the run's task list) moves it: the executors whose futures are
/// large (several model calls, tool and script calls) are boxed, so the common agent step
/// does not copy their size around at every launch. The outcome (480 bytes) is boxed as it
/// leaves: the timeout, the attempt loop, the panic guard and the step's record each moved
/// it whole (chain −2.5% instructions per node, BENCHMARKS.md).
pub async fn execute(ctx: &NodeCtx) -> Result<Box<Outcome>, Failure> {
    let done = match &ctx.node().kind {
        NodeKind::Agent(spec) => agent::execute(ctx, spec).await,
        NodeKind::Tool(spec) => Box::pin(tool::execute(ctx, spec)).await,
        NodeKind::Condition(spec) => condition::execute(ctx, spec),
        NodeKind::Loop(spec) => loop_node::execute(ctx, spec),
        NodeKind::HumanGate(spec) => human_gate::execute(ctx, spec),
        NodeKind::Merge => merge::execute(),
        NodeKind::End(spec) => end::execute(ctx, spec),
        NodeKind::Judge(spec) => Box::pin(judge::execute(ctx, spec)).await,
        NodeKind::Consensus(spec) => Box::pin(consensus::execute(ctx, spec)).await,
        NodeKind::Script(spec) => Box::pin(script::execute(ctx, spec)).await,
        NodeKind::Step(spec) => Box::pin(step::execute(ctx, spec)).await,
    };
    done.map(Box::new)
}

impl NodeCtx {
    /// Where a model call of this step sends its reply as it is written, when the sink shows
    /// replies live (never while replaying a record).
    pub fn on_delta(&self) -> Option<weir_core::model::OnDelta> {
        use std::sync::atomic::Ordering;
        if self.replay || !self.sink.streams() {
            return None;
        }
        let sink = self.sink.clone();
        let run_id = self.run_id.clone();
        let node_id = self.node().id.clone();
        let step = self.seq;
        let attempt = self.attempt.load(Ordering::Relaxed);
        let replies = self.replies.clone();
        Some(weir_core::model::OnDelta(Arc::new(move |text, at| {
            let reply = if at == 0 {
                replies.fetch_add(1, Ordering::Relaxed) + 1
            } else {
                replies.load(Ordering::Relaxed)
            };
            sink.delta(
                &run_id,
                &weir_core::event::Delta {
                    step,
                    node_id: &node_id,
                    attempt,
                    reply,
                    offset: at,
                    text,
                },
            );
        })))
    }

    /// The node being run.
    pub fn node(&self) -> &Node {
        &self.wf.nodes[self.index]
    }

    /// The HTTP timeout of one model call: a little past the attempt timeout, so the
    /// engine's own timeout decides.
    /// The time budget of a model request: the node's attempt timeout, less a small margin
    /// so the gateway's own per-call timeouts (which split this budget across the primary
    /// and its fallbacks) fire, and are recorded, before the attempt's.
    pub fn call_timeout(&self) -> std::time::Duration {
        let t = self.node().policy.timeout;
        t.saturating_sub((t / 10).min(std::time::Duration::from_millis(100)))
    }

    /// A tool's own timeout: past the attempt's, so the attempt timeout is what ends a call
    /// that hangs (and says so).
    pub fn tool_timeout(&self) -> std::time::Duration {
        self.node().policy.timeout + std::time::Duration::from_secs(1)
    }

    /// The loop to go on from, once: the first attempt takes it, a retry starts afresh.
    pub fn take_resume(&self) -> Option<Box<weir_core::record::Resume>> {
        self.resume.lock().expect("resume lock").take()
    }

    /// Commits an agent's loop so far (its model calls and tool calls) as the running
    /// step's attempt, so that a driver taking the run over goes on from there instead of
    /// calling the tools again. Not synced (a process that dies leaves it with the OS); a
    /// lease another driver took refuses it, and the loop must stop.
    pub async fn checkpoint(&self, request: &Request, spent: &Spent) -> Result<(), Failure> {
        let Some(held) = &self.lease else {
            return Ok(());
        };
        if self.replay {
            return Ok(());
        }
        let node = self.node();
        let step = weir_core::record::StepRecord {
            seq: self.seq,
            node_id: self.wf.node_id(self.index).clone(),
            node_type: node.type_name().into(),
            visit: self.visit,
            status: weir_core::record::StepStatus::Running,
            route: None,
            input: Value::Null,
            output: weir_core::record::no_output(),
            error: None,
            cost_usd: 0.0,
            tokens: Tokens::default(),
            attempts: vec![weir_core::record::Attempt {
                n: self
                    .attempt
                    .load(std::sync::atomic::Ordering::Relaxed)
                    .max(1),
                status: weir_core::record::StepStatus::Running,
                error: None,
                error_class: None,
                duration_ms: self.launched.elapsed().as_millis() as u64,
                request: Some(request.clone()),
                response: None,
                calls: spent.calls.clone(),
                tool_calls: spent.tool_calls.clone(),
                cost_usd: spent.cost_usd,
            }],
            started_at: self.started_at.clone(),
            finished_at: None,
            duration_ms: None,
        };
        let lease = held.current();
        match self
            .services
            .store
            .start_steps(&lease, &[&step], Vec::new())
            .await
        {
            Ok(_) => Ok(()),
            Err(e @ weir_core::store::StoreError::LeaseLost { .. }) => Err(Failure::fatal(
                "lease_lost",
                format!("the agent's loop stopped: {e}"),
            )),
            Err(e) => {
                tracing::warn!(run_id = %self.run_id, node = %node.id, "could not commit the agent's turn: {e}; a takeover would repeat its tool calls");
                Ok(())
            }
        }
    }
}

/// A node stopped by a budget: parked at a gate of kind `budget` (`on_exceeded: pause`), or
/// failed with `budget_exceeded`.
pub(crate) fn budget_stop(
    e: crate::budget::Exceeded,
    request: Option<&Request>,
    spent: Spent,
) -> Result<Outcome, Failure> {
    if !e.pause {
        return Err(crate::budget::failure(&e, request, spent));
    }
    let prompt = crate::budget::prompt(&e);
    let mut output = serde_json::json!({"waiting_for": "budget"});
    output["budget"] = e.detail.clone();
    Ok(Outcome {
        output: output.into(),
        write: None,
        route: Route::Park {
            prompt,
            kind: weir_core::record::GateKind::Budget,
            detail: Some(Box::new(e.detail)),
        },
        request: request.cloned(),
        response: None,
        spent,
    })
}

/// Renders a template against the node's view of state, naming the field on failure.
pub fn render(
    ctx: &NodeCtx,
    t: &weir_core::expr::Template,
    field: &str,
) -> Result<String, Failure> {
    t.render_in(&ctx.scope)
        .map_err(|e| Failure::fatal("template", format!("{field}: {}", e.message)))
}

/// A model that could not be reached, with what was spent reaching for it.
pub fn model_failure(
    e: weir_core::ModelError,
    request: impl Into<Request>,
    spent: Spent,
) -> Failure {
    Failure {
        message: e.message.clone(),
        class: e.class.as_str().into(),
        retryable: e.retryable,
        retry_after: e.retry_after,
        request: Some(Box::new(request.into())),
        spent: Some(Box::new(spent)),
    }
}

/// A reply still invalid after the last re-ask. Not retried by `retry_count`: the re-ask
/// loop already was the retry. `schema` says whether a `response_schema` (repair attempts)
/// or a validator envelope (`maxRetries`) was being checked.
pub fn invalid_reply(
    errors: Vec<String>,
    repairs: u32,
    schema: bool,
    request: impl Into<Request>,
    spent: Spent,
) -> Failure {
    let list: String = errors.iter().map(|e| format!("\n  - {e}")).collect();
    let (what, noun) = if schema {
        (
            "the reply did not match response_schema",
            if repairs == 1 {
                "repair attempt"
            } else {
                "repair attempts"
            },
        )
    } else {
        (
            "the reply did not match the validator's format",
            if repairs == 1 { "retry" } else { "retries" },
        )
    };
    let mut f = Failure::fatal("schema", format!("{what} after {repairs} {noun}:{list}"));
    f.request = Some(Box::new(request.into()));
    f.spent = Some(Box::new(spent));
    f
}

/// What a run's node futures tell its drive while they run (an attempt that failed and will
/// be retried, a model fallback), read at the drive's next turn. Such events are rare, so
/// this is a list behind a lock and the drive's waker: about 80 bytes per run, where a tokio
/// channel took 800 for every run in flight (its shared state, and its first block of slots
/// allocated with it).
#[derive(Default)]
pub struct Progress {
    told: std::sync::Mutex<Vec<weir_core::event::EventKind>>,
    waker: futures_util::task::AtomicWaker,
}

impl Progress {
    /// Tells the drive; it writes the event at its next turn.
    pub fn send(&self, event: weir_core::event::EventKind) {
        self.told.lock().expect("progress lock").push(event);
        self.waker.wake();
    }

    /// What was told since the last read, without waiting.
    pub(crate) fn take(&self) -> Vec<weir_core::event::EventKind> {
        std::mem::take(&mut *self.told.lock().expect("progress lock"))
    }

    /// Waits until something is told, and takes all of it.
    pub(crate) async fn next(&self) -> Vec<weir_core::event::EventKind> {
        std::future::poll_fn(|cx| {
            self.waker.register(cx.waker());
            let told = self.take();
            if told.is_empty() {
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(told)
            }
        })
        .await
    }
}
