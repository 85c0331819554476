//! Schema migrations, embedded in the binary and applied in order on open.

/// `(version, sql)`; append only, never edit a released entry.
pub const MIGRATIONS: &[(i64, &str)] = &[(
    1,
    r#"
CREATE TABLE runs (
    id           TEXT PRIMARY KEY,
    workflow     TEXT NOT NULL,
    dialect      TEXT NOT NULL,
    status       TEXT NOT NULL,
    source_path  TEXT NOT NULL,
    source_text  TEXT NOT NULL,
    input        TEXT NOT NULL,
    snapshot     TEXT NOT NULL,
    error        TEXT,
    cost_usd     REAL NOT NULL DEFAULT 0,
    started_at   TEXT NOT NULL,
    finished_at  TEXT
);
CREATE INDEX runs_started ON runs (started_at DESC);
CREATE TABLE steps (
    run_id       TEXT NOT NULL REFERENCES runs (id),
    seq          INTEGER NOT NULL,
    node_id      TEXT NOT NULL,
    node_type    TEXT NOT NULL,
    visit        INTEGER NOT NULL,
    status       TEXT NOT NULL,
    route        TEXT,
    input        TEXT NOT NULL,
    output       TEXT NOT NULL,
    error        TEXT,
    cost_usd     REAL NOT NULL DEFAULT 0,
    tokens_in    INTEGER NOT NULL DEFAULT 0,
    tokens_out   INTEGER NOT NULL DEFAULT 0,
    started_at   TEXT NOT NULL,
    finished_at  TEXT,
    duration_ms  INTEGER,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE attempts (
    run_id       TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    n            INTEGER NOT NULL,
    body         TEXT NOT NULL,
    PRIMARY KEY (run_id, seq, n)
);
CREATE TABLE events (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       TEXT NOT NULL,
    body         TEXT NOT NULL
);
CREATE INDEX events_run ON events (run_id, id);
"#,
)];
