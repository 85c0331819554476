//! `weir explain CODE`: the page of a diagnostic code (`E003`, `W105`) or a run error code
//! (`node_failed`), embedded in the binary so it works wherever weir is installed.

use anyhow::Result;

use crate::Usage;

macro_rules! pages {
    ($dir:literal: $($code:literal),* $(,)?) => {
        &[$(($code, include_str!(concat!("../../../docs/errors/", $dir, $code, ".md")))),*]
    };
}

/// Diagnostic codes of `weir validate`.
const DIAGNOSTICS: &[(&str, &str)] = pages!("": "E001", "E002", "E003", "E004", "E005", "E006",
    "E007", "E008", "E009", "E010", "E011", "E012", "E013", "E014", "E015", "E016", "E017",
    "E018", "E020", "E021", "E022", "E023", "E024", "E025", "E026", "E027", "W101", "W102", "W103",
    "W104", "W105", "W106", "W107", "W108", "W109");

/// The `error.code` of a run that ended badly.
const RUN_ERRORS: &[(&str, &str)] = pages!("runs/": "budget_exceeded", "cancelled", "end_failed", "gate_rejected",
    "hop_ceiling_exceeded", "internal", "node_failed", "store_error", "takeover_limit");

/// Where the pages are online, for the diagnostics' `= docs:` line.
pub const ONLINE: &str = "docs/errors";

fn page(code: &str) -> Option<(&'static str, &'static str)> {
    let upper = code.trim().to_ascii_uppercase();
    let lower = code.trim().to_ascii_lowercase();
    DIAGNOSTICS
        .iter()
        .find(|(c, _)| *c == upper)
        .or_else(|| RUN_ERRORS.iter().find(|(c, _)| *c == lower))
        .copied()
}

/// The first heading of a page without its `# CODE: ` prefix.
fn title(text: &str) -> &str {
    let first = text.lines().next().unwrap_or("");
    let first = first.trim_start_matches('#').trim();
    first.split_once(": ").map_or(first, |(_, t)| t)
}

pub fn run(code: Option<&str>, list: bool) -> Result<u8> {
    match code {
        Some(code) if !list => match page(code) {
            Some((c, text)) => {
                let body: String = text
                    .lines()
                    .filter(|l| !l.starts_with("See [all codes]") && !l.starts_with("See also"))
                    .map(|l| format!("{l}\n"))
                    .collect();
                print!("{}", body.trim_end());
                let online = if c.starts_with(['E', 'W']) {
                    format!("{ONLINE}/{c}.md")
                } else {
                    format!("{ONLINE}/runs/{c}.md")
                };
                println!("\n\n(online: {online}; `weir explain --list` lists every code)");
                Ok(0)
            }
            None => Err(Usage(format!(
                "no code `{code}`: `weir explain --list` lists them (diagnostics E001–E027, W101–W109; run errors like node_failed)"
            ))
            .into()),
        },
        _ => {
            println!("diagnostic codes (weir validate):");
            for (c, text) in DIAGNOSTICS {
                println!("  {c}  {}", title(text));
            }
            println!("run error codes (error.code of a run that ended badly):");
            for (c, text) in RUN_ERRORS {
                println!("  {c:<21} {}", title(text));
            }
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_in_docs_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors");
        for (dir, table) in [("", DIAGNOSTICS), ("runs", RUN_ERRORS)] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let name = entry.unwrap().file_name().to_string_lossy().into_owned();
                if let Some(code) = name.strip_suffix(".md")
                    && code != "README"
                {
                    assert!(
                        table.iter().any(|(c, _)| *c == code),
                        "docs/errors/{dir}/{name} is not embedded in `weir explain`"
                    );
                }
            }
        }
    }

    #[test]
    fn codes_are_found_in_any_case() {
        assert_eq!(page("e003").unwrap().0, "E003");
        assert_eq!(page("NODE_FAILED").unwrap().0, "node_failed");
        assert!(page("E999").is_none());
        assert_eq!(title(page("E003").unwrap().1), "edge to a missing node");
    }
}
