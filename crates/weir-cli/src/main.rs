//! The `weir` binary: glue. It parses the command line, wires the concrete providers, tools
//! and store into the engine, and maps outcomes and errors to exit codes in one place
//! (DESIGN §10): 0 succeeded, 1 failed, 2 invalid workflow or usage, 3 paused, 4 aborted,
//! 5 conflict, 130 interrupted.

mod doctor;
mod explain;
mod help;
mod init;
mod output;
mod replay;
mod runs;
mod serve;
mod testing;
mod trace;
mod validate;
mod wiring;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use help::*;

/// mimalloc (v2) instead of glibc's malloc: a step leaves many small allocations (records,
/// events, JSON values), and mimalloc takes about a quarter off a node's instructions
/// (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "A workflow engine for AI agents",
    after_help = TOP_HELP
)]
struct Cli {
    /// Run store: a SQLite path, sqlite://path or sqlite::memory: (default: $WEIR_DB, else
    /// ~/.local/share/weir/weir.db)
    #[arg(long, global = true, value_name = "URL")]
    db: Option<String>,
    /// Workspace settings file (default: $WEIR_CONFIG, else ./weir.toml when present)
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<String>,
    /// Send every model call of a run to this model instead of the ones its workflow names
    /// (fallbacks too): `--model mock` runs any workflow offline, without editing it
    #[arg(long, global = true, value_name = "NAME")]
    model: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a workflow to its end (or to a human gate)
    #[command(after_help = RUN_HELP)]
    Run {
        /// The workflow file (.yaml, .yml or .json; graph, machine or pipeline dialect)
        file: String,
        /// Run input: a JSON object, or @path to a JSON file
        #[arg(long, value_name = "JSON")]
        input: Option<String>,
        /// Print exactly one JSON object, the run record, on stdout
        #[arg(long)]
        json: bool,
    },
    /// Write a small workflow that runs offline, to start from
    #[command(after_help = INIT_HELP)]
    Init {
        /// Where to write it
        #[arg(default_value = "hello.yaml")]
        file: String,
        /// graph (nodes and edges), machine (states with transitions) or pipeline (steps)
        #[arg(long, default_value = "graph", value_parser = ["graph", "machine", "pipeline"])]
        dialect: String,
        /// Overwrite FILE if it exists
        #[arg(long)]
        force: bool,
    },
    /// Check workflow files and report every error and warning
    #[command(after_help = VALIDATE_HELP)]
    Validate {
        /// Workflow files; NAME.input.json and NAME.mock.json companions are skipped
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
        /// Fail (exit 2) on warnings too, not only on errors
        #[arg(long)]
        deny_warnings: bool,
        /// Print a JSON array, one entry per file, with its errors and warnings
        #[arg(long)]
        json: bool,
    },
    /// Approve the pending human gate of a paused run and continue it
    #[command(after_help = APPROVE_HELP)]
    Approve {
        /// The paused run: its id or a unique prefix of it
        run_id: String,
        /// The gate to decide (default: the only, or oldest, waiting gate)
        #[arg(long, value_name = "NODE_ID")]
        gate: Option<String>,
        /// A JSON object merged into the run's state, or @path to a JSON file
        #[arg(long, value_name = "JSON")]
        input: Option<String>,
        /// A note recorded with the decision
        #[arg(long, value_name = "TEXT")]
        comment: Option<String>,
        /// Who decided (default: $USER)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
        /// Print the run record as JSON once the run stops again
        #[arg(long)]
        json: bool,
    },
    /// Reject the pending human gate of a paused run (the run fails)
    #[command(after_help = REJECT_HELP)]
    Reject {
        /// The paused run: its id or a unique prefix of it
        run_id: String,
        /// The gate to decide (default: the only, or oldest, waiting gate)
        #[arg(long, value_name = "NODE_ID")]
        gate: Option<String>,
        /// Why: recorded with the decision (asked for on a terminal when left out)
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// Who decided (default: $USER)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
        /// Print the run record as JSON
        #[arg(long)]
        json: bool,
    },
    /// Continue a run whose driver stopped (interrupted, or died and its lease expired)
    #[command(after_help = RESUME_HELP)]
    Resume {
        /// The run: its id or a unique prefix of it
        run_id: String,
        /// Print the run record as JSON once the run stops
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run: at once when queued or paused, else its driver stops in-flight steps
    #[command(after_help = CANCEL_HELP)]
    Cancel {
        /// The run: its id or a unique prefix of it
        run_id: String,
        /// Who cancelled (default: $USER)
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Inspect recorded runs
    #[command(after_help = RUNS_HELP)]
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Serve the HTTP API, with in-process workers driving the runs
    #[command(after_help = SERVE_HELP)]
    Serve {
        /// Address to listen on (port 0: any free port)
        #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
        listen: String,
        /// In-process workers (claim loops); 0 only serves and enqueues
        #[arg(long, default_value_t = 4)]
        workers: usize,
        /// Runs each worker drives at once
        #[arg(long, default_value_t = 8, value_name = "N")]
        runs_per_worker: usize,
        /// Largest request body, in bytes
        #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
        max_body: usize,
        /// On SIGTERM, how long in-flight steps may finish before they are interrupted
        #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
        grace: f64,
    },
    /// Drive runs from the store without serving HTTP
    #[command(after_help = WORKER_HELP)]
    Worker {
        /// Runs driven at once
        #[arg(long, default_value_t = 8, value_name = "N")]
        concurrency: usize,
        /// The name its leases carry (default: host:pid)
        #[arg(long)]
        name: Option<String>,
        /// On SIGTERM, how long in-flight steps may finish before they are interrupted
        #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
        grace: f64,
    },
    /// Run a recorded run again, offline, every call answered from its record, and report
    /// what differs
    #[command(after_help = REPLAY_HELP)]
    Replay {
        /// The recorded run: its id or a unique prefix of it
        run_id: String,
        /// Replay this (changed) workflow file instead of the version the run recorded
        #[arg(long, value_name = "FILE")]
        workflow: Option<String>,
        /// Print the comparison as one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Run workflow tests (NAME.test.yaml beside NAME.yaml), or write one from a run
    #[command(after_help = TEST_HELP)]
    Test {
        /// Test files, or folders to find *.test.yaml in (default: the current folder); with
        /// --record, where to write the test (default: NAME.test.yaml beside the workflow)
        paths: Vec<String>,
        /// Write a test that expects what this recorded run did, instead of running tests
        #[arg(long, value_name = "RUN_ID")]
        record: Option<String>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    #[command(after_help = COMPLETIONS_HELP)]
    Completions {
        /// The shell to complete for
        shell: clap_complete::Shell,
    },
    /// Print the page of a diagnostic code (E003, W105) or a run error code (node_failed)
    #[command(after_help = EXPLAIN_HELP)]
    Explain {
        /// The code, as `weir validate` or a run's error prints it
        #[arg(required_unless_present = "list")]
        code: Option<String>,
        /// List every code with its title
        #[arg(long)]
        list: bool,
    },
    /// Check this machine for what weir needs: database, settings, bun, API keys
    #[command(after_help = DOCTOR_HELP)]
    Doctor {
        /// Print the checks as a JSON array
        #[arg(long)]
        json: bool,
    },
    /// Manage API tokens
    #[command(after_help = TOKENS_HELP)]
    Tokens {
        #[command(subcommand)]
        command: TokensCommand,
    },
}

#[derive(Subcommand)]
enum TokensCommand {
    /// Make a token; its value is printed this once
    #[command(after_help = TOKENS_HELP)]
    Create {
        /// read, run, approve or admin (each includes the ones before it)
        #[arg(long, default_value = "read")]
        scope: String,
        /// A name to tell the token by in lists
        #[arg(long)]
        name: String,
        /// Print the token (with its value) as JSON
        #[arg(long)]
        json: bool,
    },
    /// Every token (never its value)
    #[command(after_help = TOKENS_HELP)]
    List {
        /// Print the tokens as a JSON array
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by id
    #[command(after_help = TOKENS_HELP)]
    Revoke {
        /// The token's id, as `weir tokens list` prints it
        id: String,
    },
}

#[derive(Subcommand)]
enum RunsCommand {
    /// Newest first: run id, workflow, status, start, duration, steps, cost, error
    #[command(after_help = RUNS_LIST_HELP)]
    List {
        /// At most this many runs
        #[arg(long, default_value_t = 50, value_name = "N")]
        limit: u32,
        /// Only runs in this status: queued, running, paused, succeeded, failed, aborted,
        /// cancelled
        #[arg(long, value_name = "STATUS")]
        status: Option<String>,
        /// Only runs of this workflow (its name, or a saved workflow's id)
        #[arg(long, value_name = "NAME")]
        workflow: Option<String>,
        /// Only runs started since: an age (30m, 12h, 7d) or an RFC 3339 time
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Print the runs as a JSON array of summaries
        #[arg(long)]
        json: bool,
    },
    /// One run as a trace: every step, attempt and model call, with prompts and replies
    #[command(after_help = RUNS_SHOW_HELP)]
    Show {
        /// The run: its id or a unique prefix of it (8 characters, as lists print it)
        run_id: String,
        /// Only this step, shown whole: its number (3 or #3) or a node id (every visit)
        step: Option<String>,
        /// Print prompts, replies and outputs whole instead of folding them to one line
        #[arg(long)]
        full: bool,
        /// Print the run record as JSON (with STEP: that step's records, as an array)
        #[arg(long)]
        json: bool,
    },
    /// Delete runs that ended longer ago than an age (never paused, queued or running ones)
    #[command(after_help = RUNS_PRUNE_HELP)]
    Prune {
        /// An age: 30d, 12h, 90m, 45s, 2w
        #[arg(long, value_name = "AGE")]
        older_than: String,
        /// Only runs that ended so: succeeded, failed, aborted, cancelled (repeatable)
        #[arg(long, value_name = "STATUS")]
        status: Vec<String>,
        /// Print how many runs were deleted as JSON
        #[arg(long)]
        json: bool,
    },
}

/// Exit codes of DESIGN §10.
pub mod exit {
    pub const FAILED: u8 = 1;
    pub const INVALID: u8 = 2;
    /// Already decided, driven elsewhere, or not in a state that allows the command.
    pub const CONFLICT: u8 = 5;
    /// Ctrl-C: the run was released for `weir resume`.
    pub const INTERRUPTED: u8 = 130;
}

impl Command {
    /// Whether the command was asked for JSON on stdout (`--json`): then an error is printed
    /// there as `{"error": {"code", "message"}}` too.
    fn json(&self) -> bool {
        match self {
            Command::Run { json, .. }
            | Command::Validate { json, .. }
            | Command::Approve { json, .. }
            | Command::Reject { json, .. }
            | Command::Resume { json, .. }
            | Command::Doctor { json }
            | Command::Replay { json, .. } => *json,
            Command::Runs { command } => match command {
                RunsCommand::List { json, .. }
                | RunsCommand::Show { json, .. }
                | RunsCommand::Prune { json, .. } => *json,
            },
            Command::Tokens { command } => match command {
                TokensCommand::Create { json, .. } | TokensCommand::List { json } => *json,
                TokensCommand::Revoke { .. } => false,
            },
            _ => false,
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
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
    };
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
    let db_is_default = cli.db.is_none() && std::env::var("WEIR_DB").map_or(true, |v| v.is_empty());
    let db_from = if cli.db.is_some() {
        "--db"
    } else if db_is_default {
        "the default path"
    } else {
        "WEIR_DB"
    };
    let db = cli.db.clone().unwrap_or_else(weir_store::default_url);
    // A bad weir.toml stops every command but `weir doctor`, which reports it.
    let is_doctor = matches!(cli.command, Command::Doctor { .. });
    let (settings, settings_state) = match wiring::settings(cli.config.as_deref()) {
        Ok(s) => (s, Ok(wiring::settings_path(cli.config.as_deref()))),
        Err(e) if is_doctor => (Default::default(), Err(format!("{e:#}"))),
        Err(e) => {
            if as_json {
                let body = serde_json::json!({
                    "error": {"code": error_code_of(&e), "message": format!("{e:#}")}
                });
                println!("{body}");
            }
            eprintln!("error: {e:#}");
            return ExitCode::from(exit::INVALID);
        }
    };
    let env = wiring::Env {
        db,
        db_is_default,
        settings,
        model: cli.model.clone(),
        db_from,
    };
    let db_line = format!("{} (from {db_from})", wiring::redact_url(&env.db));
    let result = rt.block_on(async move {
        match cli.command {
            Command::Validate {
                files,
                deny_warnings,
                json,
            } => validate::run(&env, &files, deny_warnings, json),
            Command::Explain { code, list } => explain::run(code.as_deref(), list),
            Command::Test { paths, record } => testing::run(&env, &paths, record.as_deref()).await,
            Command::Replay {
                run_id,
                workflow,
                json,
            } => replay::run(&env, &run_id, workflow.as_deref(), json).await,
            Command::Completions { shell } => {
                clap_complete::generate(shell, &mut Cli::command(), "weir", &mut std::io::stdout());
                Ok(0)
            }
            Command::Doctor { json } => doctor::run(&env, settings_state, json).await,
            Command::Init {
                file,
                dialect,
                force,
            } => init::run(&env, &file, &dialect, force),
            Command::Run { file, input, json } => {
                runs::run(&env, &file, input.as_deref(), json).await
            }
            Command::Approve {
                run_id,
                gate,
                input,
                comment,
                by,
                json,
            } => {
                runs::decide(
                    &env,
                    &run_id,
                    gate.as_deref(),
                    true,
                    input.as_deref(),
                    comment,
                    by,
                    json,
                )
                .await
            }
            Command::Reject {
                run_id,
                gate,
                reason,
                by,
                json,
            } => {
                runs::decide(
                    &env,
                    &run_id,
                    gate.as_deref(),
                    false,
                    None,
                    reason,
                    by,
                    json,
                )
                .await
            }
            Command::Resume { run_id, json } => runs::resume(&env, &run_id, json).await,
            Command::Cancel { run_id, by } => runs::cancel(&env, &run_id, by).await,
            Command::Runs {
                command:
                    RunsCommand::List {
                        limit,
                        status,
                        workflow,
                        since,
                        json,
                    },
            } => {
                let filter = runs::ListArgs {
                    limit,
                    status,
                    workflow,
                    since,
                };
                runs::list(&env, filter, json).await
            }
            Command::Runs {
                command:
                    RunsCommand::Show {
                        run_id,
                        step,
                        full,
                        json,
                    },
            } => runs::show(&env, &run_id, step.as_deref(), full, json).await,
            Command::Runs {
                command:
                    RunsCommand::Prune {
                        older_than,
                        status,
                        json,
                    },
            } => runs::prune(&env, &older_than, &status, json).await,
            Command::Serve {
                listen,
                workers,
                runs_per_worker,
                max_body,
                grace,
            } => {
                serve::serve(
                    &env,
                    serve::ServeArgs {
                        listen,
                        workers,
                        runs_per_worker: runs_per_worker.max(1),
                        max_body,
                        grace: seconds(grace),
                    },
                )
                .await
            }
            Command::Worker {
                concurrency,
                name,
                grace,
            } => serve::worker(&env, concurrency.max(1), name, seconds(grace)).await,
            Command::Tokens { command } => match command {
                TokensCommand::Create { scope, name, json } => {
                    serve::tokens_create(&env, &name, &scope, json).await
                }
                TokensCommand::List { json } => serve::tokens_list(&env, json).await,
                TokensCommand::Revoke { id } => serve::tokens_revoke(&env, &id).await,
            },
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if as_json {
                let body = serde_json::json!({
                    "error": {"code": error_code_of(&e), "message": format!("{e:#}")}
                });
                println!("{body}");
            }
            eprintln!("error: {e:#}");
            // A store fault names the database and how it was chosen.
            if e.downcast_ref::<weir_core::store::StoreError>().is_some()
                || engine_kind(&e) == Some(Kind::Store)
            {
                eprintln!("  database: {db_line}");
            }
            ExitCode::from(exit_code_of(&e))
        }
    }
}

fn seconds(s: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(if s.is_finite() {
        s.clamp(0.0, 86_400.0)
    } else {
        10.0
    })
}

/// The engine's kind of an error (an engine or store error), if it is one.
fn engine_kind(e: &anyhow::Error) -> Option<Kind> {
    e.downcast_ref::<weir_engine::Error>()
        .map(weir_engine::Error::kind)
        .or_else(|| {
            e.downcast_ref::<weir_core::store::StoreError>()
                .map(|s| weir_engine::Error::from(s.clone()).kind())
        })
}

/// The one place errors become exit codes.
fn exit_code_of(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<Usage>().is_some() || e.downcast_ref::<wiring::NoDatabase>().is_some() {
        return exit::INVALID;
    }
    match engine_kind(e) {
        Some(Kind::NotFound | Kind::InvalidInput) => exit::INVALID,
        Some(Kind::Conflict | Kind::LeaseLost) => exit::CONFLICT,
        _ => exit::FAILED,
    }
}

use weir_engine::ErrorKind as Kind;

/// The `code` of a `--json` error: what kind of failure, for scripts to branch on.
fn error_code_of(e: &anyhow::Error) -> &'static str {
    if e.downcast_ref::<wiring::NoDatabase>().is_some() {
        return "no_database";
    }
    if e.downcast_ref::<Usage>().is_some() {
        return "usage";
    }
    match engine_kind(e) {
        Some(Kind::NotFound) => "not_found",
        Some(Kind::InvalidInput) => "invalid_input",
        Some(Kind::Conflict) => "conflict",
        Some(Kind::LeaseLost) => "lease_lost",
        Some(Kind::Store) => "store",
        None => "error",
    }
}

/// An error in how weir was called (bad input JSON, unknown run id): exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);
