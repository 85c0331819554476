//! The `pipeline` dialect (spec 001): a default `model`, an optional `hopCeiling` and a list
//! of `steps`. Each step lowers to one IR node of kind `step`; consecutive steps are joined by
//! `continue` edges and every gate jump becomes a `jump:<step>` edge, so the engine's one
//! scheduler runs pipelines too. The hop ceiling (default 25) counts step executions.

use weir_core::Diagnostic;
use weir_core::ir::{
    Dialect, Edge, Field, FieldSource, Gate, GateAction, GateCondition, LoopRef, Node, NodeKind,
    StateLayout, StepSpec, Workflow,
};
use weir_core::schema::CompiledSchema;
use weir_core::validate::suggest;

use crate::fields::Cx;
use crate::tree::{self, Kind};

/// Default hop ceiling of a pipeline: step executions per run.
pub const DEFAULT_HOP_CEILING: u32 = 25;

const TOP_KEYS: &[&str] = &[
    "dialect",
    "name",
    "description",
    "input",
    "model",
    "hopCeiling",
    "hop_ceiling",
    "budget",
    "triggers",
    "steps",
];
const STEP_KEYS: &[&str] = &[
    "id",
    "label",
    "description",
    "nodes",
    "model",
    "systemPrompt",
    "fields",
    "if",
    "temperature",
    "max_tokens",
    "timeout_seconds",
    "retry_count",
    "budget",
];
const FIELD_TYPES: &[&str] = &["text", "ingest", "multi_ingest"];
const CONDITIONS: &[&str] = &[
    "integerRange",
    "jsonMatches",
    "contains",
    "regex",
    "expression",
];

/// Lowers a parsed pipeline document. Returns the workflow (when no error prevents building
/// it) and the diagnostics found while lowering.
pub fn lower(doc: &tree::Node, default_name: &str) -> (Workflow, Vec<Diagnostic>) {
    let mut cx = Cx { diags: Vec::new() };
    cx.top_level(
        doc,
        TOP_KEYS,
        "a pipeline document has name, description, input, model, hopCeiling, budget, triggers and steps",
    );
    let (name, hop_ceiling) = cx.header(doc, default_name, DEFAULT_HOP_CEILING);
    let input_schema = cx.schema(None, doc, "input");
    let default_model = cx.string("", doc, "model");
    let items: &[tree::Node] = match doc.get("steps").map(|s| &s.kind) {
        Some(Kind::Seq(items)) if !items.is_empty() => items,
        _ => {
            cx.err(
                "E001",
                None,
                doc.get("steps").and_then(|s| s.span).or(doc.span),
                "`steps` must be a non-empty list".into(),
                "add steps: [{id: ..., systemPrompt: ...}]",
            );
            return (
                workflow(name, Vec::new(), Vec::new(), hop_ceiling),
                cx.diags,
            );
        }
    };
    let ids: Vec<String> = items
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.get("id")
                .and_then(|v| v.as_str())
                .map_or_else(|| format!("step{}", i + 1), str::to_string)
        })
        .collect();
    let mut nodes = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if let Some(n) = lower_step(&mut cx, item, &ids[i], &ids, default_model.as_deref()) {
            nodes.push(n);
        }
    }
    // `continue` goes to the next step; jumps go where they say.
    let mut edges = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let NodeKind::Step(spec) = &n.kind else {
            continue;
        };
        if let Some(next) = nodes.get(i + 1) {
            edges.push(Edge {
                source_span: None,
                target_span: None,
                id: format!("{}.continue", n.id),
                source: n.id.clone(),
                target: next.id.clone(),
                selector: Some("continue".into()),
                span: None,
            });
        }
        for route in spec.routes() {
            if let Some(target) = route.strip_prefix("jump:") {
                edges.push(Edge {
                    source_span: None,
                    target_span: None,
                    id: format!("{}.{route}", n.id),
                    source: n.id.clone(),
                    target: target.to_string(),
                    selector: Some(route.clone()),
                    span: n.span,
                });
            }
        }
    }
    let mut wf = workflow(name, nodes, edges, hop_ceiling);
    wf.input_schema = input_schema;
    wf.budget = cx.budget("", doc);
    wf.triggers = cx.triggers(doc);
    cx.structure(&wf);
    (wf, cx.diags)
}

fn workflow(name: String, nodes: Vec<Node>, edges: Vec<Edge>, hop_ceiling: u32) -> Workflow {
    Workflow {
        name,
        dialect: Dialect::Pipeline,
        start: nodes.first().map(|n| n.id.clone()),
        budget: None,
        triggers: Vec::new(),
        index: Default::default(),
        nodes,
        edges,
        hop_ceiling,
        layout: StateLayout::Variables,
        input_schema: None,
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one arm per step kind of the pipeline dialect, each a handful of fields; the shared fields are read at the top"
)]
fn lower_step(
    cx: &mut Cx,
    item: &tree::Node,
    id: &str,
    ids: &[String],
    default_model: Option<&str>,
) -> Option<Node> {
    let span = item.get("id").and_then(|v| v.span).or(item.span);
    if item.as_map().is_none() {
        cx.err(
            "E001",
            None,
            item.span,
            format!("a step must be a map, found {}", item.type_name()),
            "write {id: ..., systemPrompt: ..., fields: [...]}",
        );
        return None;
    }
    if item.get("id").is_none() {
        cx.err(
            "E008",
            Some(id),
            span,
            "step without an `id`".into(),
            "give every step a unique id; jumps and ingest fields name it",
        );
    }
    for (k, v) in item.as_map().unwrap_or_default() {
        if !STEP_KEYS.contains(&k.as_str()) {
            cx.err(
                "E009",
                Some(id),
                v.key_span.or(v.span),
                format!(
                    "unknown step key `{k}`{}",
                    suggest(k, STEP_KEYS.iter().copied())
                ),
                &format!("a step accepts: {}", STEP_KEYS.join(", ")),
            );
        }
    }
    let model = cx
        .string(id, item, "model")
        .or_else(|| default_model.map(str::to_string));
    if model.is_none() {
        cx.err(
            "E008",
            Some(id),
            span,
            "no model for this step".into(),
            "set `model:` at the top of the pipeline or on the step",
        );
    }
    let nodes = cx.integer(id, item, "nodes", 1, 50).map_or(1, |n| n as u32);
    let system_prompt = cx.string(id, item, "systemPrompt");
    let policy = cx.policy(id, item);
    let mut fields = Vec::new();
    match item.get("fields").map(|f| &f.kind) {
        None | Some(Kind::Null) => {}
        Some(Kind::Seq(list)) => {
            for f in list {
                if let Some(field) = lower_field(cx, id, f, ids) {
                    fields.push(field);
                }
            }
        }
        Some(_) => cx.err(
            "E011",
            Some(id),
            item.get("fields").and_then(|f| f.span),
            "`fields` must be a list".into(),
            "write fields: [{name: ..., type: text, from: input.x}]",
        ),
    }
    let gate = item.get("if").and_then(|g| lower_gate(cx, id, g, ids));
    Some(Node {
        id: id.to_string(),
        label: cx.string(id, item, "label"),
        kind: NodeKind::Step(StepSpec {
            model: model?.into(),
            system_prompt,
            nodes,
            fields,
            gate,
            temperature: cx.number(id, item, "temperature", 0.0, 2.0),
            max_tokens: cx
                .integer(id, item, "max_tokens", 1, 1_000_000)
                .map(|x| x as u32),
        }),
        policy,
        output_key: None,
        span,
        model_span: item.get("model").and_then(|v| v.span),
    })
}

fn step_ref(cx: &mut Cx, id: &str, v: &tree::Node, what: &str, ids: &[String]) -> Option<String> {
    let Some(target) = v.as_str() else {
        cx.err(
            "E011",
            Some(id),
            v.span,
            format!("{what} must name a step id"),
            "write the step's id",
        );
        return None;
    };
    if !ids.iter().any(|s| s == target) {
        cx.err(
            "E003",
            Some(id),
            v.span,
            format!(
                "{what} names step `{target}`, which does not exist{}",
                suggest(target, ids.iter().map(String::as_str))
            ),
            "name one of the pipeline's step ids",
        );
        return None;
    }
    Some(target.to_string())
}

#[expect(
    clippy::too_many_lines,
    reason = "one arm per field type of a pipeline field (text, number, choice, list, object), each with its diagnostics"
)]
fn lower_field(cx: &mut Cx, id: &str, f: &tree::Node, ids: &[String]) -> Option<Field> {
    if f.as_map().is_none() {
        cx.err(
            "E011",
            Some(id),
            f.span,
            "a field must be a map".into(),
            "write {name: ..., type: text|ingest|multi_ingest, from: ...}",
        );
        return None;
    }
    for (k, v) in f.as_map().unwrap_or_default() {
        if !["name", "type", "from", "fallback"].contains(&k.as_str()) {
            cx.err(
                "E009",
                Some(id),
                v.key_span.or(v.span),
                format!("unknown field key `{k}`"),
                "a field has name, type, from and fallback",
            );
        }
    }
    let name = cx.string(id, f, "name").unwrap_or_else(|| "Input".into());
    let ty = cx.string(id, f, "type")?;
    let ty_span = f.get("type").and_then(|t| t.span);
    let fallback = f.get("fallback").map(|v| match &v.kind {
        Kind::Str(s) => s.clone(),
        _ => v.to_json().to_string(),
    });
    let Some(from) = f.get("from") else {
        cx.err("E008", Some(id), f.span, format!("field `{name}` has no `from`"), "text fields read an expression such as input.context; ingest fields read {stepId, loopRef}");
        return None;
    };
    let source = match ty.as_str() {
        "text" => {
            let Some(expr) = from.as_str() else {
                cx.err(
                    "E011",
                    Some(id),
                    from.span,
                    "a text field's `from` is an expression such as input.context".into(),
                    "write from: input.context",
                );
                return None;
            };
            match weir_core::expr::Expr::parse(expr) {
                Ok(from) => FieldSource::Text { from },
                Err(e) => {
                    cx.err(
                        "E006",
                        Some(id),
                        from.span,
                        format!("invalid `from` expression `{expr}`: {}", e.message),
                        "see docs/expressions.md",
                    );
                    return None;
                }
            }
        }
        "ingest" | "multi_ingest" => {
            if from.as_map().is_none() {
                cx.err(
                    "E011",
                    Some(id),
                    from.span,
                    format!("an {ty} field's `from` is {{stepId, loopRef}}"),
                    "write from: {stepId: draft, loopRef: current}",
                );
                return None;
            }
            let step = step_ref(
                cx,
                id,
                from.get("stepId").or_else(|| from.get("nodeRef"))?,
                "`from.stepId`",
                ids,
            )?;
            let loop_ref = match from.get("loopRef").and_then(|l| l.as_str()) {
                None | Some("current") => LoopRef::Current,
                Some("previous") => LoopRef::Previous,
                Some(other) => {
                    cx.err(
                        "E007",
                        Some(id),
                        from.get("loopRef").and_then(|l| l.span),
                        format!("loopRef `{other}` is not current or previous"),
                        "use loopRef: current or loopRef: previous",
                    );
                    LoopRef::Current
                }
            };
            if ty == "ingest" {
                FieldSource::Ingest { step, loop_ref }
            } else {
                FieldSource::MultiIngest { step, loop_ref }
            }
        }
        other => {
            cx.err(
                "E004",
                Some(id),
                ty_span,
                format!(
                    "unknown field type `{other}`{}",
                    suggest(other, FIELD_TYPES.iter().copied())
                ),
                "field types are text, ingest and multi_ingest",
            );
            return None;
        }
    };
    Some(Field {
        name,
        source,
        fallback,
    })
}

fn lower_action(
    cx: &mut Cx,
    id: &str,
    v: Option<&tree::Node>,
    default: GateAction,
    ids: &[String],
) -> GateAction {
    let Some(v) = v else { return default };
    match &v.kind {
        Kind::Str(s) if s == "continue" => GateAction::Continue,
        Kind::Str(s) if s == "abort" => GateAction::Abort,
        Kind::Map(_) => match v.get("jump").and_then(|j| j.get("stepId")) {
            Some(target) => step_ref(cx, id, target, "jump", ids).map_or(default, GateAction::Jump),
            None => {
                cx.err(
                    "E011",
                    Some(id),
                    v.span,
                    "a jump is {jump: {stepId: <step>}}".into(),
                    "write else: {jump: {stepId: draft}}",
                );
                default
            }
        },
        _ => {
            cx.err(
                "E007",
                Some(id),
                v.span,
                format!("`{}` is not an action", v.to_json()),
                "an action is continue, abort or {jump: {stepId: <step>}}",
            );
            default
        }
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one arm per gate condition form, each with its diagnostics and its jump target checked"
)]
fn lower_gate(cx: &mut Cx, id: &str, g: &tree::Node, ids: &[String]) -> Option<Gate> {
    if g.as_map().is_none() {
        cx.err(
            "E011",
            Some(id),
            g.span,
            "`if:` must be a map".into(),
            "write if: {integerRange: [4, 5], then: continue, else: abort}",
        );
        return None;
    }
    let present: Vec<&str> = CONDITIONS
        .iter()
        .copied()
        .filter(|c| g.get(c).is_some())
        .collect();
    for (k, v) in g.as_map().unwrap_or_default() {
        if !CONDITIONS.contains(&k.as_str()) && k != "then" && k != "else" {
            cx.err("E009", Some(id), v.key_span.or(v.span), format!("unknown gate key `{k}`{}", suggest(k, CONDITIONS.iter().copied())), "a gate has one condition (integerRange, jsonMatches, contains, regex, expression) and then/else");
        }
    }
    if present.len() != 1 {
        cx.err(
            "E008",
            Some(id),
            g.span,
            format!(
                "a gate needs exactly one condition, found {}",
                present.len()
            ),
            "use one of integerRange, jsonMatches, contains, regex, expression",
        );
        return None;
    }
    // Actions first, so a jump to a missing step is reported even when the condition is bad.
    let then = lower_action(cx, id, g.get("then"), GateAction::Continue, ids);
    let otherwise = lower_action(cx, id, g.get("else"), GateAction::Abort, ids);
    let key = present[0];
    let v = g.get(key)?;
    let condition = match key {
        "integerRange" => {
            let bounds: Option<Vec<i64>> = match &v.kind {
                Kind::Seq(items) => items.iter().map(|i| i.to_json().as_i64()).collect(),
                _ => None,
            };
            match bounds.as_deref() {
                Some([lo, hi]) if lo <= hi => GateCondition::IntegerRange(*lo, *hi),
                _ => {
                    cx.err("E007", Some(id), v.span, format!("integerRange must be [low, high] with two integers and low <= high, found {}", v.to_json()), "write integerRange: [4, 5]");
                    return None;
                }
            }
        }
        "jsonMatches" => match CompiledSchema::compile(&v.to_json()) {
            Ok(schema) => GateCondition::JsonMatches(schema),
            Err(e) => {
                cx.err(
                    "E017",
                    Some(id),
                    v.span,
                    format!("invalid jsonMatches schema: {e}"),
                    "give a JSON Schema object",
                );
                return None;
            }
        },
        "contains" => GateCondition::Contains(cx.string(id, g, key)?),
        "regex" => {
            let r = cx.string(id, g, key)?;
            match regex::Regex::new(&r) {
                Ok(re) => GateCondition::Regex(weir_core::ir::Pattern(re)),
                Err(e) => {
                    cx.err(
                        "E007",
                        Some(id),
                        v.span,
                        format!("invalid regex: {e}"),
                        "write a Rust-syntax regular expression",
                    );
                    return None;
                }
            }
        }
        _ => {
            let e = cx.string(id, g, key)?;
            match weir_core::expr::Expr::parse(&e) {
                Ok(x) => GateCondition::Expression(x),
                Err(err) => {
                    cx.err(
                        "E006",
                        Some(id),
                        v.span,
                        format!("invalid gate expression `{e}`: {}", err.message),
                        "the expression sees output, parsed and index",
                    );
                    return None;
                }
            }
        }
    };
    Some(Gate {
        condition,
        then,
        otherwise,
    })
}
