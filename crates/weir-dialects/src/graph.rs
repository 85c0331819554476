//! The `graph` dialect (spec 002): `nodes` with `id`, `type`, `position`, `config`, and
//! `edges` with `source`, `target` and an optional `condition_value` / `label` selector.
//!
//! Lowering checks every field by hand so that every problem is reported at once, at the
//! key it concerns.

use serde_json::Value;
use weir_core::Diagnostic;
use weir_core::ErrorClass;
use weir_core::expr::{self, Template};
use weir_core::ir::{
    AgentSpec, ConditionSpec, DEFAULT_HOP_CEILING, DEFAULT_REPAIR_ATTEMPTS, Dialect, Edge, EndSpec,
    GateSpec, LoopSpec, Node, NodeKind, StateLayout, ToolSpec, Workflow,
};
use weir_core::validate::suggest;

use crate::fields::{At, Cx};
use crate::tree::{self, Kind};

const NODE_TYPES: &[&str] = &[
    "agent",
    "tool",
    "condition",
    "loop",
    "human_gate",
    "merge",
    "end",
];
const UNIVERSAL: &[&str] = &[
    "label",
    "timeout_seconds",
    "retry_count",
    "output_key",
    "budget",
];
const TOP_KEYS: &[&str] = &[
    "dialect",
    "name",
    "description",
    "input",
    "nodes",
    "edges",
    "hop_ceiling",
    "budget",
    "triggers",
];

/// Lowers a parsed graph document. Returns the workflow (when no error prevents building
/// it) and the diagnostics found while lowering.
#[expect(
    clippy::too_many_lines,
    reason = "a graph document lowered in its order: top-level fields, nodes, edges, entry, triggers; each per-kind detail is in the lower_* functions it calls"
)]
pub fn lower(doc: &tree::Node, default_name: &str) -> (Workflow, Vec<Diagnostic>) {
    let mut cx = Cx { diags: Vec::new() };
    if doc.as_map().is_none() {
        cx.err(
            "E001",
            None,
            doc.span,
            format!(
                "a graph workflow is a map with `nodes` and `edges`, found {}",
                doc.type_name()
            ),
            "see docs/graph.md",
        );
        return (empty_workflow(default_name), cx.diags);
    }
    cx.top_level(
        doc,
        TOP_KEYS,
        "a graph document has dialect, name, description, input, nodes, edges, hop_ceiling, budget and triggers",
    );
    let (name, hop_ceiling) = cx.header(doc, default_name, DEFAULT_HOP_CEILING);
    let input_schema = cx.schema(None, doc, "input");

    let mut nodes = Vec::new();
    match doc.get("nodes").map(|n| &n.kind) {
        Some(Kind::Seq(items)) => {
            for item in items {
                if let Some(n) = lower_node(&mut cx, item) {
                    nodes.push(n);
                }
            }
        }
        Some(_) | None => cx.err(
            "E001",
            None,
            doc.get("nodes").and_then(|n| n.span).or(doc.span),
            "`nodes` must be a list of nodes".into(),
            "add \"nodes\": [{\"id\": ..., \"type\": ..., \"config\": {...}}]",
        ),
    }
    let mut edges = Vec::new();
    match doc.get("edges").map(|n| &n.kind) {
        Some(Kind::Seq(items)) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(e) = lower_edge(&mut cx, item, i) {
                    edges.push(e);
                }
            }
        }
        None | Some(Kind::Null) => {}
        Some(_) => cx.err(
            "E001",
            None,
            doc.get("edges").and_then(|n| n.span),
            "`edges` must be a list".into(),
            "add \"edges\": [{\"source\": ..., \"target\": ...}]",
        ),
    }
    // Ids of nodes that failed to lower still exist as far as edges are concerned.
    let mut known: std::collections::HashSet<String> = std::collections::HashSet::new();
    let had_errors = cx.diags.iter().any(Diagnostic::is_error);
    let mut had_errors_dup = false;
    if let Some(Kind::Seq(items)) = doc.get("nodes").map(|n| &n.kind) {
        for item in items {
            if let Some(v) = item.get("id")
                && let Some(id) = v.as_str()
            {
                if had_errors && known.contains(id) {
                    had_errors_dup = true;
                    cx.err(
                        "E002",
                        Some(id),
                        v.span,
                        format!("duplicate node id `{id}`"),
                        "node ids must be unique per graph; rename one of them",
                    );
                }
                known.insert(id.to_string());
            }
        }
    }
    let wf = Workflow {
        name,
        dialect: Dialect::Graph,
        nodes,
        edges,
        hop_ceiling,
        layout: StateLayout::Flat,
        input_schema,
        start: None,
        budget: cx.budget("", doc),
        triggers: cx.triggers(doc),
        index: Default::default(),
    };
    for d in weir_core::validate::structure(&wf) {
        let about_failed_node = d.code == "E003"
            && d.node_id
                .as_deref()
                .is_some_and(|id| wf.node(id).is_none() && known.contains(id));
        // With nodes missing, entry and reachability findings would be guesses.
        let unreliable = had_errors && (d.code.starts_with('W') || d.code == "E012");
        let duplicate_reported = d.code == "E002" && had_errors_dup;
        if !about_failed_node && !unreliable && !duplicate_reported {
            cx.diags.push(d);
        }
    }
    (wf, cx.diags)
}

fn empty_workflow(name: &str) -> Workflow {
    Workflow {
        name: name.to_string(),
        dialect: Dialect::Graph,
        nodes: Vec::new(),
        edges: Vec::new(),
        hop_ceiling: DEFAULT_HOP_CEILING,
        layout: StateLayout::Flat,
        input_schema: None,
        start: None,
        budget: None,
        triggers: Vec::new(),
        index: Default::default(),
    }
}

/// One node: its envelope (`id`, `type`, `position`, `config`), the keys every kind
/// shares, then its kind's own config (one function per kind below).
fn lower_node(cx: &mut Cx, item: &tree::Node) -> Option<Node> {
    let id = node_id(cx, item)?;
    let span = item.get("id").and_then(|v| v.span).or(item.span);
    check_node_fields(cx, &id, item);
    let ty = cx.node_type(&id, item, span, NODE_TYPES)?;
    let cfg = node_config(cx, &id, item)?;
    check_config_keys(cx, &id, &ty, cfg);
    let label = cx.string(&id, cfg, "label");
    let policy = cx.policy(&id, cfg);
    let output_key = cx.string(&id, cfg, "output_key");
    if let Some(k) = &output_key
        && (k.is_empty() || k.starts_with("__"))
    {
        cx.err(
            "E007",
            Some(&id),
            cfg.get("output_key").and_then(|v| v.span),
            format!("output_key `{k}` is not allowed"),
            "keys starting with __ are internal; use a plain name",
        );
    }
    let at = At {
        id: &id,
        cfg,
        span,
        noun: "config",
    };
    let kind = match ty.as_str() {
        "agent" => lower_agent(cx, &at),
        "tool" => lower_tool(cx, &at),
        "condition" => Some(NodeKind::Condition(ConditionSpec {
            expression: cx.expression(&id, cfg, span)?,
        })),
        "loop" => lower_loop(cx, &at),
        "human_gate" => lower_gate(cx, &at),
        "merge" => Some(NodeKind::Merge),
        "end" => lower_end(cx, &at),
        _ => None,
    }?;
    Some(Node {
        label,
        kind,
        policy,
        output_key,
        span,
        model_span: cfg.get("model").and_then(|v| v.span),
        id,
    })
}

/// The node's `id`: a non-empty string.
fn node_id(cx: &mut Cx, item: &tree::Node) -> Option<String> {
    if item.as_map().is_none() {
        cx.err(
            "E001",
            None,
            item.span,
            format!("a node must be a map, found {}", item.type_name()),
            "write {\"id\": ..., \"type\": ..., \"config\": {...}}",
        );
        return None;
    }
    match item.get("id").map(|v| &v.kind) {
        Some(Kind::Str(s)) if !s.trim().is_empty() => Some(s.clone()),
        _ => {
            cx.err(
                "E008",
                None,
                item.span,
                "node without an `id`".into(),
                "give every node a unique string id",
            );
            None
        }
    }
}

/// Reports node fields other than id, type, position and config.
fn check_node_fields(cx: &mut Cx, id: &str, item: &tree::Node) {
    for (k, v) in item.as_map().unwrap_or_default() {
        if !["id", "type", "position", "config"].contains(&k.as_str()) {
            let hint = match k.as_str() {
                "next" | "on" => format!(
                    "`{k}` is how a machine state names what follows; a graph says it with edges: {{id: e1, source: {id}, target: NEXT}} (or write the file as a machine: docs/machine.md)"
                ),
                _ => {
                    "a node has id, type, position and config; type-specific keys go inside config"
                        .into()
                }
            };
            cx.err(
                "E009",
                Some(id),
                v.key_span.or(v.span),
                format!("unknown node field `{k}`"),
                &hint,
            );
        }
    }
}

/// An empty `config`, for nodes that have none.
static NO_CONFIG: tree::Node = tree::Node {
    key_span: None,
    span: None,
    kind: Kind::Map(Vec::new()),
};

/// The node's `config` map (absent or null: an empty one).
fn node_config<'a>(cx: &mut Cx, id: &str, item: &'a tree::Node) -> Option<&'a tree::Node> {
    match item.get("config") {
        None => Some(&NO_CONFIG),
        Some(c) if matches!(c.kind, Kind::Null) => Some(&NO_CONFIG),
        Some(c) if c.as_map().is_some() => Some(c),
        Some(c) => {
            cx.err(
                "E011",
                Some(id),
                c.span,
                format!("`config` must be a map, found {}", c.type_name()),
                "write \"config\": {...}",
            );
            None
        }
    }
}

/// Reports config keys that neither every kind nor this one takes.
fn check_config_keys(cx: &mut Cx, id: &str, ty: &str, cfg: &tree::Node) {
    let specific: &[&str] = match ty {
        "agent" => &[
            "model",
            "system_prompt",
            "user_message",
            "temperature",
            "max_tokens",
            "response_schema",
            "repair_attempts",
            "fallback_models",
            "fallback_error_classes",
            "tools",
            "max_turns",
            "tool_choice",
            "parallel_tool_calls",
            "approve_tools",
            "fatal_tools",
        ],
        "tool" => &["tool_name", "params"],
        "condition" => &["expression"],
        "loop" => &["expression", "max_iterations"],
        "human_gate" => &["prompt"],
        "end" => &["status", "output"],
        _ => &[],
    };
    for (k, v) in cfg.as_map().unwrap_or_default() {
        if !UNIVERSAL.contains(&k.as_str()) && !specific.contains(&k.as_str()) {
            let all: Vec<&str> = UNIVERSAL.iter().chain(specific).copied().collect();
            cx.err(
                "E009",
                Some(id),
                v.key_span.or(v.span),
                format!(
                    "unknown config key `{k}` for {ty} nodes{}",
                    suggest(k, all.iter().copied())
                ),
                &format!("{ty} nodes accept: {}", all.join(", ")),
            );
        }
    }
}

fn lower_agent(cx: &mut Cx, at: &At<'_>) -> Option<NodeKind> {
    let (id, cfg) = (at.id, at.cfg);
    at.require(
        cx,
        "model",
        "set \"model\", e.g. \"claude-haiku-4-5\" or \"mock\"",
    );
    at.require(
        cx,
        "user_message",
        "set \"user_message\", a template such as \"Lead: {lead}\"",
    );
    let model = cx.string(id, cfg, "model");
    let system_prompt = cx.template(id, cfg, "system_prompt");
    let user_message = cx.template(id, cfg, "user_message");
    let temperature = cx.number(id, cfg, "temperature", 0.0, 2.0);
    let max_tokens = cx
        .integer(id, cfg, "max_tokens", 1, 1_000_000)
        .map(|x| x as u32);
    let response_schema = cx.schema(Some(id), cfg, "response_schema");
    let repair_attempts = cx
        .integer(id, cfg, "repair_attempts", 0, 10)
        .map_or(DEFAULT_REPAIR_ATTEMPTS, |x| x as u32);
    let fallback_models = cx.strings(id, cfg, "fallback_models").unwrap_or_default();
    let classes = cx.strings(id, cfg, "fallback_error_classes");
    let fallback_error_classes = classes.map(|names| {
        let mut out = Vec::new();
        for c in &names {
            match ErrorClass::parse(c) {
                Some(class) => out.push(class),
                None => cx.err(
                    "E007",
                    Some(id),
                    cfg.get("fallback_error_classes").and_then(|v| v.span),
                    format!(
                        "`{c}` is not an error class{}",
                        suggest(c, ErrorClass::ALL.iter().map(|c| c.as_str()))
                    ),
                    "classes: rate_limit, timeout, server_error, http_error, malformed, network, auth",
                ),
            }
        }
        out
    });
    let tools = cx.agent_tools(id, cfg);
    Some(NodeKind::Agent(AgentSpec {
        model: model?.into(),
        system_prompt,
        user_message: user_message?,
        temperature,
        max_tokens,
        response_schema,
        repair_attempts,
        fallback_models,
        fallback_error_classes,
        tools,
    }))
}

fn lower_tool(cx: &mut Cx, at: &At<'_>) -> Option<NodeKind> {
    let (id, cfg) = (at.id, at.cfg);
    at.require(cx, "tool_name", "set \"tool_name\", e.g. \"http_request\"");
    let tool_name = cx.string(id, cfg, "tool_name");
    let params = match cfg.get("params") {
        None => expr::ValueTemplate::parse(&Value::Object(Default::default())).ok(),
        Some(p) if p.as_map().is_some() => match expr::ValueTemplate::parse(&p.to_json()) {
            Ok(t) => Some(t),
            Err(e) => {
                cx.err(
                    "E010",
                    Some(id),
                    p.span,
                    format!("invalid template in `params`: {}", e.message),
                    "placeholders are {key} or {key.path}; write {{ and }} for literal braces",
                );
                None
            }
        },
        Some(p) => {
            cx.err(
                "E011",
                Some(id),
                p.span,
                format!("`params` must be a map, found {}", p.type_name()),
                "write \"params\": {...}",
            );
            None
        }
    };
    Some(NodeKind::Tool(ToolSpec {
        tool_name: tool_name?,
        params: params?,
    }))
}

fn lower_loop(cx: &mut Cx, at: &At<'_>) -> Option<NodeKind> {
    let expression = cx.expression(at.id, at.cfg, at.span);
    let max_iterations = cx
        .integer(at.id, at.cfg, "max_iterations", 1, 10_000)
        .unwrap_or(10) as u32;
    Some(NodeKind::Loop(LoopSpec {
        expression: expression?,
        max_iterations,
    }))
}

fn lower_gate(cx: &mut Cx, at: &At<'_>) -> Option<NodeKind> {
    Some(NodeKind::HumanGate(GateSpec {
        prompt: if at.cfg.get("prompt").is_some() {
            cx.template(at.id, at.cfg, "prompt")?
        } else {
            Template::parse("Approve to continue.").expect("constant template parses")
        },
    }))
}

fn lower_end(cx: &mut Cx, at: &At<'_>) -> Option<NodeKind> {
    let status = cx.end_status(at.id, at.cfg);
    let output = match at
        .cfg
        .get("output")
        .map(|o| expr::ValueTemplate::parse(&o.to_json()))
    {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            cx.err(
                "E010",
                Some(at.id),
                at.cfg.get("output").and_then(|v| v.span),
                format!("invalid template in `output`: {}", e.message),
                "placeholders are {key} or {key.path}; write {{ and }} for literal braces",
            );
            return None;
        }
    };
    Some(NodeKind::End(EndSpec { status, output }))
}

fn lower_edge(cx: &mut Cx, item: &tree::Node, index: usize) -> Option<Edge> {
    if item.as_map().is_none() {
        cx.err(
            "E001",
            None,
            item.span,
            format!("an edge must be a map, found {}", item.type_name()),
            "write {\"source\": ..., \"target\": ...}",
        );
        return None;
    }
    for (k, v) in item.as_map().unwrap_or_default() {
        if !["id", "source", "target", "condition_value", "label"].contains(&k.as_str()) {
            cx.err(
                "E009",
                None,
                v.key_span.or(v.span),
                format!("unknown edge field `{k}`"),
                "an edge has id, source, target, condition_value and label",
            );
        }
    }
    let text = |key: &str| {
        item.get(key).and_then(|v| match &v.kind {
            Kind::Str(s) => Some(s.clone()),
            Kind::Bool(b) => Some(b.to_string()),
            Kind::Num(n) => Some(n.to_string()),
            _ => None,
        })
    };
    let id = text("id").unwrap_or_else(|| format!("edge{}", index + 1));
    let (Some(source), Some(target)) = (text("source"), text("target")) else {
        cx.err(
            "E008",
            None,
            item.span,
            format!("edge `{id}` needs both `source` and `target`"),
            "name the node ids the edge connects",
        );
        return None;
    };
    Some(Edge {
        id,
        source,
        target,
        selector: text("condition_value").or_else(|| text("label")),
        span: item.span,
        source_span: item.get("source").and_then(|v| v.span),
        target_span: item.get("target").and_then(|v| v.span),
    })
}
