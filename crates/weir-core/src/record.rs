//! Run, step and attempt records: what a user sees in `weir runs show --json` and
//! `GET /api/runs/{id}` (DESIGN §10), plus the scheduler snapshot a store persists with every
//! step so a run can continue after its process dies.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::ModelCall;
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
    /// A model or tool call would have crossed a budget (`on_exceeded: fail`), or a
    /// reviewer declined to raise it.
    BudgetExceeded,
    /// Someone cancelled the run.
    Cancelled,
    /// The run was taken over from dead drivers more times in a row than `[lease]
    /// max_takeovers` allows, with no step finishing in between (a poison step).
    TakeoverLimit,
    /// The store refused a write that can never succeed (a value larger than the database
    /// takes, a corrupt row): the run ends here, with what was committed before.
    StoreError,
    /// A bug in weir (a node panicked, the snapshot names an unknown node).
    Internal,
}

impl ErrorCode {
    pub const ALL: &[ErrorCode] = &[
        ErrorCode::NodeFailed,
        ErrorCode::HopCeilingExceeded,
        ErrorCode::EndFailed,
        ErrorCode::GateRejected,
        ErrorCode::BudgetExceeded,
        ErrorCode::Cancelled,
        ErrorCode::TakeoverLimit,
        ErrorCode::StoreError,
        ErrorCode::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::NodeFailed => "node_failed",
            ErrorCode::HopCeilingExceeded => "hop_ceiling_exceeded",
            ErrorCode::EndFailed => "end_failed",
            ErrorCode::GateRejected => "gate_rejected",
            ErrorCode::BudgetExceeded => "budget_exceeded",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::TakeoverLimit => "takeover_limit",
            ErrorCode::StoreError => "store_error",
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
    pub model: crate::model::ModelName,
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
    pub response: Option<crate::model::ReplyText>,
    /// For model calls: every model reached in this attempt (fallbacks, schema repairs),
    /// each with its reply, usage, cost and, for a reply that failed validation, the errors.
    #[serde(default)]
    pub calls: Vec<Call>,
    /// For an agent with tools: every tool call the model asked for, in the order asked
    /// (turn by turn), with its arguments and what it gave back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRecord>,
    /// What this attempt cost, failed or not.
    #[serde(default, serialize_with = "cost::serialize")]
    pub cost_usd: f64,
}

/// One tool call an agent's model asked for (see [`Attempt::tool_calls`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// The model turn that asked for it (1 is the first model call).
    pub turn: u32,
    /// The provider's id of the call.
    pub id: String,
    /// The name the model called it by.
    pub name: String,
    /// The tool as the workflow names it (`http_request`, `custom:crm`, `mcp:docs/search`).
    pub tool: String,
    pub arguments: Value,
    /// What it gave back (absent when it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed: a tool error, arguments that do not match its schema, a rejection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
    /// A reviewer's decision, for a tool listed in `approve_tools`: `{approved, by, at,
    /// comment?, arguments_edited?}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Value>,
}

/// A node's type name (`agent`, `tool`, …): the workflow's own `&'static str` while a run
/// goes, owned only when read back from a store.
pub type NodeType = std::borrow::Cow<'static, str>;

/// A node's id in a run's bookkeeping: shared with the workflow's index, so marking a node
/// pending, completed or visited copies no string.
pub type NodeId = std::sync::Arc<str>;

/// A shared `null`, the output of a step that has not finished (no allocation per step).
pub fn no_output() -> std::sync::Arc<Output> {
    static NULL: std::sync::LazyLock<std::sync::Arc<Output>> =
        std::sync::LazyLock::new(|| std::sync::Arc::new(Output::default()));
    NULL.clone()
}

/// A record kept as its typed fields until something reads it as JSON: a step's
/// [`Output`] (a model reply's fields) and an attempt's model [`Call`]s. Most are only ever
/// written to a store or dropped, and building their JSON objects cost several allocations
/// a key (an agent's output eight, a model call's record fifteen). Reads go through
/// `Deref<Target = Value>`, which builds the object once; serialization writes the same
/// JSON from the fields directly. Made from JSON (read back from a store, or changed
/// through [`value_mut`](Self::value_mut)), it is that JSON. Equal when their JSON is.
pub struct AsJson<T> {
    typed: Option<T>,
    value: std::sync::OnceLock<Value>,
}

/// What [`AsJson`] needs of a typed record: its JSON, from a reference or from the record
/// itself (its strings moved in).
pub trait JsonFields: Clone + PartialEq + Serialize {
    fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    fn into_json(self) -> Value {
        self.to_json()
    }
}

/// A step's output: a JSON value, or a model reply's fields (an agent's
/// `{text, model, provider, fallback_used, input_tokens, output_tokens}`).
pub type Output = AsJson<Reply>;

/// One model reached during an attempt: the gateway's [`ModelCall`], or JSON (read back
/// from a store, or with fields added: a rejected reply's `validation_errors`).
pub type Call = AsJson<ModelCall>;

/// A model reply as an agent step's output records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reply {
    pub text: crate::model::ReplyText,
    pub model: crate::model::ModelName,
    pub provider: String,
    pub fallback_used: bool,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl JsonFields for Reply {
    fn to_json(&self) -> Value {
        self.clone().into_json()
    }

    /// The reply's JSON object, its strings moved into it.
    fn into_json(self) -> Value {
        let mut m = Map::with_capacity(6);
        m.insert("text".into(), Value::String(String::from(&*self.text)));
        m.insert("model".into(), Value::String(String::from(&*self.model)));
        m.insert("provider".into(), Value::String(self.provider));
        m.insert("fallback_used".into(), Value::Bool(self.fallback_used));
        m.insert("input_tokens".into(), self.input_tokens.into());
        m.insert("output_tokens".into(), self.output_tokens.into());
        Value::Object(m)
    }
}

impl JsonFields for ModelCall {}

impl Output {
    pub fn reply(reply: Reply) -> Self {
        Self::typed(reply)
    }

    /// The reply's fields, for an output that was made from one.
    pub fn as_reply(&self) -> Option<&Reply> {
        self.as_typed()
    }

    /// The reply's fields to change in place (the JSON is built again when next read).
    pub fn reply_mut(&mut self) -> Option<&mut Reply> {
        self.typed_mut()
    }
}

impl<T> Default for AsJson<T> {
    fn default() -> Self {
        Self {
            typed: None,
            value: std::sync::OnceLock::new(),
        }
    }
}

impl<T: JsonFields> AsJson<T> {
    pub fn typed(record: T) -> Self {
        Self {
            typed: Some(record),
            value: std::sync::OnceLock::new(),
        }
    }

    /// The typed record, for one made from it.
    pub fn as_typed(&self) -> Option<&T> {
        self.typed.as_ref()
    }

    /// The typed record to change in place (the JSON is built again when next read).
    pub fn typed_mut(&mut self) -> Option<&mut T> {
        if self.typed.is_some() {
            self.value = std::sync::OnceLock::new();
        }
        self.typed.as_mut()
    }

    /// The JSON to change in place (a typed record becomes that JSON).
    pub fn value_mut(&mut self) -> &mut Value {
        if let Some(t) = self.typed.take() {
            self.value = std::sync::OnceLock::from(t.into_json());
        }
        self.value.get_or_init(|| Value::Null);
        self.value.get_mut().expect("initialized above")
    }

    pub fn into_value(mut self) -> Value {
        std::mem::take(self.value_mut())
    }
}

impl<T> From<Value> for AsJson<T> {
    fn from(v: Value) -> Self {
        Self {
            typed: None,
            value: std::sync::OnceLock::from(v),
        }
    }
}

impl<T: JsonFields> std::ops::Deref for AsJson<T> {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value.get_or_init(|| match &self.typed {
            Some(t) => t.to_json(),
            None => Value::Null,
        })
    }
}

impl<T: Clone> Clone for AsJson<T> {
    fn clone(&self) -> Self {
        Self {
            typed: self.typed.clone(),
            value: self.value.clone(),
        }
    }
}

impl<T: JsonFields> PartialEq for AsJson<T> {
    fn eq(&self, other: &Self) -> bool {
        match (&self.typed, &other.typed) {
            (Some(a), Some(b)) => a == b,
            _ => **self == **other,
        }
    }
}

impl<T: JsonFields> PartialEq<Value> for AsJson<T> {
    fn eq(&self, other: &Value) -> bool {
        **self == *other
    }
}

impl<T: JsonFields> PartialEq<AsJson<T>> for Value {
    fn eq(&self, other: &AsJson<T>) -> bool {
        *self == **other
    }
}

impl<T: JsonFields> std::fmt::Debug for AsJson<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl<T: JsonFields> Serialize for AsJson<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (&self.typed, self.value.get()) {
            (Some(t), None) => t.serialize(s),
            _ => (**self).serialize(s),
        }
    }
}

impl<'de, T> Deserialize<'de> for AsJson<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Self::from)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub seq: u32,
    /// Shared with the workflow's own id while a run goes.
    pub node_id: NodeId,
    #[serde(default)]
    pub node_type: NodeType,
    /// How many times this node had run in the run when this step started (1-based).
    #[serde(default)]
    pub visit: u32,
    pub status: StepStatus,
    pub route: Option<String>,
    pub input: Value,
    /// Shared with the run's snapshot while this is its last step (no copy per step).
    pub output: std::sync::Arc<Output>,
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
    /// What waits: a `human_gate` node, an agent's tool call, a budget.
    #[serde(default, skip_serializing_if = "GateKind::is_human")]
    pub kind: GateKind,
    /// For a tool call: `{tool, name, arguments, turn, index}`; for a budget: what it
    /// allows and what was spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

/// What a pending gate waits on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateKind {
    /// A `human_gate` node (or a machine/pipeline approval step).
    #[default]
    Human,
    /// An agent's call of a tool listed in its `approve_tools`.
    ToolCall,
    /// A budget that would be exceeded, with `on_exceeded: pause`.
    Budget,
}

impl GateKind {
    pub fn is_human(&self) -> bool {
        *self == GateKind::Human
    }

    pub fn as_str(self) -> &'static str {
        match self {
            GateKind::Human => "human",
            GateKind::ToolCall => "tool_call",
            GateKind::Budget => "budget",
        }
    }
}

/// Where an agent's tool-use loop goes on from: the conversation its step recorded before
/// it stopped (its driver died, or it parked for a reviewer), and the reviewer's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    /// The node's visit the loop belongs to (its tool calls' idempotency keys).
    pub visit: u32,
    /// The attempt as last committed: its model calls and tool calls.
    pub attempt: Attempt,
    /// A reviewer's decision on the tool call the loop parked at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<ToolDecision>,
}

/// A reviewer's decision on one tool call (a gate of kind `tool_call`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDecision {
    /// The provider's id of the call decided.
    pub id: String,
    pub approved: bool,
    pub by: String,
    pub at: String,
    /// Approve: a comment; reject: the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// Approve: the arguments to call the tool with instead of the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

/// What started a run: `weir run`, the API, a schedule's tick, a webhook's delivery, an
/// MCP call or a parent run's `workflow` node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartKind {
    #[default]
    Cli,
    Api,
    Schedule,
    Webhook,
    Mcp,
    Parent,
}

impl StartKind {
    pub const ALL: [Self; 6] = [
        Self::Cli,
        Self::Api,
        Self::Schedule,
        Self::Webhook,
        Self::Mcp,
        Self::Parent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cli => "cli",
            Self::Api => "api",
            Self::Schedule => "schedule",
            Self::Webhook => "webhook",
            Self::Mcp => "mcp",
            Self::Parent => "parent",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The record's `trigger`: what started the run, with the trigger's name (schedules and
/// webhooks), the tick a schedule fired for, a webhook's delivery id, or the parent run and
/// its node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RunTrigger {
    pub kind: StartKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The tick a schedule fired for (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick: Option<String>,
    /// A webhook delivery's id (its `dedupe` header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run: Option<String>,
    /// The parent's `workflow` node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl RunTrigger {
    /// A trigger of `kind` with nothing more to say (`cli`, `api`, `mcp`).
    pub fn of(kind: StartKind) -> Self {
        Self {
            kind,
            ..Self::default()
        }
    }

    /// A schedule's tick.
    pub fn schedule(name: &str, tick: &str) -> Self {
        Self {
            kind: StartKind::Schedule,
            name: Some(name.into()),
            tick: Some(tick.into()),
            ..Self::default()
        }
    }

    /// A run list's trigger filter: a kind (`schedule`), or a kind and a trigger's name
    /// (`schedule:nightly`).
    pub fn filter(s: &str) -> Result<(StartKind, Option<String>), String> {
        let (kind, name) = match s.split_once(':') {
            Some((k, n)) => (k, Some(n.to_string()).filter(|n| !n.is_empty())),
            None => (s, None),
        };
        let kind = StartKind::parse(kind).ok_or_else(|| {
            format!(
                "trigger `{kind}` is none of cli, api, schedule, webhook, mcp, parent (add `:NAME` for one trigger)"
            )
        })?;
        Ok((kind, name))
    }

    /// What a run stored before runs recorded their trigger started from: the API when it
    /// pins a saved workflow version, `weir run` otherwise.
    pub fn inferred(pinned: bool) -> Self {
        Self::of(if pinned {
            StartKind::Api
        } else {
            StartKind::Cli
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub run_id: String,
    pub workflow: String,
    pub dialect: String,
    pub status: RunStatus,
    /// What started the run.
    #[serde(default)]
    pub trigger: RunTrigger,
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
    /// What started the run.
    #[serde(default)]
    pub trigger: RunTrigger,
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
    pub pending: Vec<NodeId>,
    pub completed: BTreeSet<NodeId>,
    /// Merge node → ids of the incoming edges that have fired.
    pub arrivals: BTreeMap<String, BTreeSet<String>>,
    /// Total node executions so far (the hop ceiling counts these).
    pub hops: u32,
    pub visits: BTreeMap<NodeId, u32>,
    pub next_seq: u32,
    pub cost_usd: f64,
    /// Output of the last node that ran (shared with its step record).
    pub output: std::sync::Arc<Output>,
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
    /// Agents whose tool-use loop goes on from where it stopped, by node id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resume: BTreeMap<String, Resume>,
    /// Tokens, model calls and tool calls of the run so far (its cost is `cost_usd`).
    #[serde(default, skip_serializing_if = "Usage::is_zero")]
    pub usage: Usage,
    /// Budgets raised at a `budget` gate: the run's under `""`, a node's under its id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub raised: BTreeMap<String, crate::ir::Budget>,
}

/// What a run (or a step) used, besides its cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input and output tokens together.
    pub tokens: u64,
    pub model_calls: u64,
    pub tool_calls: u64,
}

impl Usage {
    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }
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
            resume: Default::default(),
            usage: Usage::default(),
            raised: Default::default(),
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

    /// A reply kept as fields writes the JSON an agent's output object always had (same keys,
    /// same order), reads as it, compares equal to it, and is redacted field by field.
    #[test]
    fn a_reply_output_is_its_json() {
        use super::{Output, Reply};
        use serde_json::{Value, json};
        let reply = || {
            Output::reply(Reply {
                text: "hello sk-secret-123".into(),
                model: "mock".into(),
                provider: "mock".into(),
                fallback_used: false,
                input_tokens: 3,
                output_tokens: 2,
            })
        };
        let want = json!({"text": "hello sk-secret-123", "model": "mock", "provider": "mock",
            "fallback_used": false, "input_tokens": 3, "output_tokens": 2});
        let typed = serde_json::to_string(&reply()).unwrap();
        assert_eq!(typed, serde_json::to_string(&want).unwrap());
        let o = reply();
        assert_eq!(o["text"], "hello sk-secret-123");
        assert_eq!(o, want);
        assert_eq!(want, o);
        // Once read, it serializes from the JSON it built: the same text.
        assert_eq!(serde_json::to_string(&o).unwrap(), typed);
        let back: Output = serde_json::from_str(&typed).unwrap();
        assert_eq!(back, reply());
        assert_eq!(Output::from(Value::Null), Output::default());
        assert_eq!(reply().into_value(), want);

        let r = crate::secrets::Redactor::new(vec!["sk-secret-123".into()]);
        let mut o = reply();
        assert!(r.output_holds(&o));
        let _ = o["text"].clone(); // a read before the redaction must not leave the secret
        r.output(&mut o);
        assert_eq!(o["text"], "hello [redacted]");
        assert!(!serde_json::to_string(&o).unwrap().contains("sk-secret-123"));
        let mut v = Output::from(json!({"k": "sk-secret-123"}));
        r.output(&mut v);
        assert_eq!(*v, json!({"k": "[redacted]"}));
    }

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
