//! Checks on the IR that hold for every dialect: graph integrity (missing nodes, duplicate
//! ids, entry nodes, unreachable nodes, branch selectors, merges that can lose a branch) and
//! capabilities (every tool exists, every model can be routed). All problems are collected.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use crate::diag::Diagnostic;
use crate::ir::{NodeKind, Workflow};
use crate::model::ModelClient;
use crate::tool::ToolRunner;

/// Structural checks; the loader has already reported per-field problems.
#[expect(
    clippy::too_many_lines,
    reason = "the structural checks in the order of the diagnostics they report (entry, edges, reachability, loops, ends); each check is a short block that shares the node index built at the top"
)]
pub fn structure(wf: &Workflow) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for n in &wf.nodes {
        if seen.insert(n.id.as_str(), 1).is_some() {
            out.push(
                Diagnostic::error("E002", format!("duplicate node id `{}`", n.id))
                    .node(&n.id)
                    .at(n.span)
                    .hint("node ids must be unique per graph; rename one of them"),
            );
        }
    }
    let ids: HashSet<&str> = wf.nodes.iter().map(|n| n.id.as_str()).collect();
    let mut edge_ids = HashSet::new();
    for e in &wf.edges {
        if !edge_ids.insert(e.id.as_str()) {
            out.push(
                Diagnostic::error("E013", format!("duplicate edge id `{}`", e.id))
                    .edge(&e.id)
                    .at(e.span)
                    .hint("edge ids must be unique; rename one of them"),
            );
        }
        for (end, id, span) in [
            ("source", &e.source, e.source_span),
            ("target", &e.target, e.target_span),
        ] {
            if !ids.contains(id.as_str()) {
                out.push(
                    Diagnostic::error(
                        "E003",
                        format!("edge `{}` has {end} `{id}`, which is not a node", e.id),
                    )
                    .node(id)
                    .edge(&e.id)
                    .at(span.or(e.span))
                    .hint(format!(
                        "add a node with id `{id}` or point the edge's {end} at an existing node{}",
                        suggest(id, ids.iter().copied())
                    )),
                );
            }
        }
        let Some(src) = wf.node(&e.source) else {
            continue;
        };
        if let Some(routes) = src.routes() {
            match &e.selector {
                None => out.push(
                    Diagnostic::warning(
                        "W101",
                        format!(
                            "edge `{}` leaves {} node `{}` without a selector, so it fires on every result",
                            e.id,
                            src.type_name(),
                            src.id
                        ),
                    )
                    .node(&src.id)
                    .edge(&e.id)
                    .at(e.span)
                    .hint(format!("set \"condition_value\" to one of: {}", routes.join(", "))),
                ),
                Some(s) if !routes.iter().any(|r| e.matches(r)) => out.push(
                    Diagnostic::error(
                        "E014",
                        format!(
                            "edge `{}` out of {} node `{}` selects `{s}`, which it never returns",
                            e.id,
                            src.type_name(),
                            src.id
                        ),
                    )
                    .node(&src.id)
                    .at(e.span)
                    .hint(format!("this node returns one of: {}", routes.join(", "))),
                ),
                Some(_) => {}
            }
        }
    }
    let entries: Vec<&crate::ir::Node> = wf.entries().collect();
    if !wf.nodes.is_empty() && entries.is_empty() {
        out.push(
            Diagnostic::error("E012", "no entry node: every node has an incoming edge")
                .hint("a graph starts at the nodes with no incoming edge; remove an edge into the first node"),
        );
    }
    if wf.nodes.is_empty() {
        out.push(
            Diagnostic::error("E012", "the workflow has no nodes").hint("add at least one node"),
        );
    }
    // A graph (entries by incoming edges) with edges: a node with none starts a flow of its
    // own, usually one never wired (W106); several start nodes run at once (W107).
    if wf.start.is_none() && !wf.edges.is_empty() && !entries.is_empty() {
        let isolated =
            |id: &str| wf.incoming(id).next().is_none() && wf.outgoing(id).next().is_none();
        for n in entries.iter().filter(|n| isolated(&n.id)) {
            out.push(
                Diagnostic::warning(
                    "W106",
                    format!(
                        "node `{}` has no edges, so it runs as a start node of its own",
                        n.id
                    ),
                )
                .node(&n.id)
                .at(n.span)
                .hint("connect it with an edge, or remove it"),
            );
        }
        let starts: Vec<&str> = entries
            .iter()
            .filter(|n| !isolated(&n.id))
            .map(|n| n.id.as_str())
            .collect();
        if starts.len() > 1 {
            let first = entries
                .iter()
                .find(|n| n.id == starts[0])
                .and_then(|n| n.span);
            out.push(
                Diagnostic::warning(
                    "W107",
                    format!(
                        "{} start nodes (no incoming edge), which run at once: {}",
                        starts.len(),
                        starts.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
                    ),
                )
                .node(starts[0])
                .at(first)
                .hint(format!(
                    "fine for a fan-out from the start; to start at `{}` alone, add edges from it to the others",
                    starts[0]
                )),
            );
        }
    }
    if let Some(schema) = &wf.input_schema {
        undeclared_input(wf, schema.source(), &mut out);
    }
    // Reachability from the entries.
    let reach = reachable(wf, entries.iter().map(|n| n.id.as_str()));
    for n in &wf.nodes {
        if !reach.contains(n.id.as_str()) && !entries.is_empty() {
            out.push(
                Diagnostic::warning("W102", format!("node `{}` is unreachable", n.id))
                    .node(&n.id)
                    .at(n.span)
                    .hint("connect it with an edge from a node that runs, or remove it"),
            );
        }
    }
    // A merge fed by a branch that a condition may rule out still completes (the branch
    // counts as ruled out), but that is often a mistake: say so.
    for n in &wf.nodes {
        if !matches!(n.kind, NodeKind::Merge) {
            continue;
        }
        let preds: BTreeSet<&str> = ancestors(wf, &n.id);
        if let Some(b) = wf
            .nodes
            .iter()
            .find(|b| b.routes().is_some() && preds.contains(b.id.as_str()))
            && wf.incoming(&n.id).count() > 1
        {
            out.push(
                Diagnostic::warning(
                    "W103",
                    format!(
                        "merge `{}` is downstream of {} `{}`: a branch it rules out counts as done",
                        n.id,
                        b.type_name(),
                        b.id
                    ),
                )
                .node(&n.id)
                .at(n.span)
                .hint("this is fine when intended; the merge fires once every branch that can still arrive has arrived"),
            );
        }
    }
    out
}

/// W108: templates that read `input.KEY` for a key the `input` schema's `properties` lack.
fn undeclared_input(wf: &Workflow, schema: &serde_json::Value, out: &mut Vec<Diagnostic>) {
    let Some(props) = schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
    else {
        return;
    };
    static BLOCK: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"(?s)\{\{.*?\}\}|\{%.*?%\}").expect("a valid regex")
    });
    static KEY: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r#"\binput(?:\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*["']([^"']+)["']\s*\])"#)
            .expect("a valid regex")
    });
    for n in &wf.nodes {
        let Ok(kind) = serde_json::to_value(&n.kind) else {
            continue;
        };
        let mut texts = Vec::new();
        strings(&kind, &mut texts);
        let mut reported: BTreeSet<String> = BTreeSet::new();
        for t in texts {
            for block in BLOCK.find_iter(t) {
                for c in KEY.captures_iter(block.as_str()) {
                    let Some(key) = c.get(1).or_else(|| c.get(2)).map(|m| m.as_str()) else {
                        continue;
                    };
                    if props.contains_key(key) || !reported.insert(key.to_string()) {
                        continue;
                    }
                    let declared: Vec<&str> = props.keys().map(String::as_str).collect();
                    out.push(
                        Diagnostic::warning(
                            "W108",
                            format!("a template of `{}` reads `input.{key}`, which the input schema does not declare", n.id),
                        )
                        .node(&n.id)
                        .at(n.span)
                        .hint(format!(
                            "add `{key}` to the input schema's properties, or fix the name{}",
                            match suggest(key, declared.iter().copied()) {
                                s if s.is_empty() => format!(" (declared: {})", declared.join(", ")),
                                s => s,
                            }
                        )),
                    );
                }
            }
        }
    }
}

fn strings<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match v {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        serde_json::Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// Checks that every tool exists and every model can be routed.
#[expect(
    clippy::too_many_lines,
    reason = "one short block per kind of capability a node needs (tools, models, scripts), all over the same walk of the nodes"
)]
pub fn capabilities(
    wf: &Workflow,
    tools: &dyn ToolRunner,
    models: &dyn ModelClient,
    secrets: &dyn crate::secrets::Secrets,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let passed = secrets.script_env();
    for n in &wf.nodes {
        if let NodeKind::Script(s) = &n.kind {
            for name in crate::script::env_reads(&s.source) {
                if !crate::script::BASE_ENV.contains(&name.as_str()) && !passed.contains(&name) {
                    out.push(
                        Diagnostic::warning(
                            "W109",
                            format!(
                                "the script reads `{name}` from the environment, which weir does not pass to scripts"
                            ),
                        )
                        .node(&n.id)
                        .at(n.span)
                        .hint(format!(
                            "add \"{name}\" to `env` under `[scripts]` in weir.toml; unless it is passed, reading it fails the node"
                        )),
                    );
                }
            }
        }
        if let NodeKind::Tool(t) = &n.kind {
            for name in crate::secrets::referenced(t.params.source()) {
                if !secrets.is_declared(&name) {
                    let declared = secrets.declared();
                    out.push(
                        Diagnostic::error(
                            "E026",
                            format!("secret `{name}` is not declared in the workspace"),
                        )
                        .node(&n.id)
                        .at(n.span)
                        .hint(format!(
                            "declare it under [secrets] in weir.toml: {name} = {{ env = \"{name}\" }}{}",
                            if declared.is_empty() {
                                String::new()
                            } else {
                                format!(" (declared: {})", declared.join(", "))
                            }
                        )),
                    );
                }
            }
        }
    }
    // A webhook's secret: the sender signs with it, so the workspace must declare it.
    for t in &wf.triggers {
        if let crate::ir::TriggerKind::Webhook(h) = &t.kind
            && let Some(name) = &h.secret
            && !secrets.is_declared(name)
        {
            let declared = secrets.declared();
            out.push(
                Diagnostic::error(
                    "E026",
                    format!(
                        "webhook `{}`: secret `{name}` is not declared in the workspace",
                        t.name
                    ),
                )
                .hint(format!(
                    "declare it under [secrets] in weir.toml: {name} = {{ env = \"{name}\" }}{}",
                    if declared.is_empty() {
                        String::new()
                    } else {
                        format!(" (declared: {})", declared.join(", "))
                    }
                )),
            );
        }
    }
    // An agent's tools: each must be one a model can be offered.
    for n in &wf.nodes {
        let NodeKind::Agent(a) = &n.kind else {
            continue;
        };
        for t in &a.tools.tools {
            if t != "mcp_call" && tools.has_tool(t) {
                continue;
            }
            let names: Vec<String> = tools
                .tool_names()
                .into_iter()
                .filter(|n| n != "mcp_call")
                .collect();
            out.push(
                        Diagnostic::error("E005", format!("the agent cannot offer `{t}` to its model: no such tool"))
                            .node(&n.id)
                            .at(n.span)
                            .hint(format!(
                                "available tools: {}, and mcp:SERVER/TOOL or mcp:SERVER/* for the tools of a server under [mcp.servers]{}",
                                names.join(", "),
                                suggest(t, names.iter().map(String::as_str))
                            )),
                    );
        }
    }
    for n in &wf.nodes {
        match &n.kind {
            NodeKind::Tool(t) if !tools.has_tool(&t.tool_name) => {
                let names = tools.tool_names();
                let msg = if t.tool_name.starts_with("custom:") {
                    format!(
                        "custom tool `{}` is not registered; re-register it or update the node",
                        t.tool_name
                    )
                } else {
                    format!("unknown tool `{}`", t.tool_name)
                };
                out.push(
                    Diagnostic::error("E005", msg)
                        .node(&n.id)
                        .at(n.span)
                        .hint(format!(
                            "available tools: {}{}",
                            names.join(", "),
                            suggest(&t.tool_name, names.iter().map(String::as_str))
                        )),
                );
            }
            NodeKind::Tool(t) => {
                if let Err(why) = tools.check_call(&t.tool_name, t.params.source()) {
                    out.push(
                        Diagnostic::error("E025", format!("`{}` cannot work: {why}", t.tool_name))
                            .node(&n.id)
                            .at(n.span)
                            .hint(
                                "configure it under [mcp.servers] in weir.toml, or fix the params",
                            ),
                    );
                }
            }
            NodeKind::Agent(_) | NodeKind::Judge(_) | NodeKind::Consensus(_) => {
                let (primary, fallbacks): (&str, &[String]) = match &n.kind {
                    NodeKind::Agent(a) => (&a.model, &a.fallback_models),
                    NodeKind::Judge(j) => (&j.model, &[]),
                    NodeKind::Consensus(c) => (&c.model, &[]),
                    _ => continue,
                };
                let all = std::iter::once(primary).chain(fallbacks.iter().map(String::as_str));
                for (i, model) in all.enumerate() {
                    let role = if i == 0 { "model" } else { "fallback model" };
                    if let Err(why) = models.check_model(model) {
                        out.push(
                            Diagnostic::error("E015", format!("{role} `{model}` cannot be used: {why}"))
                                .node(&n.id)
                                .at(n.model_span.or(n.span))
                                .hint("use a claude-*, gpt-*, o1*/o3*/o4* model, `mock`, or a provider:model name"),
                        );
                    } else {
                        if let Some(hint) = models.unknown_model(model) {
                            out.push(
                                Diagnostic::warning(
                                    "W105",
                                    format!("{role} `{model}` is not a model weir knows"),
                                )
                                .node(&n.id)
                                .at(n.model_span.or(n.span))
                                .hint(hint),
                            );
                        }
                        if let Err(why) = models.check_policy(model) {
                            let d = if i == 0 {
                                Diagnostic::error("E018", format!("model `{model}` is not allowed: {why}"))
                                .hint("pick an allowed model or extend [models] allow / [providers] allow in weir.toml")
                            } else {
                                Diagnostic::warning(
                                "W104",
                                format!("fallback model `{model}` is not allowed and will be skipped: {why}"),
                            )
                            .hint("remove it from fallback_models or allow it in weir.toml")
                            };
                            out.push(d.node(&n.id).at(n.model_span.or(n.span)));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn reachable<'a>(wf: &'a Workflow, from: impl Iterator<Item = &'a str>) -> HashSet<&'a str> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut queue: VecDeque<&str> = from.collect();
    while let Some(id) = queue.pop_front() {
        if seen.insert(id) {
            queue.extend(wf.outgoing(id).map(|e| e.target.as_str()));
        }
    }
    seen
}

fn ancestors<'a>(wf: &'a Workflow, id: &'a str) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut queue: VecDeque<&str> = wf.incoming(id).map(|e| e.source.as_str()).collect();
    while let Some(n) = queue.pop_front() {
        if n != id && seen.insert(n) {
            queue.extend(wf.incoming(n).map(|e| e.source.as_str()));
        }
    }
    seen
}

/// ` (did you mean `x`?)` for the closest candidate within a small edit distance.
pub fn suggest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    candidates
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= 2.max(word.len() / 4))
        .min()
        .map(|(_, c)| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

/// Levenshtein distance, in characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}
