//! The internal representation every dialect lowers to, and the only shape the engine runs.
//!
//! A [`Workflow`] is nodes plus edges. Expressions and templates are kept as checked source
//! text: they were compiled once by the loader (syntax errors are diagnostics) and the
//! engine evaluates them against public state.

use std::time::Duration;

use serde::Serialize;

use crate::diag::Span;
use crate::expr::{Expr, Template, ValueTemplate};
use crate::model::ErrorClass;
use crate::schema::CompiledSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    Graph,
    Machine,
    Pipeline,
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Graph => "graph",
            Dialect::Machine => "machine",
            Dialect::Pipeline => "pipeline",
        }
    }
}

/// Default ceiling on node executions per run (DESIGN §2).
pub const DEFAULT_HOP_CEILING: u32 = 1000;

/// Where node outputs live in run state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StateLayout {
    /// Graph: the input's keys, plus each agent/tool result under its output key. A node
    /// that already ran runs again only when a loop node re-arms it.
    Flat,
    /// Machine and pipeline: `{"input": {...}, "variables": {node_id: output}}`; templates
    /// also see each variable by its node id (`{{ build.stdout }}`). Every transition runs
    /// its target again, as in a state machine; the hop ceiling bounds cycles.
    Variables,
}

#[derive(Debug, Clone, Serialize)]
pub struct Workflow {
    pub name: String,
    pub dialect: Dialect,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    pub hop_ceiling: u32,
    pub layout: StateLayout,
    /// JSON Schema the run input must match (machine dialect `input:`).
    pub input_schema: Option<CompiledSchema>,
    /// Explicit entry node (machine `start:`, pipeline's first step); `None` = every node
    /// without an incoming edge (graph).
    pub start: Option<String>,
    /// What a run may spend in all (`budget:` at the top of the document).
    pub budget: Option<Budget>,
    /// What starts runs of it by itself (`triggers:` at the top of the document), once it
    /// is saved in a server's store.
    pub triggers: Vec<Trigger>,
    /// Lookups by node id, built on first use: `node`, `outgoing` and `incoming` cost the
    /// same on a 100,000-node graph as on a 5-node one. Build `nodes` and `edges` first;
    /// the index does not follow later changes.
    #[serde(skip)]
    pub index: Index,
}

/// The lookup tables of a [`Workflow`] (see its `index` field).
#[derive(Default, Clone)]
pub struct Index(std::sync::OnceLock<Tables>);

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Index")
    }
}

/// A hash map keyed by node ids with a fast (seeded, not DoS-hardened) hasher: looked up
/// several times per step, where SipHash showed in profiles.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Clone)]
struct Tables {
    /// Node id → index of its first node.
    by_id: FastMap<String, usize>,
    /// Edge indexes by source and by target id.
    out: FastMap<String, Vec<usize>>,
    inc: FastMap<String, Vec<usize>>,
    /// Positions of the entry nodes (see [`Workflow::entries`]): found once, not per run.
    entries: Vec<usize>,
    /// By node position: its outgoing edges with their targets' positions (edges to a
    /// node that does not exist left out), for routing without a lookup per edge.
    successors: Vec<Vec<(usize, usize)>>,
    /// By node position: its id, shared (a run's bookkeeping holds these, not copies).
    ids: Vec<crate::record::NodeId>,
}

impl Workflow {
    fn tables(&self) -> &Tables {
        self.index.0.get_or_init(|| {
            let mut by_id = FastMap::with_capacity_and_hasher(self.nodes.len(), Default::default());
            for (i, n) in self.nodes.iter().enumerate() {
                by_id.entry(n.id.clone()).or_insert(i);
            }
            let mut out: FastMap<String, Vec<usize>> = Default::default();
            let mut inc: FastMap<String, Vec<usize>> = Default::default();
            for (i, e) in self.edges.iter().enumerate() {
                out.entry(e.source.clone()).or_default().push(i);
                inc.entry(e.target.clone()).or_default().push(i);
            }
            let mut successors = vec![Vec::new(); self.nodes.len()];
            for (i, e) in self.edges.iter().enumerate() {
                if let (Some(s), Some(t)) = (by_id.get(&e.source), by_id.get(&e.target)) {
                    successors[*s].push((i, *t));
                }
            }
            let entries = match &self.start {
                Some(s) => by_id.get(s).copied().into_iter().collect(),
                None => (0..self.nodes.len())
                    .filter(|i| !inc.contains_key(&self.nodes[*i].id))
                    .collect(),
            };
            Tables {
                by_id,
                out,
                inc,
                entries,
                successors,
                ids: self.nodes.iter().map(|n| n.id.as_str().into()).collect(),
            }
        })
    }

    pub fn node(&self, id: &str) -> Option<&Node> {
        self.tables().by_id.get(id).map(|i| &self.nodes[*i])
    }

    /// The position of node `id` in `nodes`.
    pub fn position(&self, id: &str) -> Option<usize> {
        self.tables().by_id.get(id).copied()
    }

    pub fn outgoing<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a Edge> + 'a {
        self.tables()
            .out
            .get(id)
            .into_iter()
            .flatten()
            .map(|i| &self.edges[*i])
    }

    /// The outgoing edges of the node at `position`, each with its target node, in the
    /// order of `edges`.
    pub fn successors(&self, position: usize) -> impl Iterator<Item = (&Edge, usize, &Node)> + '_ {
        self.tables()
            .successors
            .get(position)
            .into_iter()
            .flatten()
            .map(|(e, t)| (&self.edges[*e], *t, &self.nodes[*t]))
    }

    /// The id of the node at `position`, shared.
    pub fn node_id(&self, position: usize) -> &crate::record::NodeId {
        &self.tables().ids[position]
    }

    pub fn incoming<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a Edge> + 'a {
        self.tables()
            .inc
            .get(id)
            .into_iter()
            .flatten()
            .map(|i| &self.edges[*i])
    }

    /// Entry nodes: the explicit start, else those with no incoming edge.
    pub fn entries(&self) -> impl Iterator<Item = &Node> + '_ {
        self.tables().entries.iter().map(|i| &self.nodes[*i])
    }

    /// The entry nodes' ids, shared.
    pub fn entry_ids(&self) -> impl Iterator<Item = &crate::record::NodeId> + '_ {
        let t = self.tables();
        t.entries.iter().map(|i| &t.ids[*i])
    }
}

/// How often and how long a node may try (spec 002 "Retries, timeouts, and backoff").
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AttemptPolicy {
    pub timeout: Duration,
    /// Extra attempts after the first.
    pub retry_count: u32,
    /// What one execution of the node may spend (its attempts and its agent loop together).
    pub budget: Option<Budget>,
}

/// A trigger of a workflow: its name (unique in the document) and what fires it.
#[derive(Debug, Clone, Serialize)]
pub struct Trigger {
    pub name: String,
    /// `enabled: false` keeps it in the document without firing.
    pub enabled: bool,
    #[serde(flatten)]
    pub kind: TriggerKind,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TriggerKind {
    /// A run at each tick of a cron expression.
    Schedule(Schedule),
    /// A run for each authenticated delivery to `POST /hooks/{workflow}/{name}`.
    Webhook(Webhook),
}

/// `kind: webhook`: deliveries authenticated by `signature` with the declared secret
/// `secret` (or, for `token`, a random token in the URL that weir makes and stores hashed);
/// `input` maps the delivery to the run's input; `dedupe` names the header whose value
/// identifies a delivery (a repeated one returns the first run).
#[derive(Debug, Clone, Serialize)]
pub struct Webhook {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub signature: Signature,
    /// `{key: template}` over `body`, `headers` (lower case, `-` as `_`) and `query`;
    /// without it the run's input is the body (an object) or `{body: …}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedupe: Option<String>,
}

/// How a webhook's deliveries are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Signature {
    /// `X-Signature-256: sha256=HEX`, the HMAC-SHA256 of the raw body with the secret.
    HmacSha256,
    /// GitHub's `X-Hub-Signature-256: sha256=HEX`.
    Github,
    /// Stripe's `Stripe-Signature: t=TIME,v1=HEX` over `TIME.BODY`, within five minutes.
    Stripe,
    /// Slack's `X-Slack-Signature: v0=HEX` over `v0:TIME:BODY` with
    /// `X-Slack-Request-Timestamp: TIME`, within five minutes.
    Slack,
    /// A random token in the URL (`?token=…`), for senders that cannot sign.
    Token,
}

impl Signature {
    pub const NAMES: [&str; 5] = ["hmac-sha256", "github", "stripe", "slack", "token"];

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "hmac-sha256" => Self::HmacSha256,
            "github" => Self::Github,
            "stripe" => Self::Stripe,
            "slack" => Self::Slack,
            "token" => Self::Token,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// `kind: schedule`: `cron`, read in `timezone`, starts a run with `input` at each tick.
#[derive(Debug, Clone, Serialize)]
pub struct Schedule {
    pub cron: String,
    pub timezone: String,
    pub input: serde_json::Value,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
}

/// What a tick does while the trigger's last run has not finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// No run for this tick (the default).
    Skip,
    /// A run is created and waits for the last one to finish.
    Queue,
    /// A run is created and runs alongside.
    Allow,
}

/// What happens to ticks missed while nothing was running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Nothing: missed ticks are skipped.
    None,
    /// One run for the most recent missed tick (the default).
    Latest,
}

/// A spending limit (`budget:` on a workflow or a node): every limit given must hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Budget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    /// Input and output tokens together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// `on_exceeded: pause` (a gate of kind `budget`) rather than `fail`.
    #[serde(default)]
    pub pause: bool,
}

impl Budget {
    /// This budget with `raise` added to each limit it sets (a raise of a limit the budget
    /// does not set leaves it unset).
    pub fn raised(mut self, raise: &Budget) -> Self {
        fn add<T: std::ops::Add<Output = T> + Copy>(a: &mut Option<T>, b: Option<T>) {
            if let (Some(x), Some(y)) = (a.as_mut(), b) {
                *x = *x + y;
            }
        }
        add(&mut self.usd, raise.usd);
        add(&mut self.tokens, raise.tokens);
        add(&mut self.model_calls, raise.model_calls);
        add(&mut self.tool_calls, raise.tool_calls);
        self
    }
}

/// Default per-attempt timeout when a node sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

impl Default for AttemptPolicy {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            retry_count: 0,
            budget: None,
        }
    }
}

impl AttemptPolicy {
    /// Sleep before attempt `next` (2-based): 1 s, 2 s, 4 s, … capped at 30 s.
    pub fn backoff(next_attempt: u32) -> Duration {
        let exp = next_attempt.saturating_sub(2).min(5);
        Duration::from_secs((1u64 << exp).min(30))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Node {
    pub id: String,
    pub label: Option<String>,
    pub kind: NodeKind,
    pub policy: AttemptPolicy,
    /// Where agent and tool nodes write their result; defaults to the node id.
    pub output_key: Option<String>,
    #[serde(skip)]
    pub span: Option<Span>,
    /// Where the node's `model` value is written, for model diagnostics.
    #[serde(skip)]
    pub model_span: Option<Span>,
}

impl Node {
    pub fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }

    /// Branch nodes route on a boolean result; their edges need selectors.
    pub fn is_branch(&self) -> bool {
        matches!(self.kind, NodeKind::Condition(_) | NodeKind::Loop(_))
    }

    /// The route keys this node can return, when it branches on a fixed set.
    pub fn routes(&self) -> Option<Vec<String>> {
        let bools = || vec!["true".to_string(), "false".to_string()];
        match &self.kind {
            NodeKind::Condition(_) | NodeKind::Loop(_) => Some(bools()),
            NodeKind::Judge(j) => Some(j.validator.routes()),
            NodeKind::Script(s) => s.validator.as_ref().map(Validator::routes),
            NodeKind::Consensus(c) => Some(c.mode.routes()),
            NodeKind::Step(s) => Some(s.routes()),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum NodeKind {
    Agent(AgentSpec),
    Tool(ToolSpec),
    Condition(ConditionSpec),
    Loop(LoopSpec),
    HumanGate(GateSpec),
    Merge,
    End(EndSpec),
    Judge(JudgeSpec),
    Consensus(ConsensusSpec),
    Script(ScriptSpec),
    Step(StepSpec),
}

impl NodeKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            NodeKind::Agent(_) => "agent",
            NodeKind::Tool(_) => "tool",
            NodeKind::Condition(_) => "condition",
            NodeKind::Loop(_) => "loop",
            NodeKind::HumanGate(_) => "human_gate",
            NodeKind::Merge => "merge",
            NodeKind::End(_) => "end",
            NodeKind::Judge(_) => "ai_judge",
            NodeKind::Consensus(_) => "consensus",
            NodeKind::Script(_) => "script",
            NodeKind::Step(_) => "step",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct AgentSpec {
    pub model: crate::model::ModelName,
    pub system_prompt: Option<Template>,
    pub user_message: Template,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    /// JSON Schema the reply must match, compiled.
    pub response_schema: Option<CompiledSchema>,
    /// Re-prompts allowed after an invalid reply (default 2).
    pub repair_attempts: u32,
    pub fallback_models: Vec<String>,
    /// `None` = every class but `auth`.
    pub fallback_error_classes: Option<Vec<ErrorClass>>,
    /// The tools the model may call, and how the tool-use loop runs.
    pub tools: AgentTools,
}

/// An agent's tools: what the model may call and how its tool-use loop runs.
#[derive(Debug, Clone, Serialize)]
pub struct AgentTools {
    /// The tools, as the workflow names them (`http_request`, `custom:crm`,
    /// `mcp:docs/search`, `mcp:docs/*`); none: one model call, no loop.
    pub tools: Vec<String>,
    /// The most model calls the loop makes (default 10).
    pub max_turns: u32,
    pub tool_choice: crate::model::ToolChoice,
    /// Whether the model may ask for several calls in one turn (default true).
    pub parallel_tool_calls: bool,
    /// Tools whose calls wait for a reviewer (`send_email`, `mcp:github/*`): the run parks
    /// at a gate of kind `tool_call` before such a call is made.
    pub approve_tools: Vec<String>,
    /// Tools whose error fails the node (its retries apply) instead of going back to the
    /// model as the call's result.
    pub fatal_tools: Vec<String>,
}

impl AgentTools {
    /// Whether a call of `tool_ref` (as the workflow names it: `custom:crm`,
    /// `mcp:github/create_issue`) waits for a reviewer: it is listed in `approve_tools`, or a
    /// listed `mcp:SERVER/*` covers it.
    pub fn needs_approval(&self, tool_ref: &str) -> bool {
        covers(&self.approve_tools, tool_ref)
    }

    /// Whether an error of `tool_ref` fails the node (`fatal_tools`, matched the same way).
    pub fn is_fatal(&self, tool_ref: &str) -> bool {
        covers(&self.fatal_tools, tool_ref)
    }
}

/// Whether a list of tools names `tool_ref`, itself or by its server's `mcp:SERVER/*`.
fn covers(list: &[String], tool_ref: &str) -> bool {
    list.iter().any(|a| {
        a == tool_ref
            || a.strip_suffix('*')
                .is_some_and(|prefix| prefix.ends_with('/') && tool_ref.starts_with(prefix))
    })
}

/// Default `max_turns` of an agent with tools.
pub const DEFAULT_MAX_TURNS: u32 = 10;

impl Default for AgentTools {
    fn default() -> Self {
        Self {
            tools: Vec::new(),
            max_turns: DEFAULT_MAX_TURNS,
            tool_choice: crate::model::ToolChoice::Auto,
            parallel_tool_calls: true,
            approve_tools: Vec::new(),
            fatal_tools: Vec::new(),
        }
    }
}

/// Default `repair_attempts` (spec 002 "Structured output").
pub const DEFAULT_REPAIR_ATTEMPTS: u32 = 2;

#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    pub tool_name: String,
    /// Params with every string leaf a template, rendered against state before the call.
    pub params: ValueTemplate,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConditionSpec {
    pub expression: Expr,
}

#[derive(Debug, Clone, Serialize)]
pub struct LoopSpec {
    pub expression: Expr,
    pub max_iterations: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct GateSpec {
    pub prompt: Template,
}

/// Terminal status an `end` node gives the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EndStatus {
    Succeeded,
    Failed,
    Aborted,
}

#[derive(Debug, Clone, Serialize)]
pub struct EndSpec {
    pub status: EndStatus,
    /// Rendered into the run's `output` (string leaves are templates); without it the run
    /// output is the last node's output.
    pub output: Option<ValueTemplate>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Edge {
    pub id: String,
    pub source: String,
    pub target: String,
    /// `condition_value`, else `label`: which branch result fires this edge.
    pub selector: Option<String>,
    #[serde(skip)]
    pub span: Option<Span>,
    /// Where the `source` and `target` values are written (diagnostics point at them).
    #[serde(skip)]
    pub source_span: Option<Span>,
    #[serde(skip)]
    pub target_span: Option<Span>,
}

impl Edge {
    /// Whether this edge fires for a route `key`: exact, and case-insensitive for
    /// `true`/`false`; an edge without a selector always fires.
    pub fn matches(&self, key: &str) -> bool {
        match &self.selector {
            None => true,
            Some(s) => {
                s == key
                    || (s.eq_ignore_ascii_case(key)
                        && (key.eq_ignore_ascii_case("true") || key.eq_ignore_ascii_case("false")))
            }
        }
    }
}

/// How a judge's or script's raw value becomes a route (spec 000 "Validators").
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Validator {
    Boolean,
    Enum { routes: Vec<String> },
    Confidence { threshold: f64 },
}

impl Validator {
    pub fn routes(&self) -> Vec<String> {
        match self {
            Validator::Enum { routes } => routes.clone(),
            _ => vec!["true".into(), "false".into()],
        }
    }
}

/// `ai_judge`: one model call answering in a JSON envelope, routed by its validator.
#[derive(Debug, Clone, Serialize)]
pub struct JudgeSpec {
    pub model: crate::model::ModelName,
    pub system: Option<Template>,
    pub prompt: Template,
    pub validator: Validator,
    /// Re-asks after a malformed or out-of-range reply (0–5, default 1).
    pub max_retries: u32,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ConsensusMode {
    /// Gate: each agent approves with `result: true`.
    Boolean,
    /// Gate: each agent approves when its score meets the threshold.
    Confidence { threshold: f64 },
    /// Plurality vote over free answers (optionally restricted to `choices`).
    Answer { choices: Option<Vec<String>> },
    /// Every agent answers; an aggregation pass picks the most consistent answer.
    MostConsistent,
}

impl ConsensusMode {
    pub fn routes(&self) -> Vec<String> {
        match self {
            ConsensusMode::Boolean | ConsensusMode::Confidence { .. } => {
                vec!["approved".into(), "rejected".into()]
            }
            _ => vec!["decided".into(), "undecided".into()],
        }
    }
}

/// `consensus`: `agent_count` parallel model calls and a vote.
#[derive(Debug, Clone, Serialize)]
pub struct ConsensusSpec {
    pub model: crate::model::ModelName,
    pub system: Option<Template>,
    pub prompt: Template,
    pub agent_count: u32,
    pub quorum: u32,
    pub mode: ConsensusMode,
    /// Per-agent re-asks (0–3, default 1).
    pub max_retries: u32,
    pub temperature: Option<f64>,
}

/// `script`: JavaScript/TypeScript run under bun; the module's `export default` is the value.
#[derive(Debug, Clone, Serialize)]
pub struct ScriptSpec {
    pub source: String,
    pub validator: Option<Validator>,
}

/// A pipeline step (spec 001): `nodes` parallel LLM calls whose user message is built from
/// `fields`, and an optional gate that prunes outputs and picks what happens next.
#[derive(Debug, Clone, Serialize)]
pub struct StepSpec {
    pub model: crate::model::ModelName,
    pub system_prompt: Option<String>,
    pub nodes: u32,
    pub fields: Vec<Field>,
    pub gate: Option<Gate>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
}

impl StepSpec {
    /// Route keys: `continue` and `jump:<step>` for every jump the gate can take (`abort`
    /// ends the run instead of routing).
    pub fn routes(&self) -> Vec<String> {
        let mut out = vec!["continue".to_string()];
        if let Some(g) = &self.gate {
            for a in [&g.then, &g.otherwise] {
                if let GateAction::Jump(s) = a {
                    let k = format!("jump:{s}");
                    if !out.contains(&k) {
                        out.push(k);
                    }
                }
            }
        }
        out
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Field {
    pub name: String,
    pub source: FieldSource,
    /// Used when the source has nothing visible.
    pub fallback: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LoopRef {
    Current,
    Previous,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FieldSource {
    /// An expression over state, e.g. `input.context`.
    Text { from: Expr },
    /// The i-th visible output of a step (node i reads output i, cycling).
    Ingest { step: String, loop_ref: LoopRef },
    /// Every visible output of a step.
    MultiIngest { step: String, loop_ref: LoopRef },
}

#[derive(Debug, Clone, Serialize)]
pub struct Gate {
    pub condition: GateCondition,
    pub then: GateAction,
    pub otherwise: GateAction,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateCondition {
    /// The output parsed as an integer lies in `[lo, hi]`, inclusive.
    IntegerRange(i64, i64),
    /// The output parsed as JSON matches the schema.
    JsonMatches(CompiledSchema),
    /// The output contains the text.
    Contains(String),
    /// The output matches the regular expression.
    Regex(Pattern),
    /// An expression over `output` (text), `parsed` (JSON or null) and `index`.
    Expression(Expr),
}

/// A regular expression compiled at load (serialises as its source).
#[derive(Debug, Clone)]
pub struct Pattern(pub regex::Regex);

impl Serialize for Pattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateAction {
    Continue,
    Abort,
    Jump(String),
}
