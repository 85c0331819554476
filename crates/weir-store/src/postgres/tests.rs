//! The Postgres store's own tests (the conformance suite covers what every store shares):
//! workflow sources kept once (migration 3), against creations and retention racing.

use std::sync::Arc;
use weir_core::{Admin, Lifecycle, RunReads};

use sqlx::{Connection, PgConnection};
use weir_core::record::Snapshot;
use weir_core::store::NewRun;

use super::schema;
use super::store::Postgres;
use crate::testdb::TestDb;

fn new_run(id: &str, text: &str) -> NewRun {
    NewRun {
        run_id: id.into(),
        workflow: "wf".into(),
        dialect: "graph".into(),
        source_path: "wf.json".into(),
        source_text: text.into(),
        input: serde_json::json!({"id": id}),
        created_at: weir_core::store::now_rfc3339(),
        snapshot: Snapshot {
            pending: vec!["a".into()],
            next_seq: 1,
            ..Snapshot::default()
        },
        idempotency_key: None,
        claim: None,
        pin: None,
        trigger: weir_core::record::RunTrigger::default(),
    }
}

async fn count(url: &str, sql: &'static str) -> i64 {
    let mut c = PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap()
}

/// A database of schema 2, whose runs kept their sources in their rows, keeps each distinct
/// text once after the upgrade, and every run reads back its own.
#[tokio::test]
async fn a_schema_2_databases_sources_are_kept_once() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let mut c = PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("CREATE TABLE schema_version (version BIGINT PRIMARY KEY)")
        .execute(&mut c)
        .await
        .unwrap();
    for (version, sql) in &schema::MIGRATIONS[..2] {
        sqlx::raw_sql(*sql).execute(&mut c).await.unwrap();
        sqlx::query("INSERT INTO schema_version (version) VALUES ($1)")
            .bind(*version)
            .execute(&mut c)
            .await
            .unwrap();
    }
    sqlx::raw_sql(
        r#"INSERT INTO runs (id, workflow, dialect, status, source_path, source_text, input, snapshot, started_at)
           VALUES ('a', 'wf', 'graph', 'queued', 'wf.json', '{"name": "wf"}', '{"n": 1}', '{"state": {}, "loops": {}, "pending": [], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 1, "cost_usd": 0.0, "output": null, "gates": []}', '2026-01-01T00:00:00.000Z'),
                  ('b', 'wf', 'graph', 'queued', 'wf.json', '{"name": "wf"}', '{"n": 2}', '{"state": {}, "loops": {}, "pending": [], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 1, "cost_usd": 0.0, "output": null, "gates": []}', '2026-01-01T00:00:01.000Z'),
                  ('c', 'other', 'graph', 'queued', 'other.json', '{"name": "other"}', '{"n": 3}', '{"state": {}, "loops": {}, "pending": [], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 1, "cost_usd": 0.0, "output": null, "gates": []}', '2026-01-01T00:00:02.000Z')"#,
    )
    .execute(&mut c)
    .await
    .unwrap();
    let store = Postgres::open(&db.url).await.unwrap();
    assert_eq!(count(&db.url, "SELECT COUNT(*) FROM sources").await, 2);
    for (id, text, n) in [("a", "wf", 1), ("b", "wf", 2), ("c", "other", 3)] {
        let run = store.load_run(id).await.unwrap();
        assert_eq!(run.source_text, format!(r#"{{"name": "{text}"}}"#), "{id}");
        assert_eq!(run.input, serde_json::json!({ "n": n }), "{id}");
    }
    // A run created after the upgrade shares the text that is already there.
    store
        .create_run(new_run("d", r#"{"name": "wf"}"#))
        .await
        .unwrap();
    assert_eq!(count(&db.url, "SELECT COUNT(*) FROM sources").await, 2);
}

/// Runs of one workflow share its source's row; retention deletes the row with the last run
/// that names it. Creations racing retention over that row all succeed, each run reads back
/// its text, and no text outlives its runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creations_racing_retention_over_one_source_lose_nothing() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let store = Arc::new(Postgres::open(&db.url).await.unwrap());
    let text = r#"{"name": "shared", "nodes": []}"#;
    for id in ["x", "y"] {
        store.create_run(new_run(id, text)).await.unwrap();
    }
    store.create_run(new_run("z", "{}")).await.unwrap();
    assert_eq!(count(&db.url, "SELECT COUNT(*) FROM sources").await, 2);
    // Retention deletes the shared text with the last run that names it.
    let future = "9999-01-01T00:00:00.000Z";
    for (id, left) in [("x", 2), ("y", 1)] {
        store.request_cancel(id, "test").await.unwrap();
        assert_eq!(store.prune(future, &[]).await.unwrap(), [id]);
        assert_eq!(
            count(&db.url, "SELECT COUNT(*) FROM sources").await,
            left,
            "{id}"
        );
    }
    // Runs of the text created, read and cancelled, while retention prunes them: the text
    // goes and comes back again and again under the creations.
    let pruner = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut pruned = 0;
            for _ in 0..300 {
                pruned += store.prune(future, &[]).await.unwrap().len();
                tokio::task::yield_now().await;
            }
            pruned
        })
    };
    let mut creators = Vec::new();
    for t in 0..3 {
        let store = store.clone();
        creators.push(tokio::spawn(async move {
            for i in 0..60 {
                let id = format!("run-{t}-{i}");
                store.create_run(new_run(&id, text)).await.unwrap();
                assert_eq!(store.load_run(&id).await.unwrap().source_text, text, "{id}");
                store.request_cancel(&id, "test").await.unwrap();
            }
        }));
    }
    for c in creators {
        c.await.unwrap();
    }
    assert!(
        pruner.await.unwrap() > 0,
        "retention ran beside the creations"
    );
    // Only z is left, with its text: the shared one went with the last of its runs.
    store.prune(future, &[]).await.unwrap();
    assert_eq!(count(&db.url, "SELECT COUNT(*) FROM sources").await, 1);
    assert_eq!(store.load_run("z").await.unwrap().source_text, "{}");
    store.request_cancel("z", "test").await.unwrap();
    store.prune(future, &[]).await.unwrap();
    assert_eq!(count(&db.url, "SELECT COUNT(*) FROM sources").await, 0);
}

/// A source text retention deletes while a creation is naming it (the creation found the
/// row, and its foreign key waits for the deleting transaction): the creation is refused by
/// the key, runs again, writes the text anew and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_whose_source_is_deleted_under_it_writes_the_text_again() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let store = Arc::new(Postgres::open(&db.url).await.unwrap());
    let text = r#"{"name": "raced"}"#;
    store.create_run(new_run("old", text)).await.unwrap();
    store.request_cancel("old", "test").await.unwrap();
    // The run goes, its text stays for the moment: a retention between its two deletions.
    let mut p = PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql(
        "BEGIN; DELETE FROM runs WHERE id = 'old'; DELETE FROM run_events WHERE run_id = 'old'",
    )
    .execute(&mut p)
    .await
    .unwrap();
    let key: i64 = sqlx::query_scalar("SELECT key FROM sources FOR UPDATE")
        .fetch_one(&mut p)
        .await
        .unwrap();
    let creating = {
        let store = store.clone();
        tokio::spawn(async move { store.create_run(new_run("new", text)).await })
    };
    // The creation finds the row and waits on it (the key's check), then the row goes.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !creating.is_finished(),
        "the creation waits for the deleting transaction"
    );
    sqlx::query("DELETE FROM sources WHERE key = $1")
        .bind(key)
        .execute(&mut p)
        .await
        .unwrap();
    sqlx::raw_sql("COMMIT").execute(&mut p).await.unwrap();
    creating.await.unwrap().unwrap();
    assert_eq!(store.load_run("new").await.unwrap().source_text, text);
    let keys: Vec<i64> = sqlx::query_scalar("SELECT key FROM sources")
        .fetch_all(&mut p)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1);
    assert_ne!(keys[0], key, "the text was written anew");
}

/// Retention that would delete a text a run created meanwhile names (the run's transaction
/// committed while retention's deletion waited on it) is refused by the foreign key, and its
/// deletion runs again and keeps the text; the runs it pruned stay pruned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_a_source_a_run_created_meanwhile_names() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let store = Arc::new(Postgres::open(&db.url).await.unwrap());
    let text = r#"{"name": "kept"}"#;
    store.create_run(new_run("old", text)).await.unwrap();
    store.request_cancel("old", "test").await.unwrap();
    // A creation's transaction, not yet committed, names the text (its key share lock on
    // the row is what retention's deletion waits for).
    let mut c = PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql(
        r#"BEGIN;
           INSERT INTO runs (id, workflow, dialect, status, source_path, source_key, input, snapshot, started_at)
           SELECT 'new', 'wf', 'graph', 'queued', 'wf.json', key, '{}', '{"state": {}, "loops": {}, "pending": [], "completed": [], "arrivals": {}, "hops": 0, "visits": {}, "next_seq": 1, "cost_usd": 0.0, "output": null, "gates": []}', '2026-01-01T00:00:00.000Z'
           FROM sources"#,
    )
    .execute(&mut c)
    .await
    .unwrap();
    let pruning = {
        let store = store.clone();
        tokio::spawn(async move { store.prune("9999-01-01T00:00:00.000Z", &[]).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!pruning.is_finished(), "retention waits for the creation");
    sqlx::raw_sql("COMMIT").execute(&mut c).await.unwrap();
    assert_eq!(pruning.await.unwrap().unwrap(), ["old"]);
    assert_eq!(store.load_run("new").await.unwrap().source_text, text);
    assert_eq!(count(&db.url, "SELECT COUNT(*) FROM sources").await, 1);
}
