//! Schedules through the real binary: a saved workflow's schedule fires in `weir serve`,
//! each tick once, recorded as the run's trigger; `weir triggers list|fire|pause|resume`
//! and the API's triggers routes; `overlap: skip` while a run waits at a gate; a pause a
//! new version does not undo; the run list's trigger filter.

use std::time::Duration;

use serde_json::{Value, json};

use crate::serve::{Client, Server, block};
use crate::support::Weir;

/// A graph workflow that a schedule starts every second.
fn every_second(name: &str, overlap: &str) -> Value {
    json!({
        "name": name,
        "nodes": [{"id": "hello", "type": "agent",
                   "config": {"model": "mock", "user_message": "tick {who}"}}],
        "edges": [],
        "triggers": [{"kind": "schedule", "name": "every-second", "cron": "* * * * * *",
                      "timezone": "Europe/Paris", "input": {"who": "cron"},
                      "overlap": overlap}]
    })
}

async fn save(api: &Client, id: &str, doc: Value) {
    let (status, saved) = api
        .send(
            reqwest::Method::PUT,
            &format!("/api/workflows/{id}"),
            Some(doc),
        )
        .await;
    assert_eq!(status, 200, "{saved}");
}

async fn scheduled_runs(api: &Client, id: &str) -> Vec<Value> {
    let list = api
        .get(&format!(
            "/api/runs?workflow={id}&trigger=schedule:every-second&limit=500"
        ))
        .await;
    list["runs"].as_array().unwrap().clone()
}

fn ticks(runs: &[Value]) -> Vec<String> {
    let mut t: Vec<String> = runs
        .iter()
        .map(|r| r["trigger"]["tick"].as_str().unwrap().to_string())
        .collect();
    t.sort();
    t
}

fn seconds(tick: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(tick)
        .unwrap()
        .timestamp()
}

#[test]
fn a_schedule_fires_every_tick_once_and_records_it_as_the_runs_trigger() {
    let w = Weir::new();
    block(async {
        let server = Server::start(&w, &["--workers", "2"]);
        let token = server.first_token().unwrap();
        let api = Client::new(&server, &token);
        save(&api, "ticker", every_second("Ticker", "allow")).await;
        tokio::time::sleep(Duration::from_millis(4500)).await;
        let runs = scheduled_runs(&api, "ticker").await;
        let t = ticks(&runs);
        assert!(t.len() >= 3, "a run a second: {t:?}");
        for pair in t.windows(2) {
            assert_eq!(
                seconds(&pair[1]) - seconds(&pair[0]),
                1,
                "one run per tick, none missing: {t:?}"
            );
        }
        let first = api
            .wait_for(runs[0]["run_id"].as_str().unwrap(), |s| s == "succeeded")
            .await;
        assert_eq!(first["trigger"]["kind"], "schedule");
        assert_eq!(first["trigger"]["name"], "every-second");
        assert_eq!(
            first["input"],
            json!({"who": "cron"}),
            "the trigger's input"
        );
        assert_eq!(first["output"]["text"], "mock reply to: tick cron");
        // The API's own runs are told apart.
        let (status, made) = api
            .post(
                "/api/workflows/ticker/runs",
                json!({"input": {"who": "me"}}),
            )
            .await;
        assert_eq!(status, 202, "{made}");
        let by_api = api.get("/api/runs?trigger=api").await;
        let ids: Vec<&str> = by_api["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [made["run_id"].as_str().unwrap()]);
        let bad = api.get("/api/runs?trigger=cron").await;
        assert_eq!(bad["error"]["code"], "invalid_request", "{bad}");
        // The triggers route: the schedule, active, with its next ticks in Paris.
        let listed = api.get("/api/workflows/ticker/triggers").await;
        let t0 = &listed["triggers"][0];
        assert_eq!(t0["name"], "every-second");
        assert_eq!(t0["state"], "active");
        assert_eq!(t0["next"].as_array().unwrap().len(), 5);
        assert!(
            t0["next_local"][0].as_str().unwrap().ends_with("+01:00"),
            "{t0}"
        );
        assert!(t0["last_run"]["run_id"].is_string(), "{t0}");
        server.kill();
    });
    // The CLI reads the same store.
    let list = w.run(&["runs", "list", "--trigger", "schedule:every-second"]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    assert!(
        list.stdout.contains("schedule:every-second"),
        "{}",
        list.stdout
    );
    let listed = w.run(&["triggers", "list", "--json", "--at", "2027-03-28T00:59:58Z"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let v: Value = serde_json::from_str(&listed.stdout).unwrap();
    // The night the clocks go forward in Paris: 02:59:59 is followed by 03:00:00.
    assert_eq!(
        v[0]["next_local"],
        json!([
            "2027-03-28T01:59:59+01:00",
            "2027-03-28T03:00:00+02:00",
            "2027-03-28T03:00:01+02:00",
            "2027-03-28T03:00:02+02:00",
            "2027-03-28T03:00:03+02:00"
        ])
    );
    let table = w.run(&["triggers", "list"]);
    assert!(
        table.stdout.contains("ticker") && table.stdout.contains("* * * * * * (Europe/Paris)"),
        "{}",
        table.stdout
    );
}

/// A gate keeps the first run waiting: under `overlap: skip` no tick starts another until it
/// ends; a pause stops the ticks, a new version keeps it, a resume starts them again.
#[test]
fn skip_waits_for_the_last_run_and_a_pause_outlives_a_new_version() {
    let w = Weir::new();
    let gated = |name: &str| {
        json!({
            "name": name,
            "nodes": [{"id": "ok", "type": "human_gate", "config": {"prompt": "go?"}}],
            "edges": [],
            "triggers": [{"kind": "schedule", "name": "every-second", "cron": "* * * * * *",
                          "timezone": "UTC"}]
        })
    };
    block(async {
        let server = Server::start(&w, &["--workers", "1"]);
        let token = server.first_token().unwrap();
        let api = Client::new(&server, &token);
        save(&api, "gated", gated("Gated")).await;
        runs_until(
            &api,
            "gated",
            "the first tick's run parks at its gate",
            |r| r.iter().any(|r| r["status"] == "paused"),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let runs = scheduled_runs(&api, "gated").await;
        assert_eq!(
            runs.len(),
            1,
            "skip: no run while the last one waits: {runs:?}"
        );
        let first = runs[0]["run_id"].as_str().unwrap().to_string();
        let (status, _) = api
            .post(&format!("/api/runs/{first}/approve"), json!({"gate": "ok"}))
            .await;
        assert_eq!(status, 200);
        runs_until(
            &api,
            "gated",
            "a tick after the approval starts a run",
            |r| r.len() >= 2,
        )
        .await;
        // Pause: nothing more fires, through a new version too.
        let (status, paused) = api
            .post(
                "/api/workflows/gated/triggers/every-second/pause",
                json!({}),
            )
            .await;
        assert_eq!(status, 200, "{paused}");
        assert_eq!(paused["state"], "paused");
        save(&api, "gated", gated("Gated v2")).await;
        for r in scheduled_runs(&api, "gated").await {
            let id = r["run_id"].as_str().unwrap();
            let _ = api.post(&format!("/api/runs/{id}/cancel"), json!({})).await;
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = scheduled_runs(&api, "gated").await.len();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(
            scheduled_runs(&api, "gated").await.len(),
            before,
            "a paused trigger fires nothing, a new version notwithstanding"
        );
        let listed = api.get("/api/workflows/gated/triggers").await;
        assert_eq!(listed["triggers"][0]["state"], "paused");
        assert_eq!(listed["triggers"][0]["version"], 2);
        // Fire by hand: one run now, paused or not.
        let (status, fired) = api
            .post("/api/workflows/gated/triggers/every-second/fire", json!({}))
            .await;
        assert_eq!(status, 202, "{fired}");
        let (status, missing) = api
            .post("/api/workflows/gated/triggers/nightly/fire", json!({}))
            .await;
        assert_eq!(status, 404);
        assert!(
            missing["error"]["message"]
                .as_str()
                .unwrap()
                .contains("its triggers: every-second"),
            "{missing}"
        );
        server.kill();
    });
    let resumed = w.run(&["triggers", "resume", "gated", "every-second"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(
        resumed.stdout.contains("gated/every-second: active"),
        "{}",
        resumed.stdout
    );
    let fired = w.run(&["triggers", "fire", "gated", "every-second", "--json"]);
    assert_eq!(fired.code, 0, "{}", fired.stderr);
    let id: Value = serde_json::from_str(&fired.stdout).unwrap();
    let shown = w.show(id["run_id"].as_str().unwrap());
    assert_eq!(shown["trigger"]["kind"], "schedule");
    assert_eq!(shown["status"], "queued", "queued for serve or a worker");
    let nope = w.run(&["triggers", "fire", "gated", "nightly"]);
    assert_eq!(nope.code, 2, "{}", nope.stderr);
}

/// The scheduled runs once `cond` holds of them (within 30 s).
async fn runs_until(api: &Client, id: &str, what: &str, cond: impl Fn(&[Value]) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let runs = scheduled_runs(api, id).await;
        if cond(&runs) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {runs:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A schedule every second on `weir serve` and two `weir worker` processes on one Postgres
/// database: one run per tick and none missing, a worker SIGKILLed half-way changing
/// nothing; everything stopped for five ticks and started again: one catch-up run, no storm.
#[test]
fn on_postgres_every_process_watches_and_each_tick_fires_once() {
    use weir_store::testdb::TestDb;
    let seconds_up = |s: u64| Duration::from_millis(s * 1000 + 300);
    block(async {
        let Some(db) = TestDb::create().await else {
            return;
        };
        let w = Weir::new().env("WEIR_DB", &db.url);
        let server = Server::start(&w, &["--workers", "0"]);
        let token = server.first_token().unwrap();
        let api = Client::new(&server, &token);
        save(&api, "ticker", every_second("Ticker", "allow")).await;
        let worker = |name: &str| w.spawn(&["worker", "--name", name]);
        let mut w1 = worker("w1");
        let mut w2 = worker("w2");
        tokio::time::sleep(seconds_up(5)).await;
        let _ = w1.kill();
        let _ = w1.wait();
        tokio::time::sleep(seconds_up(5)).await;
        let _ = w2.kill();
        let _ = w2.wait();
        server.kill();
        let before = ticks(&scheduled_runs_db(&w).await);
        tokio::time::sleep(seconds_up(5)).await;
        let again = Server::start(&w, &["--workers", "1"]);
        tokio::time::sleep(seconds_up(3)).await;
        let api = Client::new(&again, &token);
        let t = ticks(&scheduled_runs(&api, "ticker").await);
        again.kill();
        let mut unique = t.clone();
        unique.dedup();
        assert_eq!(unique.len(), t.len(), "no tick fired twice: {t:?}");
        let gaps: Vec<i64> = t
            .windows(2)
            .map(|p| seconds(&p[1]) - seconds(&p[0]))
            .filter(|g| *g != 1)
            .collect();
        assert_eq!(gaps.len(), 1, "one gap, the downtime: {t:?}");
        assert!(gaps[0] >= 5, "ticks missed while down fire no storm: {t:?}");
        assert!(before.len() >= 9, "a run a second while up: {before:?}");
        assert!(
            t.len() >= before.len() + 3,
            "the catch-up and the ticks after it: {t:?}"
        );
    });
}

/// The scheduled runs, read through the CLI while no server runs.
async fn scheduled_runs_db(w: &Weir) -> Vec<Value> {
    let listed = w.run(&[
        "runs",
        "list",
        "--json",
        "--limit",
        "500",
        "--trigger",
        "schedule:every-second",
    ]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    serde_json::from_str(&listed.stdout).unwrap()
}

/// A delivery of the signature table: what it is, its path, headers and body, the status
/// it must get.
type Delivery<'a> = (&'a str, &'a str, Vec<(&'static str, String)>, Vec<u8>, u16);

fn sign(secret: &str, parts: &[&[u8]]) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    for p in parts {
        mac.update(p);
    }
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn hooked() -> Value {
    json!({
        "name": "Hooked",
        "nodes": [{"id": "echo", "type": "condition", "config": {"expression": "action == 'opened'"}}],
        "edges": [],
        "triggers": [
            {"kind": "webhook", "name": "github", "signature": "github", "secret": "HOOK_SECRET",
             "input": {"action": "{body.action}", "event": "{headers.x_github_event}"},
             "dedupe": "X-GitHub-Delivery"},
            {"kind": "webhook", "name": "plain", "signature": "hmac-sha256", "secret": "HOOK_SECRET"},
            {"kind": "webhook", "name": "stripe", "signature": "stripe", "secret": "HOOK_SECRET"},
            {"kind": "webhook", "name": "slack", "signature": "slack", "secret": "HOOK_SECRET",
             "input": {"command": "{body.command}"}},
            {"kind": "webhook", "name": "form", "signature": "token"}
        ]
    })
}

/// Webhooks through `weir serve`: each scheme's valid deliveries start runs and nothing
/// else does (a wrong secret, a body changed by one byte, a replay outside the tolerance, a
/// missing header); a delivery id delivered 100 times makes one run; a `token` hook's URL is
/// shown once; over the body cap 413, over the rate 429.
#[test]
fn webhooks_start_runs_only_for_authentic_deliveries() {
    let secret = "whsec_9f8e7d6c5b4a";
    let w = Weir::new().env("HOOK_SECRET", secret);
    w.file(
        "weir.toml",
        "[secrets]\nHOOK_SECRET = { env = \"HOOK_SECRET\" }\n[webhooks]\nrequests_per_minute = 400\n",
    );
    block(async {
        let server = Server::start(&w, &["--workers", "1", "--max-body", "4096"]);
        let token = server.first_token().unwrap();
        let api = Client::new(&server, &token);
        let (status, saved) = api
            .send(
                reqwest::Method::PUT,
                "/api/workflows/hooked",
                Some(hooked()),
            )
            .await;
        assert_eq!(status, 200, "{saved}");
        let url = saved["hook_tokens"][0]["url"].as_str().unwrap().to_string();
        assert!(url.starts_with("/hooks/hooked/form?token="), "{saved}");
        let (_, again) = api
            .send(
                reqwest::Method::PUT,
                "/api/workflows/hooked",
                Some(hooked()),
            )
            .await;
        assert!(
            again.get("hook_tokens").is_none(),
            "the token is shown once: {again}"
        );
        let http = reqwest::Client::new();
        let post = |path: String, headers: Vec<(&'static str, String)>, body: Vec<u8>| {
            let (http, base) = (http.clone(), server.url.clone());
            async move {
                let mut r = http.post(format!("{base}{path}")).body(body);
                for (k, v) in headers {
                    r = r.header(k, v);
                }
                let r = r.send().await.unwrap();
                let status = r.status().as_u16();
                (status, r.json::<Value>().await.unwrap_or(Value::Null))
            }
        };
        let body = br#"{"action":"opened","number":7}"#.to_vec();
        let now = chrono::Utc::now().timestamp().to_string();
        let old = (chrono::Utc::now().timestamp() - 600).to_string();
        let gh = format!("sha256={}", sign(secret, &[&body]));
        let mut changed = body.clone();
        changed[3] = b'b';
        let slack_body = b"command=%2Fdeploy&text=now".to_vec();
        let slack = |at: &str| {
            format!(
                "v0={}",
                sign(secret, &[b"v0:", at.as_bytes(), b":", &slack_body])
            )
        };
        let stripe =
            |at: &str| format!("t={at},v1={}", sign(secret, &[at.as_bytes(), b".", &body]));
        let cases: Vec<Delivery<'_>> = vec![
            (
                "github valid",
                "/hooks/hooked/github",
                vec![
                    ("x-hub-signature-256", gh.clone()),
                    ("x-github-event", "pull_request".into()),
                    ("x-github-delivery", "d-1".into()),
                ],
                body.clone(),
                202,
            ),
            (
                "github wrong secret",
                "/hooks/hooked/github",
                vec![(
                    "x-hub-signature-256",
                    format!("sha256={}", sign("other", &[&body])),
                )],
                body.clone(),
                401,
            ),
            (
                "github body changed",
                "/hooks/hooked/github",
                vec![("x-hub-signature-256", gh.clone())],
                changed.clone(),
                401,
            ),
            (
                "github no header",
                "/hooks/hooked/github",
                vec![],
                body.clone(),
                401,
            ),
            (
                "hmac valid",
                "/hooks/hooked/plain",
                vec![
                    ("x-signature-256", sign(secret, &[&body])),
                    ("content-type", "application/json".into()),
                ],
                body.clone(),
                202,
            ),
            (
                "hmac changed",
                "/hooks/hooked/plain",
                vec![("x-signature-256", sign(secret, &[&body]))],
                changed.clone(),
                401,
            ),
            (
                "stripe valid",
                "/hooks/hooked/stripe",
                vec![("stripe-signature", stripe(&now))],
                body.clone(),
                202,
            ),
            (
                "stripe replayed",
                "/hooks/hooked/stripe",
                vec![("stripe-signature", stripe(&old))],
                body.clone(),
                401,
            ),
            (
                "slack valid",
                "/hooks/hooked/slack",
                vec![
                    ("x-slack-signature", slack(&now)),
                    ("x-slack-request-timestamp", now.clone()),
                    ("content-type", "application/x-www-form-urlencoded".into()),
                ],
                slack_body.clone(),
                202,
            ),
            (
                "slack replayed",
                "/hooks/hooked/slack",
                vec![
                    ("x-slack-signature", slack(&old)),
                    ("x-slack-request-timestamp", old.clone()),
                ],
                slack_body.clone(),
                401,
            ),
            (
                "slack no timestamp",
                "/hooks/hooked/slack",
                vec![("x-slack-signature", slack(&now))],
                slack_body.clone(),
                401,
            ),
            ("token valid", url.as_str(), vec![], body.clone(), 202),
            (
                "token wrong",
                "/hooks/hooked/form?token=0000",
                vec![],
                body.clone(),
                401,
            ),
            (
                "token missing",
                "/hooks/hooked/form",
                vec![],
                body.clone(),
                401,
            ),
            (
                "no such hook",
                "/hooks/hooked/nope",
                vec![],
                body.clone(),
                404,
            ),
        ];
        let mut started = Vec::new();
        for (what, path, headers, b, want) in cases {
            let (status, answer) = post(path.to_string(), headers, b).await;
            assert_eq!(status, want, "{what}: {answer}");
            if status == 202 {
                started.push(answer["run_id"].as_str().unwrap().to_string());
            } else {
                assert!(answer["error"]["message"].is_string(), "{what}: {answer}");
            }
        }
        let listed = api.get("/api/runs?trigger=webhook&limit=100").await;
        let mut ids: Vec<String> = listed["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        started.sort();
        assert_eq!(ids, started, "only the valid deliveries made runs");
        // The GitHub delivery's run: its input mapped from the body and headers.
        let gh_run = listed["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["trigger"]["name"] == "github")
            .unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        let record = api.wait_for(&gh_run, |s| s == "succeeded").await;
        assert_eq!(
            record["input"],
            json!({"action": "opened", "event": "pull_request"})
        );
        assert_eq!(
            record["trigger"],
            json!({"kind": "webhook", "name": "github", "delivery": "d-1"})
        );
        // 100 redeliveries of d-1: the first run each time.
        for _ in 0..100 {
            let (status, answer) = post(
                "/hooks/hooked/github".into(),
                vec![
                    ("x-hub-signature-256", gh.clone()),
                    ("x-github-event", "pull_request".into()),
                    ("x-github-delivery", "d-1".into()),
                ],
                body.clone(),
            )
            .await;
            assert_eq!(
                (status, answer["run_id"].as_str()),
                (202, Some(gh_run.as_str()))
            );
            assert_eq!(answer["created"], false);
        }
        let listed = api.get("/api/runs?trigger=webhook:github&limit=100").await;
        assert_eq!(
            listed["runs"].as_array().unwrap().len(),
            1,
            "one delivery, one run"
        );
        // Over the body cap, and over the rate.
        let (status, _) = post("/hooks/hooked/github".into(), vec![], vec![b'x'; 8192]).await;
        assert_eq!(status, 413);
        let mut limited = None;
        for _ in 0..450 {
            let (status, _) = post("/hooks/hooked/plain".into(), vec![], b"{}".to_vec()).await;
            if status == 429 {
                limited = Some(status);
                break;
            }
        }
        assert_eq!(limited, Some(429), "the hook's rate is enforced");
        let listed = api.get("/api/workflows/hooked/triggers").await;
        let form = listed["triggers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "form")
            .unwrap()
            .clone();
        assert_eq!(form["path"], "/hooks/hooked/form");
        assert_eq!(form["signature"], "token");
        server.kill();
    });
    let log = w.run(&["runs", "list", "--trigger", "webhook"]);
    assert!(!log.stdout.contains(secret), "no secret in the list");
}
