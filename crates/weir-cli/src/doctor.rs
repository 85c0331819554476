//! `weir doctor`: what a run on this machine will find. The settings file, the database
//! (reachable, or creatable where it would be made), bun for script steps, the providers'
//! API keys (present or not; never their values) and a `WEIR_MOCK` script.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use crate::wiring::{self, Env};

#[derive(Serialize)]
struct Check {
    check: String,
    /// `ok`, `warn` (weir works, some workflows will not) or `fail`.
    status: &'static str,
    detail: String,
}

fn check(name: &str, status: &'static str, detail: impl Into<String>) -> Check {
    Check {
        check: name.to_string(),
        status,
        detail: detail.into(),
    }
}

/// Runs every check; exit 1 when one fails. `settings` is how reading weir.toml went (the
/// other commands stop at a bad one; doctor reports it).
pub async fn run(env: &Env, settings: Result<Option<String>, String>, as_json: bool) -> Result<u8> {
    let mut checks = vec![match settings {
        Ok(Some(path)) => check("settings", "ok", format!("{path} is valid")),
        Ok(None) => check(
            "settings",
            "ok",
            "no weir.toml here (and no --config or WEIR_CONFIG): built-in defaults",
        ),
        Err(e) => check("settings", "fail", e),
    }];
    checks.push(database(env).await);
    checks.push(bun().await);
    for (provider, var, models) in [
        ("anthropic", "ANTHROPIC_API_KEY", "claude-* and anthropic/*"),
        (
            "openai",
            "OPENAI_API_KEY",
            "gpt-*, o1*, o3*, o4* and openai/*",
        ),
    ] {
        checks.push(key(provider, var, models));
    }
    for (name, p) in &env.settings.providers.named {
        if let Some(var) = &p.api_key_env {
            checks.push(key(name, var, &format!("{name}/*")));
        }
    }
    if let Ok(spec) = std::env::var("WEIR_MOCK")
        && !spec.is_empty()
    {
        checks.push(match weir_providers::mock::Mock::from_env() {
            Ok(_) => check(
                "mock",
                "ok",
                format!("WEIR_MOCK={spec} scripts the mock model"),
            ),
            Err(e) => check("mock", "fail", format!("WEIR_MOCK: {e}")),
        });
    }
    let failed = checks.iter().any(|c| c.status == "fail");
    if as_json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for c in &checks {
            let mark = match c.status {
                "ok" => "✓",
                "warn" => "!",
                _ => "✗",
            };
            println!("{mark} {:<10} {}", c.check, c.detail);
        }
        let warned = checks.iter().filter(|c| c.status == "warn").count();
        println!(
            "{}",
            if failed {
                "a check failed: fix it before running workflows".to_string()
            } else if warned > 0 {
                format!(
                    "ready ({warned} warning{})",
                    if warned == 1 { "" } else { "s" }
                )
            } else {
                "ready".to_string()
            }
        );
    }
    Ok(if failed { crate::exit::FAILED } else { 0 })
}

async fn database(env: &Env) -> Check {
    let shown = format!("{} (from {})", wiring::redact_url(&env.db), env.db_from);
    let exists = match weir_store::sqlite_path(&env.db) {
        _ if weir_store::is_postgres_url(&env.db) => true,
        Ok(Some(p)) => p.exists(),
        Ok(None) => true,
        Err(e) => return check("database", "fail", format!("{shown}: {e}")),
    };
    if exists {
        return match wiring::store(env, wiring::Open::MustExist).await {
            Ok(_) => check("database", "ok", format!("{shown} opens")),
            Err(e) => check("database", "fail", format!("{e:#}")),
        };
    }
    // Not there yet: `weir run` creates it, if the nearest existing folder is writable.
    let path = weir_store::sqlite_path(&env.db)
        .ok()
        .flatten()
        .unwrap_or_default();
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d.exists() {
            break;
        }
        dir = d.parent();
    }
    let dir = dir.unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    match writable(dir) {
        Ok(()) => check(
            "database",
            "ok",
            format!("{shown} does not exist yet; `weir run` creates it"),
        ),
        Err(e) => check(
            "database",
            "fail",
            format!(
                "{shown} does not exist and cannot be created: {} is not writable ({e})",
                dir.display()
            ),
        ),
    }
}

/// Whether a file can be made in `dir` (made and removed at once).
fn writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".weir-doctor-{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

async fn bun() -> Check {
    let Some(bun) = weir_script::find_bun() else {
        return check(
            "bun",
            "warn",
            "not found: script steps need it (`npm install -g bun`, or set WEIR_BUN=PATH)",
        );
    };
    let version = tokio::process::Command::new(&bun)
        .arg("--version")
        .output()
        .await;
    match version {
        Ok(o) if o.status.success() => check(
            "bun",
            "ok",
            format!(
                "{} {}",
                bun.display(),
                String::from_utf8_lossy(&o.stdout).trim()
            ),
        ),
        Ok(o) => check(
            "bun",
            "warn",
            format!(
                "{} --version failed: {}",
                bun.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        ),
        Err(e) => check(
            "bun",
            "warn",
            format!("{} does not start: {e}", bun.display()),
        ),
    }
}

/// An API key: whether its variable is set, never its value.
fn key(provider: &str, var: &str, models: &str) -> Check {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => check(provider, "ok", format!("{var} is set")),
        _ => check(
            provider,
            "warn",
            format!(
                "{var} is not set: {models} models fail with an auth error (the mock model needs no key)"
            ),
        ),
    }
}
