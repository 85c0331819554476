#![allow(
    clippy::too_many_lines,
    reason = "a benchmark reads top to bottom as one measurement"
)]

//! weir-bench: the five workloads of `shared/bench/LANGGRAPH.md` on weir's real engine (real
//! loader, scheduler, node executors; the real SQLite store for the durable workload), with a
//! model client that returns a fixed reply after an optional delay, as the peer's fake does.
//! Prints JSON lines `{"bench", "metric", "value", "unit"}` with the peer's names.
//!
//! `react` is the agent loop (`agents.rs`), on the peer's agent script.
//!
//! `cargo run --release -p weir-bench [-- BENCH...]` (default: all; also `paused` and `api`,
//! the HTTP server end to end; `pg`, Postgres with `weir worker` processes, only when named).

mod agents;
mod fakes;
mod pg;
mod server;

use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_core::RunReads;

use serde_json::{Value, json};
use weir_core::{RunStatus, RunStore, Workflow};
use weir_engine::{Engine, Quiet, Services, Source};

use fakes::{FakeModel, NoScripts, NoTools};

/// The allocator the `weir` binary ships with (`crates/weir-cli/src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use weir_store::Memory;

fn emit(bench: &str, metric: &str, value: f64, unit: &str) {
    println!(
        "{}",
        json!({"bench": bench, "metric": metric, "value": (value * 1000.0).round() / 1000.0, "unit": unit})
    );
}

/// Each loaded workflow's source text, by name: a run stores its workflow's source, as
/// `weir run` stores the file it was given.
static SOURCES: std::sync::Mutex<Vec<(String, Arc<str>)>> = std::sync::Mutex::new(Vec::new());

fn load(text: &str) -> Arc<Workflow> {
    let l = weir_dialects::load("bench.json", text);
    assert!(!l.has_errors(), "{:?}", l.diagnostics);
    let wf = l.valid().expect("valid workflow");
    let mut sources = SOURCES.lock().expect("sources");
    sources.retain(|(name, _)| *name != wf.name);
    sources.push((wf.name.clone(), text.into()));
    Arc::new(wf)
}

fn agent(id: &str, msg: &str) -> Value {
    json!({"id": id, "type": "agent", "config": {"model": "fake", "user_message": msg, "output_key": "last"}})
}

/// `n0 → n1 → … → n{N-1}`, each an LLM call reading the previous reply.
fn chain(n: usize) -> Arc<Workflow> {
    load(&chain_doc(n).to_string())
}

/// The document of [`chain`].
fn chain_doc(n: usize) -> Value {
    let nodes: Vec<Value> = (0..n)
        .map(|i| agent(&format!("n{i}"), &format!("node {i}: {{last}}")))
        .collect();
    let edges: Vec<Value> = (1..n)
        .map(|i| json!({"source": format!("n{}", i - 1), "target": format!("n{i}")}))
        .collect();
    json!({"name": "chain", "nodes": nodes, "edges": edges})
}

/// `start → b0..b4 → join (merge) → summary`.
fn fanout() -> Arc<Workflow> {
    let mut nodes = vec![
        json!({"id": "start", "type": "agent", "config": {"model": "fake", "user_message": "{topic}", "output_key": "topic"}}),
    ];
    let mut edges = Vec::new();
    for i in 0..5 {
        nodes.push(json!({"id": format!("b{i}"), "type": "agent", "config": {"model": "fake", "user_message": format!("branch {i}: {{topic}}")}}));
        edges.push(json!({"source": "start", "target": format!("b{i}")}));
        edges.push(json!({"source": format!("b{i}"), "target": "join"}));
    }
    nodes.push(json!({"id": "join", "type": "merge"}));
    nodes.push(json!({"id": "summary", "type": "agent", "config": {"model": "fake", "user_message": "join: {b0}|{b1}|{b2}|{b3}|{b4}"}}));
    edges.push(json!({"source": "join", "target": "summary"}));
    load(&json!({"name": "fanout", "nodes": nodes, "edges": edges}).to_string())
}

/// `entry → step ⇄ again (loop, 100 iterations)`.
fn looped(iters: usize) -> Arc<Workflow> {
    load(&json!({"name": "loop", "hop_ceiling": 1000, "nodes": [
        {"id": "entry", "type": "agent", "config": {"model": "fake", "user_message": "go", "output_key": "last"}},
        {"id": "step", "type": "agent", "config": {"model": "fake", "user_message": "{last}", "output_key": "last"}},
        {"id": "again", "type": "loop", "config": {"expression": "True", "max_iterations": iters - 1}}],
      "edges": [{"source": "entry", "target": "again"},
                {"source": "again", "target": "step", "condition_value": "true"},
                {"source": "step", "target": "again"}]}).to_string())
}

fn engine(store: Arc<dyn RunStore>, latency: Duration) -> Engine {
    engine_with(store, latency, 0)
}

fn engine_with(store: Arc<dyn RunStore>, latency: Duration, reply_bytes: usize) -> Engine {
    Engine::new(
        Services {
            models: Arc::new(FakeModel {
                latency,
                reply_bytes,
            }),
            tools: Arc::new(NoTools),
            scripts: Arc::new(NoScripts),
            store,
            secrets: Arc::new(weir_core::settings::Settings::default()),
        },
        Arc::new(Quiet),
    )
}

fn source(wf: &Workflow) -> Source {
    let sources = SOURCES.lock().expect("sources");
    Source {
        path: "bench.json".into(),
        text: sources
            .iter()
            .find(|(name, _)| *name == wf.name)
            .map(|(_, text)| text.clone())
            .unwrap_or_default(),
        pin: None,
    }
}

async fn run(e: &Engine, wf: &Arc<Workflow>, input: Value) -> weir_engine::RunOutcome {
    let r = e.start(wf.clone(), source(wf), input).await.expect("run");
    assert!(
        matches!(r.status, RunStatus::Succeeded | RunStatus::Paused),
        "{:?}",
        r.error
    );
    r
}

async fn timed(e: &Engine, wf: &Arc<Workflow>, runs: usize, input: Value) -> f64 {
    run(e, wf, input.clone()).await; // warm-up
    let t = Instant::now();
    for _ in 0..runs {
        run(e, wf, input.clone()).await;
    }
    t.elapsed().as_secs_f64()
}

/// The number of timed runs: `default`, or `WEIR_BENCH_RUNS` (bench/instructions.sh runs each
/// workload at two sizes and takes the difference, so start-up and warm-up cancel out).
fn runs_or(default: usize) -> usize {
    std::env::var("WEIR_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn status_kib(field: &str) -> f64 {
    status_of("/proc/self/status", field)
}

/// The number after `field` in a `/proc` file of lines `field value …`.
fn status_of(file: &str, field: &str) -> f64 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0.0)
}

async fn bench_chain() {
    let (n, r) = (20, runs_or(500));
    let e = engine(Arc::new(Memory::ephemeral()), Duration::ZERO);
    let dt = timed(&e, &chain(n), r, json!({"last": ""})).await;
    emit(
        "chain",
        "per_node_overhead",
        dt / (r * n) as f64 * 1e6,
        "us",
    );
    emit("chain", "runs_per_sec", r as f64 / dt, "runs/s");
}

/// What starting and ending a run costs beside its one node: runs of a one-node chain, one
/// after the other, in memory. Each of the concurrency workload's 2,000 runs pays this
/// before its first model call or after its last, so it sets how long their launch takes.
/// Named only: `weir-bench launch` (bench/instructions.sh counts it per run).
async fn bench_launch() {
    let r = runs_or(2000);
    let e = engine(Arc::new(Memory::ephemeral()), Duration::ZERO);
    let dt = timed(&e, &chain(1), r, json!({"last": ""})).await;
    emit("launch", "per_run", dt / r as f64 * 1e6, "us");
}

async fn bench_fanout() {
    let r = runs_or(500);
    let e = engine(Arc::new(Memory::ephemeral()), Duration::ZERO);
    let dt = timed(&e, &fanout(), r, json!({"topic": "t"})).await;
    emit("fanout", "per_run", dt / r as f64 * 1e6, "us");
    emit("fanout", "runs_per_sec", r as f64 / dt, "runs/s");
}

async fn bench_loop() {
    let (iters, r) = (100, runs_or(100));
    let store = Arc::new(Memory::new());
    let wf = looped(iters);
    let check = run(&engine(store.clone(), Duration::ZERO), &wf, json!({})).await;
    let record = store.get_record(&check.run_id).await.expect("record");
    let e = engine(Arc::new(Memory::ephemeral()), Duration::ZERO);
    let steps = record
        .steps
        .iter()
        .filter(|s| &*s.node_id != "again")
        .count();
    assert_eq!(
        steps, iters,
        "one loop run executes the LLM step {iters} times"
    );
    let dt = timed(&e, &wf, r, json!({})).await;
    emit("loop", "per_iteration", dt / (r * iters) as f64 * 1e6, "us");
    emit("loop", "per_run", dt / r as f64 * 1e6, "us");
}

async fn bench_concurrency() {
    // WEIR_BENCH_CONC_NODES=N: chains of N nodes instead of 5, to tell the cost of starting
    // and ending 2,000 runs (one node) from each wave's.
    let n = std::env::var("WEIR_BENCH_CONC_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let (runs, latency) = (2000, Duration::from_millis(50));
    let before = status_kib("VmRSS:");
    concurrent(
        "concurrency",
        engine(Arc::new(Memory::ephemeral()), latency),
        runs,
        n,
        latency,
    )
    .await;
    emit(
        "concurrency",
        "peak_rss",
        status_kib("VmHWM:") / 1024.0,
        "MiB",
    );
    emit("concurrency", "rss_before_launch", before / 1024.0, "MiB");
}

/// The machine's own cost of a durable SQLite commit: a bare loop of one-row `BEGIN
/// IMMEDIATE … COMMIT` transactions in WAL mode with `synchronous=FULL` (an fsync each), on
/// the same disk as the benchmark's database. The physical floor under a durable step.
struct FsyncProbe {
    _dir: tempfile::TempDir,
    conn: rusqlite::Connection,
    next: i64,
}

impl FsyncProbe {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let conn = rusqlite::Connection::open(dir.path().join("fsync.db")).expect("sqlite");
        // A small checkpoint interval, and untimed commits first: the WAL wraps and is
        // reused from its start, as a database that has been written for a while reuses
        // it. A WAL that is still growing makes every fsync write the file's new size too,
        // which took this VM's disk up to twice as long as weir's own steady-state commits.
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = 64;
             CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);",
        )
        .expect("schema");
        let mut probe = Self {
            _dir: dir,
            conn,
            next: 0,
        };
        probe.commits(200);
        probe
    }

    /// Makes `n` commits; how long they took, in seconds.
    fn commits(&mut self, n: usize) -> f64 {
        let t = Instant::now();
        for _ in 0..n {
            self.conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
            self.conn
                .execute(
                    "INSERT OR REPLACE INTO t (id, body) VALUES (?1, 'x')",
                    [self.next % 64],
                )
                .expect("insert");
            self.conn.execute_batch("COMMIT").expect("commit");
            self.next += 1;
        }
        t.elapsed().as_secs_f64()
    }
}

/// The concurrency workload on the SQLite store with `synchronous=FULL`: 2,000 concurrent
/// 5-node runs, every step committed durably before its successor starts. Group commit lets
/// the commits of runs that arrive together share one transaction and one fsync.
async fn bench_concurrency_durable() {
    let (runs, n, latency) = (2000, 5, Duration::from_millis(50));
    let dir = tempfile::tempdir().expect("temp dir");
    let store = weir_store::Sqlite::open_with(Some(&dir.path().join("conc.db")), true)
        .await
        .expect("sqlite");
    let before = weir_store::Sqlite::commits();
    concurrent(
        "concurrency_durable",
        engine(Arc::new(store), latency),
        runs,
        n,
        latency,
    )
    .await;
    // Transactions, not writes: group commit puts the writes of many runs in one.
    let after = weir_store::Sqlite::commits();
    emit(
        "concurrency_durable",
        "synced_commits",
        (after.0 - before.0) as f64,
        "count",
    );
}

/// Starts `runs` runs of an `n`-node chain at once and waits for all of them; prints the wall
/// time beside the ideal (`n` model calls of `latency`, back to back).
async fn concurrent(bench: &str, e: Engine, runs: usize, n: usize, latency: Duration) {
    let e = Arc::new(e);
    let wf = chain(n);
    run(&e, &wf, json!({"last": ""})).await;
    // The last run's start: the `runs`-th call of the chain's first node from here.
    fakes::mark_call(runs);
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..runs {
        let (e, wf) = (e.clone(), wf.clone());
        set.spawn(async move {
            let s = run(&e, &wf, json!({"last": ""})).await.status;
            (s, t.elapsed())
        });
    }
    let mut done = Vec::with_capacity(runs);
    while let Some(r) = set.join_next().await {
        let (s, at) = r.expect("task");
        assert_eq!(s, RunStatus::Succeeded);
        done.push(at.as_secs_f64());
    }
    done.sort_by(f64::total_cmp);
    let dt = t.elapsed().as_secs_f64();
    let ideal = n as f64 * latency.as_secs_f64();
    emit(bench, "wall_time", dt, "s");
    emit(bench, "ideal_wall_time", ideal, "s");
    emit(bench, "overhead_over_ideal", dt - ideal, "s");
    // When the first run ended (the ideal plus the timers' rounding) and the median: the
    // wall time's excess is mostly the spread between them, the time it takes to create
    // all the runs and start their steps.
    emit(bench, "first_run_done", done[0], "s");
    emit(bench, "median_run_done", done[done.len() / 2], "s");
    // How long starting every run took: until the last of them began its first node's call.
    if let Some(at) = fakes::marked() {
        emit(bench, "last_run_started", (at - t).as_secs_f64(), "s");
    }
}

async fn bench_durable(which: &[(&str, bool)]) {
    let (n, r) = (20, runs_or(200));
    // The machine's fsync is measured between the timed runs, in batches interleaved with
    // them (`SLICES` slices of the runs, a batch before each and one after the last), and
    // weir's overhead above it is the difference of the two means: this VM's disk changes
    // its speed twofold within minutes, and a measurement before and after the runs put
    // as much drift into the difference as the difference itself.
    const SLICES: usize = 10;
    const BATCH: usize = 40;
    for &(name, full) in which {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = weir_store::Sqlite::open_with(Some(&dir.path().join("bench.db")), full)
            .await
            .expect("sqlite");
        let e = engine(Arc::new(store), Duration::ZERO);
        let mut probe = full.then(FsyncProbe::new);
        let commits_before = weir_store::Sqlite::commits();
        // WEIR_BENCH_INPUT: the runs' input as JSON instead of `{"last": ""}`; e.g. with a
        // key no node writes, as a real run's input has, to weigh snapshot patches.
        let input = std::env::var("WEIR_BENCH_INPUT").ok().map_or_else(
            || json!({"last": ""}),
            |v| serde_json::from_str(&v).expect("WEIR_BENCH_INPUT is JSON"),
        );
        let wf = chain(n);
        run(&e, &wf, input.clone()).await; // warm-up
        let mut batches = Vec::new();
        let mut dt = 0.0;
        for slice in 0..SLICES {
            if let Some(p) = probe.as_mut() {
                batches.push(p.commits(BATCH) / BATCH as f64 * 1e6);
            }
            let runs = r / SLICES + usize::from(slice < r % SLICES);
            let t = Instant::now();
            for _ in 0..runs {
                run(&e, &wf, input.clone()).await;
            }
            dt += t.elapsed().as_secs_f64();
        }
        if let Some(p) = probe.as_mut() {
            batches.push(p.commits(BATCH) / BATCH as f64 * 1e6);
        }
        let commits_after = weir_store::Sqlite::commits();
        let per_node = dt / (r * n) as f64 * 1e6;
        emit(name, "per_node_overhead", per_node, "us");
        if !batches.is_empty() {
            let f = batches.iter().sum::<f64>() / batches.len() as f64;
            emit("durable", "machine_fsync_commit", f, "us");
            let (lo, hi) = batches
                .iter()
                .fold((f64::MAX, 0.0f64), |(lo, hi), b| (lo.min(*b), hi.max(*b)));
            emit("durable", "machine_fsync_commit_slowest_batch", hi, "us");
            emit("durable", "machine_fsync_commit_fastest_batch", lo, "us");
            // What weir adds to the one durable commit each node makes.
            emit(name, "overhead_above_fsync", per_node - f, "us");
        }
        emit(name, "runs_per_sec", r as f64 / dt, "runs/s");
        // Counted by the store (the warm-up run too): the run row, one per finished step
        // (with its snapshot), the last step with the final status. A step's start rides
        // with the commit of the step before it; the first one's is committed without a sync
        // (it only makes progress visible).
        let runs = (r + 1) as f64;
        emit(
            name,
            "synced_commits_per_run",
            (commits_after.0 - commits_before.0) as f64 / runs,
            "count",
        );
        emit(
            name,
            "unsynced_commits_per_run",
            (commits_after.1 - commits_before.1) as f64 / runs,
            "count",
        );
    }
}

/// The durable chain with a growing state, as real agent chains have it: every node keeps its
/// own 1 KB reply in state (under its id) instead of overwriting one key, so the whole
/// snapshot grows by a reply per step (DESIGN §8's snapshot patches write each reply once).
/// `synchronous=NORMAL`: the work per write, not the disk's fsync.
async fn bench_durable_state() {
    let (n, r) = (20, runs_or(100));
    let nodes: Vec<Value> = (0..n)
        .map(|i| json!({"id": format!("n{i}"), "type": "agent", "config": {"model": "fake", "user_message": format!("node {i}")}}))
        .collect();
    let edges: Vec<Value> = (1..n)
        .map(|i| json!({"source": format!("n{}", i - 1), "target": format!("n{i}")}))
        .collect();
    let wf = load(&json!({"name": "growing", "nodes": nodes, "edges": edges}).to_string());
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bench.db");
    let store = weir_store::Sqlite::open_with(Some(&path), false)
        .await
        .expect("sqlite");
    let e = engine_with(Arc::new(store), Duration::ZERO, 1024);
    let dt = timed(&e, &wf, r, json!({})).await;
    emit(
        "durable_state",
        "per_node_overhead",
        dt / (r * n) as f64 * 1e6,
        "us",
    );
    drop(e);
    // What the runs occupy: the database's pages in use once the WAL is checkpointed.
    let db = rusqlite::Connection::open(&path).expect("open");
    db.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
    let used: i64 = db
        .query_row(
            "SELECT (page_count - freelist_count) * page_size
             FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()",
            [],
            |row| row.get(0),
        )
        .expect("size");
    emit(
        "durable_state",
        "db_bytes_per_run",
        used as f64 / (r + 1) as f64,
        "bytes",
    );
}

/// A long durable run: 400 agent nodes whose ids differ in length, each keeping its 64-byte
/// reply in state under its id, `synchronous=NORMAL`. What a step commit costs and writes
/// should not grow with the steps before it (snapshot patches carry what changed; the whole
/// snapshot is written at an interval that grows with the run), so the time and the bytes
/// written per node are those of a short run. Bytes: what the process passed to `write`
/// and `pwrite` (`wchar` of `/proc/self/io`), the write-ahead log and its checkpoints.
async fn bench_durable_long() {
    let (n, r) = (400, runs_or(3));
    let ids: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "{}_{i}",
                ["a", "draft", "review_text", "x", "summarize"][i % 5]
            )
        })
        .collect();
    let nodes: Vec<Value> = ids
        .iter()
        .map(|id| json!({"id": id, "type": "agent", "config": {"model": "fake", "user_message": "go"}}))
        .collect();
    let edges: Vec<Value> = ids
        .windows(2)
        .map(|w| json!({"source": w[0], "target": w[1]}))
        .collect();
    let wf = load(&json!({"name": "long", "nodes": nodes, "edges": edges}).to_string());
    let dir = tempfile::tempdir().expect("temp dir");
    let store = weir_store::Sqlite::open_with(Some(&dir.path().join("long.db")), false)
        .await
        .expect("sqlite");
    let e = engine_with(Arc::new(store), Duration::ZERO, 64);
    run(&e, &wf, json!({})).await;
    let written = || status_of("/proc/self/io", "wchar:");
    let before = written();
    let t = Instant::now();
    for _ in 0..r {
        run(&e, &wf, json!({})).await;
    }
    let dt = t.elapsed().as_secs_f64();
    let nodes = (r * n) as f64;
    emit("durable_long", "per_node_overhead", dt / nodes * 1e6, "us");
    emit(
        "durable_long",
        "bytes_written_per_node",
        (written() - before) / nodes,
        "bytes",
    );
}

/// 10,000 runs parked at a human gate: what they cost in memory and on disk.
async fn bench_paused() {
    let runs = 10_000;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("paused.db");
    let store = weir_store::Sqlite::open(Some(&path)).await.expect("sqlite");
    let e = Arc::new(engine(Arc::new(store), Duration::ZERO));
    let wf = load(&json!({"name": "paused", "nodes": [
        {"id": "draft", "type": "agent", "config": {"model": "fake", "user_message": "draft for {who}"}},
        {"id": "review", "type": "human_gate", "config": {"prompt": "approve {draft}?"}}],
      "edges": [{"source": "draft", "target": "review"}]}).to_string());
    let before = status_kib("VmRSS:");
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..runs {
        let (e, wf) = (e.clone(), wf.clone());
        set.spawn(async move { run(&e, &wf, json!({"who": i})).await.status });
        if set.len() >= 64 {
            assert_eq!(
                set.join_next().await.expect("task").expect("run"),
                RunStatus::Paused
            );
        }
    }
    while let Some(s) = set.join_next().await {
        assert_eq!(s.expect("run"), RunStatus::Paused);
    }
    let dt = t.elapsed().as_secs_f64();
    let db: u64 = ["paused.db", "paused.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.path().join(f)).ok())
        .map(|m| m.len())
        .sum();
    emit("paused", "runs", f64::from(runs), "count");
    emit("paused", "create_wall_time", dt, "s");
    emit("paused", "rss_after", status_kib("VmRSS:") / 1024.0, "MiB");
    emit("paused", "rss_before", before / 1024.0, "MiB");
    emit(
        "paused",
        "db_bytes_per_run",
        db as f64 / f64::from(runs),
        "bytes",
    );
}

/// What a follower of a long run pays per read of its new events (the SSE stream reads the
/// log after every write of the run it follows): one durable run of a 2,000-node chain with
/// 1 KB replies on SQLite, then `events_after` of its last event but one, timed over 200
/// reads, and once from the start (a first read, which reads every step row). Named only:
/// `weir-bench follow` (`WEIR_BENCH_FOLLOW_NODES=N` for another length).
async fn bench_follow() {
    // WEIR_BENCH_FOLLOW_NODES=N: a chain of N nodes instead.
    let n: usize = std::env::var("WEIR_BENCH_FOLLOW_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(
        weir_store::Sqlite::open_with(Some(&dir.path().join("follow.db")), false)
            .await
            .expect("sqlite"),
    );
    let e = engine_with(store.clone(), Duration::ZERO, 1024);
    // Past the default hop ceiling of 1,000 node executions.
    let mut doc = chain_doc(n);
    doc["hop_ceiling"] = json!(n + 1);
    let wf = load(&doc.to_string());
    let id = run(&e, &wf, json!({"last": ""})).await.run_id;
    let from_start = Instant::now();
    let all = store.events_after(&id, 0).await.expect("events");
    emit(
        "follow",
        "first_read",
        from_start.elapsed().as_secs_f64() * 1e6,
        "us",
    );
    let last = all.last().expect("events").seq;
    let reads = 200;
    let t = Instant::now();
    for _ in 0..reads {
        let new = store.events_after(&id, last - 1).await.expect("events");
        assert_eq!(new.len(), 1);
    }
    emit(
        "follow",
        "read_of_new_events",
        t.elapsed().as_secs_f64() / f64::from(reads) * 1e6,
        "us",
    );
    emit("follow", "events", all.len() as f64, "count");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let want = |b: &str| args.is_empty() || args.iter().any(|a| a == b);
    // The multi-threaded runtime the `weir` binary uses; WEIR_BENCH_RUNTIME=current_thread for one thread.
    let rt = if std::env::var("WEIR_BENCH_RUNTIME").as_deref() == Ok("current_thread") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    }
    .expect("runtime");
    let t0 = Instant::now();
    rt.block_on(async {
        println!("{}", json!({"bench": "env", "metric": "cpu_count", "value": std::thread::available_parallelism().map_or(1, std::num::NonZero::get), "unit": ""}));
        if want("chain") { bench_chain().await; }
        if want("fanout") { bench_fanout().await; }
        if want("loop") { bench_loop().await; }
        if want("concurrency") { bench_concurrency().await; }
        if want("concurrency_durable") { bench_concurrency_durable().await; }
        if want("durable") { bench_durable(&[("durable", true), ("durable_normal", false)]).await; }
        else if args.iter().any(|a| a == "durable_normal") { bench_durable(&[("durable_normal", false)]).await; }
        if want("durable_state") { bench_durable_state().await; }
        if want("durable_long") { bench_durable_long().await; }
        if want("paused") { bench_paused().await; }
        if want("react") { agents::bench_react().await; }
        if want("api") { server::bench_api().await; }
        if args.iter().any(|a| a == "pg") { pg::bench_pg().await; }
        if args.iter().any(|a| a == "follow") { bench_follow().await; }
        if args.iter().any(|a| a == "launch") { bench_launch().await; }
    });
    emit("env", "total_runtime", t0.elapsed().as_secs_f64(), "s");
}
