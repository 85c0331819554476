//! Scale-out on Postgres through the real binaries (DESIGN §8): `weir serve` replicas and
//! `weir worker` processes sharing one database; SIGKILLed workers; zombie workers woken
//! after their leases expired; a Postgres restart under load. Each test makes a database of
//! its own (or, for the restart, a Postgres server of its own) and drops it. Without a
//! Postgres server the tests say so loudly and pass, unless `WEIR_REQUIRE_POSTGRES=1`.

use std::collections::HashMap;
use std::process::Child;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use weir_store::testdb::TestDb;

use crate::serve::{Client, Server, block};
use crate::support::{Fake, Reply, Weir, wait_until};

/// A workflow of `n` `http_request` steps, each calling the fake at `/step/{i}`.
fn chain(fake: &Fake, n: usize) -> Value {
    let nodes: Vec<Value> = (1..=n)
        .map(|i| {
            json!({"id": format!("s{i}"), "type": "tool", "config": {
                "tool_name": "http_request",
                "params": {"url": format!("{}/step/{i}", fake.url), "method": "POST",
                           "body": {"n": "{n}"}},
                "output_key": format!("r{i}")}})
        })
        .collect();
    let edges: Vec<Value> = (1..n)
        .map(|i| json!({"id": format!("e{i}"), "source": format!("s{i}"), "target": format!("s{}", i + 1)}))
        .collect();
    json!({"name": "Chain", "nodes": nodes, "edges": edges})
}

/// A scratch workspace on the database `url`, allowed to call the fake, with short leases.
fn workspace(fake: &Fake, url: &str, ttl: f64, heartbeat: f64) -> Weir {
    let w = Weir::new().env("WEIR_DB", url);
    let port = fake.url.rsplit(':').next().unwrap().to_string();
    w.file(
        "weir.toml",
        &format!("[network]\nallow = [\"127.0.0.1:{port}\"]\n"),
    );
    w.short_lease(ttl, heartbeat);
    w
}

fn fake_steps(n: usize, delay: Duration) -> Fake {
    let fake = Fake::start();
    for i in 1..=n {
        fake.always(
            &format!("/step/{i}"),
            Reply::json(200, json!({"ok": i})).delayed(delay),
        );
    }
    fake
}

/// A `weir serve --workers 0` on the workspace, an admin client, and `workflow` saved as `id`.
async fn serve_saving(w: &Weir, id: &str, workflow: Value) -> (Server, Client) {
    let server = Server::start(w, &["--workers", "0"]);
    let token = server
        .first_token()
        .expect("the first start makes an admin token");
    let api = Client::new(&server, &token);
    let (status, saved) = api
        .send(
            reqwest::Method::PUT,
            &format!("/api/workflows/{id}"),
            Some(workflow),
        )
        .await;
    assert_eq!(status, 200, "{saved}");
    (server, api)
}

fn worker(w: &Weir, name: &str) -> Child {
    worker_of(w, name, 8)
}

fn worker_of(w: &Weir, name: &str, concurrency: usize) -> Child {
    w.spawn(&[
        "worker",
        "--concurrency",
        &concurrency.to_string(),
        "--name",
        name,
    ])
}

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig);
}

async fn create_runs(api: &Client, workflow: &str, n: usize) -> Vec<String> {
    let mut runs = Vec::with_capacity(n);
    for k in 0..n {
        let (status, r) = api
            .post(
                &format!("/api/workflows/{workflow}/runs"),
                json!({"input": {"n": format!("run-{k}")}}),
            )
            .await;
        assert_eq!(status, 202, "{r}");
        runs.push(r["run_id"].as_str().unwrap().to_string());
    }
    runs
}

/// Waits until no run is queued or running (over the API), then returns every record.
async fn settle(api: &Client, runs: &[String], within: Duration) -> Vec<Value> {
    let start = Instant::now();
    let mut records = Vec::with_capacity(runs.len());
    for run in runs {
        loop {
            let r = api.get(&format!("/api/runs/{run}")).await;
            if matches!(
                r["status"].as_str(),
                Some("succeeded" | "failed" | "cancelled" | "aborted" | "paused")
            ) {
                records.push(r);
                break;
            }
            assert!(
                start.elapsed() < within,
                "run {run} did not finish: {}",
                r["status"]
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    records
}

/// The requests the fake saw, by idempotency key: `(arrived, replied)` in wall-clock time.
fn executions(
    fake: &Fake,
    steps: usize,
    delay: Duration,
) -> HashMap<String, Vec<(SystemTime, SystemTime)>> {
    // `Seen::at` is monotonic: map it onto the wall clock the run records use.
    let (now_i, now_s) = (Instant::now(), SystemTime::now());
    let mut by_key: HashMap<String, Vec<(SystemTime, SystemTime)>> = HashMap::new();
    for i in 1..=steps {
        for s in fake.seen(&format!("/step/{i}")) {
            let key = s
                .headers
                .get("idempotency-key")
                .cloned()
                .unwrap_or_default();
            let arrived = now_s - (now_i - s.at);
            by_key
                .entry(key)
                .or_default()
                .push((arrived, arrived + delay));
        }
    }
    by_key
}

fn rfc3339(s: &str) -> SystemTime {
    let t = chrono::DateTime::parse_from_rfc3339(s).unwrap();
    SystemTime::UNIX_EPOCH + Duration::from_millis(t.timestamp_millis() as u64)
}

/// Checks what a run record and the fake saw say together: every step of every run
/// succeeded once; no step was executed by two drivers at once (two requests with one
/// idempotency key in flight together); no request for a step arrived after that step was
/// committed. Both rules have one exception, a request that arrived just after a frozen
/// worker was let go on (`woken`): a worker stopped while it was sending a request finishes
/// sending it when it wakes, whatever happened meanwhile, be its successor's request for the
/// step in flight or done (it had checked its lease before it began; the request carries the
/// step's idempotency key for the service to see it twice). Returns how many takeovers the
/// timelines show.
fn check_exactly_once(
    records: &[Value],
    fake: &Fake,
    steps: usize,
    delay: Duration,
    woken: &[SystemTime],
) -> usize {
    let sent_before_a_freeze = |arrived: SystemTime| {
        woken.iter().any(|w| {
            arrived
                .duration_since(*w)
                .is_ok_and(|d| d < Duration::from_millis(100))
        })
    };
    let by_key = executions(fake, steps, delay);
    let mut takeovers = 0;
    for r in records {
        let run = r["run_id"].as_str().unwrap();
        assert_eq!(r["status"], "succeeded", "{run}: {}", r["error"]);
        for i in 1..=steps {
            let node = format!("s{i}");
            let done: Vec<&Value> = r["steps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["node_id"] == node.as_str() && s["status"] == "succeeded")
                .collect();
            assert_eq!(done.len(), 1, "{run} {node}: one completed step");
            let key = weir_engine::idempotency_key(run, &node, 1);
            let mut seen = by_key.get(&key).cloned().unwrap_or_default();
            assert!(!seen.is_empty(), "{run} {node}: the fake saw the step");
            seen.sort();
            for pair in seen.windows(2) {
                assert!(
                    pair[1].0 >= pair[0].1 || sent_before_a_freeze(pair[1].0),
                    "{run} {node}: two drivers executed the step at once: {:?}",
                    seen.iter()
                        .map(|(arrived, _)| arrived.duration_since(seen[0].0).unwrap_or_default())
                        .collect::<Vec<_>>()
                );
            }
            let committed = rfc3339(done[0]["finished_at"].as_str().unwrap());
            let after = seen
                .iter()
                .filter(|(arrived, _)| *arrived > committed && !sent_before_a_freeze(*arrived))
                .count();
            assert_eq!(after, 0, "{run} {node}: executed again after it completed");
        }
        takeovers += r["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "run_resumed" && e.get("took_over_from").is_some())
            .count();
    }
    takeovers
}

#[test]
fn serve_replicas_and_workers_share_one_postgres() {
    let fake = fake_steps(3, Duration::from_millis(20));
    block(async {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let w = workspace(&fake, &db.url, 3.0, 0.5);
        let a = Server::start(&w, &["--workers", "0"]);
        let token = a
            .first_token()
            .expect("the first replica makes the admin token");
        // A second replica on the same database: the token is already there.
        let b = Server::start(&w, &["--workers", "0"]);
        assert!(
            b.first_token().is_none(),
            "one admin token for the whole database"
        );
        let (api_a, api_b) = (Client::new(&a, &token), Client::new(&b, &token));
        let (status, saved) = api_a
            .send(
                reqwest::Method::PUT,
                "/api/workflows/chain",
                Some(chain(&fake, 3)),
            )
            .await;
        assert_eq!(status, 200, "{saved}");
        let runs = create_runs(&api_a, "chain", 10).await;
        // Nobody drives them yet; replica B sees them queued.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            api_b.get(&format!("/api/runs/{}", runs[0])).await["status"],
            "queued"
        );
        // B's event stream of a run that A created and a worker drives ends with the end of
        // the run: B is woken by the database, not by its own process.
        let follow = {
            let run = runs[9].clone();
            let api = Client::new(&b, &token);
            tokio::spawn(async move { api.events(&run, None, None).await })
        };
        let mut workers = vec![worker(&w, "w1"), worker(&w, "w2")];
        let records = settle(&api_b, &runs, Duration::from_secs(60)).await;
        check_exactly_once(&records, &fake, 3, Duration::from_millis(20), &[]);
        let owners: std::collections::BTreeSet<String> = records
            .iter()
            .flat_map(|r| r["events"].as_array().unwrap().clone())
            .filter(|e| e["type"] == "run_started")
            .map(|e| e["owner"].as_str().unwrap().to_string())
            .collect();
        assert!(owners.iter().all(|o| o == "w1" || o == "w2"), "{owners:?}");
        let seen = tokio::time::timeout(Duration::from_secs(10), follow)
            .await
            .expect("B's stream ends when the run ends")
            .unwrap();
        assert_eq!(
            seen.last().map(|e| e.1.as_str()),
            Some("run_finished"),
            "{seen:?}"
        );
        for k in &mut workers {
            signal(k, nix::sys::signal::Signal::SIGTERM);
            assert!(
                k.wait().unwrap().success(),
                "weir worker exits 0 on SIGTERM"
            );
        }
        a.kill();
        b.kill();
    });
}

/// How many runs the chaos test drives (`WEIR_CHAOS_RUNS`, default 1,000).
fn chaos_runs() -> usize {
    std::env::var("WEIR_CHAOS_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

#[test]
fn sigkilled_workers_lose_no_run_and_repeat_no_completed_step() {
    let delay = Duration::from_millis(60);
    let fake = fake_steps(5, delay);
    block(async {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let w = workspace(&fake, &db.url, 1.5, 0.3);
        let (server, api) = serve_saving(&w, "chain", chain(&fake, 5)).await;
        let runs = create_runs(&api, "chain", chaos_runs()).await;
        let mut workers: Vec<Child> = (0..3).map(|k| worker(&w, &format!("w{k}"))).collect();
        let mut kills = 0;
        let mut restarts = 0;
        let mut rng = 0x2545_f491_u64;
        let start = Instant::now();
        loop {
            let done = api.get("/api/runs?status=succeeded&limit=1").await;
            let open = ["queued", "running"];
            let mut busy = false;
            for s in open {
                let page = api.get(&format!("/api/runs?status={s}&limit=1")).await;
                busy |= page["runs"].as_array().is_some_and(|r| !r.is_empty());
            }
            if !busy && done["runs"].as_array().is_some_and(|r| !r.is_empty()) {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(600),
                "the runs never finished"
            );
            // A SIGKILL of a random worker every 2–5 s, restarted at once under a new name.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            tokio::time::sleep(Duration::from_millis(2000 + rng % 3000)).await;
            let k = (rng % 3) as usize;
            let _ = workers[k].kill();
            let _ = workers[k].wait();
            kills += 1;
            restarts += 1;
            workers[k] = worker(&w, &format!("w{k}-{restarts}"));
        }
        let records = settle(&api, &runs, Duration::from_secs(120)).await;
        let takeovers = check_exactly_once(&records, &fake, 5, delay, &[]);
        eprintln!(
            "chaos: {} runs succeeded, {kills} SIGKILLs, {takeovers} takeovers in {:.1} s",
            records.len(),
            start.elapsed().as_secs_f64()
        );
        assert!(kills >= 1, "at least one worker was killed");
        for mut k in workers {
            let _ = k.kill();
            let _ = k.wait();
        }
        server.kill();
    });
}

#[test]
fn a_zombie_worker_woken_after_its_lease_expired_commits_nothing() {
    let delay = Duration::from_millis(150);
    let fake = fake_steps(3, delay);
    block(async {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let w = workspace(&fake, &db.url, 1.0, 0.2);
        let (server, api) = serve_saving(&w, "chain", chain(&fake, 3)).await;
        // Enough work, at two runs per worker, to last through all twenty freezes.
        let runs = create_runs(&api, "chain", 200).await;
        let zombie = worker_of(&w, "zombie", 2);
        let healthy = worker_of(&w, "healthy", 2);
        // Twenty times: freeze the zombie past its lease (the healthy worker takes its runs
        // over), then let it go on as if nothing happened.
        let mut woken = Vec::new();
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            signal(&zombie, nix::sys::signal::Signal::SIGSTOP);
            tokio::time::sleep(Duration::from_millis(1600)).await;
            woken.push(SystemTime::now());
            signal(&zombie, nix::sys::signal::Signal::SIGCONT);
        }
        let records = settle(&api, &runs, Duration::from_secs(120)).await;
        let takeovers = check_exactly_once(&records, &fake, 3, delay, &woken);
        let refusals: Vec<Value> = records
            .iter()
            .flat_map(|r| r["events"].as_array().unwrap().clone())
            .filter(|e| e["type"] == "stale_write_refused")
            .collect();
        for e in &refusals {
            assert_eq!(e["owner"], "zombie", "{e}");
            assert!(e["current_epoch"].as_u64() > e["epoch"].as_u64(), "{e}");
        }
        eprintln!(
            "zombie: {} runs succeeded, {takeovers} takeovers, {} stale writes refused",
            records.len(),
            refusals.len()
        );
        assert!(
            takeovers >= 10,
            "the frozen worker's runs were taken over, again and again"
        );
        assert!(
            !refusals.is_empty(),
            "the woken zombie's writes were refused, on the timeline"
        );
        for mut k in [zombie, healthy] {
            let _ = k.kill();
            let _ = k.wait();
        }
        server.kill();
    });
}

/// A Postgres server of the test's own (initdb in a scratch folder, on a free port), which
/// the test may restart without disturbing the shared one.
struct PrivatePg {
    dir: tempfile::TempDir,
    port: u16,
    bin: std::path::PathBuf,
}

impl PrivatePg {
    fn start() -> Option<Self> {
        let bin = [
            "/usr/lib/postgresql/17/bin",
            "/usr/lib/postgresql/16/bin",
            "/usr/lib/postgresql/15/bin",
        ]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.join("initdb").exists())
        .or_else(|| {
            let out = std::process::Command::new("pg_config")
                .arg("--bindir")
                .output()
                .ok()?;
            Some(String::from_utf8_lossy(&out.stdout).trim().into())
        })?;
        if !bin.join("initdb").exists() {
            return None;
        }
        let dir = tempfile::tempdir().ok()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let pg = Self { dir, port, bin };
        if nix::unistd::geteuid().is_root() {
            // Postgres refuses to run as root: its files belong to the postgres user.
            let user = nix::unistd::User::from_name("postgres").ok()??;
            nix::unistd::chown(pg.dir.path(), Some(user.uid), Some(user.gid)).ok()?;
        }
        let data = pg.dir.path().join("data");
        assert!(
            pg.pg(&[
                "initdb",
                "-A",
                "trust",
                "-U",
                "postgres",
                "-D",
                data.to_str()?
            ])
            .success(),
            "initdb"
        );
        assert!(pg.ctl("start").success(), "pg_ctl start");
        Some(pg)
    }

    fn pg(&self, args: &[&str]) -> std::process::ExitStatus {
        let tool = self.bin.join(args[0]);
        let mut c = if nix::unistd::geteuid().is_root() {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&tool);
            c
        } else {
            std::process::Command::new(&tool)
        };
        c.args(&args[1..])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run a Postgres tool")
    }

    fn ctl(&self, action: &str) -> std::process::ExitStatus {
        let data = self.dir.path().join("data");
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log");
        self.pg(&[
            "pg_ctl",
            action,
            "-w",
            "-m",
            "fast",
            "-D",
            data.to_str().unwrap(),
            "-o",
            &opts,
            "-l",
            log.to_str().unwrap(),
        ])
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let _ = self.ctl("stop");
    }
}

#[test]
fn workers_ride_out_a_postgres_restart() {
    let delay = Duration::from_millis(40);
    let fake = fake_steps(5, delay);
    block(async {
        // The shared server is not restarted under the other suites: this test runs its own.
        let Some(_shared) = TestDb::create().await else {
            return;
        };
        let Some(pg) = PrivatePg::start() else {
            panic!("Postgres answers, but no initdb/pg_ctl was found to start a private server");
        };
        let w = workspace(&fake, &pg.url(), 2.0, 0.4);
        let (server, api) = serve_saving(&w, "chain", chain(&fake, 5)).await;
        let runs = create_runs(&api, "chain", 200).await;
        let mut workers: Vec<Child> = (0..2).map(|k| worker(&w, &format!("w{k}"))).collect();
        // Restart the database once the workers are well into the runs.
        let start = Instant::now();
        while fake.seen("/step/2").len() < 40 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the workers never started"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let before = api.get("/api/runs?status=succeeded&limit=200").await["runs"]
            .as_array()
            .map_or(0, Vec::len);
        assert!(pg.ctl("restart").success(), "pg_ctl restart");
        assert!(
            before < 200,
            "runs were still executing when Postgres restarted"
        );
        let records = settle(&api, &runs, Duration::from_secs(180)).await;
        eprintln!(
            "restart: {before} of 200 runs had succeeded when Postgres restarted; all 200 did after"
        );
        for r in &records {
            assert_eq!(r["status"], "succeeded", "{}: {}", r["run_id"], r["error"]);
        }
        for k in &mut workers {
            assert!(
                k.try_wait().unwrap().is_none(),
                "a worker survives the restart instead of exiting"
            );
            let _ = k.kill();
            let _ = k.wait();
        }
        server.kill();
    });
}

#[test]
fn a_step_that_kills_every_worker_fails_the_run_after_five_takeovers() {
    let fake = fake_steps(1, Duration::ZERO);
    block(async {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let w = workspace(&fake, &db.url, 1.0, 0.2);
        // A poison step: its script kills the worker running it, every time.
        let poison = json!({"name": "Poison", "nodes": {"boom": {"type": "script", "script":
            "process.kill(process.ppid, 'SIGKILL');\nawait new Promise((r) => setTimeout(r, 10000));\nexport default 1;\n"}}});
        let (server, api) = serve_saving(&w, "poison", poison).await;
        let (status, created) = api
            .post("/api/workflows/poison/runs", json!({"input": {}}))
            .await;
        assert_eq!(status, 202, "{created}");
        let run = created["run_id"].as_str().unwrap().to_string();
        let mut generation = 0;
        let mut current = worker(&w, "w0");
        let start = Instant::now();
        let record = loop {
            let r = api.get(&format!("/api/runs/{run}")).await;
            if r["status"] == "failed" {
                break r;
            }
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "the poison run never failed: {r}"
            );
            if current.try_wait().unwrap().is_some() {
                generation += 1;
                current = worker(&w, &format!("w{generation}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let _ = current.kill();
        let _ = current.wait();
        assert_eq!(
            record["error"]["code"], "takeover_limit",
            "{}",
            record["error"]
        );
        assert_eq!(record["error"]["node_id"], "boom");
        let message = record["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("6 times") && message.contains("max_takeovers = 5"),
            "{message}"
        );
        let takeovers = record["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "run_resumed" && e.get("took_over_from").is_some())
            .count();
        assert_eq!(
            takeovers, 6,
            "taken over five times, and failed at the sixth"
        );
        assert!(
            generation >= 6,
            "each takeover followed a worker the step killed"
        );
        server.kill();
    });
}

#[test]
fn the_cli_runs_approves_and_prunes_on_postgres() {
    let fake = fake_steps(1, Duration::ZERO);
    block(async {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let w = workspace(&fake, &db.url, 30.0, 5.0);
        let paused = w.run_approval("Ada", 250);
        assert_eq!(paused.code, 3, "{}", paused.stderr);
        let paused_id = paused.json()["run_id"].as_str().unwrap().to_string();
        let done = w.run_approval("Bo", 5);
        assert_eq!(done.code, 0, "{}", done.stderr);
        let listed = w.run_ids();
        assert_eq!(listed.len(), 2, "{listed:?}");
        let approved = w.run(&["approve", &paused_id, "--by", "ada", "--json"]);
        assert_eq!(approved.code, 0, "{}", approved.stderr);
        assert_eq!(w.show(&paused_id)["status"], "succeeded");
        // A second approval of the decided gate conflicts (exit 5), as on SQLite.
        assert_eq!(w.run(&["approve", &paused_id]).code, 5);
        let third = w.run_approval("Cy", 250);
        assert_eq!(third.code, 3, "{}", third.stderr);
        std::thread::sleep(Duration::from_millis(1100));
        let pruned = w.run(&["runs", "prune", "--older-than", "1s", "--json"]);
        assert_eq!(pruned.code, 0, "{}", pruned.stderr);
        let out: Value = serde_json::from_str(&pruned.stdout).unwrap();
        assert_eq!(out["pruned"], 2, "{out}");
        assert_eq!(w.run_ids().len(), 1, "the paused run stays");
        // The password of a URL never shows in weir's output.
        let secret = db.url.replacen("postgres@", "postgres:hunter2@", 1);
        let shown = w.run(&["--db", &secret, "runs", "list"]);
        assert!(!shown.stdout.contains("hunter2") && !shown.stderr.contains("hunter2"));
    });
}

/// A TCP proxy in front of Postgres that the test controls: it can cut every connection
/// through it at once, and refuse new ones for a while (a network partition).
struct Proxy {
    addr: std::net::SocketAddr,
    live: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
    down_until: std::sync::Arc<std::sync::Mutex<Option<Instant>>>,
}

impl Proxy {
    fn start(upstream: String) -> Self {
        use std::net::{Shutdown, TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let live: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>> = Default::default();
        let down_until: std::sync::Arc<std::sync::Mutex<Option<Instant>>> = Default::default();
        let (l, d) = (live.clone(), down_until.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if d.lock().unwrap().is_some_and(|t| Instant::now() < t) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let pipe = |mut from: TcpStream, mut to: TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                        let _ = from.shutdown(Shutdown::Both);
                    });
                };
                let mut held = l.lock().unwrap();
                held.push(client.try_clone().unwrap());
                held.push(server.try_clone().unwrap());
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        Self {
            addr,
            live,
            down_until,
        }
    }

    /// Cuts every connection through the proxy; returns how many there were.
    fn cut(&self) -> usize {
        let held = std::mem::take(&mut *self.live.lock().unwrap());
        for s in &held {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        held.len() / 2
    }

    /// Refuses new connections for `d`, after cutting the ones there are.
    fn partition(&self, d: Duration) -> usize {
        *self.down_until.lock().unwrap() = Some(Instant::now() + d);
        self.cut()
    }
}

/// Where the `host:port` of a database URL is: `postgres://user@HOST:PORT/db`.
fn host_port(url: &str) -> std::ops::Range<usize> {
    let at = url.find('@').unwrap() + 1;
    at..at + url[at..].find('/').unwrap()
}

#[test]
fn workers_reconnect_when_the_connection_to_postgres_is_cut_and_fencing_holds() {
    let delay = Duration::from_millis(60);
    let fake = fake_steps(5, delay);
    block(async {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let hp = host_port(&db.url);
        let proxy = Proxy::start(db.url[hp.clone()].to_string());
        let mut proxied = db.url.clone();
        proxied.replace_range(hp, &proxy.addr.to_string());
        // The server (for the API) on the database itself, the workers through the proxy.
        let w = workspace(&fake, &db.url, 1.5, 0.3);
        let (server, api) = serve_saving(&w, "chain", chain(&fake, 5)).await;
        let runs = create_runs(&api, "chain", 400).await;
        let wp = workspace(&fake, &proxied, 1.5, 0.3);
        let mut workers: Vec<Child> = (0..2).map(|k| worker(&wp, &format!("w{k}"))).collect();
        // Six cuts of every connection, 0.5 s apart, then a 2 s partition, then four more.
        let mut cut = 0;
        for round in 0..11 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            cut += if round == 6 {
                proxy.partition(Duration::from_secs(2))
            } else {
                proxy.cut()
            };
        }
        let done = api.get("/api/runs?status=succeeded&limit=400").await["runs"]
            .as_array()
            .map_or(0, Vec::len);
        assert!(
            done < 400,
            "the runs were still going when the last cut came"
        );
        let records = settle(&api, &runs, Duration::from_secs(180)).await;
        let takeovers = check_exactly_once(&records, &fake, 5, delay, &[]);
        eprintln!(
            "connection cuts: {} runs succeeded ({done} before the last cut); {cut} \
             connections cut in 10 cuts and a 2 s partition; {takeovers} takeovers",
            records.len()
        );
        assert!(
            cut >= 10,
            "connections were cut while the workers ran: {cut}"
        );
        for k in &mut workers {
            assert!(
                k.try_wait().unwrap().is_none(),
                "a worker survives the cuts instead of exiting"
            );
            let _ = k.kill();
            let _ = k.wait();
        }
        server.kill();
    });
}

/// libfaketime (Debian's `faketime` package), preloaded into a process to move its clock;
/// `None` (loudly) where it is not installed; CI requires it.
fn libfaketime() -> Option<&'static str> {
    let found = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists());
    if found.is_none() {
        crate::faults::skip_fault_test(
            "libfaketime is not installed (apt-get install faketime)",
            "clock-jump",
        );
    }
    found
}

#[test]
fn a_worker_whose_clock_jumped_an_hour_takes_no_run_whose_lease_is_alive() {
    let delay = Duration::from_millis(800);
    let fake = fake_steps(2, delay);
    block(async {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let Some(faketime) = libfaketime() else {
            return;
        };
        let w = workspace(&fake, &db.url, 2.0, 0.4);
        let (server, api) = serve_saving(&w, "chain", chain(&fake, 2)).await;
        let runs = create_runs(&api, "chain", 12).await;
        let mut steady = worker_of(&w, "steady", 3);
        wait_until("the steady worker drives its runs", || {
            fake.seen("/step/1").len() >= 3
        });
        // A second worker whose process clock is an hour ahead (its timers, on the
        // monotonic clock, unchanged): every lease the first one holds looks an hour
        // expired to it, if it reads its own clock.
        let mut jumped = w
            .command(&["worker", "--concurrency", "3", "--name", "jumped"])
            .env("LD_PRELOAD", faketime)
            .env("FAKETIME", "+3600s")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("FAKETIME_NO_CACHE", "1")
            .spawn()
            .unwrap();
        let records = settle(&api, &runs, Duration::from_secs(120)).await;
        let takeovers = check_exactly_once(&records, &fake, 2, delay, &[]);
        let by_jumped: Vec<&Value> = records
            .iter()
            .filter(|r| {
                r["events"].as_array().unwrap().iter().any(|e| {
                    (e["type"] == "run_started" || e["type"] == "run_resumed")
                        && e["owner"] == "jumped"
                })
            })
            .collect();
        eprintln!(
            "clock jump: {} runs succeeded, {} of them driven by the worker an hour ahead, \
             {takeovers} takeovers",
            records.len(),
            by_jumped.len()
        );
        assert_eq!(takeovers, 0, "no lease alive was taken over");
        assert!(
            !by_jumped.is_empty(),
            "the worker an hour ahead did work: it took queued runs"
        );
        for k in [&mut steady, &mut jumped] {
            let _ = k.kill();
            let _ = k.wait();
        }
        server.kill();
    });
}
