//! Field readers shared by the dialect loaders: each reads one key, checks its type and
//! range, and records a diagnostic at the key's position when it is wrong.

use weir_core::expr::{self, Template};
use weir_core::{Diagnostic, Span};

use crate::tree::{self, Kind};

pub(crate) struct Cx {
    pub(crate) diags: Vec<Diagnostic>,
}

impl Cx {
    pub(crate) fn err(
        &mut self,
        code: &str,
        node: Option<&str>,
        span: Option<Span>,
        msg: String,
        hint: &str,
    ) {
        let mut d = Diagnostic::error(code, msg).at(span).hint(hint);
        if let Some(n) = node {
            d = d.node(n);
        }
        self.diags.push(d);
    }

    /// A string field; `None` (with a diagnostic) when present but not a string.
    pub(crate) fn string(&mut self, node: &str, cfg: &tree::Node, key: &str) -> Option<String> {
        let v = cfg.get(key)?;
        match &v.kind {
            Kind::Str(s) => Some(s.clone()),
            Kind::Null => None,
            _ => {
                self.err(
                    "E011",
                    Some(node),
                    v.span,
                    format!("`{key}` must be a string, found {}", v.type_name()),
                    "quote the value",
                );
                None
            }
        }
    }

    /// A list of some of the node's `tools` (`approve_tools`, `fatal_tools`): each must be
    /// one of them, or covered by a listed `mcp:SERVER/*` (E011).
    fn tool_list(
        &mut self,
        node: &str,
        cfg: &tree::Node,
        key: &str,
        tools: &[String],
    ) -> Vec<String> {
        let list = self.strings(node, cfg, key).unwrap_or_default();
        for a in &list {
            let listed = tools.iter().any(|t| {
                t == a
                    || a.strip_suffix('*').is_some_and(|p| {
                        p.ends_with('/') && (t.starts_with(p) || t.as_str() == format!("{p}*"))
                    })
                    || (t.ends_with("/*") && a.starts_with(&t[..t.len() - 1]))
            });
            if !listed {
                self.err(
                    "E011",
                    Some(node),
                    cfg.get(key).and_then(|v| v.span),
                    format!("`{key}` names `{a}`, which is not one of the node's `tools`"),
                    &format!("list in `{key}` only tools the node offers under `tools` (or `mcp:SERVER/*` for a server listed there)"),
                );
            }
        }
        list
    }

    /// An agent's `tools`, `max_turns`, `tool_choice` and `parallel_tool_calls`.
    pub(crate) fn agent_tools(
        &mut self,
        node: &str,
        cfg: &tree::Node,
    ) -> weir_core::ir::AgentTools {
        use weir_core::model::ToolChoice;
        let mut out = weir_core::ir::AgentTools {
            tools: self.strings(node, cfg, "tools").unwrap_or_default(),
            ..Default::default()
        };
        if let Some(n) = self.integer(node, cfg, "max_turns", 1, 1000) {
            out.max_turns = n as u32;
        }
        if let Some(v) = cfg.get("parallel_tool_calls") {
            match &v.kind {
                Kind::Bool(b) => out.parallel_tool_calls = *b,
                _ => self.err(
                    "E011",
                    Some(node),
                    v.span,
                    format!(
                        "`parallel_tool_calls` must be true or false, found {}",
                        v.type_name()
                    ),
                    "write true or false",
                ),
            }
        }
        if let Some(choice) = self.string(node, cfg, "tool_choice") {
            out.tool_choice = match choice.as_str() {
                "auto" => ToolChoice::Auto,
                "required" => ToolChoice::Required,
                "none" => ToolChoice::None,
                tool if out.tools.iter().any(|t| t == tool) => ToolChoice::Tool(tool.to_string()),
                other => {
                    self.err(
                        "E011",
                        Some(node),
                        cfg.get("tool_choice").and_then(|v| v.span),
                        format!("`tool_choice` is `{other}`: not auto, required, none or one of the node's tools"),
                        "write auto, required, none, or the name of a tool listed in `tools`",
                    );
                    ToolChoice::Auto
                }
            };
        }
        out.approve_tools = self.tool_list(node, cfg, "approve_tools", &out.tools);
        out.fatal_tools = self.tool_list(node, cfg, "fatal_tools", &out.tools);
        for key in [
            "max_turns",
            "tool_choice",
            "parallel_tool_calls",
            "approve_tools",
            "fatal_tools",
        ] {
            if out.tools.is_empty()
                && let Some(v) = cfg.get(key)
            {
                self.err(
                    "E011",
                    Some(node),
                    v.key_span.or(v.span),
                    format!("`{key}` is set but the node has no `tools`"),
                    "list the tools the model may call under `tools`, or remove the key",
                );
            }
        }
        out
    }

    /// A list of strings.
    pub(crate) fn strings(
        &mut self,
        node: &str,
        cfg: &tree::Node,
        key: &str,
    ) -> Option<Vec<String>> {
        let v = cfg.get(key)?;
        let items: Option<Vec<String>> = match &v.kind {
            Kind::Seq(items) => items
                .iter()
                .map(|i| i.as_str().map(str::to_string))
                .collect(),
            _ => None,
        };
        if items.is_none() {
            self.err(
                "E011",
                Some(node),
                v.span,
                format!("`{key}` must be a list of strings, found {}", v.type_name()),
                "write a list such as [\"a\", \"b\"]",
            );
        }
        items
    }

    pub(crate) fn template(&mut self, node: &str, cfg: &tree::Node, key: &str) -> Option<Template> {
        self.template_in(node, cfg, key, false)
    }

    /// A `{{ expr }}` (machine dialect) or `{expr}` (graph dialect) template.
    pub(crate) fn template_in(
        &mut self,
        node: &str,
        cfg: &tree::Node,
        key: &str,
        jinja: bool,
    ) -> Option<Template> {
        let s = self.string(node, cfg, key)?;
        let parsed = if jinja {
            Template::parse_jinja(&s)
        } else {
            Template::parse(&s)
        };
        match parsed {
            Ok(t) => Some(t),
            Err(e) => {
                self.err(
                    "E010",
                    Some(node),
                    cfg.get(key).and_then(|v| v.span),
                    format!("invalid template in `{key}`: {}", e.message),
                    if jinja {
                        "placeholders are {{ expr }}, e.g. {{ build.stdout }} or {{ input.diff }}"
                    } else {
                        "placeholders are {key} or {key.path}; write {{ and }} for literal braces"
                    },
                );
                None
            }
        }
    }

    pub(crate) fn number(
        &mut self,
        node: &str,
        cfg: &tree::Node,
        key: &str,
        lo: f64,
        hi: f64,
    ) -> Option<f64> {
        let v = cfg.get(key)?;
        let n = match &v.kind {
            Kind::Num(n) => n.as_f64(),
            Kind::Null => return None,
            _ => None,
        };
        match n {
            Some(x) if x >= lo && x <= hi => Some(x),
            Some(x) => {
                self.err(
                    "E007",
                    Some(node),
                    v.span,
                    format!("`{key}` is {x}, outside the allowed range {lo}..={hi}"),
                    "use a value inside the range",
                );
                None
            }
            None => {
                self.err(
                    "E011",
                    Some(node),
                    v.span,
                    format!("`{key}` must be a number, found {}", v.type_name()),
                    "write a plain number",
                );
                None
            }
        }
    }

    pub(crate) fn integer(
        &mut self,
        node: &str,
        cfg: &tree::Node,
        key: &str,
        lo: u64,
        hi: u64,
    ) -> Option<u64> {
        let x = self.number(node, cfg, key, lo as f64, hi as f64)?;
        if x.fract() != 0.0 {
            self.err(
                "E011",
                Some(node),
                cfg.get(key).and_then(|v| v.span),
                format!("`{key}` must be a whole number, found {x}"),
                "write an integer",
            );
            return None;
        }
        Some(x as u64)
    }

    pub(crate) fn expression(
        &mut self,
        node: &str,
        cfg: &tree::Node,
        span: Option<Span>,
    ) -> Option<expr::Expr> {
        let Some(src) = self.string(node, cfg, "expression") else {
            if cfg.get("expression").is_none() {
                self.err(
                    "E008",
                    Some(node),
                    span,
                    "missing required config `expression`".into(),
                    "add \"expression\": \"...\" (a Python-style expression over state)",
                );
            }
            return None;
        };
        match expr::Expr::parse(&src) {
            Ok(e) => Some(e),
            Err(e) => {
                self.err(
                    "E006",
                    Some(node),
                    cfg.get("expression").and_then(|v| v.span),
                    format!("invalid expression `{src}`: {}", e.message),
                    "see docs/expressions.md for the expression language",
                );
                None
            }
        }
    }
}

impl Cx {
    /// Reports every top-level key outside `allowed`.
    pub(crate) fn top_level(&mut self, doc: &tree::Node, allowed: &[&str], hint: &str) {
        for (k, v) in doc.as_map().unwrap_or_default() {
            if !allowed.contains(&k.as_str()) {
                let (msg, hint) = match cross_dialect(k, allowed) {
                    Some((other, why)) => (
                        format!("`{k}` is a key of the {other} dialect, not of this file's"),
                        why,
                    ),
                    None => (
                        format!(
                            "unknown top-level key `{k}`{}",
                            weir_core::validate::suggest(k, allowed.iter().copied())
                        ),
                        hint.to_string(),
                    ),
                };
                self.err("E009", None, v.key_span.or(v.span), msg, &hint);
            }
        }
    }

    /// The document's `name` (default: the file name) and hop ceiling (`hopCeiling` or
    /// `hop_ceiling`).
    pub(crate) fn header(
        &mut self,
        doc: &tree::Node,
        default_name: &str,
        default_hops: u32,
    ) -> (String, u32) {
        let name = doc
            .get("name")
            .and_then(|n| n.as_str())
            .unwrap_or(default_name)
            .to_string();
        let key = if doc.get("hopCeiling").is_some() {
            "hopCeiling"
        } else {
            "hop_ceiling"
        };
        let hops = self
            .integer("", doc, key, 1, 1_000_000)
            .map_or(default_hops, |x| x as u32);
        (name, hops)
    }

    /// A JSON Schema value, compiled (E017 when it does not compile).
    pub(crate) fn schema(
        &mut self,
        node: Option<&str>,
        cfg: &tree::Node,
        key: &str,
    ) -> Option<weir_core::schema::CompiledSchema> {
        let v = cfg.get(key)?;
        match weir_core::schema::CompiledSchema::compile(&v.to_json()) {
            Ok(s) => Some(s),
            Err(e) => {
                self.err(
                    "E017",
                    node,
                    v.span,
                    format!("invalid {key}: {e}"),
                    "give a JSON Schema object such as {\"type\": \"object\", \"properties\": {...}}; $ref to files or URLs is not allowed",
                );
                None
            }
        }
    }

    /// An `end` node's `status` (default succeeded).
    pub(crate) fn end_status(&mut self, node: &str, cfg: &tree::Node) -> weir_core::ir::EndStatus {
        use weir_core::ir::EndStatus;
        match self.string(node, cfg, "status").as_deref() {
            None | Some("succeeded") => EndStatus::Succeeded,
            Some("failed") => EndStatus::Failed,
            Some("aborted") => EndStatus::Aborted,
            Some(other) => {
                self.err(
                    "E007",
                    Some(node),
                    cfg.get("status").and_then(|v| v.span),
                    format!("end status `{other}` is not one of succeeded, failed, aborted"),
                    "use succeeded, failed or aborted",
                );
                EndStatus::Succeeded
            }
        }
    }

    /// Adds the dialect-independent structure checks for a dialect whose transitions were
    /// checked at their own keys (so edge-to-missing-node findings are not repeated), leaving
    /// out warnings when errors already make the graph incomplete.
    pub(crate) fn structure(&mut self, wf: &weir_core::Workflow) {
        let had_errors = self.diags.iter().any(Diagnostic::is_error);
        for d in weir_core::validate::structure(wf) {
            if d.code == "E003" || (had_errors && d.code.starts_with('W')) {
                continue;
            }
            self.diags.push(d);
        }
    }

    /// A node's `type`, which must be one of `types` (E008 when missing, E004 when unknown).
    pub(crate) fn node_type(
        &mut self,
        node: &str,
        item: &tree::Node,
        span: Option<Span>,
        types: &[&str],
    ) -> Option<String> {
        let list = types.join(", ");
        let Some(v) = item.get("type") else {
            self.err(
                "E008",
                Some(node),
                span,
                "node without a `type`".into(),
                &format!("set `type` to one of {list}"),
            );
            return None;
        };
        let Some(ty) = v.as_str() else {
            self.err(
                "E011",
                Some(node),
                v.span,
                "`type` must be a string".into(),
                &format!("one of {list}"),
            );
            return None;
        };
        if !types.contains(&ty) {
            self.err(
                "E004",
                Some(node),
                v.span,
                format!(
                    "unknown node type `{ty}`{}",
                    weir_core::validate::suggest(ty, types.iter().copied())
                ),
                &format!("node types are {list}"),
            );
            return None;
        }
        Some(ty.to_string())
    }

    /// The universal `timeout_seconds` (per attempt, default 300) and `retry_count` (0–10).
    pub(crate) fn policy(&mut self, node: &str, cfg: &tree::Node) -> weir_core::ir::AttemptPolicy {
        let timeout = self.number(node, cfg, "timeout_seconds", 0.001, 86_400.0);
        let retry_count = self.integer(node, cfg, "retry_count", 0, 10);
        weir_core::ir::AttemptPolicy {
            timeout: timeout.map_or(
                weir_core::ir::DEFAULT_TIMEOUT,
                std::time::Duration::from_secs_f64,
            ),
            retry_count: retry_count.unwrap_or(0) as u32,
            budget: self.budget(node, cfg),
        }
    }

    /// `budget: {usd, tokens, model_calls, tool_calls, on_exceeded}` of a node (`node` its
    /// id) or of the document (`node` empty).
    pub(crate) fn budget(&mut self, node: &str, cfg: &tree::Node) -> Option<weir_core::ir::Budget> {
        let v = cfg.get("budget")?;
        let at = (!node.is_empty()).then_some(node);
        if v.as_map().is_none() {
            self.err(
                "E011",
                at,
                v.span,
                format!("`budget` must be a map, found {}", v.type_name()),
                "write budget: {usd: 0.50, tokens: 20000, model_calls: 10, tool_calls: 20, on_exceeded: fail}",
            );
            return None;
        }
        const KEYS: &[&str] = &["usd", "tokens", "model_calls", "tool_calls", "on_exceeded"];
        for (k, kv) in v.as_map().unwrap_or_default() {
            if !KEYS.contains(&k.as_str()) {
                self.err(
                    "E009",
                    at,
                    kv.key_span.or(kv.span),
                    format!(
                        "unknown budget key `{k}`{}",
                        weir_core::validate::suggest(k, KEYS.iter().copied())
                    ),
                    "a budget has usd, tokens, model_calls, tool_calls and on_exceeded (fail or pause)",
                );
            }
        }
        let b = weir_core::ir::Budget {
            usd: self.number(node, v, "usd", 0.0, 1e9),
            tokens: self.integer(node, v, "tokens", 0, u64::MAX >> 12),
            model_calls: self.integer(node, v, "model_calls", 0, 1 << 40),
            tool_calls: self.integer(node, v, "tool_calls", 0, 1 << 40),
            pause: match self.string(node, v, "on_exceeded").as_deref() {
                None | Some("fail") => false,
                Some("pause") => true,
                Some(other) => {
                    self.err(
                        "E011",
                        at,
                        v.get("on_exceeded").and_then(|x| x.span),
                        format!("`on_exceeded` is `{other}`: not fail or pause"),
                        "write on_exceeded: fail (the run fails with budget_exceeded) or pause (it waits for a raise)",
                    );
                    false
                }
            },
        };
        if ["usd", "tokens", "model_calls", "tool_calls"]
            .iter()
            .all(|k| v.get(k).is_none())
        {
            self.err(
                "E011",
                at,
                v.span,
                "`budget` sets no limit".into(),
                "set at least one of usd, tokens, model_calls and tool_calls",
            );
            return None;
        }
        Some(b)
    }
}

/// A top-level key of another dialect typed into this one (a machine's `start:` in a graph
/// file): that dialect's name and a hint saying how this file is read and what to do.
fn cross_dialect(key: &str, allowed: &[&str]) -> Option<(&'static str, String)> {
    let this = if allowed.contains(&"edges") {
        "a graph (its `nodes` is a list, joined by `edges`; it starts at every node without an incoming edge)"
    } else if allowed.contains(&"steps") {
        "a pipeline (its `steps` run in order)"
    } else {
        "a machine (its `nodes` is a map of states, `start:` names the first)"
    };
    let other = match key {
        "start" | "input" => "machine",
        "edges" => "graph",
        "steps" | "model" => "pipeline",
        _ => return None,
    };
    Some((
        other,
        format!(
            "this file is read as {this}; write it in one dialect (docs/{other}.md), or set `dialect: {other}` and use that dialect's shape"
        ),
    ))
}

/// Where a node's own keys are read: its id, the map holding them (a graph node's
/// `config`, a machine node's body), and the span diagnostics point at when one is missing.
pub(crate) struct At<'a> {
    pub id: &'a str,
    pub cfg: &'a tree::Node,
    pub span: Option<Span>,
    /// What the dialect calls such a key in messages (`config`, `key`).
    pub noun: &'static str,
}

impl At<'_> {
    /// Reports a required key that is missing.
    pub(crate) fn require(&self, cx: &mut Cx, key: &str, hint: &str) {
        if self.cfg.get(key).is_none() {
            cx.err(
                "E008",
                Some(self.id),
                self.span,
                format!("missing required {} `{key}`", self.noun),
                hint,
            );
        }
    }
}
