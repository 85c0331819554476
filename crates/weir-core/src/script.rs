//! The script-runner trait: `script` nodes run JavaScript/TypeScript in a separate runtime
//! (bun). The runner reports the module's `export default` already reduced the ways the
//! validators need it (JavaScript truthiness, `String(...)`, a number or `{score}`), so the
//! mapping follows JavaScript's own rules rather than a re-implementation of them.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct ScriptCall {
    pub source: String,
    pub timeout: Duration,
    /// Public run state, visible to the script as `globalThis.weir` (`{input, variables}`).
    pub state: Value,
}

/// The module's default export, as JavaScript sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScriptValue {
    /// `JSON.stringify`-able form (`null` for `undefined` or values JSON cannot hold).
    pub json: Value,
    /// `typeof value`.
    pub js_type: String,
    /// `!!value`.
    pub truthy: bool,
    /// `String(value)`.
    pub string: String,
    /// The value if it is a number, or its numeric `score` field if it is an object.
    pub score: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScriptResult {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
    pub value: ScriptValue,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ScriptError {
    /// The script threw, or a shell command failed without `.nothrow()`.
    #[error("script failed (exit code {exit_code}): {message}")]
    Failed {
        exit_code: i32,
        message: String,
        stdout: String,
        stderr: String,
    },
    #[error("script timed out after {0:?}; its process tree was killed")]
    Timeout(Duration),
    /// The runtime is missing or could not start.
    #[error("{0}")]
    Runtime(String),
}

#[async_trait]
pub trait ScriptRunner: Send + Sync {
    async fn run(&self, call: ScriptCall) -> Result<ScriptResult, ScriptError>;
}

/// What every script may read of the environment, besides the variables `[scripts] env` of
/// weir.toml passes.
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ"];

/// The environment variables a script's source reads by name: `process.env.NAME`,
/// `process.env["NAME"]` (or `'NAME'`), in order, each once.
pub fn env_reads(source: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for object in ["process.env"] {
        let mut rest = source;
        while let Some(i) = rest.find(object) {
            rest = &rest[i + object.len()..];
            let name: String = if let Some(after) = rest.strip_prefix('.') {
                after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            } else if let Some(after) = rest.strip_prefix('[') {
                let after = after.trim_start();
                match after.chars().next() {
                    Some(q @ ('"' | '\'')) => {
                        after[1..].split(q).next().unwrap_or_default().to_string()
                    }
                    _ => String::new(),
                }
            } else {
                String::new()
            };
            if !name.is_empty() && !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

#[cfg(test)]
mod env_tests {
    #[test]
    fn env_reads_are_found_in_every_spelling() {
        let src = "export default process.env.ENV === 'production' ? process.env['TIER'] : process.env.X + process.env.ENV; const e = process.env;";
        assert_eq!(super::env_reads(src), ["ENV", "TIER", "X"]);
    }
}
