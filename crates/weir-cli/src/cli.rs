//! The command line: every command's arguments (clap) and the dispatch to the module that
//! runs it. One module per command, or per group of subcommands (`runs`, `tokens`).

use anyhow::Result;
use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::help::*;
use crate::wiring::Env;
use crate::{doctor, explain, init, replay, run, runs, serve, testing, tokens, triggers, validate};

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "A workflow engine for AI agents",
    after_help = TOP_HELP
)]
pub struct Cli {
    /// Run store: a SQLite path, sqlite://path or sqlite::memory: (default: $WEIR_DB, else
    /// ~/.local/share/weir/weir.db)
    #[arg(long, global = true, value_name = "URL")]
    pub db: Option<String>,
    /// Workspace settings file (default: $WEIR_CONFIG, else ./weir.toml when present)
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// `--model NAME`, on the commands that run or check workflows.
#[derive(Args, Clone, Default)]
pub struct ModelOverride {
    /// Send every model call of a run to this model instead of the ones its workflow names
    /// (fallbacks too): `--model mock` runs any workflow offline, without editing it
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run a workflow to its end (or to a human gate)
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Write a small workflow that runs offline, to start from
    #[command(after_help = INIT_HELP)]
    Init(InitArgs),
    /// Check workflow files and report every error and warning
    #[command(after_help = VALIDATE_HELP)]
    Validate(ValidateArgs),
    /// Approve the pending human gate of a paused run and continue it
    #[command(after_help = APPROVE_HELP)]
    Approve(ApproveArgs),
    /// Reject the pending human gate of a paused run (the run fails)
    #[command(after_help = REJECT_HELP)]
    Reject(RejectArgs),
    /// Continue a run whose driver stopped (interrupted, or died and its lease expired)
    #[command(after_help = RESUME_HELP)]
    Resume {
        /// The run: its id or a unique prefix of it
        run_id: String,
        /// Print the run record as JSON once the run stops
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        model: ModelOverride,
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
    Serve(ServeArgs),
    /// Drive runs from the store without serving HTTP
    #[command(after_help = WORKER_HELP)]
    Worker(WorkerArgs),
    /// Run a recorded run again, offline, every call answered from its record, and report
    /// what differs
    #[command(after_help = REPLAY_HELP)]
    Replay(ReplayArgs),
    /// Run workflow tests (NAME.test.yaml beside NAME.yaml), or write one from a run
    #[command(after_help = TEST_HELP)]
    Test(TestArgs),
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
    /// The schedules of saved workflows: next fire times, fire one now, pause, resume
    #[command(after_help = TRIGGERS_HELP)]
    Triggers {
        #[command(subcommand)]
        command: TriggersCommand,
    },
}

#[derive(Subcommand)]
pub enum TriggersCommand {
    /// Every trigger of the saved workflows, with its state and next fire times
    #[command(after_help = TRIGGERS_HELP)]
    List {
        /// Only this saved workflow's triggers (its id)
        #[arg(long, value_name = "ID")]
        workflow: Option<String>,
        /// The fire times after this RFC 3339 time instead of now
        #[arg(long, value_name = "TIME")]
        at: Option<String>,
        /// Print the triggers as a JSON array
        #[arg(long)]
        json: bool,
    },
    /// Start a run now as the trigger would, with its input
    #[command(after_help = TRIGGERS_HELP)]
    Fire {
        /// The saved workflow's id
        workflow: String,
        /// The trigger's name
        name: String,
        /// Print `{"run_id": …}` as JSON
        #[arg(long)]
        json: bool,
    },
    /// Stop a trigger from firing until it is resumed (a new version does not undo it)
    #[command(after_help = TRIGGERS_HELP)]
    Pause {
        /// The saved workflow's id
        workflow: String,
        /// The trigger's name
        name: String,
    },
    /// Let a paused trigger fire again, from now on
    #[command(after_help = TRIGGERS_HELP)]
    Resume {
        /// The saved workflow's id
        workflow: String,
        /// The trigger's name
        name: String,
    },
}

#[derive(Subcommand)]
pub enum TokensCommand {
    /// Make a token; its value is printed this once
    #[command(after_help = TOKENS_HELP)]
    Create(TokenArgs),
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
pub enum RunsCommand {
    /// Newest first: run id, workflow, status, start, duration, steps, cost, error
    #[command(after_help = RUNS_LIST_HELP)]
    List(ListArgs),
    /// One run as a trace: every step, attempt and model call, with prompts and replies
    #[command(after_help = RUNS_SHOW_HELP)]
    Show(ShowArgs),
    /// Delete runs that ended longer ago than an age (never paused, queued or running ones)
    #[command(after_help = RUNS_PRUNE_HELP)]
    Prune(PruneArgs),
}

// The arguments of `weir run`.
#[derive(Args)]
pub struct RunArgs {
    /// The workflow file (.yaml, .yml or .json; graph, machine or pipeline dialect)
    pub file: String,
    /// Run input: a JSON object, or @path to a JSON file
    #[arg(long, value_name = "JSON")]
    pub input: Option<String>,
    /// Print exactly one JSON object, the run record, on stdout
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub model: ModelOverride,
}

// The arguments of `weir approve`.
#[derive(Args)]
pub struct ApproveArgs {
    /// The paused run: its id or a unique prefix of it
    pub run_id: String,
    /// The gate to decide (default: the only, or oldest, waiting gate)
    #[arg(long, value_name = "NODE_ID")]
    pub gate: Option<String>,
    /// A JSON object merged into the run's state, or @path to a JSON file
    #[arg(long, value_name = "JSON")]
    pub input: Option<String>,
    /// A note recorded with the decision
    #[arg(long, value_name = "TEXT")]
    pub comment: Option<String>,
    /// Who decided (default: $USER)
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// Print the run record as JSON once the run stops again
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub model: ModelOverride,
}

// The arguments of `weir reject`.
#[derive(Args)]
pub struct RejectArgs {
    /// The paused run: its id or a unique prefix of it
    pub run_id: String,
    /// The gate to decide (default: the only, or oldest, waiting gate)
    #[arg(long, value_name = "NODE_ID")]
    pub gate: Option<String>,
    /// Why: recorded with the decision (asked for on a terminal when left out)
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Who decided (default: $USER)
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// Print the run record as JSON
    #[arg(long)]
    pub json: bool,
}

// The arguments of `weir serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port)
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: String,
    /// In-process workers (claim loops); 0 only serves and enqueues
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Runs each worker drives at once
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub runs_per_worker: usize,
    /// Largest request body, in bytes
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    pub max_body: usize,
    /// On SIGTERM, how long in-flight steps may finish before they are interrupted
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub grace: f64,
    #[command(flatten)]
    pub model: ModelOverride,
}

// The arguments of `weir worker`.
#[derive(Args)]
pub struct WorkerArgs {
    /// Runs driven at once
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub concurrency: usize,
    /// The name its leases carry (default: host:pid)
    #[arg(long)]
    pub name: Option<String>,
    /// On SIGTERM, how long in-flight steps may finish before they are interrupted
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub grace: f64,
    #[command(flatten)]
    pub model: ModelOverride,
}

// The arguments of `weir validate`.
#[derive(Args)]
pub struct ValidateArgs {
    /// Workflow files; NAME.input.json and NAME.mock.json companions are skipped
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<String>,
    /// Fail (exit 2) on warnings too, not only on errors
    #[arg(long)]
    pub deny_warnings: bool,
    /// Print a JSON array, one entry per file, with its errors and warnings
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub model: ModelOverride,
}

// The arguments of `weir init`.
#[derive(Args)]
pub struct InitArgs {
    /// Where to write it
    #[arg(default_value = "hello.yaml")]
    pub file: String,
    /// graph (nodes and edges), machine (states with transitions) or pipeline (steps)
    #[arg(long, default_value = "graph", value_parser = ["graph", "machine", "pipeline"])]
    pub dialect: String,
    /// Overwrite FILE if it exists
    #[arg(long)]
    pub force: bool,
}

// The arguments of `weir replay`.
#[derive(Args)]
pub struct ReplayArgs {
    /// The recorded run: its id or a unique prefix of it
    pub run_id: String,
    /// Replay this (changed) workflow file instead of the version the run recorded
    #[arg(long, value_name = "FILE")]
    pub workflow: Option<String>,
    /// Print the comparison as one JSON object
    #[arg(long)]
    pub json: bool,
}

// The arguments of `weir test`.
#[derive(Args)]
pub struct TestArgs {
    /// Test files, or folders to find *.test.yaml in (default: the current folder); with
    /// --record, where to write the test (default: NAME.test.yaml beside the workflow)
    pub paths: Vec<String>,
    /// Write a test that expects what this recorded run did, instead of running tests
    #[arg(long, value_name = "RUN_ID")]
    pub record: Option<String>,
    #[command(flatten)]
    pub model: ModelOverride,
}

// The arguments of `weir tokens create`.
#[derive(Args)]
pub struct TokenArgs {
    /// read, run, approve or admin (each includes the ones before it)
    #[arg(long, default_value = "read")]
    pub scope: String,
    /// A name to tell the token by in lists
    #[arg(long)]
    pub name: String,
    /// Print the token (with its value) as JSON
    #[arg(long)]
    pub json: bool,
}

// The arguments of `weir runs list`.
#[derive(Args)]
pub struct ListArgs {
    /// At most this many runs
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub limit: u32,
    /// Only runs in this status: queued, running, paused, succeeded, failed, aborted,
    /// cancelled
    #[arg(long, value_name = "STATUS")]
    pub status: Option<String>,
    /// Only runs of this workflow (its name, or a saved workflow's id)
    #[arg(long, value_name = "NAME")]
    pub workflow: Option<String>,
    /// Only runs started since: an age (30m, 12h, 7d) or an RFC 3339 time
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only runs started this way: cli, api, schedule, webhook, mcp, parent, or one
    /// trigger as KIND:NAME (schedule:nightly)
    #[arg(long, value_name = "TRIGGER")]
    pub trigger: Option<String>,
    /// Print the runs as a JSON array of summaries
    #[arg(long)]
    pub json: bool,
}

// The arguments of `weir runs show`.
#[derive(Args)]
pub struct ShowArgs {
    /// The run: its id or a unique prefix of it (8 characters, as lists print it)
    pub run_id: String,
    /// Only this step, shown whole: its number (3 or #3) or a node id (every visit)
    pub step: Option<String>,
    /// Print prompts, replies and outputs whole instead of folding them to one line
    #[arg(long)]
    pub full: bool,
    /// Print the run record as JSON (with STEP: that step's records, as an array)
    #[arg(long)]
    pub json: bool,
}

// The arguments of `weir runs prune`.
#[derive(Args)]
pub struct PruneArgs {
    /// An age: 30d, 12h, 90m, 45s, 2w
    #[arg(long, value_name = "AGE")]
    pub older_than: String,
    /// Only runs that ended so: succeeded, failed, aborted, cancelled (repeatable)
    #[arg(long, value_name = "STATUS")]
    pub status: Vec<String>,
    /// Print how many runs were deleted as JSON
    #[arg(long)]
    pub json: bool,
}

impl Command {
    /// The model every call of this command's runs goes to instead (`--model`), where the
    /// command takes one.
    pub fn model(&self) -> Option<String> {
        match self {
            Command::Run(RunArgs { model, .. })
            | Command::Approve(ApproveArgs { model, .. })
            | Command::Resume { model, .. }
            | Command::Serve(ServeArgs { model, .. })
            | Command::Worker(WorkerArgs { model, .. })
            | Command::Validate(ValidateArgs { model, .. })
            | Command::Test(TestArgs { model, .. }) => model.model.clone(),
            _ => None,
        }
    }

    /// Whether the command was asked for JSON on stdout (`--json`): then an error is printed
    /// there as `{"error": {"code", "message"}}` too.
    pub fn json(&self) -> bool {
        match self {
            Command::Run(RunArgs { json, .. })
            | Command::Validate(ValidateArgs { json, .. })
            | Command::Approve(ApproveArgs { json, .. })
            | Command::Reject(RejectArgs { json, .. })
            | Command::Resume { json, .. }
            | Command::Doctor { json }
            | Command::Replay(ReplayArgs { json, .. }) => *json,
            Command::Runs { command } => match command {
                RunsCommand::List(ListArgs { json, .. })
                | RunsCommand::Show(ShowArgs { json, .. })
                | RunsCommand::Prune(PruneArgs { json, .. }) => *json,
            },
            Command::Tokens { command } => match command {
                TokensCommand::Create(TokenArgs { json, .. }) | TokensCommand::List { json } => {
                    *json
                }
                TokensCommand::Revoke { .. } => false,
            },
            Command::Triggers {
                command: TriggersCommand::List { json, .. } | TriggersCommand::Fire { json, .. },
            } => *json,
            _ => false,
        }
    }

    /// Runs the command; its exit code, or the error `main` reports.
    pub async fn run(self, env: &Env, settings: Result<Option<String>, String>) -> Result<u8> {
        match self {
            Command::Run(args) => run::run(env, args).await,
            Command::Init(args) => init::run(env, args),
            Command::Validate(args) => validate::run(env, args),
            Command::Approve(args) => run::approve(env, args).await,
            Command::Reject(args) => run::reject(env, args).await,
            Command::Resume { run_id, json, .. } => run::resume(env, &run_id, json).await,
            Command::Cancel { run_id, by } => run::cancel(env, &run_id, by).await,
            Command::Runs { command } => command.run(env).await,
            Command::Serve(args) => serve::serve(env, args).await,
            Command::Worker(args) => serve::worker(env, args).await,
            Command::Replay(args) => replay::run(env, args).await,
            Command::Test(args) => testing::run(env, args).await,
            Command::Completions { shell } => {
                clap_complete::generate(shell, &mut Cli::command(), "weir", &mut std::io::stdout());
                Ok(0)
            }
            Command::Explain { code, list } => explain::run(code.as_deref(), list),
            Command::Doctor { json } => doctor::run(env, settings, json).await,
            Command::Tokens { command } => command.run(env).await,
            Command::Triggers { command } => triggers::run(env, command).await,
        }
    }
}

impl RunsCommand {
    async fn run(self, env: &Env) -> Result<u8> {
        match self {
            RunsCommand::List(args) => runs::list(env, args).await,
            RunsCommand::Show(args) => runs::show(env, args).await,
            RunsCommand::Prune(args) => runs::prune(env, args).await,
        }
    }
}

impl TokensCommand {
    async fn run(self, env: &Env) -> Result<u8> {
        match self {
            TokensCommand::Create(args) => tokens::create(env, args).await,
            TokensCommand::List { json } => tokens::list(env, json).await,
            TokensCommand::Revoke { id } => tokens::revoke(env, &id).await,
        }
    }
}

/// Seconds from the command line as a duration: clamped to a day, 10 s when not finite.
pub fn seconds(s: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(if s.is_finite() {
        s.clamp(0.0, 86_400.0)
    } else {
        10.0
    })
}
