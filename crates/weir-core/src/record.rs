//! Run, step and attempt records: what a user sees in `weir runs show --json` and
//! `GET /api/runs/{id}` (DESIGN §10), plus the scheduler snapshot a store persists with every
//! step so a run can continue after its process dies.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How costs are written as JSON: rounded to the nano-dollar (nine decimals), so a sum of
/// prices reads `0.003381`, not `0.0033810000000000003`. Still a JSON number (DESIGN §10);
/// nine decimals keep the price of a single token of the cheapest models.
pub mod cost {
    use serde::Serializer;

    pub fn round(x: f64) -> f64 {
        if x.is_finite() {
            (x * 1e9).round() / 1e9
        } else {
            0.0
        }
    }

    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(round(*x))
    }

    /// For `Option<f64>` costs (`null` for an unpriced model).
    pub fn opt<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match x {
            Some(v) => s.serialize_some(&round(*v)),
            None => s.serialize_none(),
        }
    }
}

/// The version of the run record's JSON shape (`schema_version`), raised on any change a
/// reader must know about; `docs/run-record.schema.json` describes it.
pub const SCHEMA_VERSION: u32 = 1;

fn schema_version() -> u32 {
    SCHEMA_VERSION
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Queued,
    Running,
    Paused,
    Succeeded,
    Failed,
    Aborted,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Paused => "paused",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Aborted => "aborted",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => RunStatus::Queued,
            "running" => RunStatus::Running,
            "paused" => RunStatus::Paused,
            "succeeded" => RunStatus::Succeeded,
            "failed" => RunStatus::Failed,
            "aborted" => RunStatus::Aborted,
            "cancelled" => RunStatus::Cancelled,
            _ => return None,
        })
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Aborted | RunStatus::Cancelled
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    Running,
    Succeeded,
    Failed,
    Waiting,
    Pruned,
    Cancelled,
    Skipped,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Running => "running",
            StepStatus::Succeeded => "succeeded",
            StepStatus::Failed => "failed",
            StepStatus::Waiting => "waiting",
            StepStatus::Pruned => "pruned",
            StepStatus::Cancelled => "cancelled",
            StepStatus::Skipped => "skipped",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => StepStatus::Running,
            "succeeded" => StepStatus::Succeeded,
            "failed" => StepStatus::Failed,
            "waiting" => StepStatus::Waiting,
            "pruned" => StepStatus::Pruned,
            "cancelled" => StepStatus::Cancelled,
            "skipped" => StepStatus::Skipped,
            _ => return None,
        })
    }
}

/// Why a run ended badly. Each code has a page, `docs/errors/runs/<code>.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// A node failed after its last attempt.
    NodeFailed,
    /// The run executed more nodes than its hop ceiling allows.
    HopCeilingExceeded,
    /// The run reached an `end` node whose status is `failed`.
    EndFailed,
    /// A reviewer rejected a human gate.
    GateRejected,
    /// Someone cancelled the run.
    Cancelled,
    /// The run was taken over from dead drivers more times in a row than `[lease]
    /// max_takeovers` allows, with no step finishing in between (a poison step).
    TakeoverLimit,
    /// A bug in weir (a node panicked, the snapshot names an unknown node).
    Internal,
}

impl ErrorCode {
    pub const ALL: &[ErrorCode] = &[
        ErrorCode::NodeFailed,
        ErrorCode::HopCeilingExceeded,
        ErrorCode::EndFailed,
        ErrorCode::GateRejected,
        ErrorCode::Cancelled,
        ErrorCode::TakeoverLimit,
        ErrorCode::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::NodeFailed => "node_failed",
            ErrorCode::HopCeilingExceeded => "hop_ceiling_exceeded",
            ErrorCode::EndFailed => "end_failed",
            ErrorCode::GateRejected => "gate_rejected",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::TakeoverLimit => "takeover_limit",
            ErrorCode::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{"code", "message", "node_id"}` on a failed run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunError {
    pub code: ErrorCode,
    pub message: String,
    pub node_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
}

/// What an attempt sent, as its record shows it: a model call's `{"model", "system",
/// "user"}`, or any JSON value (a tool call, a consensus round, a pipeline step's nodes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Request {
    /// Typed, so an agent step builds it without a JSON map (keys allocated and hashed).
    Model(ModelAsk),
    Other(Value),
}

/// One model call as sent: `{"model", "system" (null when none), "user"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelAsk {
    pub model: String,
    pub system: Option<String>,
    pub user: String,
}

impl From<Value> for Request {
    fn from(v: Value) -> Self {
        Request::Other(v)
    }
}

impl From<ModelAsk> for Request {
    fn from(m: ModelAsk) -> Self {
        Request::Model(m)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub n: u32,
    pub status: StepStatus,
    pub error: Option<String>,
    /// Error class for model calls (`rate_limit`, `timeout`, …) or `tool` / `timeout` / `expression`.
    #[serde(default)]
    pub error_class: Option<String>,
    pub duration_ms: u64,
    /// For model calls: what was sent (model, system, user).
    #[serde(default)]
    pub request: Option<Request>,
    /// For model calls: the reply text.
    #[serde(default)]
    pub response: Option<String>,
    /// For model calls: every model reached in this attempt (fallbacks, schema repairs),
    /// each with its reply, usage, cost and, for a reply that failed validation, the errors.
    #[serde(default)]
    pub calls: Vec<Value>,
    /// What this attempt cost, failed or not.
    #[serde(default, serialize_with = "cost::serialize")]
    pub cost_usd: f64,
}

/// A node's type name (`agent`, `tool`, …): the workflow's own `&'static str` while a run
/// goes, owned only when read back from a store.
pub type NodeType = std::borrow::Cow<'static, str>;

/// A shared `null`, the output of a step that has not finished (no allocation per step).
pub fn no_output() -> std::sync::Arc<Value> {
    static NULL: std::sync::LazyLock<std::sync::Arc<Value>> =
        std::sync::LazyLock::new(|| std::sync::Arc::new(Value::Null));
    NULL.clone()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub seq: u32,
    pub node_id: String,
    #[serde(default)]
    pub node_type: NodeType,
    /// How many times this node had run in the run when this step started (1-based).
    #[serde(default)]
    pub visit: u32,
    pub status: StepStatus,
    pub route: Option<String>,
    pub input: Value,
    /// Shared with the run's snapshot while this is its last step (no copy per step).
    pub output: std::sync::Arc<Value>,
    pub error: Option<String>,
    #[serde(serialize_with = "cost::serialize")]
    pub cost_usd: f64,
    pub tokens: Tokens,
    pub attempts: Vec<Attempt>,
    /// Taken as a clock reading; written as RFC 3339 text.
    pub started_at: crate::store::Stamp,
    pub finished_at: Option<crate::store::Stamp>,
    pub duration_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingGate {
    pub node_id: String,
    pub prompt: String,
    /// The gate's waiting step.
    #[serde(default)]
    pub seq: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub run_id: String,
    pub workflow: String,
    pub dialect: String,
    pub status: RunStatus,
    pub input: Value,
    pub state: Value,
    pub output: Value,
    pub error: Option<RunError>,
    pub pending_gate: Option<PendingGate>,
    #[serde(serialize_with = "cost::serialize")]
    pub cost_usd: f64,
    pub events: Vec<Value>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub duration_ms: Option<u64>,
    pub steps: Vec<StepRecord>,
}

/// One line of `weir runs list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub run_id: String,
    pub workflow: String,
    pub status: RunStatus,
    pub started_at: String,
    #[serde(serialize_with = "cost::serialize")]
    pub cost_usd: f64,
    #[serde(default)]
    pub finished_at: Option<String>,
    /// The saved workflow version the run pins (runs created over the API).
    #[serde(default)]
    pub pin: Option<crate::store::Pin>,
    /// Steps recorded so far.
    #[serde(default)]
    pub steps: u32,
    /// The code of the run's error, when it ended with one (`node_failed`, `cancelled`, …).
    #[serde(default)]
    pub error_code: Option<String>,
}

/// A node waiting to run, with the visit number it will run as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub node_id: String,
}

/// A recorded step a re-run reuses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reused {
    pub from_run: String,
    pub seq: u32,
    pub output: Value,
    pub route: Option<String>,
}

/// Everything the scheduler needs to continue a run, committed with each step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Public state: what templates and expressions see. Shared copy-on-write: nodes in
    /// flight hold the state they started with, and a write copies only while they do.
    pub state: std::sync::Arc<Map<String, Value>>,
    /// Internal `__loop_<id>` counters (never visible to templates).
    pub loops: BTreeMap<String, u32>,
    /// Nodes ready to run (including any that were in flight when the snapshot was taken).
    pub pending: Vec<String>,
    pub completed: BTreeSet<String>,
    /// Merge node → ids of the incoming edges that have fired.
    pub arrivals: BTreeMap<String, BTreeSet<String>>,
    /// Total node executions so far (the hop ceiling counts these).
    pub hops: u32,
    pub visits: BTreeMap<String, u32>,
    pub next_seq: u32,
    pub cost_usd: f64,
    /// Output of the last node that ran (shared with its step record).
    pub output: std::sync::Arc<Value>,
    /// Human gates waiting for a decision, oldest first.
    pub gates: Vec<PendingGate>,
    /// Pipeline: the current pass (1 + backward jumps so far).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pass: u32,
    /// Pipeline: every execution of each step, with its pass and visible outputs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub history: BTreeMap<String, Vec<StepPass>>,
    /// A re-run: recorded steps of an earlier run, per node in order, whose outputs the
    /// node's next executions reuse instead of running.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reuse: BTreeMap<String, Vec<Reused>>,
}

/// Empty, its output the shared null (no allocation: every run starts from one).
impl Default for Snapshot {
    fn default() -> Self {
        static EMPTY: std::sync::LazyLock<std::sync::Arc<Map<String, Value>>> =
            std::sync::LazyLock::new(Default::default);
        Self {
            state: EMPTY.clone(),
            loops: Default::default(),
            pending: Default::default(),
            completed: Default::default(),
            arrivals: Default::default(),
            hops: 0,
            visits: Default::default(),
            next_seq: 0,
            cost_usd: 0.0,
            output: no_output(),
            gates: Default::default(),
            pass: 0,
            history: Default::default(),
            reuse: Default::default(),
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One execution of a pipeline step: the pass it ran in and what stayed visible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepPass {
    pub pass: u32,
    pub visible: Vec<Value>,
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    /// An attempt's request reads and writes as the JSON it always was: a model call's
    /// `{"model", "system", "user"}` in that order (`system` null when none); anything else,
    /// a model-like object with more keys included, stays the value it was.
    #[test]
    fn an_attempts_request_keeps_its_json() {
        use super::{ModelAsk, Request};
        use serde_json::json;
        let ask = Request::Model(ModelAsk {
            model: "claude-sonnet-4-5".into(),
            system: None,
            user: "hi".into(),
        });
        assert_eq!(
            serde_json::to_string(&ask).unwrap(),
            r#"{"model":"claude-sonnet-4-5","system":null,"user":"hi"}"#
        );
        let read: Request =
            serde_json::from_str(r#"{"model":"m","system":"be brief","user":"u"}"#).unwrap();
        assert!(matches!(&read, Request::Model(m) if m.system.as_deref() == Some("be brief")));
        for other in [
            json!({"tool": "http_request", "idempotency_key": "k"}),
            json!({"model": "m", "system": null, "user": "u", "agents": 3}),
            json!({"model": "m", "system": null, "nodes": [{"node": 1, "user": "u"}]}),
        ] {
            let read: Request = serde_json::from_value(other.clone()).unwrap();
            assert!(matches!(read, Request::Other(_)), "{other}");
            assert_eq!(serde_json::to_value(&read).unwrap(), other);
        }
    }

    #[test]
    fn every_run_error_code_has_a_docs_page() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors/runs");
        let index = std::fs::read_to_string(root.join("README.md")).expect("index");
        for code in ErrorCode::ALL {
            let page = root.join(format!("{code}.md"));
            assert!(page.exists(), "run error code {code} has no page");
            assert!(
                index.contains(&format!("[{code}]({code}.md)")),
                "{code} not in the index"
            );
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::json!(code.as_str())
            );
        }
    }
}
