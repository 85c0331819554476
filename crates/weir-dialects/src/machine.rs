//! The `machine` dialect (spec 000): a YAML map of node id → node, with `on:` transition maps
//! on branching nodes and `next:` on the others. Lowered to IR edges: `on: {key: target}`
//! becomes an edge selecting `key`, `next: target` an unconditional edge. Node outputs live in
//! `variables.<id>`; templates are `{{ expr }}`.
//!
//! The loader rejects what the spec rejects: an `on:` map missing a key its validator can
//! return or naming one it cannot, empty enum `routes`, a `threshold` outside 0–100,
//! `maxRetries` out of range, `enum` on consensus, transitions to unknown nodes, and an
//! `ai_agent` (or any node that cannot branch) with `on:`.

use weir_core::Diagnostic;
use weir_core::expr::Template;
use weir_core::ir::{
    AgentSpec, ConditionSpec, ConsensusMode, ConsensusSpec, DEFAULT_HOP_CEILING, Dialect, Edge,
    EndSpec, GateSpec, JudgeSpec, Node, NodeKind, ScriptSpec, StateLayout, Validator, Workflow,
};
use weir_core::validate::suggest;

use crate::fields::{At, Cx};
use crate::tree;

const TYPES: &[&str] = &[
    "script",
    "ai_judge",
    "ai_agent",
    "consensus",
    "condition",
    "human_gate",
    "end",
];
const TOP_KEYS: &[&str] = &[
    "dialect",
    "name",
    "description",
    "start",
    "input",
    "nodes",
    "hopCeiling",
    "hop_ceiling",
    "budget",
    "triggers",
];
const COMMON: &[&str] = &[
    "type",
    "label",
    "description",
    "timeout_seconds",
    "retry_count",
    "budget",
    "next",
    "on",
];

/// Lowers a parsed machine document.
pub fn lower(doc: &tree::Node, default_name: &str) -> (Workflow, Vec<Diagnostic>) {
    let mut cx = Cx { diags: Vec::new() };
    cx.top_level(
        doc,
        TOP_KEYS,
        "a machine document has name, description, start, input, hopCeiling, budget, triggers and nodes",
    );
    let (name, hop_ceiling) = cx.header(doc, default_name, DEFAULT_HOP_CEILING);
    let input_schema = cx.schema(None, doc, "input");
    let Some(entries) = doc.get("nodes").and_then(|n| n.as_map()) else {
        cx.err(
            "E001",
            None,
            doc.span,
            "`nodes` must be a map of node id → node".into(),
            "see docs/machine.md",
        );
        return (
            workflow(name, Vec::new(), Vec::new(), hop_ceiling, None, None),
            cx.diags,
        );
    };
    let ids: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for (id, body) in entries {
        if let Some((node, out)) = lower_node(&mut cx, id, body, &ids) {
            nodes.push(node);
            edges.extend(out);
        }
    }
    let start = match doc.get("start") {
        Some(s) => match s.as_str() {
            Some(id) if ids.contains(&id) => Some(id.to_string()),
            Some(id) => {
                cx.err(
                    "E003",
                    Some(id),
                    s.span,
                    format!(
                        "start node `{id}` does not exist{}",
                        suggest(id, ids.iter().copied())
                    ),
                    "name one of the nodes under `nodes:`",
                );
                None
            }
            None => None,
        },
        None => ids.first().map(ToString::to_string),
    };
    let mut wf = workflow(name, nodes, edges, hop_ceiling, input_schema, start);
    wf.budget = cx.budget("", doc);
    wf.triggers = cx.triggers(doc);
    cx.structure(&wf);
    (wf, cx.diags)
}

fn workflow(
    name: String,
    nodes: Vec<Node>,
    edges: Vec<Edge>,
    hop_ceiling: u32,
    input_schema: Option<weir_core::schema::CompiledSchema>,
    start: Option<String>,
) -> Workflow {
    Workflow {
        name,
        dialect: Dialect::Machine,
        nodes,
        edges,
        hop_ceiling,
        layout: StateLayout::Variables,
        input_schema,
        start,
        budget: None,
        triggers: Vec::new(),
        index: Default::default(),
    }
}

/// One node: its type, the keys every kind shares, its kind's own keys (one function per
/// kind below), then its transitions.
fn lower_node(cx: &mut Cx, id: &str, body: &tree::Node, ids: &[&str]) -> Option<(Node, Vec<Edge>)> {
    let span = body.span;
    if body.as_map().is_none() {
        cx.err(
            "E001",
            Some(id),
            span,
            format!("node `{id}` must be a map, found {}", body.type_name()),
            "give the node a `type` and its fields",
        );
        return None;
    }
    let ty = cx.node_type(id, body, span, TYPES)?;
    check_keys(cx, id, &ty, body);
    let label = cx.string(id, body, "label");
    let policy = cx.policy(id, body);
    let at = At {
        id,
        cfg: body,
        span,
        noun: "key",
    };
    let kind = match ty.as_str() {
        "ai_agent" => lower_agent(cx, &at),
        "ai_judge" => lower_judge(cx, &at),
        "consensus" => lower_consensus(cx, &at),
        "script" => lower_script(cx, &at),
        "condition" => Some(NodeKind::Condition(ConditionSpec {
            expression: cx.expression(id, body, span)?,
        })),
        "human_gate" => Some(NodeKind::HumanGate(GateSpec {
            prompt: match body.get("prompt") {
                Some(_) => cx.template_in(id, body, "prompt", true)?,
                None => Template::parse("Approve to continue.").expect("constant template parses"),
            },
        })),
        "end" => lower_end(cx, &at),
        _ => None,
    }?;
    let node = Node {
        id: id.to_string(),
        label,
        kind,
        policy,
        output_key: None,
        span,
        model_span: body.get("model").and_then(|v| v.span),
    };
    let edges = transitions(cx, &node, body, ids);
    Some((node, edges))
}

/// Reports keys that neither every kind nor this one takes.
fn check_keys(cx: &mut Cx, id: &str, ty: &str, body: &tree::Node) {
    let specific: &[&str] = match ty {
        "ai_agent" => &[
            "model",
            "prompt",
            "system",
            "temperature",
            "max_tokens",
            "maxRetries",
            "response_schema",
            "tools",
            "max_turns",
            "tool_choice",
            "parallel_tool_calls",
            "approve_tools",
            "fatal_tools",
        ],
        "ai_judge" => &[
            "model",
            "prompt",
            "system",
            "temperature",
            "max_tokens",
            "maxRetries",
            "validator",
        ],
        "consensus" => &[
            "model",
            "prompt",
            "system",
            "temperature",
            "maxRetries",
            "validator",
            "agentCount",
            "quorum",
        ],
        "script" => &["script", "runtime", "validator"],
        "condition" => &["expression"],
        "human_gate" => &["prompt"],
        "end" => &["status", "output"],
        _ => &[],
    };
    for (k, v) in body.as_map().unwrap_or_default() {
        if !COMMON.contains(&k.as_str()) && !specific.contains(&k.as_str()) {
            let all: Vec<&str> = COMMON.iter().chain(specific).copied().collect();
            cx.err(
                "E009",
                Some(id),
                v.key_span.or(v.span),
                format!(
                    "unknown key `{k}` for {ty} nodes{}",
                    suggest(k, all.iter().copied())
                ),
                &format!("{ty} nodes accept: {}", all.join(", ")),
            );
        }
    }
}

/// `maxRetries`: 1 when absent.
fn max_retries(cx: &mut Cx, at: &At<'_>, hi: u64) -> u32 {
    cx.integer(at.id, at.cfg, "maxRetries", 0, hi)
        .map_or(1, |x| x as u32)
}

/// The `model`, `prompt` and `system` of a node that calls a model.
fn model_prompt_system(
    cx: &mut Cx,
    at: &At<'_>,
) -> (Option<String>, Option<Template>, Option<Template>) {
    (
        cx.string(at.id, at.cfg, "model"),
        cx.template_in(at.id, at.cfg, "prompt", true),
        cx.template_in(at.id, at.cfg, "system", true),
    )
}

fn lower_agent(cx: &mut Cx, at: &At<'_>) -> Option<NodeKind> {
    let (id, body) = (at.id, at.cfg);
    at.require(cx, "model", "set `model`, e.g. claude-sonnet-4-5 or mock");
    at.require(
        cx,
        "prompt",
        "set `prompt`, a template such as \"Summarise {{ input.text }}\"",
    );
    let (model, prompt, system) = model_prompt_system(cx, at);
    let response_schema = cx.schema(Some(id), body, "response_schema");
    Some(NodeKind::Agent(AgentSpec {
        model: model?.into(),
        system_prompt: system,
        user_message: prompt?,
        temperature: cx.number(id, body, "temperature", 0.0, 2.0),
        max_tokens: cx
            .integer(id, body, "max_tokens", 1, 1_000_000)
            .map(|x| x as u32),
        response_schema,
        repair_attempts: max_retries(cx, at, 5),
        fallback_models: Vec::new(),
        fallback_error_classes: None,
        tools: cx.agent_tools(id, body),
    }))
}

fn lower_judge(cx: &mut Cx, at: &At<'_>) -> Option<NodeKind> {
    let (id, body) = (at.id, at.cfg);
    at.require(cx, "model", "set `model`, e.g. claude-sonnet-4-5 or mock");
    at.require(cx, "prompt", "set `prompt`");
    at.require(
        cx,
        "validator",
        "add `validator: {kind: boolean}` (or enum with routes, or confidence with threshold)",
    );
    let (model, prompt, system) = model_prompt_system(cx, at);
    let validator = validator(cx, id, body.get("validator")?, false)?;
    Some(NodeKind::Judge(JudgeSpec {
        model: model?.into(),
        system,
        prompt: prompt?,
        max_retries: max_retries(cx, at, 5),
        temperature: cx.number(id, body, "temperature", 0.0, 2.0),
        max_tokens: cx
            .integer(id, body, "max_tokens", 1, 1_000_000)
            .map(|x| x as u32),
        validator: match validator {
            Either::Validator(v) => v,
            Either::Consensus(_) => return None,
        },
    }))
}

fn lower_consensus(cx: &mut Cx, at: &At<'_>) -> Option<NodeKind> {
    let (id, body) = (at.id, at.cfg);
    at.require(cx, "model", "set `model`");
    at.require(cx, "prompt", "set `prompt`");
    at.require(
        cx,
        "validator",
        "add `validator: {kind: boolean}` (or confidence, answer, most_consistent)",
    );
    let (model, prompt, system) = model_prompt_system(cx, at);
    let agent_count = cx
        .integer(id, body, "agentCount", 1, 20)
        .map_or(3, |x| x as u32);
    let quorum = cx
        .integer(id, body, "quorum", 1, 20)
        .map_or(agent_count / 2 + 1, |x| x as u32);
    if quorum > agent_count {
        cx.err(
            "E007",
            Some(id),
            body.get("quorum").and_then(|q| q.span),
            format!("quorum {quorum} is more than agentCount {agent_count}"),
            "quorum is how many of the agents must agree: 1..=agentCount",
        );
    }
    let mode = validator(cx, id, body.get("validator")?, true)?;
    Some(NodeKind::Consensus(ConsensusSpec {
        model: model?.into(),
        system,
        prompt: prompt?,
        agent_count,
        quorum,
        max_retries: max_retries(cx, at, 3),
        temperature: cx.number(id, body, "temperature", 0.0, 2.0),
        mode: match mode {
            Either::Consensus(m) => m,
            Either::Validator(_) => return None,
        },
    }))
}

fn lower_script(cx: &mut Cx, at: &At<'_>) -> Option<NodeKind> {
    let (id, body) = (at.id, at.cfg);
    at.require(
        cx,
        "script",
        "add `script: |` with JavaScript or TypeScript ending in `export default …`",
    );
    if let Some(rt) = body.get("runtime")
        && rt.as_str() != Some("bun")
    {
        cx.err(
            "E007",
            Some(id),
            rt.span,
            "the only script runtime is `bun`".into(),
            "remove `runtime` or set it to bun",
        );
    }
    let source = cx.string(id, body, "script");
    let validator = match body.get("validator") {
        Some(v) => match validator(cx, id, v, false)? {
            Either::Validator(v) => Some(v),
            Either::Consensus(_) => return None,
        },
        None => None,
    };
    Some(NodeKind::Script(ScriptSpec {
        source: source?,
        validator,
    }))
}

fn lower_end(cx: &mut Cx, at: &At<'_>) -> Option<NodeKind> {
    let (id, body) = (at.id, at.cfg);
    let status = cx.end_status(id, body);
    let output = body.get("output").map(|o| {
        let mut bad = None;
        let v = jinja_value(o.to_json(), &mut bad);
        let t = weir_core::expr::ValueTemplate::parse(&v);
        if let Some(message) = bad.or_else(|| t.as_ref().err().map(|e| e.message.clone())) {
            cx.err(
                "E010",
                Some(id),
                o.span,
                format!("invalid template in `output`: {message}"),
                "placeholders are {{ expr }}, e.g. {{ build.stdout }} or {{ input.diff }}",
            );
        }
        t.ok()
    });
    let output = match output {
        Some(None) => return None,
        Some(t) => t,
        None => None,
    };
    Some(NodeKind::End(EndSpec { status, output }))
}

enum Either {
    Validator(Validator),
    Consensus(ConsensusMode),
}

#[expect(
    clippy::too_many_lines,
    reason = "one arm per validator kind of the machine dialect (schema, regex, script, judge), each a few lines of fields with their diagnostics"
)]
fn validator(cx: &mut Cx, id: &str, v: &tree::Node, consensus: bool) -> Option<Either> {
    if v.as_map().is_none() {
        cx.err(
            "E011",
            Some(id),
            v.span,
            format!("`validator` must be a map, found {}", v.type_name()),
            "write validator: {kind: boolean}",
        );
        return None;
    }
    let kinds: &[&str] = if consensus {
        &["boolean", "confidence", "answer", "most_consistent"]
    } else {
        &["boolean", "enum", "confidence"]
    };
    for (k, val) in v.as_map().unwrap_or_default() {
        if !["kind", "routes", "threshold", "choices"].contains(&k.as_str()) {
            cx.err("E009", Some(id), val.key_span.or(val.span), format!("unknown validator key `{k}`"), "a validator has kind, and routes (enum), threshold (confidence) or choices (answer)");
        }
    }
    let Some(kind) = cx.string(id, v, "kind") else {
        cx.err(
            "E008",
            Some(id),
            v.span,
            "validator without a `kind`".into(),
            &format!("kind is one of: {}", kinds.join(", ")),
        );
        return None;
    };
    let kind_span = v.get("kind").and_then(|k| k.span);
    if consensus && kind == "enum" {
        cx.err(
            "E023",
            Some(id),
            kind_span,
            "consensus does not support the enum validator".into(),
            "there is no per-agent approval rule for an arbitrary route; use answer (with choices) or put an ai_judge with enum after the vote",
        );
        return None;
    }
    if !kinds.contains(&kind.as_str()) {
        cx.err(
            "E007",
            Some(id),
            kind_span,
            format!(
                "unknown validator kind `{kind}`{}",
                suggest(&kind, kinds.iter().copied())
            ),
            &format!("kind is one of: {}", kinds.join(", ")),
        );
        return None;
    }
    let threshold = |cx: &mut Cx| {
        if v.get("threshold").is_none() {
            cx.err(
                "E008",
                Some(id),
                v.span,
                "the confidence validator needs a `threshold`".into(),
                "add threshold: 0-100",
            );
            return None;
        }
        cx.number(id, v, "threshold", 0.0, 100.0)
    };
    let misplaced = |cx: &mut Cx, key: &str, allowed: bool| {
        if !allowed && let Some(x) = v.get(key) {
            cx.err(
                "E009",
                Some(id),
                x.key_span.or(x.span),
                format!("`{key}` does not apply to the {kind} validator"),
                "remove it",
            );
        }
    };
    misplaced(cx, "routes", kind == "enum");
    misplaced(cx, "threshold", kind == "confidence");
    misplaced(cx, "choices", kind == "answer");
    Some(match kind.as_str() {
        "boolean" if consensus => Either::Consensus(ConsensusMode::Boolean),
        "boolean" => Either::Validator(Validator::Boolean),
        "confidence" => {
            let t = threshold(cx)?;
            if consensus {
                Either::Consensus(ConsensusMode::Confidence { threshold: t })
            } else {
                Either::Validator(Validator::Confidence { threshold: t })
            }
        }
        "enum" => {
            let Some(routes) = cx.strings(id, v, "routes") else {
                if v.get("routes").is_none() {
                    cx.err(
                        "E008",
                        Some(id),
                        v.span,
                        "the enum validator needs `routes`".into(),
                        "add routes: [low, medium, high]",
                    );
                }
                return None;
            };
            if routes.is_empty() {
                cx.err(
                    "E022",
                    Some(id),
                    v.get("routes").and_then(|r| r.span),
                    "enum `routes` is empty, so the workflow could never leave this node".into(),
                    "list the route names, e.g. routes: [low, medium, high]",
                );
                return None;
            }
            Either::Validator(Validator::Enum { routes })
        }
        "answer" => {
            let choices = cx.strings(id, v, "choices");
            if choices.as_ref().is_some_and(Vec::is_empty) {
                cx.err(
                    "E022",
                    Some(id),
                    v.get("choices").and_then(|r| r.span),
                    "`choices` is empty".into(),
                    "list the allowed answers or remove choices",
                );
                return None;
            }
            Either::Consensus(ConsensusMode::Answer { choices })
        }
        _ => Either::Consensus(ConsensusMode::MostConsistent),
    })
}

/// `on:` and `next:` as edges, checked against the node's routes.
#[expect(
    clippy::too_many_lines,
    reason = "one block per transition form (on: map, on: list, next:), each checked against the node's routes with its own diagnostics"
)]
fn transitions(cx: &mut Cx, node: &Node, body: &tree::Node, ids: &[&str]) -> Vec<Edge> {
    let id = node.id.as_str();
    let mut edges = Vec::new();
    let target = |cx: &mut Cx, t: &tree::Node, what: &str| -> Option<String> {
        match t.as_str() {
            Some(name) if ids.contains(&name) => Some(name.to_string()),
            Some(name) => {
                cx.err(
                    "E003",
                    Some(id),
                    t.span,
                    format!(
                        "{what} goes to `{name}`, which is not a node{}",
                        suggest(name, ids.iter().copied())
                    ),
                    "transition to one of the nodes under `nodes:`",
                );
                None
            }
            None => {
                cx.err(
                    "E011",
                    Some(id),
                    t.span,
                    format!("{what} must name a node"),
                    "write the target node id",
                );
                None
            }
        }
    };
    let routes = node.routes();
    let (on, next) = (body.get("on"), body.get("next"));
    if let (Some(on), Some(_)) = (on, next) {
        cx.err(
            "E024",
            Some(id),
            on.span,
            "a node has either `on:` or `next:`, not both".into(),
            "branching nodes use on:, the others next:",
        );
    }
    match (&routes, on) {
        (None, Some(on)) => {
            let why = match node.kind {
                NodeKind::Agent(_) => "ai_agent nodes cannot branch".to_string(),
                NodeKind::Script(_) => "a script without a validator cannot branch".to_string(),
                _ => format!("{} nodes cannot branch", node.type_name()),
            };
            cx.err(
                "E024",
                Some(id),
                on.span,
                format!("{why}; use `next:`"),
                "add a validator (script) or follow with an ai_judge or condition node",
            );
        }
        (Some(routes), None) if next.is_some() => {
            cx.err(
                "E020",
                Some(id),
                next.and_then(|n| n.span),
                format!(
                    "{} nodes branch: declare `on:` with keys {}",
                    node.type_name(),
                    routes.join(", ")
                ),
                "replace next: with an on: map",
            );
        }
        (Some(routes), None) => {
            cx.err(
                "E020",
                Some(id),
                node.span,
                format!("missing `on:` map with keys {}", routes.join(", ")),
                "every route the validator can return needs a transition",
            );
        }
        (Some(routes), Some(on)) => match on.as_map() {
            None => cx.err(
                "E011",
                Some(id),
                on.span,
                "`on:` must be a map of route → node".into(),
                "e.g. on: {'true': deploy, 'false': abort}",
            ),
            Some(map) => {
                for r in routes {
                    if !map.iter().any(|(k, _)| k == r) {
                        cx.err(
                            "E020",
                            Some(id),
                            on.span,
                            format!("`on:` has no key `{r}`"),
                            &format!("declare every route: {}", routes.join(", ")),
                        );
                    }
                }
                for (k, t) in map {
                    if !routes.contains(k) {
                        let hint = if matches!(node.kind, NodeKind::Consensus(_))
                            && (k == "true" || k == "false")
                        {
                            format!(
                                "consensus routes are {}, never 'true'/'false'",
                                routes.join(", ")
                            )
                        } else {
                            format!("this node returns one of: {}", routes.join(", "))
                        };
                        cx.err(
                            "E021",
                            Some(id),
                            t.span,
                            format!("`on:` key `{k}` is not a route of this node"),
                            &hint,
                        );
                        continue;
                    }
                    if let Some(to) = target(cx, t, &format!("on.{k}")) {
                        edges.push(Edge {
                            source_span: None,
                            target_span: None,
                            id: format!("{id}.on.{k}"),
                            source: id.to_string(),
                            target: to,
                            selector: Some(k.clone()),
                            span: t.span,
                        });
                    }
                }
            }
        },
        (None, None) => {}
    }
    if routes.is_none()
        && let Some(n) = next
        && let Some(to) = target(cx, n, "next")
    {
        edges.push(Edge {
            source_span: None,
            target_span: None,
            id: format!("{id}.next"),
            source: id.to_string(),
            target: to,
            selector: None,
            span: n.span,
        });
    }
    edges
}

/// End-node outputs in the machine dialect use `{{ }}` placeholders; convert them to the
/// shared `{expr}` form so one renderer serves both. The first template that does not parse
/// is reported through `bad`.
fn jinja_value(v: serde_json::Value, bad: &mut Option<String>) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => match Template::parse_jinja(&s) {
            Ok(t) => Value::String(
                t.segments
                    .iter()
                    .map(|seg| match seg {
                        weir_core::expr::Segment::Lit(l) => l.replace('{', "{{").replace('}', "}}"),
                        weir_core::expr::Segment::Expr(e) => format!("{{{e}}}"),
                    })
                    .collect(),
            ),
            Err(e) => {
                bad.get_or_insert(e.message);
                Value::String(s)
            }
        },
        Value::Array(a) => Value::Array(a.into_iter().map(|x| jinja_value(x, bad)).collect()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, jinja_value(v, bad)))
                .collect(),
        ),
        other => other,
    }
}
