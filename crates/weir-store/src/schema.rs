//! Schema migrations, embedded in the binary and applied in order on open.

/// `(version, sql)`; append only, never edit a released entry.
pub const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        r"
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
",
    ),
    (
        2,
        r"
-- One INSERT commits a finished step: the trigger writes the step row, its attempts and the
-- run's snapshot in the same statement (so the same transaction), in one round trip to the
-- database thread, and leaves nothing behind in this table.
CREATE TABLE step_commits (
    run_id    TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    step      TEXT NOT NULL,
    snapshot  TEXT NOT NULL,
    cost_usd  REAL NOT NULL
);
CREATE TRIGGER step_commit AFTER INSERT ON step_commits BEGIN
    INSERT OR REPLACE INTO steps (run_id, seq, node_id, node_type, visit, status, route, input,
        output, error, cost_usd, tokens_in, tokens_out, started_at, finished_at, duration_ms)
    VALUES (NEW.run_id, NEW.seq, NEW.step ->> '$.node_id', NEW.step ->> '$.node_type',
        NEW.step ->> '$.visit', NEW.step ->> '$.status', NEW.step ->> '$.route',
        NEW.step -> '$.input', NEW.step -> '$.output', NEW.step ->> '$.error',
        NEW.step ->> '$.cost_usd', NEW.step ->> '$.tokens.input', NEW.step ->> '$.tokens.output',
        NEW.step ->> '$.started_at', NEW.step ->> '$.finished_at', NEW.step ->> '$.duration_ms');
    INSERT OR REPLACE INTO attempts (run_id, seq, n, body)
        SELECT NEW.run_id, NEW.seq, value ->> '$.n', value FROM json_each(NEW.step -> '$.attempts');
    UPDATE runs SET snapshot = NEW.snapshot, cost_usd = NEW.cost_usd WHERE id = NEW.run_id;
    DELETE FROM step_commits WHERE rowid = NEW.rowid;
END;
",
    ),
    (
        3,
        r"
-- A step commit also carries the `running` rows of the steps launched since the last commit.
ALTER TABLE step_commits ADD COLUMN started TEXT NOT NULL DEFAULT '[]';
DROP TRIGGER step_commit;
CREATE TRIGGER step_commit AFTER INSERT ON step_commits BEGIN
    INSERT OR REPLACE INTO steps (run_id, seq, node_id, node_type, visit, status, route, input,
        output, error, cost_usd, tokens_in, tokens_out, started_at, finished_at, duration_ms)
    VALUES (NEW.run_id, NEW.seq, NEW.step ->> '$.node_id', NEW.step ->> '$.node_type',
        NEW.step ->> '$.visit', NEW.step ->> '$.status', NEW.step ->> '$.route',
        NEW.step -> '$.input', NEW.step -> '$.output', NEW.step ->> '$.error',
        NEW.step ->> '$.cost_usd', NEW.step ->> '$.tokens.input', NEW.step ->> '$.tokens.output',
        NEW.step ->> '$.started_at', NEW.step ->> '$.finished_at', NEW.step ->> '$.duration_ms');
    INSERT OR REPLACE INTO steps (run_id, seq, node_id, node_type, visit, status, route, input,
        output, error, cost_usd, tokens_in, tokens_out, started_at, finished_at, duration_ms)
    SELECT NEW.run_id, value ->> '$.seq', value ->> '$.node_id', value ->> '$.node_type',
        value ->> '$.visit', value ->> '$.status', NULL, value -> '$.input', 'null', NULL,
        0, 0, 0, value ->> '$.started_at', NULL, NULL
    FROM json_each(NEW.started);
    INSERT OR REPLACE INTO attempts (run_id, seq, n, body)
        SELECT NEW.run_id, NEW.seq, value ->> '$.n', value FROM json_each(NEW.step -> '$.attempts');
    UPDATE runs SET snapshot = NEW.snapshot, cost_usd = NEW.cost_usd WHERE id = NEW.run_id;
    DELETE FROM step_commits WHERE rowid = NEW.rowid;
END;
",
    ),
    (
        4,
        r#"
-- Runs under leases (DESIGN §8): an epoch that fences every write of a drive, the lease's
-- owner and expiry, a cancel flag, idempotent creation, and a typed event log with a
-- gap-free per-run sequence. Writes are explicit statements: the JSON-parsing trigger goes.
DROP TRIGGER IF EXISTS step_commit;
DROP TABLE IF EXISTS step_commits;
ALTER TABLE runs ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN owner TEXT;
ALTER TABLE runs ADD COLUMN lease_expires_at INTEGER;
ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN idempotency_key TEXT;
ALTER TABLE runs ADD COLUMN event_seq INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX runs_idempotency ON runs (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_runnable ON runs (status, lease_expires_at) WHERE status IN ('queued', 'running');
-- `body` is the event without its `seq` (the key): `{"at", "type", …}`.
CREATE TABLE run_events (
    run_id  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    body    TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
INSERT INTO run_events (run_id, seq, body)
    SELECT run_id, n, json_object('at', COALESCE(body ->> '$.at', ''),
                                  'type', 'legacy', 'body', json(body))
    FROM (SELECT run_id, body, ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY id) AS n
          FROM events);
UPDATE runs SET event_seq = (SELECT COUNT(*) FROM run_events e WHERE e.run_id = runs.id);
DROP TABLE events;
"#,
    ),
    (
        5,
        r"
-- The server's catalog (DESIGN §10): saved workflows with every version, API tokens (hashed)
-- and custom tools; runs remember the saved version they pin.
ALTER TABLE runs ADD COLUMN workflow_id TEXT;
ALTER TABLE runs ADD COLUMN workflow_version INTEGER;
CREATE INDEX runs_list ON runs (started_at DESC, id DESC);
CREATE TABLE workflows (
    id          TEXT PRIMARY KEY,
    latest      INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    deleted_at  TEXT
);
CREATE TABLE workflow_versions (
    workflow_id TEXT NOT NULL,
    version     INTEGER NOT NULL,
    name        TEXT NOT NULL,
    dialect     TEXT NOT NULL,
    format      TEXT NOT NULL,
    source      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (workflow_id, version)
) WITHOUT ROWID;
CREATE TABLE tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    scope       TEXT NOT NULL,
    hash        BLOB NOT NULL,
    created_at  TEXT NOT NULL,
    revoked_at  TEXT
);
CREATE TABLE tools (
    name        TEXT PRIMARY KEY,
    definition  TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
",
    ),
    (
        6,
        r"
-- The queue (claim_next): queued runs oldest first, and runs whose lease may have expired,
-- each from its own partial index, without sorting every runnable run on each claim.
CREATE INDEX runs_queued ON runs (started_at) WHERE status = 'queued';
CREATE INDEX runs_leased ON runs (lease_expires_at) WHERE status = 'running';
",
    ),
    (
        7,
        r"
-- Steps without the foreign key to runs: each insert searched runs for it (retention deletes
-- a run's steps and attempts before the run itself). Rowid tables stay: step rows and
-- attempt bodies are often larger than a WITHOUT ROWID table suits.
CREATE TABLE steps_v7 (
    run_id       TEXT NOT NULL,
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
INSERT INTO steps_v7 (run_id, seq, node_id, node_type, visit, status, route, input, output,
                      error, cost_usd, tokens_in, tokens_out, started_at, finished_at, duration_ms)
    SELECT run_id, seq, node_id, node_type, visit, status, route, input, output,
           error, cost_usd, tokens_in, tokens_out, started_at, finished_at, duration_ms
    FROM steps;
DROP TABLE steps;
ALTER TABLE steps_v7 RENAME TO steps;
",
    ),
    (
        8,
        r"
-- The lean durable path: a step commit may write what changed in the run's snapshot as a
-- patch instead of the whole snapshot, which is written every few commits and at the end.
-- A run's patches are those written since its whole snapshot (`seq`: the commit's first
-- event number, commit order); a whole snapshot deletes them in its own transaction. A rowid
-- table: patches are appended, and the pages they leave are freed once every run's patches
-- on them are covered.
CREATE TABLE run_patches (
    id      INTEGER PRIMARY KEY,
    run_id  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    patch   TEXT NOT NULL
);
CREATE INDEX run_patches_run ON run_patches (run_id, seq);
",
    ),
    (
        9,
        r"
-- A run's workflow source and input, written once when the run is created, kept out of the
-- runs row that every step commit updates: SQLite writes a row whole when its size changes,
-- so a workflow of some kilobytes went into the WAL again at every step (a 12 KB source made
-- a durable step commit 30% dearer).
CREATE TABLE run_sources (
    run_id       TEXT PRIMARY KEY,
    source_text  TEXT NOT NULL,
    input        TEXT NOT NULL
);
INSERT INTO run_sources (run_id, source_text, input) SELECT id, source_text, input FROM runs;
ALTER TABLE runs DROP COLUMN source_text;
ALTER TABLE runs DROP COLUMN input;
",
    ),
    (
        10,
        r"
-- Integer run keys: the rows of a run's source, steps, attempts, events and patches are
-- keyed by the run's `key` (an INTEGER PRIMARY KEY, stable across VACUUM) instead of its
-- 36-character id.
-- Every step commit inserts into those tables; a text key made each insert compare strings
-- down the B-tree, and random (v4) ids scattered the inserts of concurrent runs over the
-- whole index. Integer keys compare in one instruction, take a fifth of the space, and a new
-- run's keys are the largest, so its rows go to the right edge of each index. The id stays
-- the run's public name, unique. Also gone: `runs_started` (`runs_list` covers it) and
-- `runs_runnable` (the claim reads `runs_queued` and `runs_leased`), two index updates
-- fewer at every claim and finish. A step row's own key is `run_key * 2^32 + seq`, its
-- table's rowid, so a step is one B-tree entry (no separate key index to insert into and
-- to write to the WAL at every commit); `run_key` and `seq` are read from it.
CREATE TABLE runs_v10 (
    key               INTEGER PRIMARY KEY,
    id                TEXT NOT NULL UNIQUE,
    workflow          TEXT NOT NULL,
    dialect           TEXT NOT NULL,
    status            TEXT NOT NULL,
    source_path       TEXT NOT NULL,
    snapshot          TEXT NOT NULL,
    error             TEXT,
    cost_usd          REAL NOT NULL DEFAULT 0,
    started_at        TEXT NOT NULL,
    finished_at       TEXT,
    epoch             INTEGER NOT NULL DEFAULT 0,
    owner             TEXT,
    lease_expires_at  INTEGER,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    idempotency_key   TEXT,
    event_seq         INTEGER NOT NULL DEFAULT 0,
    workflow_id       TEXT,
    workflow_version  INTEGER
);
INSERT INTO runs_v10 (key, id, workflow, dialect, status, source_path, snapshot, error,
                      cost_usd, started_at, finished_at, epoch, owner, lease_expires_at,
                      cancel_requested, idempotency_key, event_seq, workflow_id,
                      workflow_version)
    SELECT rowid, id, workflow, dialect, status, source_path, snapshot, error, cost_usd,
           started_at, finished_at, epoch, owner, lease_expires_at, cancel_requested,
           idempotency_key, event_seq, workflow_id, workflow_version
    FROM runs ORDER BY rowid;
CREATE TABLE steps_v10 (
    id           INTEGER PRIMARY KEY,
    run_key      INTEGER GENERATED ALWAYS AS (id >> 32) VIRTUAL,
    seq          INTEGER GENERATED ALWAYS AS (id & 4294967295) VIRTUAL,
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
    duration_ms  INTEGER
);
INSERT INTO steps_v10 (id, node_id, node_type, visit, status, route, input, output,
                       error, cost_usd, tokens_in, tokens_out, started_at, finished_at,
                       duration_ms)
    SELECT r.key * 4294967296 + s.seq, s.node_id, s.node_type, s.visit, s.status, s.route, s.input,
           s.output, s.error, s.cost_usd, s.tokens_in, s.tokens_out, s.started_at,
           s.finished_at, s.duration_ms
    FROM steps s JOIN runs_v10 r ON r.id = s.run_id ORDER BY r.key, s.seq;
CREATE TABLE attempts_v10 (
    run_key      INTEGER NOT NULL,
    seq          INTEGER NOT NULL,
    n            INTEGER NOT NULL,
    body         TEXT NOT NULL,
    PRIMARY KEY (run_key, seq, n)
);
INSERT INTO attempts_v10 (run_key, seq, n, body)
    SELECT r.key, a.seq, a.n, a.body
    FROM attempts a JOIN runs_v10 r ON r.id = a.run_id ORDER BY r.key, a.seq, a.n;
CREATE TABLE run_events_v10 (
    run_key  INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    body     TEXT NOT NULL,
    PRIMARY KEY (run_key, seq)
) WITHOUT ROWID;
INSERT INTO run_events_v10 (run_key, seq, body)
    SELECT r.key, e.seq, e.body FROM run_events e JOIN runs_v10 r ON r.id = e.run_id;
CREATE TABLE run_patches_v10 (
    id       INTEGER PRIMARY KEY,
    run_key  INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    patch    TEXT NOT NULL
);
INSERT INTO run_patches_v10 (run_key, seq, patch)
    SELECT r.key, p.seq, p.patch
    FROM run_patches p JOIN runs_v10 r ON r.id = p.run_id ORDER BY p.id;
CREATE TABLE run_sources_v10 (
    run_key      INTEGER PRIMARY KEY,
    source_text  TEXT NOT NULL,
    input        TEXT NOT NULL
);
INSERT INTO run_sources_v10 (run_key, source_text, input)
    SELECT r.key, s.source_text, s.input FROM run_sources s JOIN runs_v10 r ON r.id = s.run_id;
DROP TABLE run_sources;
DROP TABLE run_patches;
DROP TABLE run_events;
DROP TABLE attempts;
DROP TABLE steps;
DROP TABLE runs;
ALTER TABLE runs_v10 RENAME TO runs;
ALTER TABLE steps_v10 RENAME TO steps;
ALTER TABLE attempts_v10 RENAME TO attempts;
ALTER TABLE run_events_v10 RENAME TO run_events;
ALTER TABLE run_patches_v10 RENAME TO run_patches;
ALTER TABLE run_sources_v10 RENAME TO run_sources;
CREATE INDEX run_patches_run ON run_patches (run_key, seq);
CREATE UNIQUE INDEX runs_idempotency ON runs (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_list ON runs (started_at DESC, id DESC);
CREATE INDEX runs_queued ON runs (started_at) WHERE status = 'queued';
CREATE INDEX runs_leased ON runs (lease_expires_at) WHERE status = 'running';
",
    ),
    (
        11,
        r"
-- A step's attempts are a JSON array in the step's own row, in attempt order. A step commit
-- rewrites that row anyway (its `running` row becomes the finished one); a table of its own
-- cost two more B-tree pages per commit (the table's and its key index's), written to the
-- WAL at every commit and, with synchronous=FULL, through the fsync (BENCHMARKS.md).
ALTER TABLE steps ADD COLUMN attempts TEXT NOT NULL DEFAULT '[]';
UPDATE steps SET attempts = (
    SELECT json_group_array(json(a.body) ORDER BY a.n) FROM attempts a
    WHERE a.run_key = steps.run_key AND a.seq = steps.seq
) WHERE EXISTS (SELECT 1 FROM attempts a WHERE a.run_key = steps.run_key AND a.seq = steps.seq);
DROP TABLE attempts;
",
    ),
    (
        12,
        r"
-- The events a write appends are one row: their bodies as a JSON array, keyed by the first
-- one's number (the others follow it without gaps). A step commit appends two or more
-- (the step's end, its successors' starts) and paid a B-tree insert for each.
CREATE TABLE run_events_v12 (
    run_key  INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    bodies   TEXT NOT NULL,
    PRIMARY KEY (run_key, seq)
) WITHOUT ROWID;
INSERT INTO run_events_v12 (run_key, seq, bodies)
    SELECT run_key, seq, '[' || body || ']' FROM run_events;
DROP TABLE run_events;
ALTER TABLE run_events_v12 RENAME TO run_events;
",
    ),
    (
        13,
        r"
-- Event rows appended in time order (their rowid), found by run through an index. Keyed by
-- run (`WITHOUT ROWID`, migration 10), the rows of many runs going on at once landed in the
-- middle of the table's B-tree: with a write's events in one row of 300 bytes and more
-- (migration 12), a group commit of many runs dirtied a page per run, and pages split. In
-- time order a group's rows fill one page after another; the index's entries are small.
-- (2,000 concurrent durable runs: 42% fewer WAL writes; a lone commit writes one page more:
-- BENCHMARKS.md.)
CREATE TABLE run_events_v13 (
    id       INTEGER PRIMARY KEY,
    run_key  INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    bodies   TEXT NOT NULL
);
INSERT INTO run_events_v13 (run_key, seq, bodies)
    SELECT run_key, seq, bodies FROM run_events ORDER BY run_key, seq;
DROP TABLE run_events;
ALTER TABLE run_events_v13 RENAME TO run_events;
CREATE UNIQUE INDEX run_events_run ON run_events (run_key, seq);
",
    ),
    (
        14,
        r"
-- Step rows appended in time order (their rowid, `row`), found by their key `id` (the run's
-- key and the step's number, migration 10) through a unique index, as the events were in
-- migration 13. Keyed by run, the steps of many runs going on at once landed in the middle
-- of the table's B-tree: a group commit of 2,000 runs' steps dirtied a page or more per run,
-- and pages split. A finished step still replaces its `running` row (`INSERT OR REPLACE`,
-- by the index); the new row goes at the end. (BENCHMARKS.md: a lone commit writes the
-- index's page too.)
CREATE TABLE steps_v14 (
    row          INTEGER PRIMARY KEY,
    id           INTEGER NOT NULL,
    run_key      INTEGER GENERATED ALWAYS AS (id >> 32) VIRTUAL,
    seq          INTEGER GENERATED ALWAYS AS (id & 4294967295) VIRTUAL,
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
    attempts     TEXT NOT NULL DEFAULT '[]'
);
INSERT INTO steps_v14 (id, node_id, node_type, visit, status, route, input, output, error,
                       cost_usd, tokens_in, tokens_out, started_at, finished_at, duration_ms,
                       attempts)
    SELECT id, node_id, node_type, visit, status, route, input, output, error, cost_usd,
           tokens_in, tokens_out, started_at, finished_at, duration_ms, attempts
    FROM steps ORDER BY id;
DROP TABLE steps;
ALTER TABLE steps_v14 RENAME TO steps;
CREATE UNIQUE INDEX steps_id ON steps (id);
",
    ),
    (
        15,
        r#"
-- A run's steps in flight are lines of its own row (`running`: one JSON object per line,
-- each beginning `{"seq":N,`), not `running` rows of `steps`: a step is written to `steps`
-- once, when it ends, and the run row every write of a drive rewrites anyway carries the
-- starts. (A `running` row cost an insert and a delete per step: BENCHMARKS.md.)
ALTER TABLE runs ADD COLUMN running TEXT;
UPDATE runs SET running = (
    SELECT group_concat(line, '') FROM (
        SELECT json_object('seq', seq, 'node_id', node_id, 'node_type', node_type,
                           'visit', visit, 'input', input, 'output', output,
                           'started_at', started_at) || char(10) AS line
        FROM steps
        WHERE steps.id BETWEEN runs.key * 4294967296 AND runs.key * 4294967296 + 4294967295
          AND status = 'running' AND route IS NULL AND error IS NULL AND finished_at IS NULL
          AND duration_ms IS NULL AND attempts = '[]' AND cost_usd = 0
          AND tokens_in = 0 AND tokens_out = 0
        ORDER BY steps.id))
WHERE key IN (SELECT run_key FROM steps WHERE status = 'running');
DELETE FROM steps
WHERE status = 'running' AND route IS NULL AND error IS NULL AND finished_at IS NULL
  AND duration_ms IS NULL AND attempts = '[]' AND cost_usd = 0 AND tokens_in = 0
  AND tokens_out = 0;
"#,
    ),
    // (16 was the redo log's `redo_applied`, released in 24065e7 and taken out in 3de446a:
    // a database that ran that build is at 16, so the next number is 17.)
    (
        17,
        r"
-- The events of a write that ends steps are a column of the first of those steps' rows
-- (`events`, numbered from `event_seq`), not a row of `run_events`: a step commit then
-- writes the step's B-tree pages and the run's, not also the events table's and its
-- index's, two pages fewer in the write-ahead log at every durable step (BENCHMARKS.md).
-- Writes without steps (a run's creation, start, pause, cancel request, a refusal) keep
-- their row of `run_events`; readers take both, in event order. A step row written again
-- keeps the events it holds (an upsert, not a replace).
ALTER TABLE steps ADD COLUMN event_seq INTEGER;
ALTER TABLE steps ADD COLUMN events TEXT;
",
    ),
    (
        18,
        r"
-- A run's step rows are a chain, newest first: the run's row holds its newest step row
-- (`last_row`), each step row the one written before it (`prev`). The unique index on the
-- step's key goes: it was a third B-tree page, so a third WAL frame, at every durable step
-- commit (BENCHMARKS.md), and rows stay in time order (migration 14), so the rows of many
-- runs committed together still fill pages one after another. A step written again (a
-- decision, a cancel) is a new row in the chain; readers take the newest row of each step.
-- The chain is in commit order, so an event follower walks back from the newest row only
-- as far as the events it has not read. The run's row counts its steps that have rows
-- (`step_count`), for the run list, which counted the index's entries.
-- The table is rebuilt (rows keep their rowids) so that what a walk reads, `prev` and
-- `event_seq`, comes first in a row: a row longer than a page keeps its tail in overflow
-- pages, which a read of a column at the end must fetch.
ALTER TABLE runs ADD COLUMN last_row INTEGER;
ALTER TABLE runs ADD COLUMN step_count INTEGER NOT NULL DEFAULT 0;
CREATE TABLE steps_v18 (
    row          INTEGER PRIMARY KEY,
    id           INTEGER NOT NULL,
    prev         INTEGER,
    event_seq    INTEGER,
    run_key      INTEGER GENERATED ALWAYS AS (id >> 32) VIRTUAL,
    seq          INTEGER GENERATED ALWAYS AS (id & 4294967295) VIRTUAL,
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
    attempts     TEXT NOT NULL DEFAULT '[]',
    events       TEXT
);
INSERT INTO steps_v18 (row, id, prev, event_seq, node_id, node_type, visit, status, route,
                       input, output, error, cost_usd, tokens_in, tokens_out, started_at,
                       finished_at, duration_ms, attempts, events)
    SELECT row, id, LAG(row) OVER (PARTITION BY run_key ORDER BY row), event_seq, node_id,
           node_type, visit, status, route, input, output, error, cost_usd, tokens_in,
           tokens_out, started_at, finished_at, duration_ms, attempts, events
    FROM steps ORDER BY row;
UPDATE runs SET last_row = h.row, step_count = h.steps
FROM (SELECT run_key, MAX(row) AS row, COUNT(DISTINCT id) AS steps FROM steps_v18
      GROUP BY run_key) AS h
WHERE runs.key = h.run_key;
DROP TABLE steps;
ALTER TABLE steps_v18 RENAME TO steps;
",
    ),
    (
        19,
        r"
-- A workflow's source is stored once per distinct text (`sources`), and a run's row of
-- `run_sources` names it: every run of a workflow wrote its own copy of the source, a
-- kilobyte or more per run (most of what a run parked at a gate costs in the database), and
-- a run's creation wrote it into the log again. Runs of one workflow version share a row;
-- a text no run names any more goes with the last of its runs (`prune`).
CREATE TABLE sources (
    key   INTEGER PRIMARY KEY,
    text  TEXT NOT NULL UNIQUE
);
INSERT OR IGNORE INTO sources (text) SELECT source_text FROM run_sources ORDER BY run_key;
CREATE TABLE run_sources_v19 (
    run_key     INTEGER PRIMARY KEY,
    source_key  INTEGER NOT NULL,
    input       TEXT NOT NULL
);
INSERT INTO run_sources_v19 (run_key, source_key, input)
    SELECT r.run_key, s.key, r.input FROM run_sources r JOIN sources s ON s.text = r.source_text;
DROP TABLE run_sources;
ALTER TABLE run_sources_v19 RENAME TO run_sources;
CREATE INDEX run_sources_source ON run_sources (source_key);
",
    ),
    (
        20,
        r"
-- What started each run (`trigger` in its record): the kind (cli, api, schedule, webhook,
-- mcp, parent) for the list's filter, and the whole of it (name, tick, delivery, parent)
-- as JSON. Runs created before have neither; their record infers the kind from the pin.
ALTER TABLE runs ADD COLUMN trigger_kind TEXT;
ALTER TABLE runs ADD COLUMN trigger_json TEXT;
",
    ),
    (
        21,
        r"
-- What an operator set on a saved workflow's trigger, kept apart from its versions so a new
-- version does not undo it: a pause, and the hash of a `token` webhook's URL token.
CREATE TABLE trigger_states (
    workflow_id  TEXT NOT NULL,
    name         TEXT NOT NULL,
    paused       INTEGER NOT NULL DEFAULT 0,
    token_hash   BLOB,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (workflow_id, name)
);
",
    ),
];
