//! The EXAMPLES and EXIT CODES sections of `weir … --help`.

macro_rules! exit_codes {
    () => {
        "Exit codes:
  0    the run succeeded
  1    the run failed or was cancelled (or weir itself failed)
  2    invalid workflow, input or usage (unknown run id, bad flag)
  3    the run is paused at a human gate (approve or reject it)
  4    the run aborted (it reached an `end` with status aborted)
  5    conflict: already decided, driven elsewhere, or not in a state that allows it
  130  interrupted (Ctrl-C): the run was released; `weir resume ID` continues it"
    };
}

pub const TOP_HELP: &str = concat!(
    "Examples:
  weir init hello.yaml && weir run hello.yaml       a workflow that runs offline
  weir run examples/graph/support-triage.json --input @examples/graph/support-triage.input.json
  weir runs list --status failed --since 1d         what failed today
  weir runs show 1a2b3c4d                           one run, step by step
  weir explain E003                                 what a diagnostic code means
  weir test                                         every NAME.test.yaml here, offline
  weir replay 1a2b3c4d --workflow flow.yaml         did my change alter a recorded run?
  weir doctor                                       check bun, API keys, the database

",
    exit_codes!(),
    "

Docs: docs/cli.md (every command), docs/testing.md (test, replay), docs/observability.md
(OpenTelemetry), docs/errors/ (every code, also `weir explain CODE`)"
);

pub const RUN_HELP: &str = concat!(
    "Examples:
  weir run hello.yaml
  weir run triage.yaml --input '{\"ticket\": \"refund please\"}'
  weir run triage.yaml --input @ticket.json --json | jq .status
  weir --model mock run triage.yaml        every model call to the offline mock
  WEIR_MOCK=replies.json weir run triage.yaml
A NAME.mock.json beside NAME.yaml scripts the mock model (docs/models.md).

",
    exit_codes!()
);

pub const INIT_HELP: &str = "Examples:
  weir init                                 hello.yaml, a graph
  weir init review.yaml --dialect pipeline
  weir init flow.yaml --dialect machine --force";

pub const VALIDATE_HELP: &str = "Examples:
  weir validate flow.yaml
  weir validate examples/*/*.yaml --deny-warnings
  weir validate flow.yaml --json | jq '.[0].errors'
  weir explain E003                         what an error code means

Exit codes:
  0  no errors (warnings allowed unless --deny-warnings)
  2  errors (or warnings with --deny-warnings), or a file that cannot be read";

pub const APPROVE_HELP: &str = concat!(
    "Examples:
  weir approve 1a2b3c4d
  weir approve 1a2b3c4d --gate review --comment 'looks right' --by ana
  weir approve 1a2b3c4d --input '{\"tone\": \"formal\"}'

",
    exit_codes!()
);

pub const REJECT_HELP: &str = concat!(
    "Examples:
  weir reject 1a2b3c4d --reason 'tone is off'
  weir reject 1a2b3c4d --gate legal --reason 'needs a lawyer' --by ana

",
    exit_codes!()
);

pub const RESUME_HELP: &str = concat!(
    "Examples:
  weir resume 1a2b3c4d            after Ctrl-C, or a crash once its lease expired

",
    exit_codes!()
);

pub const CANCEL_HELP: &str = "Examples:
  weir cancel 1a2b3c4d
  weir cancel 1a2b3c4d --by ana

Exit codes:
  0  cancelled (or its driver was asked to stop)
  2  no such run
  5  the run already ended";

pub const RUNS_HELP: &str = "Examples:
  weir runs list
  weir runs show 1a2b3c4d
  weir runs prune --older-than 30d";

pub const RUNS_LIST_HELP: &str = "Examples:
  weir runs list
  weir runs list --status failed --since 12h
  weir runs list --workflow support-triage --limit 200
  weir runs list --json | jq '.[].run_id'";

pub const RUNS_SHOW_HELP: &str = "Examples:
  weir runs show 1a2b3c4d              every step, attempt and model call, long texts folded
  weir runs show 1a2b3c4d --full       prompts, replies and outputs whole
  weir runs show 1a2b3c4d classify     one node's steps, whole (or a number: 3, #3)
  weir runs show 1a2b3c4d --json       the run record (docs/run-record.schema.json)

Exit codes: as `weir run` for the run's status (0 while it is queued or running)";

pub const RUNS_PRUNE_HELP: &str = "Examples:
  weir runs prune --older-than 30d
  weir runs prune --older-than 7d --status failed --status cancelled";

pub const SERVE_HELP: &str = "Examples:
  weir serve
  weir serve --listen 0.0.0.0:8080 --workers 8
  WEIR_DB=postgres://weir@db/weir weir serve --workers 0     API only, workers elsewhere

The API is documented in docs/api.md (OpenAPI at /api/openapi.json).";

pub const WORKER_HELP: &str = "Examples:
  weir worker --db postgres://weir@db/weir --concurrency 16
  weir worker --name worker-a --grace 30";

pub const TOKENS_HELP: &str = "Examples:
  weir tokens create --name ci --scope run
  weir tokens list
  weir tokens revoke 3f9c2a71b0de";

pub const TRIGGERS_HELP: &str =
    "Triggers are declared in a workflow document (`triggers:`) and fire for workflows
saved in the store that `weir serve` and `weir worker` run on.

Examples:
  weir triggers list
  weir triggers list --workflow digest --json
  weir triggers fire digest weekday-morning
  weir triggers pause digest weekday-morning
  weir triggers resume digest weekday-morning";

pub const COMPLETIONS_HELP: &str = "Examples:
  weir completions bash > ~/.local/share/bash-completion/completions/weir
  weir completions zsh > ~/.zfunc/_weir
  weir completions fish > ~/.config/fish/completions/weir.fish";

pub const DOCTOR_HELP: &str = "Examples:
  weir doctor
  weir --db postgres://weir@db/weir doctor
  weir doctor --json

Exit codes:
  0  every check passed (warnings allowed)
  1  a check failed";

pub const EXPLAIN_HELP: &str = "Examples:
  weir explain E003
  weir explain w104
  weir explain --list";

pub const REPLAY_HELP: &str = "Examples:
  weir replay 1a2b3c4d                              the recorded workflow: nothing should differ
  weir replay 1a2b3c4d --workflow triage.yaml       did my prompt change alter last week's run?
  weir replay 1a2b3c4d --json | jq '.differences[].kind'

No model, tool or script is called: every call is answered from the run's record, matched
by node, visit and attempt; a call the record cannot answer fails its step (\"not in the
recording\"). Human gates are decided as they were.

Exit codes:
  0  nothing differs
  1  something differs (a prompt, a route, an output, a step, the status)
  2  no such run, a workflow that does not compile, or a run still queued or running";

pub const TEST_HELP: &str = "Examples:
  weir test                                   every *.test.yaml under this folder
  weir test examples/graph/approval.test.yaml
  weir test --record 1a2b3c4d                 NAME.test.yaml from what the run did

A test runs its workflow in memory: every model call answered by the test's mock rules
(whatever model a node names), every tool node by its scripted result, every human gate by
its decision; nothing is written to the database and no provider is called.

Exit codes:
  0  every test passed
  1  a test failed
  2  no test files, or a file that is not a test file";
