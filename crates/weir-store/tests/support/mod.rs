//! What the store suites share: a fresh store of each kind, and builders of runs, steps,
//! snapshots and decisions. (Each test binary uses part of it.)
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weir_core::catalog::Catalog;
use weir_core::event::EventKind;
use weir_core::record::{PendingGate, RunStatus, Snapshot, StepRecord, StepStatus, Tokens};
use weir_core::store::{
    Claim, GateDecision, Lease, NewRun, RunStore, RunUpdate, StepCommit, StoreError, Written,
};

/// A fresh store of each kind; the temp dir lives as long as the store.
pub struct Fixture {
    pub store: Arc<dyn RunStore>,
    pub catalog: Arc<dyn Catalog>,
    pub _dir: Option<tempfile::TempDir>,
    pub reopen: Option<std::path::PathBuf>,
    /// Dropped after the stores (fields drop in order).
    pub _db: Option<weir_store::testdb::TestDb>,
}

pub async fn memory() -> Fixture {
    let m = Arc::new(weir_store::Memory::new());
    Fixture {
        store: m.clone(),
        catalog: m,
        _dir: None,
        reopen: None,
        _db: None,
    }
}

pub async fn sqlite() -> Fixture {
    sqlite_with(false).await
}

/// SQLite with `sync=full`: every commit synced before it is answered (`wal.rs`).
pub async fn sqlite_full_sync() -> Fixture {
    sqlite_with(true).await
}

async fn sqlite_with(full_sync: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weir.db");
    let s = Arc::new(
        weir_store::Sqlite::open_with(Some(&path), full_sync)
            .await
            .unwrap(),
    );
    Fixture {
        store: s.clone(),
        catalog: s,
        reopen: Some(path),
        _dir: Some(dir),
        _db: None,
    }
}

/// A fresh database of its own on the test Postgres server; `None` when there is none (the
/// case is then skipped, loudly, unless `WEIR_REQUIRE_POSTGRES=1`).
pub async fn postgres() -> Option<Fixture> {
    let db = weir_store::testdb::TestDb::create().await?;
    let s = Arc::new(weir_store::Postgres::open(&db.url).await.unwrap());
    Some(Fixture {
        store: s.clone(),
        catalog: s,
        _dir: None,
        reopen: None,
        _db: Some(db),
    })
}

impl Fixture {
    /// How many snapshot patches a SQL store keeps for a run (`None` for the memory store,
    /// which keeps whole snapshots).
    pub async fn patches_kept(&self, run_id: &str) -> Option<i64> {
        match (&self.reopen, &self._db) {
            (Some(p), _) => {
                let conn = rusqlite::Connection::open(p).unwrap();
                let n = conn
                    .query_row(
                        "SELECT COUNT(*) FROM run_patches
                         WHERE run_key = (SELECT key FROM runs WHERE id = ?1)",
                        [run_id],
                        |r| r.get(0),
                    )
                    .unwrap();
                Some(n)
            }
            (None, Some(db)) => {
                let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
                let n = sqlx::query_scalar("SELECT COUNT(*) FROM run_patches WHERE run_id = $1")
                    .bind(run_id)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                pool.close().await;
                Some(n)
            }
            (None, None) => None,
        }
    }

    /// The same data as a process that starts after a crash sees it.
    pub async fn after_crash(&self) -> Arc<dyn RunStore> {
        match (&self.reopen, &self._db) {
            (Some(p), _) => Arc::new(weir_store::Sqlite::open(Some(p)).await.unwrap()),
            (None, Some(db)) => Arc::new(weir_store::Postgres::open(&db.url).await.unwrap()),
            (None, None) => self.store.clone(),
        }
    }
}

/// The first `limit` runs of the store's list, unfiltered.
pub async fn list(store: &dyn RunStore, limit: u32) -> Vec<weir_core::record::RunSummary> {
    store
        .list_runs(&weir_core::store::RunFilter {
            limit,
            ..Default::default()
        })
        .await
        .unwrap()
}

pub fn claim(owner: &str, ttl_ms: u64) -> Claim {
    Claim {
        owner: owner.into(),
        ttl: Duration::from_millis(ttl_ms),
    }
}

pub fn new_run(id: &str) -> NewRun {
    NewRun {
        run_id: id.into(),
        workflow: "wf".into(),
        dialect: "graph".into(),
        source_path: "wf.json".into(),
        source_text: "{}".into(),
        input: json!({"x": 1}),
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

/// Creates run `id` claimed by `owner` (a 30 s lease), as `weir run` does; its lease.
pub async fn claimed_run(store: &dyn RunStore, id: &str, owner: &str) -> Lease {
    let mut n = new_run(id);
    n.claim = Some(claim(owner, 30_000));
    store.create_run(n).await.unwrap().lease.unwrap()
}

pub fn step(seq: u32, node: &str, status: StepStatus) -> StepRecord {
    StepRecord {
        seq,
        node_id: node.into(),
        node_type: "agent".into(),
        visit: 1,
        status,
        route: None,
        input: Value::Null,
        output: Arc::new(json!({"node": node}).into()),
        error: None,
        cost_usd: 0.5,
        tokens: Tokens::default(),
        attempts: Vec::new(),
        started_at: weir_core::store::Stamp::now(),
        finished_at: None,
        duration_ms: None,
    }
}

/// The `step_finished` event of step `seq` of agent node `node`, succeeded.
pub fn finished(seq: u32, node: &str, attempts: u32) -> EventKind {
    EventKind::StepFinished {
        step: seq,
        node_id: node.into(),
        node_type: "agent".into(),
        status: StepStatus::Succeeded,
        route: None,
        error: None,
        duration_ms: u64::from(attempts),
        cost_usd: 0.5,
        attempts,
    }
}

pub fn snap(done: &[&str], gates: Vec<PendingGate>) -> Snapshot {
    let mut s = Snapshot {
        next_seq: done.len() as u32 + 1,
        cost_usd: 0.5 * done.len() as f64,
        gates,
        ..Snapshot::default()
    };
    for d in done {
        s.completed.insert((*d).into());
        Arc::make_mut(&mut s.state).insert(d.to_string(), json!(true));
    }
    s
}

/// Creates a run, claims it and parks it at gate `g` (step 1, waiting).
pub async fn paused_run(store: &dyn RunStore, id: &str) -> u64 {
    let lease = claimed_run(store, id, "driver").await;
    let gate = step(1, "g", StepStatus::Waiting);
    let gates = vec![PendingGate {
        node_id: "g".into(),
        prompt: "ok?".into(),
        seq: 1,
        kind: weir_core::record::GateKind::Human,
        detail: None,
    }];
    store
        .commit_step(
            &lease,
            StepCommit {
                step: &gate,
                started: &[],
                snapshot: &snap(&[], gates.clone()),
                patch: None,
                covers_patches: false,
                events: vec![],
            },
        )
        .await
        .unwrap();
    store
        .finish_run(
            &lease,
            &[],
            &RunUpdate {
                status: RunStatus::Paused,
                error: None,
                finished_at: None,
                snapshot: snap(&[], gates),
            },
            vec![EventKind::RunPaused {
                node_id: "g".into(),
                prompt: "ok?".into(),
                kind: weir_core::record::GateKind::Human,
            }],
        )
        .await
        .unwrap();
    store.load_run(id).await.unwrap().epoch
}

pub fn approve(id: &str, epoch: u64, by: &str) -> GateDecision {
    let mut s = step(1, "g", StepStatus::Succeeded);
    s.route = Some("approved".into());
    s.output = Arc::new(json!({"approved": true, "by": by}).into());
    GateDecision {
        run_id: id.into(),
        expect_epoch: epoch,
        step: s,
        status: RunStatus::Queued,
        error: None,
        finished_at: None,
        snapshot: snap(&["g"], vec![]),
        also: vec![],
        events: vec![EventKind::GateDecided {
            node_id: "g".into(),
            approved: true,
            by: by.into(),
            comment: None,
        }],
    }
}

pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Commits node `node`'s finished step 1 with a snapshot that has it completed.
pub async fn commit_first(
    store: &dyn RunStore,
    lease: &Lease,
    node: &str,
) -> Result<Written, StoreError> {
    let st = step(1, node, StepStatus::Succeeded);
    store
        .commit_step(
            lease,
            StepCommit {
                step: &st,
                started: &[],
                snapshot: &snap(&[node], vec![]),
                patch: None,
                covers_patches: false,
                events: vec![],
            },
        )
        .await
}
