//! weir-dialects: the loaders. Each dialect parses its document with source spans, lowers it
//! to the shared IR and reports every problem it finds as a [`Diagnostic`]; [`load`] picks the
//! dialect from an explicit `dialect:` key or the document's shape. [`compile`] is the one
//! path from text to a runnable workflow: the CLI, the server and workers (reloading a
//! stored run) all go through it.

#![warn(missing_docs)]

mod fields;
pub mod graph;
pub mod machine;
pub mod pipeline;
pub mod tree;
mod triggers;

use std::sync::Arc;

use weir_core::secrets::Secrets;
use weir_core::{Diagnostic, ModelClient, ToolRunner, Workflow};

/// What a workflow is checked against besides its own structure: the tools and models it
/// may use and the secrets the workspace declares.
pub struct Capabilities<'a> {
    /// The tools a workflow may name.
    pub tools: &'a dyn ToolRunner,
    /// The models a workflow may route to.
    pub models: &'a dyn ModelClient,
    /// The secrets the workspace declares (by name only).
    pub secrets: &'a dyn Secrets,
}

/// A workflow that loaded and passed every check, with its warnings.
#[derive(Debug, Clone)]
pub struct Validated {
    /// The compiled workflow.
    pub workflow: Arc<Workflow>,
    /// Problems that do not stop it from running.
    pub warnings: Vec<Diagnostic>,
}

/// Loads `text` (read from `path`) and runs every check; `Err` holds every diagnostic,
/// errors and warnings, when any is an error.
pub fn compile(
    path: &str,
    text: &str,
    caps: &Capabilities<'_>,
) -> Result<Validated, Vec<Diagnostic>> {
    let check = |loaded: Loaded| {
        let mut diags = loaded.diagnostics;
        let mut found = false;
        if let Some(wf) = &loaded.workflow {
            for mut d in
                weir_core::validate::capabilities(wf, caps.tools, caps.models, caps.secrets)
            {
                d.file = Some(path.to_string());
                diags.push(d);
                found = true;
            }
        }
        (loaded.workflow, diags, found)
    };
    let loaded = load(path, text);
    let fast = !loaded.positioned;
    let (mut workflow, mut diags, found) = check(loaded);
    if fast && found {
        // The fast parse had nothing to report, but the capability checks do: load again
        // with positions so their diagnostics point at their nodes.
        (workflow, diags, _) = check(load_positioned(path, text));
    }
    match workflow {
        Some(wf) if !diags.iter().any(Diagnostic::is_error) => Ok(Validated {
            workflow: Arc::new(wf),
            warnings: diags,
        }),
        _ => Err(diags),
    }
}

/// The result of loading one file: the workflow as far as it could be built (possibly with
/// errors, so later checks can still report on it) and every diagnostic, errors and
/// warnings, with the file name filled in.
#[derive(Debug)]
pub struct Loaded {
    /// The workflow, when no error prevented building it.
    pub workflow: Option<Workflow>,
    /// Every problem found while loading, errors and warnings.
    pub diagnostics: Vec<Diagnostic>,
    /// Whether the tree carried source positions (false: a clean JSON document read by the
    /// fast parse; its nodes have no spans).
    pub positioned: bool,
}

impl Loaded {
    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// The workflow, only when it loaded without errors: the one thing the engine accepts.
    pub fn valid(self) -> Option<Workflow> {
        if self.has_errors() {
            None
        } else {
            self.workflow
        }
    }
}

/// Parses, lowers and structurally validates `text` read from `path`.
pub fn load(path: &str, text: &str) -> Loaded {
    let stem = std::path::Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("workflow")
        .to_string();
    // A clean JSON document needs no positions: the fast parse is enough. Anything to
    // report sends it through the positioned parse, so every diagnostic has its line.
    if let Some(doc) = tree::parse_json_unspanned(text) {
        let mut fast = load_tree(&doc, &stem);
        if fast.diagnostics.is_empty() {
            fast.positioned = false;
            return fast;
        }
    }
    load_positioned(path, text)
}

/// [`load`] through the positioned parse only.
pub fn load_positioned(path: &str, text: &str) -> Loaded {
    let stem = std::path::Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("workflow")
        .to_string();
    let strict = strict_json(path, text);
    let mut out = match strict.and_then(|()| tree::parse(text)) {
        Err(e) => Loaded {
            positioned: true,
            workflow: None,
            diagnostics: vec![Diagnostic::error("E001", e.message).at(e.span).hint(
                if is_json_path(path) {
                    "a .json workflow is strict JSON: quote every key, no comments, no \
                         trailing commas, no NaN (or name the file .yaml)"
                } else {
                    "fix the syntax; workflows are YAML or JSON"
                },
            )],
        },
        Ok(doc) => load_tree(&doc, &stem),
    };
    for d in &mut out.diagnostics {
        d.file = Some(path.to_string());
    }
    out
}

/// Whether `path` names a JSON file (`.json`, any case).
fn is_json_path(path: &str) -> bool {
    std::path::Path::new(path)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// A `.json` file is JSON: the YAML parser, which reads positions, would also take unquoted
/// keys, comments and trailing commas. `Ok` for any other file.
fn strict_json(path: &str, text: &str) -> Result<(), tree::ParseError> {
    if !is_json_path(path) {
        return Ok(());
    }
    match weir_core::json::from_str(text.strip_prefix('\u{feff}').unwrap_or(text)) {
        Ok(_) => Ok(()),
        Err(e) => Err(tree::ParseError {
            message: format!("invalid JSON: {e}"),
            span: Some(weir_core::Span {
                line: e.line(),
                column: e.column(),
            }),
        }),
    }
}

fn load_tree(doc: &tree::Node, stem: &str) -> Loaded {
    let explicit = doc.get("dialect").and_then(|d| d.as_str());
    let shape = match doc.get("nodes").map(|n| &n.kind) {
        Some(tree::Kind::Seq(_)) => Some("graph"),
        Some(tree::Kind::Map(_)) => Some("machine"),
        _ if doc.get("steps").is_some() => Some("pipeline"),
        _ => None,
    };
    let dialect = explicit.or(shape);
    match dialect {
        Some("graph") => {
            let (wf, diags) = graph::lower(doc, stem);
            Loaded {
                workflow: Some(wf),
                diagnostics: diags,
                positioned: true,
            }
        }
        Some("machine") => {
            let (wf, diags) = machine::lower(doc, stem);
            Loaded {
                workflow: Some(wf),
                diagnostics: diags,
                positioned: true,
            }
        }
        Some("pipeline") => {
            let (wf, diags) = pipeline::lower(doc, stem);
            Loaded {
                workflow: Some(wf),
                diagnostics: diags,
                positioned: true,
            }
        }
        Some(other) => Loaded {
            positioned: true,
            workflow: None,
            diagnostics: vec![
                Diagnostic::error("E016", format!("unknown dialect `{other}`"))
                    .at(doc.get("dialect").and_then(|d| d.span))
                    .hint("dialect is one of graph, machine, pipeline"),
            ],
        },
        None => Loaded {
            positioned: true,
            workflow: None,
            diagnostics: vec![
                Diagnostic::error("E001", "cannot tell the workflow's dialect")
                    .at(doc.span)
                    .hint("a graph workflow has a `nodes` list and an `edges` list"),
            ],
        },
    }
}
