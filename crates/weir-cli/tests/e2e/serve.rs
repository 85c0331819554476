//! `weir serve` through the real binary and a real HTTP client: the first start (token and
//! examples), runs over the API, SSE with many subscribers and `Last-Event-ID`, a SIGKILL
//! in the middle of 20 runs, and a graceful SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Fake, Reply, Weir};

pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) url: String,
    output: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `weir serve` on a free port and waits until it listens.
    pub(crate) fn start(w: &Weir, extra: &[&str]) -> Self {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut child = w.spawn(&args);
        let stdout = child.stdout.take().unwrap();
        let output = Arc::new(Mutex::new(Vec::new()));
        let out2 = output.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
                }
                out2.lock().unwrap().push(line);
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("weir serve prints the address it listens on");
        // The token lines follow the address line.
        std::thread::sleep(Duration::from_millis(100));
        Self { child, url, output }
    }

    pub(crate) fn first_token(&self) -> Option<String> {
        self.output
            .lock()
            .unwrap()
            .iter()
            .find_map(|l| l.trim().strip_prefix("weir_").map(|t| format!("weir_{t}")))
    }

    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(crate) fn terminate(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "weir serve did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    pub(crate) fn new(server: &Server, token: &str) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            http: reqwest::Client::new(),
            base: server.url.clone(),
            token: token.to_string(),
        }
    }

    pub(crate) async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// `/metrics`, as text.
    pub(crate) async fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub(crate) async fn get(&self, path: &str) -> Value {
        self.send(reqwest::Method::GET, path, None).await.1
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    pub(crate) async fn wait_for(&self, run: &str, done: impl Fn(&str) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let r = self.get(&format!("/api/runs/{run}")).await;
            if done(r["status"].as_str().unwrap_or("")) {
                return r;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "run {run} stuck: {}",
                r["status"]
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Reads the run's SSE stream: `(id, type)` of every event, until the stream ends or
    /// `stop_after` events were read.
    pub(crate) async fn events(
        &self,
        run: &str,
        last: Option<u64>,
        stop_after: Option<usize>,
    ) -> Vec<(u64, String)> {
        let mut req = self
            .http
            .get(format!("{}/api/runs/{run}/events", self.base))
            .bearer_auth(&self.token);
        if let Some(l) = last {
            req = req.header("Last-Event-ID", l.to_string());
        }
        let mut resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let mut buf = String::new();
        let mut out = Vec::new();
        let (mut id, mut kind) = (None, None);
        while let Some(chunk) = resp.chunk().await.unwrap() {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(i) = buf.find('\n') {
                let line: String = buf.drain(..=i).collect();
                let line = line.trim_end();
                if let Some(v) = line.strip_prefix("id: ") {
                    id = v.parse().ok();
                } else if let Some(v) = line.strip_prefix("event: ") {
                    kind = Some(v.to_string());
                } else if line.is_empty()
                    && let (Some(i), Some(k)) = (id.take(), kind.take())
                {
                    out.push((i, k));
                    if stop_after == Some(out.len()) {
                        return out;
                    }
                }
            }
        }
        out
    }
}

/// Runs an async test body on its own runtime (the fake provider has another).
pub(crate) fn block<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn approval_input() -> Value {
    json!({"customer": "Ada", "amount": 250})
}

#[test]
fn first_start_seeds_examples_and_runs_follow_over_sse() {
    block(first_start());
}

async fn first_start() {
    let w = Weir::new();
    let server = Server::start(&w, &[]);
    let token = server
        .first_token()
        .expect("the first start prints an admin token");
    let api = Client::new(&server, &token);
    let listed = api.get("/api/workflows").await;
    let ids: Vec<&str> = listed["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    for id in [
        "data-enrichment-pipeline",
        "approval",
        "quality-loop",
        "early-exit",
    ] {
        assert!(ids.contains(&id), "{id} seeded: {ids:?}");
    }
    let dialects: std::collections::BTreeSet<&str> = listed["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["dialect"].as_str().unwrap())
        .collect();
    assert_eq!(dialects.len(), 3, "one of each dialect: {dialects:?}");
    // A run over the API pauses at its gate; SSE subscribers follow it to the end.
    let (status, created) = api
        .post(
            "/api/workflows/approval/runs",
            json!({"input": approval_input()}),
        )
        .await;
    assert_eq!(status, 202, "{created}");
    let run = created["run_id"].as_str().unwrap().to_string();
    api.wait_for(&run, |s| s == "paused").await;
    let subscribers: Vec<_> = (0..100)
        .map(|_| {
            let api = Client::new(&server, &token);
            let run = run.clone();
            tokio::spawn(async move { api.events(&run, None, None).await })
        })
        .collect();
    // A client that reads three events and drops the connection.
    let early = api.events(&run, None, Some(3)).await;
    assert_eq!(early.iter().map(|e| e.0).collect::<Vec<_>>(), [1, 2, 3]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, decided) = api
        .post(
            &format!("/api/runs/{run}/approve"),
            json!({"gate": "review", "input": {"note": "ok"}}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    let (status, _) = api
        .post(
            &format!("/api/runs/{run}/approve"),
            json!({"gate": "review"}),
        )
        .await;
    assert_eq!(status, 409, "a second decision conflicts");
    let record = api.wait_for(&run, |s| s == "succeeded").await;
    let log: Vec<(u64, String)> = record["events"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, e)| (i as u64 + 1, e["type"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(log.last().unwrap().1, "run_finished");
    for s in subscribers {
        let got = tokio::time::timeout(Duration::from_secs(30), s)
            .await
            .expect("every stream ends after the run's final event")
            .unwrap();
        assert_eq!(got, log, "every subscriber gets every event, in order");
    }
    // Reconnecting with Last-Event-ID gets exactly what was missed.
    let rest = api.events(&run, Some(3), None).await;
    let mut joined = early.clone();
    joined.extend(rest);
    assert_eq!(joined, log);
    // After the end, a new subscriber gets the whole log and the end; one resuming after
    // the final event gets nothing, and its stream ends too.
    assert_eq!(api.events(&run, None, None).await, log);
    let last = log.last().unwrap().0;
    let after_end =
        tokio::time::timeout(Duration::from_secs(10), api.events(&run, Some(last), None))
            .await
            .expect("a stream resumed after the final event ends");
    assert!(after_end.is_empty(), "{after_end:?}");
    // A bad token is refused; healthz needs none; metrics count the run.
    let bad = reqwest::Client::new()
        .get(format!("{}/api/runs", server.url))
        .bearer_auth(
            "weir_000000000000_0000000000000000000000000000000000000000000000000000000000000000",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 401);
    let health = reqwest::get(format!("{}/healthz", server.url))
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let metrics = api.metrics().await;
    assert!(
        metrics.contains("weir_runs{status=\"succeeded\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("weir_step_duration_seconds_count"),
        "{metrics}"
    );
    // A restarted server prints no new token and keeps the examples as they are.
    server.kill();
    let again = Server::start(&w, &[]);
    assert!(again.first_token().is_none());
    let api = Client::new(&again, &token);
    assert_eq!(
        api.get("/api/workflows").await["workflows"]
            .as_array()
            .unwrap()
            .len(),
        ids.len()
    );
}

/// A workflow of two model calls that name their run's number, so the fake provider can
/// count requests per run and node.
const TWO_CALLS: &str = r#"{"name": "Two Calls", "nodes": [
  {"id": "first", "type": "agent", "config": {"model": "gpt-4o", "user_message": "first {n}", "output_key": "a"}},
  {"id": "second", "type": "agent", "config": {"model": "gpt-4o", "user_message": "second {n}", "output_key": "b"}}],
  "edges": [{"id": "e1", "source": "first", "target": "second"}]}"#;

fn openai(text: &str) -> Reply {
    Reply::json(
        200,
        json!({"id": "c", "object": "chat.completion", "model": "gpt-4o",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 10, "completion_tokens": 5}}),
    )
}

#[test]
fn after_a_sigkill_a_restarted_server_finishes_every_run_without_repeating_a_step() {
    let fake = Fake::start();
    fake.always(
        "/v1/chat/completions",
        openai("done").delayed(Duration::from_millis(300)),
    );
    block(sigkill(&fake));
}

async fn sigkill(fake: &Fake) {
    let w = Weir::new()
        .env("OPENAI_BASE_URL", &format!("{}/v1", fake.url))
        .env("OPENAI_API_KEY", "sk-test");
    w.short_lease(1.5, 0.3);
    let server = Server::start(&w, &["--workers", "4"]);
    let token = server.first_token().unwrap();
    let api = Client::new(&server, &token);
    let (status, saved) = api
        .send(
            reqwest::Method::PUT,
            "/api/workflows/two-calls",
            Some(serde_json::from_str(TWO_CALLS).unwrap()),
        )
        .await;
    assert_eq!(status, 200, "{saved}");
    let mut runs = Vec::new();
    for n in 0..20 {
        let (status, r) = api
            .post(
                "/api/workflows/two-calls/runs",
                json!({"input": {"n": format!("run-{n:02}")}}),
            )
            .await;
        assert_eq!(status, 202, "{r}");
        runs.push(r["run_id"].as_str().unwrap().to_string());
    }
    // Kill it while runs are in flight.
    let start = Instant::now();
    while fake.seen("/v1/chat/completions").len() < 6 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the workers never called the model"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill();
    let again = Server::start(&w, &["--workers", "4"]);
    let api = Client::new(&again, &token);
    let mut takeovers = 0;
    for run in &runs {
        let record = api
            .wait_for(run, |s| !matches!(s, "queued" | "running"))
            .await;
        assert_eq!(record["status"], "succeeded", "{run}: {}", record["error"]);
        let n = record["input"]["n"].as_str().unwrap().to_string();
        for node in ["first", "second"] {
            let prompt = format!("{node} {n}");
            let requests = fake
                .seen("/v1/chat/completions")
                .iter()
                .filter(|s| s.body.contains(&prompt))
                .count();
            let steps: Vec<&Value> = record["steps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["node_id"] == node)
                .collect();
            let succeeded = steps.iter().filter(|s| s["status"] == "succeeded").count();
            assert_eq!(succeeded, 1, "{run} {node}: one completed step");
            // Every request is a recorded step: the completed one, plus one `cancelled`
            // step for each attempt the kill interrupted. A completed step never ran twice.
            assert!(
                (1..=steps.len()).contains(&requests),
                "{run} {node}: {requests} requests, steps {steps:?}"
            );
        }
        takeovers += record["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "run_resumed" && e.get("took_over_from").is_some())
            .count();
    }
    assert!(takeovers >= 1, "runs in flight at the kill were taken over");
}

#[test]
fn sigterm_lets_steps_finish_releases_runs_and_paused_runs_stay_paused() {
    let fake = Fake::start();
    fake.always(
        "/v1/chat/completions",
        openai("done").delayed(Duration::from_millis(500)),
    );
    block(sigterm(&fake));
}

async fn sigterm(fake: &Fake) {
    let w = Weir::new()
        .env("OPENAI_BASE_URL", &format!("{}/v1", fake.url))
        .env("OPENAI_API_KEY", "sk-test");
    let server = Server::start(&w, &["--workers", "2", "--grace", "5"]);
    let token = server.first_token().unwrap();
    let api = Client::new(&server, &token);
    api.send(
        reqwest::Method::PUT,
        "/api/workflows/two-calls",
        Some(serde_json::from_str(TWO_CALLS).unwrap()),
    )
    .await;
    let (_, paused) = api
        .post(
            "/api/workflows/approval/runs",
            json!({"input": approval_input()}),
        )
        .await;
    let paused = paused["run_id"].as_str().unwrap().to_string();
    api.wait_for(&paused, |s| s == "paused").await;
    let (_, busy) = api
        .post(
            "/api/workflows/two-calls/runs",
            json!({"input": {"n": "busy"}}),
        )
        .await;
    let busy = busy["run_id"].as_str().unwrap().to_string();
    let start = Instant::now();
    while fake.seen("/v1/chat/completions").is_empty() {
        assert!(start.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A client following the paused run does not hold the shutdown up.
    let follower = {
        let api = Client::new(&server, &token);
        let paused = paused.clone();
        tokio::spawn(async move { api.events(&paused, None, None).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let status = server.terminate();
    let followed = follower.await.unwrap();
    assert_eq!(
        followed.last().map(|e| e.1.as_str()),
        Some("run_paused"),
        "{followed:?}"
    );
    assert!(
        status.success(),
        "weir serve exits 0 on SIGTERM: {status:?}"
    );
    // The step in flight finished (one request, one succeeded step); the run was released.
    let shown = w.show(&busy);
    assert_eq!(shown["status"], "queued", "{shown}");
    assert_eq!(shown["steps"][0]["status"], "succeeded", "{shown}");
    assert_eq!(fake.seen("/v1/chat/completions").len(), 1);
    assert_eq!(w.show(&paused)["status"], "paused");
    // The next server finishes it; the paused run stays paused.
    let again = Server::start(&w, &[]);
    let api = Client::new(&again, &token);
    let done = api.wait_for(&busy, |s| s == "succeeded").await;
    assert_eq!(done["steps"].as_array().unwrap().len(), 2);
    assert_eq!(fake.seen("/v1/chat/completions").len(), 2);
    assert_eq!(
        api.get(&format!("/api/runs/{paused}")).await["status"],
        "paused"
    );
}

#[test]
fn tokens_are_made_listed_and_revoked_from_the_cli() {
    let w = Weir::new();
    let made = w.run(&["tokens", "create", "--scope", "run", "--name", "ci"]);
    assert_eq!(made.code, 0, "{}", made.stderr);
    let token = made.stdout.trim().to_string();
    assert!(token.starts_with("weir_") && token.len() == 82, "{token}");
    let listed = w.run(&["tokens", "list", "--json"]);
    let rows: Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(rows[0]["scope"], "run");
    assert!(
        !listed.stdout.contains(&token[18..]),
        "a listing never shows a token"
    );
    let id = rows[0]["id"].as_str().unwrap();
    assert_eq!(w.run(&["tokens", "revoke", id]).code, 0);
    let listed = w.run(&["tokens", "list"]);
    let lines: Vec<&str> = listed.stdout.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].ends_with("REVOKED"),
        "a header row: {}",
        listed.stdout
    );
    let row = lines
        .iter()
        .find(|l| l.starts_with(id))
        .expect("the token's row");
    assert!(!row.ends_with('—'), "revoked, with when: {row}");
    let bad = w.run(&["tokens", "create", "--scope", "root", "--name", "x"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}

#[test]
fn a_serve_without_workers_enqueues_and_a_weir_worker_drives() {
    block(serve_and_worker());
}

async fn serve_and_worker() {
    let w = Weir::new();
    let server = Server::start(&w, &["--workers", "0"]);
    let token = server.first_token().unwrap();
    let api = Client::new(&server, &token);
    let (status, created) = api
        .post(
            "/api/workflows/support-triage/runs",
            json!({"input": {"customer": "Ada", "ticket": "refund please"}}),
        )
        .await;
    assert_eq!(status, 202, "{created}");
    let run = created["run_id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        api.get(&format!("/api/runs/{run}")).await["status"],
        "queued",
        "no worker drives it"
    );
    let mut worker = w.spawn(&["worker", "--concurrency", "2", "--name", "worker-one"]);
    let record = api.wait_for(&run, |s| s == "succeeded").await;
    let started = record["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "run_started")
        .cloned()
        .unwrap();
    assert_eq!(started["owner"], "worker-one", "{started}");
    let pid = nix::unistd::Pid::from_raw(worker.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = worker.wait().unwrap();
    assert!(
        status.success(),
        "weir worker exits 0 on SIGTERM: {status:?}"
    );
}

/// One `http_request` node calling `url`.
fn fetch(url: &str) -> Value {
    json!({"name": "Fetch", "nodes": [{"id": "get", "type": "tool",
           "config": {"tool_name": "http_request", "params": {"url": url}, "output_key": "got"}}], "edges": []})
}

#[test]
fn the_server_reaches_only_what_network_allow_permits_and_weir_run_reaches_anything() {
    let allowed = Fake::start();
    allowed.always("/data", Reply::text(200, "allowed data"));
    let other = Fake::start();
    other.always("/data", Reply::text(200, "internal data"));
    block(network_policy(&allowed, &other));
}

async fn network_policy(allowed: &Fake, other: &Fake) {
    let w = Weir::new();
    let port = allowed.url.rsplit(':').next().unwrap().to_string();
    w.file(
        "weir.toml",
        &format!("[network]\nallow = [\"127.0.0.1:{port}\"]\n"),
    );
    let server = Server::start(&w, &[]);
    let token = server.first_token().unwrap();
    let api = Client::new(&server, &token);
    for (id, url) in [
        ("ok", format!("{}/data", allowed.url)),
        ("internal", format!("{}/data", other.url)),
    ] {
        let (status, saved) = api
            .send(
                reqwest::Method::PUT,
                &format!("/api/workflows/{id}"),
                Some(fetch(&url)),
            )
            .await;
        assert_eq!(status, 200, "{saved}");
    }
    let (_, ok) = api.post("/api/workflows/ok/runs", json!({})).await;
    let ok = api
        .wait_for(ok["run_id"].as_str().unwrap(), |s| {
            s == "succeeded" || s == "failed"
        })
        .await;
    assert_eq!(ok["status"], "succeeded", "{}", ok["error"]);
    assert_eq!(ok["state"]["got"]["body"], "allowed data");
    let (_, bad) = api.post("/api/workflows/internal/runs", json!({})).await;
    let bad = api
        .wait_for(bad["run_id"].as_str().unwrap(), |s| {
            s == "succeeded" || s == "failed"
        })
        .await;
    assert_eq!(bad["status"], "failed");
    let error = bad["steps"][0]["error"].as_str().unwrap();
    assert!(
        error.contains("network policy") && error.contains("[network] allow"),
        "{error}"
    );
    assert_eq!(
        bad["steps"][0]["attempts"].as_array().unwrap().len(),
        1,
        "a refusal is not retried"
    );
    assert!(
        other.seen("/data").is_empty(),
        "the refused server was never reached"
    );
    // `weir run` of the same workflow: the user's own file, the user's own privileges.
    let file = w.file(
        "internal.json",
        &fetch(&format!("{}/data", other.url)).to_string(),
    );
    let ran = w.run(&["run", &file, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(ran.json()["state"]["got"]["body"], "internal data");
}

#[test]
fn runs_prune_deletes_ended_runs_and_keeps_paused_ones() {
    let w = Weir::new();
    let paused = w.run_approval("Ada", 250);
    assert_eq!(paused.code, 3, "{}", paused.stderr);
    let done = w.run_approval("Bo", 5);
    assert_eq!(done.code, 0, "{}", done.stderr);
    let done_id = done.json()["run_id"].as_str().unwrap().to_string();
    let kept = w.run(&["runs", "prune", "--older-than", "1h", "--json"]);
    assert_eq!(kept.code, 0, "{}", kept.stderr);
    assert_eq!(
        serde_json::from_str::<Value>(&kept.stdout).unwrap()["pruned"],
        0
    );
    std::thread::sleep(Duration::from_millis(1100));
    let pruned = w.run(&["runs", "prune", "--older-than", "1s", "--json"]);
    let out: Value = serde_json::from_str(&pruned.stdout).unwrap();
    assert_eq!(out["run_ids"], json!([done_id]), "{out}");
    assert_eq!(
        w.run(&["runs", "show", &done_id]).code,
        2,
        "a pruned run is gone"
    );
    assert_eq!(w.run_ids().len(), 1, "the paused run stays");
    let bad = w.run(&["runs", "prune", "--older-than", "soon"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    let bad = w.run(&["runs", "prune", "--older-than", "1d", "--status", "paused"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("never pruned"), "{}", bad.stderr);
}

#[test]
fn the_server_prunes_on_its_retention_schedule() {
    block(retention_schedule());
}

async fn retention_schedule() {
    let w = Weir::new();
    w.file(
        "weir.toml",
        "[retention]\nolder_than = \"1s\"\nevery = \"1s\"\n",
    );
    let server = Server::start(&w, &[]);
    let token = server.first_token().unwrap();
    let api = Client::new(&server, &token);
    let (_, done) = api
        .post(
            "/api/workflows/approval/runs",
            json!({"input": {"customer": "Bo", "amount": 5}}),
        )
        .await;
    let done = done["run_id"].as_str().unwrap().to_string();
    api.wait_for(&done, |s| s == "succeeded").await;
    let (_, paused) = api
        .post(
            "/api/workflows/approval/runs",
            json!({"input": {"customer": "Ada", "amount": 250}}),
        )
        .await;
    let paused = paused["run_id"].as_str().unwrap().to_string();
    api.wait_for(&paused, |s| s == "paused").await;
    let start = Instant::now();
    loop {
        let (status, _) = api
            .send(reqwest::Method::GET, &format!("/api/runs/{done}"), None)
            .await;
        if status == 404 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the ended run was never pruned"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        api.get(&format!("/api/runs/{paused}")).await["status"],
        "paused"
    );
}

#[test]
fn budgets_over_the_api_pause_for_a_raise_or_fail_and_metrics_count_them() {
    block(budgets_over_the_api());
}

async fn budgets_over_the_api() {
    let w = Weir::new();
    let server = Server::start(&w, &[]);
    let token = server.first_token().unwrap();
    let api = Client::new(&server, &token);
    let flow = |on: &str| {
        json!({"name": format!("capped-{on}"), "budget": {"model_calls": 0, "on_exceeded": on},
               "nodes": [{"id": "ask", "type": "agent", "config": {"model": "mock", "user_message": "hello"}}],
               "edges": []})
    };
    for on in ["pause", "fail"] {
        let (status, saved) = api
            .send(
                reqwest::Method::PUT,
                &format!("/api/workflows/capped-{on}"),
                Some(flow(on)),
            )
            .await;
        assert_eq!(status, 200, "{saved}");
    }
    let (_, paused) = api
        .post("/api/workflows/capped-pause/runs", json!({"input": {}}))
        .await;
    let run = paused["run_id"].as_str().unwrap().to_string();
    let record = api.wait_for(&run, |s| s == "paused").await;
    assert_eq!(record["pending_gate"]["kind"], "budget", "{record}");
    assert_eq!(record["pending_gate"]["detail"]["limit"], "model_calls");
    let (status, refused) = api
        .post(
            &format!("/api/runs/{run}/approve"),
            json!({"gate": "ask", "input": {"raise": {}}}),
        )
        .await;
    assert_eq!(status, 422, "a raise of nothing: {refused}");
    let (status, decided) = api
        .post(
            &format!("/api/runs/{run}/approve"),
            json!({"gate": "ask", "input": {"raise": {"model_calls": 1}}}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    api.wait_for(&run, |s| s == "succeeded").await;
    let (_, failed) = api
        .post("/api/workflows/capped-fail/runs", json!({"input": {}}))
        .await;
    let run = failed["run_id"].as_str().unwrap().to_string();
    let record = api.wait_for(&run, |s| s == "failed").await;
    assert_eq!(record["error"]["code"], "budget_exceeded");
    let metrics = api.metrics().await;
    assert!(
        metrics.contains("weir_budget_stops_total{on_exceeded=\"fail\"} 1")
            && metrics.contains("weir_budget_stops_total{on_exceeded=\"pause\"} 1"),
        "{metrics}"
    );
}
