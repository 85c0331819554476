//! The Postgres schema, applied in order on open under an advisory lock (several workers may
//! start at once). Append only; never edit a released entry.

pub const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        r#"
-- Runs: one row each, updated in place by every write of a drive (event_seq, snapshot), so
-- the fill factor leaves room for HOT updates.
CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    workflow         TEXT NOT NULL,
    dialect          TEXT NOT NULL,
    status           TEXT NOT NULL,
    source_path      TEXT NOT NULL,
    source_text      TEXT NOT NULL,
    input            TEXT NOT NULL,
    snapshot         TEXT NOT NULL,
    error            TEXT,
    cost_usd         DOUBLE PRECISION NOT NULL DEFAULT 0,
    started_at       TEXT NOT NULL,
    finished_at      TEXT,
    epoch            BIGINT NOT NULL DEFAULT 0,
    owner            TEXT,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    idempotency_key  TEXT UNIQUE,
    event_seq        BIGINT NOT NULL DEFAULT 0,
    workflow_id      TEXT,
    workflow_version BIGINT
) WITH (fillfactor = 70);
CREATE INDEX runs_list ON runs (started_at DESC, id DESC);
CREATE INDEX runs_ended ON runs (finished_at) WHERE finished_at IS NOT NULL;
-- The hot queue: a row per runnable or leased run, and only those (a paused or ended run
-- has none), so the claim scans a table the size of the work in flight however large
-- `runs` grows. `visible_at` (unix ms) is when the row may be claimed: its enqueue time
-- while queued, its lease's expiry while leased.
CREATE TABLE queue (
    run_id      TEXT PRIMARY KEY,
    n           BIGINT GENERATED ALWAYS AS IDENTITY,
    visible_at  BIGINT NOT NULL,
    leased      BOOLEAN NOT NULL DEFAULT FALSE,
    epoch       BIGINT NOT NULL DEFAULT 0
) WITH (fillfactor = 50);
-- Claims take expired leases first (runs already under way), then queued runs oldest first.
CREATE INDEX queue_ready ON queue (visible_at, n) WHERE NOT leased;
CREATE INDEX queue_leases ON queue (visible_at) WHERE leased;
CREATE TABLE steps (
    run_id       TEXT NOT NULL,
    seq          BIGINT NOT NULL,
    node_id      TEXT NOT NULL,
    node_type    TEXT NOT NULL,
    visit        BIGINT NOT NULL,
    status       TEXT NOT NULL,
    route        TEXT,
    input        TEXT NOT NULL,
    output       TEXT NOT NULL,
    error        TEXT,
    cost_usd     DOUBLE PRECISION NOT NULL DEFAULT 0,
    tokens_in    BIGINT NOT NULL DEFAULT 0,
    tokens_out   BIGINT NOT NULL DEFAULT 0,
    started_at   TEXT NOT NULL,
    finished_at  TEXT,
    duration_ms  BIGINT,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE attempts (
    run_id  TEXT NOT NULL,
    seq     BIGINT NOT NULL,
    n       BIGINT NOT NULL,
    body    TEXT NOT NULL,
    PRIMARY KEY (run_id, seq, n)
);
-- `body` is the event without its `seq` (the key): `{"at", "type", …}`.
CREATE TABLE run_events (
    run_id  TEXT NOT NULL,
    seq     BIGINT NOT NULL,
    body    TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE workflows (
    id          TEXT PRIMARY KEY,
    latest      BIGINT NOT NULL,
    created_at  TEXT NOT NULL,
    deleted_at  TEXT
);
CREATE TABLE workflow_versions (
    workflow_id TEXT NOT NULL,
    version     BIGINT NOT NULL,
    name        TEXT NOT NULL,
    dialect     TEXT NOT NULL,
    format      TEXT NOT NULL,
    source      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (workflow_id, version)
);
CREATE TABLE tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    scope       TEXT NOT NULL,
    hash        BYTEA NOT NULL,
    created_at  TEXT NOT NULL,
    revoked_at  TEXT
);
CREATE TABLE tools (
    name        TEXT PRIMARY KEY,
    definition  TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
"#,
    ),
    (
        2,
        r"
-- The lean durable path: a step commit may write what changed in the run's snapshot as a
-- patch instead of the whole snapshot, which is written every few commits and at the end.
-- A run's patches are those written since its whole snapshot (`seq`: the commit's first
-- event number, commit order); a whole snapshot deletes them in its own statement.
CREATE TABLE run_patches (
    run_id  TEXT NOT NULL,
    seq     BIGINT NOT NULL,
    patch   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
",
    ),
    (
        3,
        r"
-- A workflow's source is stored once per distinct text (`sources`, as SQLite's migration 19),
-- and a run names it (`source_key`): every run kept its own copy in its row, a kilobyte or
-- more, which every update of the row (each step commit) wrote again. A text is found by
-- its SHA-256 (a B-tree entry cannot hold a long text). The foreign key keeps a text while
-- any run names it: retention deletes texts no run names, and a creation that races it
-- fails on the key and is retried (as is the retention's delete).
CREATE TABLE sources (
    key   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hash  BYTEA NOT NULL UNIQUE,
    text  TEXT NOT NULL
);
INSERT INTO sources (hash, text)
    SELECT DISTINCT ON (h) h, source_text
    FROM (SELECT sha256(convert_to(source_text, 'UTF8')) AS h, source_text FROM runs) AS r;
ALTER TABLE runs ADD COLUMN source_key BIGINT REFERENCES sources (key);
UPDATE runs SET source_key = s.key
    FROM sources s WHERE s.hash = sha256(convert_to(runs.source_text, 'UTF8'));
ALTER TABLE runs ALTER COLUMN source_key SET NOT NULL;
ALTER TABLE runs DROP COLUMN source_text;
CREATE INDEX runs_source ON runs (source_key);
",
    ),
    (
        4,
        r"
-- What started each run (as SQLite's migration 20): the kind for the list's filter, and the
-- whole of it as JSON.
ALTER TABLE runs ADD COLUMN trigger_kind TEXT;
ALTER TABLE runs ADD COLUMN trigger_json TEXT;
",
    ),
    (
        5,
        r"
-- What an operator set on a saved workflow's trigger (as SQLite's migration 21).
CREATE TABLE trigger_states (
    workflow_id  TEXT NOT NULL,
    name         TEXT NOT NULL,
    paused       BOOLEAN NOT NULL DEFAULT false,
    token_hash   BYTEA,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (workflow_id, name)
);
",
    ),
];
