//! `weir-bench pg`: weir on Postgres, side by side with the DBOS Transact peer
//! (`shared/bench/DBOS.md`, the same bench and metric names), plus what the scale-out issue
//! asks for: no-op steps per second with 1, 2 and 4 `weir worker` processes, enqueue → start
//! latency, and the dead tuples the hot queue table is left with.
//!
//! The server is `$WEIR_BENCH_PG` (default `postgres://postgres@127.0.0.1:5432/postgres`);
//! each workload gets a fresh database, dropped at the end. The workers are the real `weir`
//! binary (`$WEIR_BIN`, else `weir` beside this binary).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_core::{DriveWrites, Lifecycle, RunReads};

use serde_json::json;
use weir_core::{RunStatus, RunStore};
use weir_engine::{CreateOptions, Engine, Quiet, Services, Source};
use weir_store::Postgres;
use weir_store::testdb::TestDb;

use crate::fakes::{FakeModel, NoScripts, NoTools};
use crate::{emit, load};

/// `n` no-op steps in a row (merge nodes with one incoming edge: each is a step, committed
/// before the next starts, that does nothing).
fn noop_chain(n: usize) -> String {
    let nodes: Vec<_> = (0..n)
        .map(|i| json!({"id": format!("s{i}"), "type": "merge"}))
        .collect();
    let edges: Vec<_> = (1..n)
        .map(|i| json!({"source": format!("s{}", i - 1), "target": format!("s{i}")}))
        .collect();
    json!({"name": format!("noop{n}"), "nodes": nodes, "edges": edges}).to_string()
}

fn engine(store: Arc<dyn RunStore>) -> Engine {
    Engine::new(
        Services {
            models: Arc::new(FakeModel {
                latency: Duration::ZERO,
                reply_bytes: 0,
            }),
            tools: Arc::new(NoTools),
            scripts: Arc::new(NoScripts),
            store,
            secrets: Arc::new(weir_core::settings::Settings::default()),
        },
        Arc::new(Quiet),
    )
}

fn weir_bin() -> std::path::PathBuf {
    let p: std::path::PathBuf = std::env::var_os("WEIR_BIN").map_or_else(
        || {
            std::env::current_exe()
                .expect("own path")
                .with_file_name("weir")
        },
        Into::into,
    );
    // The workers run in a scratch folder: a relative path would not find the binary.
    std::fs::canonicalize(&p).unwrap_or(p)
}

async fn fresh() -> Option<(TestDb, Arc<Postgres>)> {
    let server = std::env::var("WEIR_BENCH_PG").unwrap_or_else(|_| weir_store::testdb::admin_url());
    let db = TestDb::create_on(&server).await?;
    let store = Arc::new(Postgres::open(&db.url).await.expect("open Postgres"));
    Some((db, store))
}

pub async fn bench_pg() {
    let Some((db, store)) = fresh().await else {
        eprintln!("weir-bench pg: no Postgres server; skipped");
        return;
    };
    pg_chain(store.clone()).await;
    drop((store, db));
    // The store alone, without the engine: what one durable step commit costs.
    let Some((db, store)) = fresh().await else {
        return;
    };
    raw_commits(store.clone()).await;
    drop((store, db));
    for workers in [1, 2, 4] {
        let Some((db, store)) = fresh().await else {
            return;
        };
        pg_queue(&db.url, store.clone(), workers).await;
        drop((store, db));
    }
    let Some((db, store)) = fresh().await else {
        return;
    };
    pg_idle(&db.url, store.clone()).await;
    drop((store, db));
}

/// DBOS's `pg_chain`: one workflow of 20 no-op steps, 50 runs one after another, each step
/// committed to Postgres before the next starts (in process, as DBOS runs).
async fn pg_chain(store: Arc<Postgres>) {
    let (n, runs) = (20, 50);
    let e = engine(store);
    let text: Arc<str> = noop_chain(n).into();
    let wf = load(&text);
    let source = || Source {
        path: "noop20.json".into(),
        text: text.clone(),
        pin: None,
    };
    for warm in [true, false] {
        let t = Instant::now();
        for _ in 0..if warm { 5 } else { runs } {
            let r = e.start(wf.clone(), source(), json!({})).await.expect("run");
            assert_eq!(r.status, RunStatus::Succeeded);
        }
        if !warm {
            let dt = t.elapsed().as_secs_f64();
            emit("pg_chain", "per_step", dt / (runs * n) as f64 * 1e6, "us");
            emit("pg_chain", "runs_per_sec", runs as f64 / dt, "runs/s");
        }
    }
}

fn spawn_worker(url: &str, name: &str, concurrency: usize, dir: &std::path::Path) -> Child {
    Command::new(weir_bin())
        .args([
            "--db",
            url,
            "worker",
            "--concurrency",
            &concurrency.to_string(),
            "--name",
            name,
        ])
        .current_dir(dir)
        .env("HOME", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e} (set WEIR_BIN)", weir_bin().display()))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Milliseconds from each run's `run_created` to its `run_started`, sorted.
async fn start_latencies(store: &Postgres, ids: &[String]) -> Vec<f64> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let events = store.events_after(id, 0).await.expect("events");
        let at = |t: &str| {
            events
                .iter()
                .find(|e| e.kind.name() == t)
                .and_then(|e| e.at.millis())
        };
        if let (Some(a), Some(b)) = (at("run_created"), at("run_started")) {
            out.push((b - a) as f64);
        }
    }
    out.sort_by(f64::total_cmp);
    out
}

/// Creates `n` queued runs, 16 creations in flight at a time (as clients of the API would).
async fn enqueue(e: &Arc<Engine>, text: &str, n: usize) -> Vec<String> {
    let wf = load(text);
    let mut ids = Vec::with_capacity(n);
    let mut set = tokio::task::JoinSet::new();
    for k in 0..n {
        let (e, wf, text) = (e.clone(), wf.clone(), text.to_string());
        set.spawn(async move {
            let src = Source {
                path: "noop5.json".into(),
                text: text.into(),
                pin: None,
            };
            e.create(&wf, src, json!({}), CreateOptions::default())
                .await
                .expect("create")
                .run_id
        });
        if set.len() >= 16 || k + 1 == n {
            while set.len() > if k + 1 == n { 0 } else { 15 } {
                ids.push(set.join_next().await.expect("task").expect("create"));
            }
        }
    }
    ids
}

async fn wait_all(store: &Postgres, n: u64, within: Duration) {
    let start = Instant::now();
    loop {
        let done: u64 = store
            .count_by_status()
            .await
            .expect("count")
            .iter()
            .filter(|(s, _)| *s == RunStatus::Succeeded)
            .map(|(_, c)| *c)
            .sum();
        if done >= n {
            return;
        }
        assert!(start.elapsed() < within, "only {done} of {n} runs finished");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// DBOS's `pg_queue`: 1,000 workflows of 5 no-op steps enqueued at once, here driven by
/// `workers` `weir worker` processes (32 runs at once each).
async fn pg_queue(url: &str, store: Arc<Postgres>, workers: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (runs, steps) = (1000, 5);
    let text = noop_chain(steps);
    let mut procs: Vec<Child> = (0..workers)
        .map(|k| spawn_worker(url, &format!("bench-w{k}"), 32, dir.path()))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await; // connected and idle
    let e = Arc::new(engine(store.clone()));
    let t = Instant::now();
    let ids = enqueue(&e, &text, runs).await;
    let enq = t.elapsed().as_secs_f64();
    wait_all(&store, runs as u64, Duration::from_secs(300)).await;
    let dt = t.elapsed().as_secs_f64();
    let name = if workers == 1 {
        "pg_queue".to_string()
    } else {
        format!("pg_queue_{workers}w")
    };
    emit(
        &name,
        "steps_per_sec",
        (runs * steps) as f64 / dt,
        "steps/s",
    );
    emit(&name, "wall_time", dt, "s");
    emit(&name, "enqueue_time", enq, "s");
    let lat = start_latencies(&store, &ids).await;
    emit(&name, "enqueue_to_start_p50", percentile(&lat, 0.5), "ms");
    emit(&name, "enqueue_to_start_p99", percentile(&lat, 0.99), "ms");
    for p in &mut procs {
        let _ = p.kill();
        let _ = p.wait();
    }
    // The statistics are flushed within a second or so of the last transaction.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (dead, live) = store.queue_tuples().await.expect("stats");
    emit(&name, "queue_dead_tuples", dead as f64, "count");
    emit(&name, "queue_live_rows", live as f64, "count");
}

/// A run created while workers are idle: how soon one starts it (the LISTEN/NOTIFY path).
async fn pg_idle(url: &str, store: Arc<Postgres>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = noop_chain(5);
    let mut procs: Vec<Child> = (0..4)
        .map(|k| spawn_worker(url, &format!("idle-w{k}"), 32, dir.path()))
        .collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let e = Arc::new(engine(store.clone()));
    let mut ids = Vec::new();
    for _ in 0..200 {
        ids.extend(enqueue(&e, &text, 1).await);
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    wait_all(&store, 200, Duration::from_secs(60)).await;
    let lat = start_latencies(&store, &ids).await;
    emit(
        "pg_idle",
        "create_to_start_p50",
        percentile(&lat, 0.5),
        "ms",
    );
    emit(
        "pg_idle",
        "create_to_start_p99",
        percentile(&lat, 0.99),
        "ms",
    );
    for p in &mut procs {
        let _ = p.kill();
        let _ = p.wait();
    }
}

/// The store alone: step commits on one lease, one after another.
async fn raw_commits(store: Arc<Postgres>) {
    use weir_core::store::{Claim, NewRun, StepCommit};
    let run = NewRun {
        run_id: "raw".into(),
        workflow: "raw".into(),
        dialect: "graph".into(),
        source_path: "raw.json".into(),
        source_text: "{}".into(),
        input: json!({}),
        created_at: weir_core::store::now_rfc3339(),
        snapshot: weir_core::record::Snapshot::default(),
        idempotency_key: None,
        claim: Some(Claim {
            owner: "me".into(),
            ttl: Duration::from_secs(60),
        }),
        pin: None,
        trigger: weir_core::record::RunTrigger::default(),
    };
    let lease = store.create_run(run.clone()).await.unwrap().lease.unwrap();
    let snap = weir_core::record::Snapshot::default();
    let n = 1000;
    let t = Instant::now();
    for i in 0..n {
        let step = weir_core::StepRecord {
            seq: i + 1,
            node_id: "s".into(),
            node_type: "merge".into(),
            visit: 1,
            status: weir_core::record::StepStatus::Succeeded,
            route: None,
            input: json!(null),
            output: Arc::new(json!({"merged": true}).into()),
            error: None,
            cost_usd: 0.0,
            tokens: Default::default(),
            attempts: vec![],
            started_at: weir_core::store::Stamp::now(),
            finished_at: Some(weir_core::store::Stamp::now()),
            duration_ms: Some(0),
        };
        store
            .commit_step(
                &lease,
                StepCommit {
                    step: &step,
                    started: &[],
                    snapshot: &snap,
                    patch: None,
                    covers_patches: false,
                    events: vec![],
                },
            )
            .await
            .unwrap();
    }
    emit(
        "pg_raw",
        "commit_step",
        t.elapsed().as_secs_f64() / f64::from(n) * 1e6,
        "us",
    );
}
