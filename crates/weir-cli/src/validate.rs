//! `weir validate FILE... [--json]`.

use anyhow::Result;
use serde_json::json;
use weir_core::{Diagnostic, diag};
use weir_dialects::{Capabilities, Validated};

use crate::exit;
use crate::wiring::Env;

/// Compiles a workflow against this workspace: dialect loading, structure, tools, models
/// and secrets (`weir_dialects::compile`, the one path from text to a runnable workflow).
pub fn compile(env: &Env, path: &str, text: &str) -> Result<Validated, Vec<Diagnostic>> {
    let tools = weir_tools::Registry::new(env.settings.clone());
    // A broken WEIR_MOCK script does not change which models route; `--model` does.
    let offline = weir_providers::Router::offline(env.settings.clone());
    let models = match &env.model {
        Some(m) => offline
            .forcing(m)
            .unwrap_or_else(|_| weir_providers::Router::offline(env.settings.clone())),
        None => offline,
    };
    weir_dialects::compile(
        path,
        text,
        &Capabilities {
            tools: &tools,
            models: &models,
            secrets: &env.settings,
        },
    )
}

fn unreadable(path: &str, message: String) -> Diagnostic {
    let mut d = Diagnostic::error("E001", message)
        .hint("check the path; workflows are UTF-8 YAML or JSON files");
    d.file = Some(path.to_string());
    d
}

pub fn read(path: &str) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| crate::Usage(format!("cannot read {path}: {e}")).into())
}

/// A workflow's companion file, named after it: `NAME.input.json` (a run's input, for
/// `--input @…`) or `NAME.mock.json` (the mock model's script). Not a workflow.
pub fn companion(path: &str) -> Option<&'static str> {
    if path.ends_with(".input.json") {
        Some("a run input (for --input @FILE)")
    } else if path.ends_with(".mock.json") {
        Some("a mock model script (used by `weir run` of the workflow beside it)")
    } else if path.ends_with(".test.yaml") || path.ends_with(".test.yml") {
        Some("a workflow test (run it with `weir test`)")
    } else {
        None
    }
}

pub fn run(env: &Env, args: crate::cli::ValidateArgs) -> Result<u8> {
    let (files, deny_warnings, as_json) = (&args.files, args.deny_warnings, args.json);
    let mut reports = Vec::new();
    let mut any_error = false;
    // `weir validate examples/graph/*.json` names the companions too: they are skipped, and
    // said so, rather than reported as workflows that fail to parse.
    let (skipped, files): (Vec<&String>, Vec<&String>) =
        files.iter().partition(|f| companion(f).is_some());
    for f in &skipped {
        eprintln!("{f}: skipped, {}", companion(f).expect("partitioned on it"));
    }
    if files.is_empty() {
        return Err(crate::Usage(
            "no workflow files to validate (only companion files were named)".into(),
        )
        .into());
    }
    for f in files {
        // A file that cannot be read is reported like any other error, so every file named
        // gets its entry (and `--json` its object).
        let (text, diags) = match std::fs::read(f) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => {
                    let diags = compile(env, f, &text).map_or_else(|d| d, |v| v.warnings);
                    (text, diags)
                }
                Err(e) => (
                    String::new(),
                    vec![unreadable(f, format!("{f} is not UTF-8 text ({e})"))],
                ),
            },
            Err(e) => (
                String::new(),
                vec![unreadable(f, format!("cannot read {f}: {e}"))],
            ),
        };
        let (errors, warnings) = diag::count(&diags);
        let valid = errors == 0 && !(deny_warnings && warnings > 0);
        any_error |= !valid;
        if as_json {
            let (e, w): (Vec<_>, Vec<_>) = diags.iter().partition(|d| d.is_error());
            reports.push(json!({"file": f, "valid": valid, "errors": e, "warnings": w}));
        } else {
            for d in &diags {
                eprint!("{}", d.render(Some(&text)));
            }
            if errors == 0 && !valid {
                println!(
                    "{f}: {warnings} warning{} (--deny-warnings)",
                    if warnings == 1 { "" } else { "s" }
                );
            } else if errors == 0 {
                println!(
                    "{f}: ok ({warnings} warning{})",
                    if warnings == 1 { "" } else { "s" }
                );
            } else {
                println!(
                    "{f}: {errors} error{}, {warnings} warning{}",
                    if errors == 1 { "" } else { "s" },
                    if warnings == 1 { "" } else { "s" }
                );
            }
        }
    }
    if as_json {
        // Always an array, one object per file, however many files were named.
        println!("{}", serde_json::to_string_pretty(&reports)?);
    }
    Ok(if any_error { exit::INVALID } else { 0 })
}
