//! The `weir` binary: glue. It parses the command line (`cli.rs`), wires the concrete
//! providers, tools, scripts and stores (`wiring.rs`, the only place that names them), runs
//! the command in its module, and maps outcomes and errors to exit codes in one place
//! (`errors.rs`): 0 succeeded, 1 failed, 2 invalid workflow or usage, 3 paused, 4 aborted,
//! 5 conflict, 130 interrupted.

mod cli;
mod doctor;
mod errors;
mod explain;
mod help;
mod init;
mod output;
mod replay;
mod run;
mod runs;
mod serve;
mod testing;
mod tokens;
mod trace;
mod triggers;
mod validate;
mod wiring;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};
pub use errors::{Usage, exit};

/// mimalloc (v2) instead of glibc's malloc: a step leaves many small allocations (records,
/// events, JSON values), and mimalloc takes about a quarter off a node's instructions.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    quiet_on_closed_pipe();
    let cli = parse();
    let as_json = cli.command.json();
    // One TLS crypto provider for every HTTP client in the process (ring).
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    // A bad weir.toml stops every command but `weir doctor`, which reports it.
    let is_doctor = matches!(cli.command, Command::Doctor { .. });
    let (settings, settings_state) = match wiring::settings(cli.config.as_deref()) {
        Ok(s) => (s, Ok(wiring::settings_path(cli.config.as_deref()))),
        Err(e) if is_doctor => (Default::default(), Err(errors::chain(&e))),
        Err(e) => {
            report(&e, as_json, None);
            return ExitCode::from(exit::INVALID);
        }
    };
    let model = cli.command.model();
    let env = wiring::Env::new(cli.db, settings, model);
    let result = rt.block_on(cli.command.run(&env, settings_state));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            report(&e, as_json, Some(&env));
            ExitCode::from(errors::exit_code_of(&e))
        }
    }
}

/// The command line; a usage error asked for `--json` is printed as JSON on stdout too.
fn parse() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind as K;
            let asked_json = std::env::args().skip(1).any(|a| a == "--json");
            let is_usage = !matches!(e.kind(), K::DisplayHelp | K::DisplayVersion)
                && !matches!(e.kind(), K::DisplayHelpOnMissingArgumentOrSubcommand);
            if asked_json && is_usage {
                let text = e.to_string();
                let first = text.lines().next().unwrap_or_default();
                let message = first.strip_prefix("error: ").unwrap_or(first);
                let body = serde_json::json!({"error": {"code": "usage", "message": message}});
                println!("{body}");
            }
            e.exit();
        }
    }
}

/// Prints a command's error: on stderr, and as JSON on stdout when asked for; a store fault
/// names the database and how it was chosen.
fn report(e: &anyhow::Error, as_json: bool, env: Option<&wiring::Env>) {
    if as_json {
        let body = serde_json::json!({
            "error": {"code": errors::error_code_of(e), "message": errors::chain(e)}
        });
        println!("{body}");
    }
    eprintln!("error: {}", errors::chain(e));
    if let Some(env) = env
        && (e.downcast_ref::<weir_core::store::StoreError>().is_some()
            || errors::engine_kind(e) == Some(weir_engine::ErrorKind::Store))
    {
        eprintln!(
            "  database: {} (from {})",
            wiring::redact_url(&env.db),
            env.db_from
        );
        // A drive that gave up on a busy or unreachable database names its run first.
        if let Some(weir_engine::Error::Store(b)) = e.downcast_ref::<weir_engine::Error>()
            && b.fault.transient()
            && let Some((run, _)) = b
                .message
                .strip_prefix("run ")
                .and_then(|m| m.split_once(": "))
        {
            eprintln!(
                "  the run keeps every step committed before; continue it once the database \
                 can be written again: weir resume {}{}",
                output::short(run),
                env.hint()
            );
        }
    }
}

/// A reader that goes away (`weir runs show ID --json | head -c 10`) ends the process
/// quietly with status 0, as ripgrep and git do, where Rust's `print!` would panic on the
/// closed pipe. Every other panic is reported as before.
fn quiet_on_closed_pipe() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to std") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        report(info);
    }));
}
