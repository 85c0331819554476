#![allow(
    clippy::too_many_lines,
    reason = "a test reads top to bottom as one story"
)]

use std::path::Path;
use std::time::Duration;

use weir_core::event::{EventKind, RunEvent};
use weir_core::record::{RunStatus, RunSummary, Snapshot, StepRecord, StepStatus};
use weir_core::store::{
    Admin, CancelOutcome, Claim, DriveWrites, Lifecycle, NewRun, RunFilter, RunReads, RunUpdate,
    StepCommit, StoreError,
};

use super::reads;
use super::store::Sqlite;
use crate::schema::MIGRATIONS;

/// A database at `path` as a weir of schema `version` left it (its migrations up to it).
fn database_at_schema(path: &Path, version: i64) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("CREATE TABLE schema_version (version INTEGER PRIMARY KEY)")
        .unwrap();
    for (v, sql) in MIGRATIONS.iter().filter(|(v, _)| *v <= version) {
        conn.execute_batch(sql).unwrap();
        conn.execute("INSERT INTO schema_version (version) VALUES (?1)", [v])
            .unwrap();
    }
    conn
}

/// A store opened (and so migrated) on a database that a weir of schema `version` left with
/// `rows` in it; the directory holds the database for as long as it lives.
async fn opened_after(version: i64, rows: &'static str) -> (tempfile::TempDir, Sqlite) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    database_at_schema(&path, version)
        .execute_batch(rows)
        .unwrap();
    let store = Sqlite::open(Some(&path)).await.unwrap();
    (dir, store)
}

/// The one number `sql` selects.
async fn count(store: &Sqlite, sql: &'static str) -> i64 {
    store
        .readers
        .read(move |c| Ok(c.query_row(sql, [], |r| r.get(0)).unwrap()))
        .await
        .unwrap()
}

/// A database written by a weir before leases (schema 3) opens, migrates, and its runs
/// go on: a run left `running` is claimable, its old events are kept as `legacy`.
#[tokio::test]
async fn a_schema_3_database_migrates() {
    let (_dir, store) = opened_after(
        3,
        r#"INSERT INTO runs (id, workflow, dialect, status, source_path, source_text, input, snapshot, started_at)
               VALUES ('old', 'wf', 'graph', 'running', 'wf.json', '{"name": "wf"}', '{"topic": "rivers"}', '{"state": {}, "loops": {}, "pending": ["a"], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 1, "cost_usd": 0.0, "output": null, "gates": [], "owner": "host:1"}', '2026-01-01T00:00:00.000Z');
               INSERT INTO events (run_id, body) VALUES ('old', '{"type": "run_resumed", "at": "2026-01-01T00:00:01.000Z"}');
               INSERT INTO events (run_id, body) VALUES ('old', '{"type": "gate_approved", "node_id": "g"}');
               INSERT INTO steps (run_id, seq, node_id, node_type, visit, status, route, input, output, error, cost_usd, tokens_in, tokens_out, started_at, finished_at, duration_ms)
               VALUES ('old', 1, 'a', 'agent', 1, 'succeeded', NULL, '{}', '"hi"', NULL, 0.25, 3, 4, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.500Z', 500);"#,
    )
    .await;
    // The source and input moved out of the runs row (migration 9).
    let stored = store.load_run("old").await.unwrap();
    assert_eq!(
        (stored.source_text.as_str(), stored.input.clone()),
        (r#"{"name": "wf"}"#, serde_json::json!({"topic": "rivers"}))
    );
    assert_eq!(
        store.get_record("old").await.unwrap().input,
        serde_json::json!({"topic": "rivers"})
    );
    // The steps table was rebuilt (migration 7): its rows come through unchanged.
    let step = store.get_step("old", 1).await.unwrap();
    assert_eq!(
        (
            &*step.node_id,
            serde_json::Value::clone(&step.output),
            step.cost_usd,
            step.tokens.output,
            step.duration_ms
        ),
        ("a", serde_json::json!("hi"), 0.25, 4, Some(500))
    );
    let events = store.events_after("old", 0).await.unwrap();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
    assert!(
        matches!(&events[1].kind, EventKind::Legacy { body } if body["type"] == "gate_approved")
    );
    let (lease, w) = store
        .claim_run(
            "old",
            &Claim {
                owner: "new".into(),
                ttl: Duration::from_secs(30),
            },
        )
        .await
        .unwrap();
    assert_eq!(lease.epoch, 1);
    assert!(matches!(w.events[..], [EventKind::RunResumed { .. }]));
    let events = store.events_after("old", 2).await.unwrap();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [3]);
    assert!(matches!(events[0].kind, EventKind::RunResumed { .. }));
}

/// A run's source and input live in `run_sources` (migration 9), the source once per
/// distinct text (migration 19): runs of one workflow share it, a run of another text gets
/// its own, and a text goes with the last run that names it.
#[tokio::test]
async fn runs_share_their_source_and_the_last_one_pruned_takes_it() {
    let store = Sqlite::open(None).await.unwrap();
    let wf = r#"{"name": "wf", "nodes": []}"#;
    let other = r#"{"name": "other", "nodes": []}"#;
    for (id, text, topic) in [
        ("r1", wf, "rivers"),
        ("r2", wf, "lakes"),
        ("r3", other, "seas"),
    ] {
        let mut run = new_run(text, serde_json::json!({ "topic": topic }));
        run.run_id = id.into();
        store.create_run(run).await.unwrap();
    }
    for (id, text, topic) in [
        ("r1", wf, "rivers"),
        ("r2", wf, "lakes"),
        ("r3", other, "seas"),
    ] {
        let stored = store.load_run(id).await.unwrap();
        assert_eq!(stored.source_text, text, "{id}");
        assert_eq!(stored.input, serde_json::json!({ "topic": topic }), "{id}");
    }
    let texts = || count(&store, "SELECT COUNT(*) FROM sources");
    assert_eq!(texts().await, 2, "one row per distinct source, not per run");
    // Queued runs are cancelled at once, which ends them; prune r1 first (its source is
    // still r2's), then the rest.
    store.request_cancel("r1", "test").await.unwrap();
    assert_eq!(
        store.prune("9999-01-01T00:00:00.000Z", &[]).await.unwrap(),
        ["r1"]
    );
    assert_eq!(texts().await, 2, "r2 still names the source r1 had");
    assert_eq!(store.load_run("r2").await.unwrap().source_text, wf);
    for id in ["r2", "r3"] {
        store.request_cancel(id, "test").await.unwrap();
    }
    assert_eq!(
        store
            .prune("9999-01-01T00:00:00.000Z", &[])
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(count(&store, "SELECT COUNT(*) FROM run_sources").await, 0);
    assert_eq!(texts().await, 0, "no run names either source any more");
    // A run created after its source was pruned writes it again.
    let mut run = new_run(wf, serde_json::json!({}));
    run.run_id = "r4".into();
    store.create_run(run).await.unwrap();
    assert_eq!(store.load_run("r4").await.unwrap().source_text, wf);
}

/// A database of schema 18 kept a copy of the source in every run's row of `run_sources`;
/// migration 19 keeps one per distinct text and points each run at it.
#[tokio::test]
async fn a_schema_18_databases_sources_are_kept_once() {
    let (_dir, store) = opened_after(
        18,
        r#"INSERT INTO runs (key, id, workflow, dialect, status, source_path, snapshot, started_at)
               VALUES (1, 'a', 'wf', 'graph', 'queued', 'wf.json', '{"state": {}, "loops": {}, "pending": [], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 1, "cost_usd": 0.0, "output": null, "gates": []}', '2026-01-01T00:00:00.000Z'),
                      (2, 'b', 'wf', 'graph', 'queued', 'wf.json', '{"state": {}, "loops": {}, "pending": [], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 1, "cost_usd": 0.0, "output": null, "gates": []}', '2026-01-01T00:00:01.000Z'),
                      (3, 'c', 'other', 'graph', 'queued', 'other.json', '{"state": {}, "loops": {}, "pending": [], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 1, "cost_usd": 0.0, "output": null, "gates": []}', '2026-01-01T00:00:02.000Z');
               INSERT INTO run_sources (run_key, source_text, input)
               VALUES (1, '{"name": "wf"}', '{"n": 1}'), (2, '{"name": "wf"}', '{"n": 2}'), (3, '{"name": "other"}', '{"n": 3}');"#,
    )
    .await;
    assert_eq!(count(&store, "SELECT COUNT(*) FROM sources").await, 2);
    for (id, text, n) in [("a", "wf", 1), ("b", "wf", 2), ("c", "other", 3)] {
        let stored = store.load_run(id).await.unwrap();
        assert_eq!(
            stored.source_text,
            format!(r#"{{"name": "{text}"}}"#),
            "{id}"
        );
        assert_eq!(stored.input, serde_json::json!({ "n": n }), "{id}");
    }
}

/// A write that finds SQLite's write lock held by another connection (another process on
/// the same file: a `weir worker` beside `weir serve`) is not run in place, where it would
/// either fail at once or hold up the runtime's thread: it goes to the writer thread, which
/// waits for the lock, and succeeds once the other transaction commits.
#[tokio::test(flavor = "current_thread")]
async fn a_write_behind_another_connections_write_lock_waits_on_the_writer_thread() {
    let dir = tempfile::tempdir().unwrap();
    let store = Sqlite::open(Some(&dir.path().join("w.db"))).await.unwrap();
    let run = new_run("{}", serde_json::json!({}));
    let other = rusqlite::Connection::open(dir.path().join("w.db")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        other.execute_batch("COMMIT").unwrap();
    });
    store.create_run(run.clone()).await.unwrap();
    holder.join().unwrap();
    assert_eq!(store.load_run("r1").await.unwrap().source_text, "{}");
}

/// A write that panics while it runs in place (on the caller's thread, the transaction
/// begun) leaves the writer usable: the next write rolls the open transaction back and
/// commits, and the panicking write left nothing behind.
#[tokio::test(flavor = "current_thread")]
async fn a_write_that_panicked_in_place_leaves_the_writer_usable() {
    use futures_util::FutureExt;
    let store = Sqlite::open(None).await.unwrap();
    let panicked = std::panic::AssertUnwindSafe(store.writer.grouped(true, |c| {
        c.execute(
            "INSERT INTO tools (name, definition, created_at) VALUES ('half', '{}', 'now')",
            [],
        )
        .unwrap();
        if true {
            panic!("a bug in a write");
        }
        Ok(())
    }))
    .catch_unwind()
    .await;
    assert!(panicked.is_err());
    let run = new_run("{}", serde_json::json!({}));
    store.create_run(run.clone()).await.unwrap();
    assert_eq!(store.load_run("r1").await.unwrap().source_text, "{}");
    let half = count(&store, "SELECT COUNT(*) FROM tools WHERE name = 'half'").await;
    assert_eq!(half, 0, "the panicked write's statements were rolled back");
}

/// A drive remembers its run's integer key after its first write. Once another process
/// took that run over, finished and pruned it, a new run can get the same key and the same
/// epoch; the stale drive's next write must still be refused, and leave the new run alone.
#[tokio::test(flavor = "current_thread")]
async fn a_stale_drive_whose_runs_key_was_reused_is_refused() {
    // Two processes on one database: `store` drives r1 until its lease lapses; `other`
    // takes r1 over, finishes and prunes it, and creates r2.
    let dir = tempfile::tempdir().unwrap();
    let store = Sqlite::open(Some(&dir.path().join("w.db"))).await.unwrap();
    let other = Sqlite::open(Some(&dir.path().join("w.db"))).await.unwrap();
    let claim = |owner: &str, ms: u64| Claim {
        owner: owner.into(),
        ttl: Duration::from_millis(ms),
    };
    let note = || vec![EventKind::CancelRequested { by: "test".into() }];
    store
        .create_run(new_run("{}", serde_json::json!({})))
        .await
        .unwrap();
    let (stale, _) = store.claim_run("r1", &claim("a", 50)).await.unwrap();
    store.append_events(&stale, note()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let (taker, _) = other.claim_run("r1", &claim("b", 60_000)).await.unwrap();
    let done = RunUpdate {
        status: RunStatus::Succeeded,
        error: None,
        finished_at: Some(weir_core::store::now_rfc3339()),
        snapshot: Default::default(),
    };
    other
        .finish_run(&taker, &[], &done, Vec::new())
        .await
        .unwrap();
    assert_eq!(
        other.prune("9999", &[]).await.unwrap(),
        vec!["r1".to_string()]
    );
    let mut second = new_run("{}", serde_json::json!({}));
    second.run_id = "r2".into();
    other.create_run(second.clone()).await.unwrap();
    let (fresh, _) = other.claim_run("r2", &claim("c", 60_000)).await.unwrap();
    assert_eq!(
        fresh.epoch, stale.epoch,
        "the new run has the stale lease's epoch"
    );
    let keys: Vec<i64> = store
        .readers
        .read(|c| reads::all(c, "SELECT key FROM runs", [], |r| Ok(r.get(0).unwrap())))
        .await
        .unwrap();
    assert_eq!(keys, vec![1], "the new run took the pruned run's key");
    let before = store.events_after("r2", 0).await.unwrap().len();
    let refused = store.append_events(&stale, note()).await;
    assert!(
        matches!(refused, Err(StoreError::LeaseLost { .. })),
        "{refused:?}"
    );
    assert_eq!(store.events_after("r2", 0).await.unwrap().len(), before);
    other.append_events(&fresh, note()).await.unwrap();
}

/// A queued run `r1` of a graph workflow with this source and input.
fn new_run(source_text: &str, input: serde_json::Value) -> NewRun {
    NewRun {
        run_id: "r1".into(),
        workflow: "wf".into(),
        dialect: "graph".into(),
        source_path: "wf.json".into(),
        source_text: source_text.into(),
        input,
        created_at: weir_core::store::now_rfc3339(),
        snapshot: Default::default(),
        idempotency_key: None,
        claim: None,
        pin: None,
        trigger: weir_core::record::RunTrigger::default(),
    }
}

/// A database of schema 10 keeps a step's attempts in a table of their own; migration 11
/// folds them into the step's row, in attempt order, and drops the table. A step with no
/// attempts (still running when the old weir stopped) reads back with none.
#[tokio::test]
async fn a_schema_10_databases_attempts_move_into_their_steps() {
    let (_dir, store) = opened_after(
        10,
        r#"INSERT INTO runs (key, id, workflow, dialect, status, source_path, snapshot, started_at)
               VALUES (7, 'old', 'wf', 'graph', 'failed', 'wf.json', '{"state": {}, "loops": {}, "pending": [], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 3, "cost_usd": 0.0, "output": null, "gates": []}', '2026-01-01T00:00:00.000Z');
               INSERT INTO run_sources (run_key, source_text, input) VALUES (7, '{"name": "wf"}', '{}');
               INSERT INTO steps (id, node_id, node_type, visit, status, input, output, started_at)
               VALUES (7 * 4294967296 + 1, 'a', 'agent', 1, 'failed', '{}', 'null', '2026-01-01T00:00:00.000Z'),
                      (7 * 4294967296 + 2, 'b', 'agent', 1, 'running', '{}', 'null', '2026-01-01T00:00:01.000Z');
               INSERT INTO attempts (run_key, seq, n, body) VALUES
                   (7, 1, 2, '{"n": 2, "status": "failed", "error": "still down", "duration_ms": 5, "cost_usd": 0.0}'),
                   (7, 1, 1, '{"n": 1, "status": "failed", "error": "down", "error_class": "server_error", "duration_ms": 4, "cost_usd": 0.0}');"#,
    )
    .await;
    let record = store.get_record("old").await.unwrap();
    let a = &record.steps[0].attempts;
    assert_eq!(
        a.iter()
            .map(|a| (a.n, a.error.as_deref()))
            .collect::<Vec<_>>(),
        [(1, Some("down")), (2, Some("still down"))]
    );
    assert_eq!(a[0].error_class.as_deref(), Some("server_error"));
    assert!(record.steps[1].attempts.is_empty());
    let tables = count(
        &store,
        "SELECT COUNT(*) FROM sqlite_master WHERE name = 'attempts'",
    )
    .await;
    assert_eq!(tables, 0, "the attempts table is gone");
}

/// A write's events are one row (migration 12): a reader that asks for the events after one
/// in the middle of a row gets the rest of that row and what follows, and a database of
/// schema 11, one event per row, reads back the same.
#[tokio::test]
async fn events_after_one_inside_a_write_start_from_the_next() {
    let (_dir, store) = opened_after(
        11,
        r#"INSERT INTO runs (key, id, workflow, dialect, status, source_path, snapshot, started_at, event_seq)
               VALUES (3, 'old', 'wf', 'graph', 'queued', 'wf.json', '{"state": {}, "loops": {}, "pending": [], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 1, "cost_usd": 0.0, "output": null, "gates": []}', '2026-01-01T00:00:00.000Z', 2);
               INSERT INTO run_sources (run_key, source_text, input) VALUES (3, '{"name": "wf"}', '{}');
               INSERT INTO run_events (run_key, seq, body) VALUES
                   (3, 1, '{"at": "2026-01-01T00:00:00.000Z", "type": "run_created", "workflow": "wf"}'),
                   (3, 2, '{"at": "2026-01-01T00:00:01.000Z", "type": "cancel_requested", "by": "ops"}');"#,
    )
    .await;
    let seqs = |events: Vec<RunEvent>| events.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(seqs(store.events_after("old", 0).await.unwrap()), [1, 2]);
    assert_eq!(seqs(store.events_after("old", 1).await.unwrap()), [2]);
    assert_eq!(store.get_record("old").await.unwrap().events.len(), 2);

    // A run created and claimed in one write: `run_created` and `run_started` share a row.
    let mut run = new_run(r#"{"name": "wf", "nodes": []}"#, serde_json::json!({}));
    run.claim = Some(Claim {
        owner: "me".into(),
        ttl: Duration::from_secs(30),
    });
    let created = store.create_run(run).await.unwrap();
    assert!(matches!(
        created.events[..],
        [EventKind::RunCreated { .. }, EventKind::RunStarted { .. }]
    ));
    let rows = count(
        &store,
        "SELECT COUNT(*) FROM run_events WHERE run_key = (SELECT key FROM runs WHERE id = 'r1')",
    )
    .await;
    assert_eq!(rows, 1, "one write, one row of events");
    assert_eq!(seqs(store.events_after("r1", 0).await.unwrap()), [1, 2]);
    let after_first = store.events_after("r1", 1).await.unwrap();
    assert_eq!(seqs(after_first.clone()), [2]);
    assert!(matches!(after_first[0].kind, EventKind::RunStarted { .. }));
    assert!(store.events_after("r1", 2).await.unwrap().is_empty());
    let record = store.get_record("r1").await.unwrap();
    assert_eq!(
        record
            .events
            .iter()
            .map(|e| (e["seq"].as_u64(), e["type"].as_str()))
            .collect::<Vec<_>>(),
        [
            (Some(1), Some("run_created")),
            (Some(2), Some("run_started"))
        ]
    );
}

/// Step rows are appended in time order and found by their key through an index (migration
/// 14), and a step in flight is a line of its run's row (migration 15): a database of schema
/// 13 reads back its steps in step order, attempts included, a step left `running` is still
/// found for a takeover, and a step written running and then finished is one row.
#[tokio::test]
async fn a_schema_13_databases_steps_read_back_in_order() {
    let (_dir, store) = opened_after(
        13,
        r#"INSERT INTO runs (key, id, workflow, dialect, status, source_path, snapshot, started_at)
               VALUES (5, 'old', 'wf', 'graph', 'queued', 'wf.json', '{"state": {}, "loops": {}, "pending": ["c"], "completed": [], "arrivals": {}, "hops": 2, "visits": {}, "next_seq": 4, "cost_usd": 0.0, "output": null, "gates": []}', '2026-01-01T00:00:00.000Z');
               INSERT INTO run_sources (run_key, source_text, input) VALUES (5, '{"name": "wf"}', '{}');
               INSERT INTO steps (id, node_id, node_type, visit, status, input, output, started_at, attempts)
               VALUES (5 * 4294967296 + 2, 'b', 'agent', 1, 'succeeded', '{}', '"two"', '2026-01-01T00:00:01.000Z', '[{"n": 1, "status": "succeeded", "duration_ms": 3, "cost_usd": 0.0}]'),
                      (5 * 4294967296 + 1, 'a', 'agent', 1, 'succeeded', '{}', '"one"', '2026-01-01T00:00:00.000Z', '[]'),
                      (5 * 4294967296 + 3, 'c', 'agent', 1, 'running', '{}', 'null', '2026-01-01T00:00:02.000Z', '[]');"#,
    )
    .await;
    let record = store.get_record("old").await.unwrap();
    assert_eq!(
        record
            .steps
            .iter()
            .map(|s| (s.seq, &*s.node_id, s.attempts.len()))
            .collect::<Vec<_>>(),
        [(1, "a", 0), (2, "b", 1), (3, "c", 0)]
    );
    let (last, running) = store.open_steps("old").await.unwrap();
    assert_eq!(last, 3);
    assert_eq!(
        running.iter().map(|s| s.seq).collect::<Vec<_>>(),
        [3],
        "the step the old weir left running is found for the takeover"
    );
    // Migration 18 chained the rows and took the key's index away.
    let indexes = count(
        &store,
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'steps_id'",
    )
    .await;
    assert_eq!(indexes, 0);

    // A new run's step, written running and then finished, is one row.
    let mut run = new_run(r#"{"name": "wf", "nodes": []}"#, serde_json::json!({}));
    run.claim = Some(Claim {
        owner: "me".into(),
        ttl: Duration::from_secs(30),
    });
    let created = store.create_run(run).await.unwrap();
    let lease = created.lease.expect("created claimed");
    let mut step = StepRecord {
        seq: 1,
        node_id: "a".into(),
        node_type: "agent".into(),
        visit: 1,
        status: StepStatus::Running,
        route: None,
        input: serde_json::json!({}),
        output: weir_core::record::no_output(),
        error: None,
        cost_usd: 0.0,
        tokens: Default::default(),
        attempts: Vec::new(),
        started_at: weir_core::store::Stamp::now(),
        finished_at: None,
        duration_ms: None,
    };
    store
        .start_steps(&lease, &[&step], Vec::new())
        .await
        .unwrap();
    step.status = StepStatus::Succeeded;
    step.finished_at = Some(weir_core::store::Stamp::now());
    let snapshot = store.load_run("r1").await.unwrap().snapshot;
    store
        .commit_step(
            &lease,
            StepCommit {
                step: &step,
                started: &[],
                snapshot: &snapshot,
                patch: None,
                covers_patches: false,
                events: Vec::new(),
            },
        )
        .await
        .unwrap();
    let rows = count(
        &store,
        "SELECT COUNT(*) FROM steps WHERE run_key = (SELECT key FROM runs WHERE id = 'r1')",
    )
    .await;
    assert_eq!(rows, 1, "the finished step is one row");
    let steps = store.get_record("r1").await.unwrap().steps;
    assert_eq!(steps[0].status, StepStatus::Succeeded);
}

/// A step in flight is a line of its run's row (migration 15), not a row of `steps`: a
/// database of schema 14 with a running step moves it there; it reads back in the record,
/// for a takeover and in the run list's step count; a cancel of the run left by its driver
/// records it cancelled, as a row.
#[tokio::test]
async fn a_schema_14_databases_running_steps_move_into_their_run() {
    let (_dir, store) = opened_after(
        14,
        r#"INSERT INTO runs (key, id, workflow, dialect, status, source_path, snapshot, started_at, epoch, owner, lease_expires_at, event_seq)
               VALUES (9, 'old', 'wf', 'graph', 'running', 'wf.json', '{"state": {}, "loops": {}, "pending": ["b"], "completed": ["a"], "arrivals": {}, "hops": 1, "visits": {}, "next_seq": 3, "cost_usd": 0.0, "output": null, "gates": []}', '2026-01-01T00:00:00.000Z', 1, 'gone', 1, 0);
               INSERT INTO run_sources (run_key, source_text, input) VALUES (9, '{"name": "wf"}', '{}');
               INSERT INTO steps (id, node_id, node_type, visit, status, input, output, started_at, finished_at)
               VALUES (9 * 4294967296 + 1, 'a', 'agent', 1, 'succeeded', '{}', '"one"', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.500Z'),
                      (9 * 4294967296 + 2, 'b', 'tool', 2, 'running', '{"q": "x"}', 'null', '2026-01-01T00:00:01.000Z', NULL);"#,
    )
    .await;
    let rows = count(
        &store,
        "SELECT COUNT(*) FROM steps WHERE status = 'running'",
    )
    .await;
    assert_eq!(rows, 0, "no running rows are left in steps");
    let steps = store.get_record("old").await.unwrap().steps;
    assert_eq!(
        steps
            .iter()
            .map(|s| (s.seq, &*s.node_id, s.status, s.visit))
            .collect::<Vec<_>>(),
        [
            (1, "a", StepStatus::Succeeded, 1),
            (2, "b", StepStatus::Running, 2)
        ]
    );
    assert_eq!(steps[1].input, serde_json::json!({"q": "x"}));
    assert_eq!(steps[1].node_type, "tool");
    let (last, running) = store.open_steps("old").await.unwrap();
    assert_eq!((last, running.len()), (2, 1));
    assert_eq!(
        store.get_step("old", 2).await.unwrap().node_id.as_ref(),
        "b"
    );
    let filter = RunFilter {
        limit: 10,
        ..RunFilter::default()
    };
    let listed = store.list_runs(&filter).await.unwrap();
    assert_eq!(listed[0].steps, 2, "the run list counts the step in flight");

    // Its driver is gone (the lease expired long ago): a cancel ends the run here, and the
    // step in flight becomes a row of its own, cancelled.
    let (outcome, _) = store.request_cancel("old", "ops").await.unwrap();
    assert_eq!(outcome, CancelOutcome::Cancelled);
    let steps = store.get_record("old").await.unwrap().steps;
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[1].status, StepStatus::Cancelled);
    assert_eq!(steps[1].error.as_deref(), Some("cancelled by ops"));
    let (_, running) = store.open_steps("old").await.unwrap();
    assert!(running.is_empty());
}

/// Commits that take the write-ahead log past its threshold have it checkpointed into the
/// database file while the store is open (by the background thread, not by the commit):
/// the log does not grow without end, and the database file holds what was written.
#[tokio::test]
async fn a_growing_log_is_checkpointed_into_the_database_while_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.db");
    let store = Sqlite::open_with(Some(&path), true).await.unwrap();
    let before = std::fs::metadata(&path).unwrap().len();
    // 300 runs of 20 KB of input each: 6 MB, past the log's 1,000 pages (2 MB).
    let big = "x".repeat(20_000);
    for i in 0..300 {
        let mut run = new_run("{}", serde_json::json!({ "text": big }));
        run.run_id = format!("r{i}");
        store.create_run(run).await.unwrap();
    }
    let mut size = before;
    for _ in 0..100 {
        size = std::fs::metadata(&path).unwrap().len();
        if size > 4_000_000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        size > 4_000_000,
        "the database file is {size} bytes (was {before}): the log was not checkpointed"
    );
    assert_eq!(count(&store, "SELECT count(*) FROM runs").await, 300);
}

/// A store that syncs every commit (`full_sync`) gives its write-ahead log its working size
/// when it opens (zeros past the last frame), so that commits overwrite the file instead of
/// growing it; a copy of the files as a crash would leave them (the log never checkpointed,
/// no shared-memory index) reads back every committed run: recovery stops at the zeros.
#[tokio::test]
async fn a_synced_stores_log_is_given_its_size_up_front_and_recovers_past_its_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("synced.db");
    let store = Sqlite::open_with(Some(&path), true).await.unwrap();
    let log = dir.path().join("synced.db-wal");
    let size = std::fs::metadata(&log).unwrap().len();
    // 2,000 frames of a 2 KiB page and its 24-byte header, after the log's 32-byte header.
    assert!(
        size >= 32 + 2000 * (2048 + 24),
        "the log is {size} bytes when the store opens"
    );
    for i in 0..20 {
        let mut run = new_run("{}", serde_json::json!({ "n": i }));
        run.run_id = format!("r{i}");
        store.create_run(run).await.unwrap();
    }
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        size,
        "commits overwrote the zeros: the log did not grow"
    );
    let crashed = tempfile::tempdir().unwrap();
    std::fs::copy(&path, crashed.path().join("synced.db")).unwrap();
    std::fs::copy(&log, crashed.path().join("synced.db-wal")).unwrap();
    drop(store);
    let recovered = Sqlite::open(Some(&crashed.path().join("synced.db")))
        .await
        .unwrap();
    assert_eq!(count(&recovered, "SELECT count(*) FROM runs").await, 20);
    let back = recovered.get_record("r19").await.unwrap();
    assert_eq!(back.input, serde_json::json!({ "n": 19 }));

    // A store that does not sync its commits leaves the log to SQLite.
    let normal = dir.path().join("normal.db");
    let _store = Sqlite::open_with(Some(&normal), false).await.unwrap();
    let size = std::fs::metadata(dir.path().join("normal.db-wal"))
        .unwrap()
        .len();
    assert!(size < 32 + 2000 * (2048 + 24), "{size} bytes");
}

/// Claims `run_id` (its driver is gone) and commits step `seq`, node `node`, succeeded,
/// with its `step_finished` event and the whole `snapshot`.
async fn take_over_and_commit(
    store: &Sqlite,
    run_id: &str,
    snapshot: &Snapshot,
    seq: u32,
    node: &str,
) {
    let claim = Claim {
        owner: "bob".into(),
        ttl: Duration::from_secs(60),
    };
    let (lease, _) = store.claim_run(run_id, &claim).await.unwrap();
    let step = StepRecord {
        seq,
        node_id: node.into(),
        node_type: "agent".into(),
        visit: 1,
        status: StepStatus::Succeeded,
        route: None,
        input: serde_json::Value::Null,
        output: Default::default(),
        error: None,
        cost_usd: 0.0,
        tokens: Default::default(),
        attempts: Vec::new(),
        started_at: weir_core::store::Stamp::now(),
        finished_at: Some(weir_core::store::Stamp::now()),
        duration_ms: Some(1),
    };
    store
        .commit_step(
            &lease,
            StepCommit {
                step: &step,
                started: &[],
                snapshot,
                patch: None,
                covers_patches: true,
                events: vec![EventKind::StepFinished {
                    step: seq,
                    node_id: node.into(),
                    node_type: "agent".into(),
                    status: StepStatus::Succeeded,
                    route: None,
                    error: None,
                    duration_ms: 1,
                    cost_usd: 0.0,
                    attempts: 0,
                }],
            },
        )
        .await
        .unwrap();
}

/// A database of schema 15 keeps every write's events in `run_events` and patches in
/// `run_patches`; after migration 17 a step commit keeps its events in the step's row. The
/// old rows still read back (the patch applied to the snapshot), and the events of both
/// kinds of rows come back in order from any point.
#[tokio::test]
async fn a_schema_15_databases_events_and_patches_read_back_beside_new_ones() {
    let (_dir, store) = opened_after(
        15,
        r#"INSERT INTO runs (key, id, workflow, dialect, status, source_path, snapshot, started_at, epoch, owner, lease_expires_at, event_seq)
               VALUES (5, 'old', 'wf', 'graph', 'running', 'wf.json', '{"state": {"k": 1}, "loops": {}, "pending": ["a"], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 1, "cost_usd": 0.0, "output": null, "gates": []}', '2026-01-01T00:00:00.000Z', 1, 'gone', 1, 2);
               INSERT INTO run_sources (run_key, source_text, input) VALUES (5, '{"name": "wf"}', '{}');
               INSERT INTO run_events (run_key, seq, bodies) VALUES
                   (5, 1, '[{"at": "2026-01-01T00:00:00.000Z", "type": "run_created", "workflow": "wf"}, {"at": "2026-01-01T00:00:00.000Z", "type": "cancel_requested", "by": "nobody"}]');
               INSERT INTO run_patches (run_key, seq, patch) VALUES
                   (5, 2, '{"state": [{"key": "k", "value": 2}], "loops": {}, "pending": ["a"], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 1, "cost_usd": 0.5, "gates": [], "pass": 0}');"#,
    )
    .await;
    let snapshot = store.load_run("old").await.unwrap().snapshot;
    assert_eq!(
        snapshot.state.get("k"),
        Some(&serde_json::json!(2)),
        "the old patch applies"
    );
    assert_eq!(snapshot.cost_usd, 0.5);

    // Its driver is gone: another takes it over and commits a step.
    take_over_and_commit(&store, "old", &snapshot, 1, "a").await;
    let held = count(
        &store,
        "SELECT COUNT(*) FROM steps WHERE events IS NOT NULL AND event_seq = 4",
    )
    .await;
    assert_eq!(held, 1, "the commit's events are in its step's row");
    let names = |events: Vec<RunEvent>| {
        events
            .iter()
            .map(|e| (e.seq, e.kind.name()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(store.events_after("old", 0).await.unwrap()),
        [
            (1, "run_created"),
            (2, "cancel_requested"),
            (3, "run_resumed"),
            (4, "step_finished")
        ]
    );
    assert_eq!(
        names(store.events_after("old", 1).await.unwrap()),
        [
            (2, "cancel_requested"),
            (3, "run_resumed"),
            (4, "step_finished")
        ]
    );
    assert_eq!(
        names(store.events_after("old", 3).await.unwrap()),
        [(4, "step_finished")]
    );
    let record = store.get_record("old").await.unwrap();
    assert_eq!(record.events.len(), 4);
    assert_eq!(record.state, serde_json::json!({"k": 2}));
    let patches = count(&store, "SELECT COUNT(*) FROM run_patches WHERE run_key = 5").await;
    assert_eq!(patches, 0, "the whole snapshot covers the old patch");
    assert_eq!(store.load_run("old").await.unwrap().snapshot, snapshot);
}

/// The page size of SQLite's `PRAGMA page_size`.
async fn page_size(store: &Sqlite) -> i64 {
    count(store, "PRAGMA page_size").await
}

/// A database the store creates has 2 KiB pages (`PAGE_SIZE`); one an earlier weir created
/// with SQLite's 4 KiB keeps them, and its runs are written and read back as before.
#[tokio::test]
async fn new_databases_get_2_kib_pages_and_old_ones_keep_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let new = Sqlite::open(Some(&dir.path().join("new.db")))
        .await
        .unwrap();
    assert_eq!(page_size(&new).await, 2048);

    let path = dir.path().join("old.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA page_size = 4096; PRAGMA journal_mode = WAL;
             CREATE TABLE earlier (x INTEGER);",
        )
        .unwrap();
    }
    let old = Sqlite::open(Some(&path)).await.unwrap();
    assert_eq!(page_size(&old).await, 4096);
    let run = new_run("{}", serde_json::json!({ "text": "x".repeat(5_000) }));
    let id = old.create_run(run).await.unwrap().run_id;
    let back = old.get_record(&id).await.unwrap();
    assert_eq!(back.input["text"].as_str().map(str::len), Some(5_000));
}

/// A database of schema 17 has the step rows of runs that went on at once interleaved in
/// time order, found through the key's index; migration 18 chains each run's rows instead.
/// Each run reads back its own steps, its events from any point and its step count; a
/// prune deletes only the pruned run's rows; a step committed after the migration joins
/// the chain of its run.
#[tokio::test]
async fn a_schema_17_databases_step_rows_are_chained_per_run() {
    let finished = |step: u32, node: &str| {
        format!(
            r#"{{"at": "2026-01-01T00:00:01.000Z", "type": "step_finished", "step": {step}, "node_id": "{node}", "node_type": "agent", "status": "succeeded", "duration_ms": 1, "cost_usd": 0.0, "attempts": 1}}"#
        )
    };
    let started = r#"{"at": "2026-01-01T00:00:01.000Z", "type": "step_started", "step": 3, "node_id": "a3", "node_type": "agent", "visit": 1}"#;
    let created =
        r#"[{"at": "2026-01-01T00:00:00.000Z", "type": "run_created", "workflow": "wf"}]"#;
    let snapshot = r#"{"state": {}, "loops": {}, "pending": [], "completed": [], "arrivals": {}, "hops": 2, "visits": {}, "next_seq": 3, "cost_usd": 0.0, "output": null, "gates": []}"#;
    let step = |key: u64, seq: u32, node: &str, events: String| {
        format!(
            "({key} * 4294967296 + {seq}, '{node}', 'agent', 1, 'succeeded', '{{}}', '\"{node}\"', '2026-01-01T00:00:01.000Z', '[]', 2 + {seq} - 1, '{events}')"
        )
    };
    let rows = format!(
        r#"INSERT INTO runs (key, id, workflow, dialect, status, source_path, snapshot, started_at, finished_at, epoch, owner, lease_expires_at, event_seq)
               VALUES (1, 'a', 'wf', 'graph', 'succeeded', 'wf.json', '{snapshot}', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:02.000Z', 1, NULL, NULL, 4),
                      (2, 'b', 'wf', 'graph', 'running', 'wf.json', '{snapshot}', '2026-01-01T00:00:00.000Z', NULL, 1, 'gone', 1, 3);
           INSERT INTO run_sources (run_key, source_text, input) VALUES (1, '{{"name": "wf"}}', '{{}}'), (2, '{{"name": "wf"}}', '{{}}');
           INSERT INTO run_events (run_key, seq, bodies) VALUES (1, 1, '{created}'), (2, 1, '{created}');
           INSERT INTO steps (id, node_id, node_type, visit, status, input, output, started_at, attempts, event_seq, events)
               VALUES {}, {}, {}, {};"#,
        step(1, 1, "a1", format!("[{}]", finished(1, "a1"))),
        step(2, 1, "b1", format!("[{}]", finished(1, "b1"))),
        step(1, 2, "a2", format!("[{}, {started}]", finished(2, "a2"))),
        step(2, 2, "b2", format!("[{}]", finished(2, "b2"))),
    );
    let (_dir, store) = opened_after(17, Box::leak(rows.into_boxed_str())).await;
    let nodes = |steps: Vec<StepRecord>| {
        steps
            .iter()
            .map(|s| (s.seq, String::from(&*s.node_id)))
            .collect::<Vec<_>>()
    };
    let seqs = |events: Vec<RunEvent>| events.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(
        nodes(store.get_record("a").await.unwrap().steps),
        [(1, "a1".to_string()), (2, "a2".to_string())]
    );
    assert_eq!(
        nodes(store.get_record("b").await.unwrap().steps),
        [(1, "b1".to_string()), (2, "b2".to_string())]
    );
    for after in 0..=4 {
        assert_eq!(
            seqs(store.events_after("a", after).await.unwrap()),
            (after + 1..=4).collect::<Vec<_>>(),
            "run a's events after {after}"
        );
    }
    let a = store.events_after("a", 2).await.unwrap();
    assert_eq!(
        a.iter().map(|e| e.kind.name()).collect::<Vec<_>>(),
        ["step_finished", "step_started"]
    );
    let counts = |list: Vec<RunSummary>| {
        let mut c: Vec<(String, u32)> = list.iter().map(|r| (r.run_id.clone(), r.steps)).collect();
        c.sort();
        c
    };
    let all = RunFilter {
        limit: 10,
        ..Default::default()
    };
    assert_eq!(
        counts(store.list_runs(&all).await.unwrap()),
        [("a".to_string(), 2), ("b".to_string(), 2)]
    );

    assert_eq!(
        store
            .prune("2027-01-01T00:00:00.000Z", &[RunStatus::Succeeded])
            .await
            .unwrap(),
        ["a"]
    );
    assert_eq!(count(&store, "SELECT COUNT(*) FROM steps").await, 2);

    // Run b's driver is gone: another takes it over and commits its third step.
    let snapshot = store.load_run("b").await.unwrap().snapshot;
    take_over_and_commit(&store, "b", &snapshot, 3, "b3").await;
    assert_eq!(
        nodes(store.get_record("b").await.unwrap().steps),
        [
            (1, "b1".to_string()),
            (2, "b2".to_string()),
            (3, "b3".to_string())
        ]
    );
    // 1 created, 2 and 3 the old steps, 4 the takeover's claim, 5 the new step.
    for after in 0..=5 {
        assert_eq!(
            seqs(store.events_after("b", after).await.unwrap()),
            (after + 1..=5).collect::<Vec<_>>(),
            "run b's events after {after}"
        );
    }
    assert_eq!(
        counts(store.list_runs(&all).await.unwrap()),
        [("b".to_string(), 3)]
    );
}
