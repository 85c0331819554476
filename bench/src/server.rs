//! `api`: the server end to end on loopback (DESIGN §10, issue "weir serve"): runs of a
//! 5-node `mock` workflow created over the HTTP API and finished by 4 in-process workers on
//! SQLite; the time from creation to the first step's start with idle workers; and
//! authenticated `GET /api/runs/{id}` requests per second. A bounded load client (a fixed
//! number of connections in flight) on the same machine drives it.

use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_core::RunReads;

use serde_json::{Value, json};
use weir_core::catalog::Catalog;
use weir_core::record::RunStatus;
use weir_core::settings::Settings;
use weir_server::auth::{Scope, mint};
use weir_server::{App, Options, Services};

use crate::emit;

const CONNECTIONS: usize = 32;

fn workflow() -> Value {
    let nodes: Vec<Value> = (0..5)
        .map(|i| json!({"id": format!("n{i}"), "type": "agent",
                        "config": {"model": "mock", "user_message": format!("step {i}: {{topic}}"), "output_key": format!("o{i}")}}))
        .collect();
    let edges: Vec<Value> = (1..5)
        .map(|i| json!({"id": format!("e{i}"), "source": format!("n{}", i - 1), "target": format!("n{i}")}))
        .collect();
    json!({"name": "api bench", "nodes": nodes, "edges": edges})
}

/// Milliseconds into the day of the store's `YYYY-MM-DDTHH:MM:SS.mmmZ` timestamps.
fn millis(at: &str) -> f64 {
    let n =
        |r: std::ops::Range<usize>| at.get(r).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    // Within one benchmark all timestamps share the date: hours, minutes, seconds, millis.
    ((n(11..13) * 60.0 + n(14..16)) * 60.0 + n(17..19)) * 1000.0 + n(20..23)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The `mock` model of weir's own router (as `weir serve` has it); no tools, no scripts.
struct MockModels;

impl weir_runtime::Implementations for MockModels {
    fn build(&self, settings: &Settings) -> Result<weir_runtime::Parts, String> {
        let models = Arc::new(weir_providers::Router::new(settings.clone())?);
        Ok(weir_runtime::Parts {
            models: models.clone(),
            tools: Arc::new(crate::fakes::NoTools),
            scripts: Arc::new(crate::fakes::NoScripts),
            check_models: models,
            check_tools: Arc::new(crate::fakes::NoTools),
        })
    }

    fn known_models(&self) -> Vec<String> {
        Vec::new()
    }
}

pub async fn bench_api() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(
        weir_store::Sqlite::open(Some(&dir.path().join("weir.db")))
            .await
            .expect("store"),
    );
    let services = Services {
        store: store.clone(),
        catalog: store.clone(),
        settings: Settings::default(),
        implementations: Arc::new(MockModels),
    };
    let app = App::new(
        services,
        Options {
            workers: 4,
            ..Options::default()
        },
        1 << 20,
    )
    .await
    .expect("app");
    let (row, token) = mint("bench", Scope::Admin).expect("token");
    store.create_token(&row).await.expect("token stored");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(weir_server::serve(app.clone(), listener, async move {
        let _ = stop_rx.await;
    }));
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(CONNECTIONS)
        .build()
        .expect("client");
    let auth = format!("Bearer {token}");
    let put = http
        .put(format!("{base}/api/workflows/bench"))
        .header("authorization", &auth)
        .json(&workflow())
        .send()
        .await
        .expect("save workflow");
    assert_eq!(put.status().as_u16(), 200);

    // Throughput: N runs created by CONNECTIONS clients, until every one has succeeded.
    let n: usize = std::env::var("WEIR_BENCH_API_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let start = Instant::now();
    let created = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (http, base, auth, created) =
                (http.clone(), base.clone(), auth.clone(), created.clone());
            tokio::spawn(async move {
                while created.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                    let r = http
                        .post(format!("{base}/api/workflows/bench/runs"))
                        .header("authorization", &auth)
                        .json(&json!({"input": {"topic": "weir"}}))
                        .send()
                        .await
                        .expect("create run");
                    assert_eq!(r.status().as_u16(), 202);
                }
            })
        })
        .collect();
    for c in clients {
        c.await.expect("client");
    }
    let create_s = start.elapsed().as_secs_f64();
    loop {
        let counts = store.count_by_status().await.expect("counts");
        let done = counts
            .iter()
            .find(|(s, _)| *s == RunStatus::Succeeded)
            .map_or(0, |c| c.1);
        let failed: u64 = counts
            .iter()
            .filter(|(s, _)| matches!(s, RunStatus::Failed | RunStatus::Cancelled))
            .map(|c| c.1)
            .sum();
        assert_eq!(failed, 0, "runs failed: {counts:?}");
        if done as usize >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let total_s = start.elapsed().as_secs_f64();
    emit("api", "runs_per_s_end_to_end", n as f64 / total_s, "runs/s");
    let size = |name: &str| {
        std::fs::metadata(dir.path().join(name))
            .map_or(0.0, |m| m.len() as f64 / f64::from(1 << 20))
    };
    emit("api", "db_mib", size("weir.db"), "MiB");
    emit("api", "wal_mib", size("weir.db-wal"), "MiB");
    emit("api", "creates_per_s", n as f64 / create_s, "req/s");

    // Latency with idle workers: one run at a time, from `run_created` to the first
    // `step_started` in the run's own event log.
    let mut waits = Vec::new();
    let mut to_claim = Vec::new();
    for _ in 0..200 {
        let r: Value = http
            .post(format!("{base}/api/workflows/bench/runs"))
            .header("authorization", &auth)
            .json(&json!({"input": {"topic": "weir"}}))
            .send()
            .await
            .expect("create")
            .json()
            .await
            .expect("json");
        let id = r["run_id"].as_str().expect("run id").to_string();
        let record = loop {
            let rec: Value = http
                .get(format!("{base}/api/runs/{id}"))
                .header("authorization", &auth)
                .send()
                .await
                .expect("get")
                .json()
                .await
                .expect("json");
            if rec["status"] == "succeeded" {
                break rec;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let events = record["events"].as_array().expect("events");
        let at = |t: &str| {
            events
                .iter()
                .find(|e| e["type"] == t)
                .and_then(|e| e["at"].as_str())
                .map(millis)
                .expect("event")
        };
        waits.push(at("step_started") - at("run_created"));
        to_claim.push(at("run_started") - at("run_created"));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    waits.sort_by(f64::total_cmp);
    to_claim.sort_by(f64::total_cmp);
    emit(
        "api",
        "create_to_claim_p50",
        percentile(&to_claim, 0.5),
        "ms",
    );
    emit(
        "api",
        "create_to_first_step_p50",
        percentile(&waits, 0.5),
        "ms",
    );
    emit(
        "api",
        "create_to_first_step_p99",
        percentile(&waits, 0.99),
        "ms",
    );

    // Reads: CONNECTIONS clients on one run's record for 3 s.
    let run_id = store
        .list_runs(&weir_core::store::RunFilter {
            limit: 1,
            ..Default::default()
        })
        .await
        .expect("runs")[0]
        .run_id
        .clone();
    let until = Instant::now() + Duration::from_secs(3);
    let readers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (http, base, auth, id) = (http.clone(), base.clone(), auth.clone(), run_id.clone());
            tokio::spawn(async move {
                let mut count = 0u64;
                while Instant::now() < until {
                    let r = http
                        .get(format!("{base}/api/runs/{id}"))
                        .header("authorization", &auth)
                        .send()
                        .await
                        .expect("get");
                    assert_eq!(r.status().as_u16(), 200);
                    r.bytes().await.expect("body");
                    count += 1;
                }
                count
            })
        })
        .collect();
    let mut reads = 0;
    for r in readers {
        reads += r.await.expect("reader");
    }
    emit("api", "get_run_per_s", reads as f64 / 3.0, "req/s");
    let _ = stop_tx.send(());
    let _ = server.await;
}
