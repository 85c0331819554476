//! The run lifecycle through the binary (DESIGN §8): concurrent decisions, kills at random
//! moments, a zombie driver fenced by its successor, retries visible as they happen, Ctrl-C
//! and cancel.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::{Fake, Reply, Weir, steps, wait_until};

/// `draft → review (gate) → pause (delay) → send`.
const GATED: &str = r#"
name: gated
nodes:
  - {id: draft, type: agent, config: {model: mock, user_message: "Draft for {who}"}}
  - {id: review, type: human_gate, config: {prompt: "Send the draft for {who}?"}}
  - {id: pause, type: tool, config: {tool_name: delay, params: {ms: 40}}}
  - {id: send, type: agent, config: {model: mock, user_message: "Send to {who}"}}
edges:
  - {source: draft, target: review}
  - {source: review, target: pause}
  - {source: pause, target: send}
"#;

fn park(w: &Weir, who: &str) -> String {
    let f = w.file("gated.yaml", GATED);
    let ran = w.run(&[
        "run",
        &f,
        "--input",
        &json!({"who": who}).to_string(),
        "--json",
    ]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    ran.json()["run_id"].as_str().unwrap().to_string()
}

fn signal(child: &Child, sig: Signal) {
    kill(Pid::from_raw(child.id() as i32), sig).expect("signal");
}

/// Each node has at most one succeeded step: no completed step ran twice.
fn no_step_completed_twice(r: &Value) {
    let mut done: Vec<&str> = r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "succeeded")
        .map(|s| s["node_id"].as_str().unwrap())
        .collect();
    let n = done.len();
    done.sort();
    done.dedup();
    assert_eq!(n, done.len(), "a completed step ran twice: {}", r["steps"]);
}

fn events_of<'a>(r: &'a Value, kind: &str) -> Vec<&'a Value> {
    r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

/// Collects a child's stderr lines as they arrive.
fn stderr_lines(child: &mut Child) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let err = child.stderr.take().expect("piped stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

#[test]
fn two_concurrent_approvals_one_drives_the_other_conflicts() {
    let w = Weir::new();
    let id = park(&w, "Ada");
    let a = w.spawn(&["approve", &id, "--by", "alice", "--json"]);
    let b = w.spawn(&["approve", &id, "--by", "bob", "--json"]);
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let codes = [a.status.code().unwrap(), b.status.code().unwrap()];
    let (winner, loser, loser_out) = match codes {
        [0, 5] => ("alice", "bob", &b),
        [5, 0] => ("bob", "alice", &a),
        other => panic!(
            "expected one success and one conflict, got {other:?}\n{}\n{}",
            String::from_utf8_lossy(&a.stderr),
            String::from_utf8_lossy(&b.stderr)
        ),
    };
    let err = String::from_utf8_lossy(&loser_out.stderr);
    assert!(
        err.contains(&format!("already approved by {winner}")),
        "{loser} should name {winner}'s decision: {err}"
    );
    let r = w.show(&id);
    assert_eq!(r["status"], "succeeded");
    assert_eq!(steps(&r, "send").len(), 1, "the run was driven once");
    assert_eq!(r["state"]["approval_review"]["by"], winner);
    assert_eq!(events_of(&r, "gate_decided").len(), 1);
    no_step_completed_twice(&r);
}

#[test]
fn approve_killed_at_random_moments_never_leaves_a_run_stuck() {
    let w = Weir::new();
    w.short_lease(0.5, 0.1);
    let ids: Vec<String> = (0..20).map(|i| park(&w, &format!("n{i}"))).collect();
    for (i, id) in ids.iter().enumerate() {
        let mut child = w.spawn(&["approve", id, "--json"]);
        // Spread the kills over the approve process's life: startup, the decision, the
        // claim, the delay step, the last commits.
        std::thread::sleep(Duration::from_millis((i as u64 * 37) % 90));
        signal(&child, Signal::SIGKILL);
        child.wait().unwrap();
    }
    // Wait out the leases of the killed drivers.
    std::thread::sleep(Duration::from_millis(700));
    let mut outcomes = std::collections::BTreeMap::new();
    for id in &ids {
        let before = w.show(id)["status"].as_str().unwrap().to_string();
        let ran = match before.as_str() {
            "paused" => w.run(&["approve", id, "--json"]),
            "queued" | "running" => w.run(&["resume", id, "--json"]),
            "succeeded" => {
                *outcomes.entry(before).or_insert(0) += 1;
                continue;
            }
            other => panic!("run {id} is {other}"),
        };
        assert_eq!(ran.code, 0, "run {id} was {before}: {}", ran.stderr);
        *outcomes.entry(before).or_insert(0) += 1;
        let r = ran.json();
        assert_eq!(r["status"], "succeeded");
        no_step_completed_twice(&r);
        assert_eq!(events_of(&r, "gate_decided").len(), 1);
    }
    eprintln!("states the kills left: {outcomes:?}");
}

#[test]
fn a_stopped_driver_is_fenced_by_the_one_that_took_over() {
    let w = Weir::new();
    w.short_lease(1.0, 0.2);
    let f = w.file(
        "slow.yaml",
        r#"
name: slow
nodes:
  - {id: first, type: agent, config: {model: mock, user_message: "one"}}
  - {id: wait, type: tool, config: {tool_name: delay, params: {ms: 1500}}}
  - {id: last, type: agent, config: {model: mock, user_message: "three"}}
edges:
  - {source: first, target: wait}
  - {source: wait, target: last}
"#,
    );
    let mut zombie = w.spawn(&["run", &f]);
    let lines = stderr_lines(&mut zombie);
    let id = {
        wait_until("the run id", || !lines.lock().unwrap().is_empty());
        lines.lock().unwrap()[0]
            .strip_prefix("run ")
            .expect("first line is the run id")
            .to_string()
    };
    wait_until("the delay step to start", || {
        let r = w.show(&id);
        steps(&r, "wait")
            .first()
            .is_some_and(|s| s["status"] == "running")
    });
    signal(&zombie, Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(1300));
    // The lease expired: another process takes the run over and finishes it.
    let ran = w.run(&["resume", &id, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let done = ran.json();
    assert_eq!(done["status"], "succeeded");
    let taken = events_of(&done, "run_resumed");
    assert_eq!(taken.len(), 1);
    assert!(taken[0]["took_over_from"].is_string(), "{}", taken[0]);
    // The zombie wakes up: its writes are refused, it says so and stops.
    signal(&zombie, Signal::SIGCONT);
    let status = zombie.wait().unwrap();
    let err = lines.lock().unwrap().join("\n");
    assert_eq!(status.code(), Some(5), "{err}");
    assert!(err.contains("lease lost"), "{err}");
    assert!(err.contains("stopped driving it"), "{err}");
    // It changed nothing but the timeline, which shows each refused write.
    let mut after = w.show(&id);
    let events = after["events"].as_array_mut().unwrap();
    let refused: Vec<Value> = events.split_off(done["events"].as_array().unwrap().len());
    assert!(!refused.is_empty(), "the refusal is on the timeline");
    for e in &refused {
        assert_eq!(e["type"], "stale_write_refused", "{e}");
        assert_eq!(e["owner"], taken[0]["took_over_from"], "{e}");
        assert_eq!(e["current_epoch"], taken[0]["epoch"], "{e}");
    }
    assert_eq!(after, done, "the zombie changed nothing");
    no_step_completed_twice(&after);
    assert_eq!(
        steps(&after, "wait")
            .iter()
            .map(|s| s["status"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["cancelled", "succeeded"]
    );
    assert_eq!(steps(&after, "last").len(), 1);
}

#[test]
fn a_retry_shows_in_the_log_while_the_step_waits() {
    let fake = Fake::start();
    fake.queue(
        "/v1/messages",
        // The server asks for 3 s: a wide window to look at the run while the step waits.
        vec![
            Reply::json(
                429,
                json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
            )
            .header("retry-after", "3"),
        ],
    );
    fake.always(
        "/v1/messages",
        Reply::json(
            200,
            json!({"id": "m", "type": "message", "role": "assistant", "model": "claude",
                   "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                   "usage": {"input_tokens": 3, "output_tokens": 1}}),
        ),
    );
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let f = w.file(
        "flaky.json",
        r#"{"name": "flaky", "nodes": [{"id": "flaky", "type": "agent",
            "config": {"model": "claude-haiku-4-5", "user_message": "hi", "retry_count": 1}}], "edges": []}"#,
    );
    let mut child = w.spawn(&["run", &f]);
    let lines = stderr_lines(&mut child);
    // During the 1 s backoff the step has not ended, but the log already has the failure.
    wait_until("the retry line", || {
        lines.lock().unwrap().iter().any(|l| l.contains('↻'))
    });
    assert!(
        child.try_wait().unwrap().is_none(),
        "the retry shows before the run ends"
    );
    let id = lines.lock().unwrap()[0][4..].to_string();
    let r = w.show(&id);
    let failed = events_of(&r, "attempt_failed");
    assert_eq!(failed.len(), 1, "{}", r["events"]);
    assert_eq!(failed[0]["error_class"], "rate_limit");
    assert_eq!(failed[0]["backoff_ms"], 3000);
    assert_eq!(steps(&r, "flaky")[0]["status"], "running");
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let retry = lines
        .lock()
        .unwrap()
        .iter()
        .find(|l| l.contains('↻'))
        .cloned()
        .unwrap();
    assert!(
        retry.contains("↻ flaky rate_limit, retry in 3 s"),
        "{retry}"
    );
}

#[test]
fn ctrl_c_records_the_step_cancelled_and_releases_the_run() {
    let w = Weir::new();
    let f = w.file(
        "slow.yaml",
        r#"
name: slow
nodes:
  - {id: wait, type: tool, config: {tool_name: delay, params: {ms: 1500}}}
  - {id: after, type: agent, config: {model: mock, user_message: "done"}}
edges:
  - {source: wait, target: after}
"#,
    );
    let mut child = w.spawn(&["run", &f]);
    let lines = stderr_lines(&mut child);
    wait_until("the run id", || !lines.lock().unwrap().is_empty());
    let id = lines.lock().unwrap()[0][4..].to_string();
    wait_until("the delay step to start", || {
        steps(&w.show(&id), "wait").len() == 1
    });
    signal(&child, Signal::SIGINT);
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let err = lines.lock().unwrap().join("\n");
    // The hints print the 8-character id, which every command takes.
    assert!(err.contains(&format!("weir resume {}", &id[..8])), "{err}");
    assert!(err.contains(&format!("weir cancel {}", &id[..8])), "{err}");
    let r = w.show(&id);
    assert_eq!(r["status"], "queued");
    let wait = steps(&r, "wait");
    assert_eq!(wait[0]["status"], "cancelled");
    assert!(wait[0]["error"].as_str().unwrap().contains("interrupted"));
    assert_eq!(events_of(&r, "run_released").len(), 1);
    // The released run continues at once: no lease to wait out.
    let ran = w.run(&["resume", &id, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["status"], "succeeded");
    assert_eq!(steps(&r, "wait").len(), 2);
    assert_eq!(steps(&r, "after").len(), 1);
}

#[test]
fn cancel_ends_paused_and_running_runs() {
    let w = Weir::new();
    w.short_lease(2.0, 0.1);
    // A paused run is cancelled at once.
    let paused = park(&w, "Ada");
    let ran = w.run(&["cancel", &paused]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = w.show(&paused);
    assert_eq!(r["status"], "cancelled");
    assert_eq!(r["error"]["code"], "cancelled");
    assert_eq!(steps(&r, "review")[0]["status"], "cancelled");
    assert!(r["pending_gate"].is_null());
    // Deciding or cancelling it again is a conflict.
    assert_eq!(w.run(&["approve", &paused]).code, 5);
    assert_eq!(w.run(&["cancel", &paused]).code, 5);
    // A running run: its driver stops in-flight steps and ends it cancelled.
    let f = w.file(
        "slow.yaml",
        "name: slow\nnodes:\n  - {id: wait, type: tool, config: {tool_name: delay, params: {ms: 20000}}}\nedges: []\n",
    );
    let mut driver = w.spawn(&["run", &f, "--json"]);
    let lines = stderr_lines(&mut driver);
    wait_until("the run id", || !lines.lock().unwrap().is_empty());
    let id = lines.lock().unwrap()[0][4..].to_string();
    wait_until("the delay step to start", || {
        steps(&w.show(&id), "wait").len() == 1
    });
    let ran = w.run(&["cancel", &id]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.stdout.contains("cancelled"), "{}", ran.stdout);
    assert_eq!(driver.wait().unwrap().code(), Some(1));
    let r = w.show(&id);
    assert_eq!(r["status"], "cancelled");
    assert_eq!(steps(&r, "wait")[0]["status"], "cancelled");
    assert_eq!(events_of(&r, "cancel_requested").len(), 1);
}

/// The crash suite: `weir run` killed at 100 moments of a workflow with parallel branches,
/// a tool with side effects and a gate; every run is then continued. No completed step runs
/// again, and a side effect is delivered twice only for a step that was in flight when the
/// process died (and then with the same idempotency key).
#[test]
fn runs_killed_at_100_moments_continue_without_repeating_completed_work() {
    let fake = Fake::start();
    for p in ["/effect/a", "/effect/c"] {
        fake.always(
            p,
            Reply::text(200, "done").delayed(Duration::from_millis(15)),
        );
    }
    let w = Weir::new();
    w.short_lease(0.3, 0.1);
    let f = w.file(
        "crash.yaml",
        &format!(
            r#"
name: crash
nodes:
  - {{id: start, type: agent, config: {{model: mock, user_message: "go {{n}}"}}}}
  - {{id: a, type: tool, config: {{tool_name: http_request, params: {{method: POST, url: "{u}/effect/a", body: {{n: "{{n}}"}}}}}}}}
  - {{id: b, type: tool, config: {{tool_name: delay, params: {{ms: 20}}}}}}
  - {{id: join, type: merge}}
  - {{id: gate, type: human_gate, config: {{prompt: "ship {{n}}?"}}}}
  - {{id: c, type: tool, config: {{tool_name: http_request, params: {{method: POST, url: "{u}/effect/c", body: {{n: "{{n}}"}}}}}}}}
edges:
  - {{source: start, target: a}}
  - {{source: start, target: b}}
  - {{source: a, target: join}}
  - {{source: b, target: join}}
  - {{source: join, target: gate}}
  - {{source: gate, target: c}}
"#,
            u = fake.url
        ),
    );
    let runs = 100;
    for i in 0..runs {
        let mut child = w.spawn(&["run", &f, "--input", &json!({"n": i}).to_string()]);
        // Kill during the drive: after the run exists (its id is printed at creation), at a
        // moment that moves through the workflow from one run to the next.
        let lines = stderr_lines(&mut child);
        wait_until("the run id", || !lines.lock().unwrap().is_empty());
        std::thread::sleep(Duration::from_millis((i as u64 * 7) % 90));
        signal(&child, Signal::SIGKILL);
        child.wait().unwrap();
    }
    std::thread::sleep(Duration::from_millis(400));
    let ids = w.run_ids();
    assert_eq!(ids.len(), runs);
    let mut states = std::collections::BTreeMap::new();
    // Idempotency key → whether that node's step was interrupted in flight (and re-run).
    let mut keys: std::collections::HashMap<String, bool> = Default::default();
    for id in &ids {
        let mut status = w.show(id)["status"].as_str().unwrap().to_string();
        *states.entry(status.clone()).or_insert(0) += 1;
        for _ in 0..4 {
            let ran = match status.as_str() {
                "paused" => w.run(&["approve", id, "--json"]),
                "queued" | "running" => w.run(&["resume", id, "--json"]),
                _ => break,
            };
            assert!(
                matches!(ran.code, 0 | 3),
                "run {id} ({status}): {}",
                ran.stderr
            );
            status = ran.json()["status"].as_str().unwrap().to_string();
        }
        assert_eq!(status, "succeeded", "run {id}");
        let r = w.show(id);
        no_step_completed_twice(&r);
        for node in ["start", "a", "b", "join", "gate", "c"] {
            assert_eq!(
                steps(&r, node)
                    .iter()
                    .filter(|s| s["status"] == "succeeded")
                    .count(),
                1,
                "run {id}: {node} completed once"
            );
        }
        for node in ["a", "c"] {
            let all = steps(&r, node);
            let done = all.iter().find(|s| s["status"] == "succeeded").unwrap();
            let key = done["attempts"][0]["request"]["idempotency_key"]
                .as_str()
                .unwrap()
                .to_string();
            let interrupted = all.iter().any(|s| {
                s["status"] == "cancelled"
                    && s["error"].as_str().unwrap_or("").contains("interrupted")
            });
            keys.insert(key, interrupted);
        }
    }
    // Side effects: grouped by idempotency key, a key seen twice belongs to a step that was
    // interrupted in flight, never to one that had completed.
    let mut twice = 0;
    for p in ["/effect/a", "/effect/c"] {
        let mut by_key: std::collections::HashMap<String, usize> = Default::default();
        for s in fake.seen(p) {
            *by_key
                .entry(s.headers["idempotency-key"].clone())
                .or_default() += 1;
        }
        for (key, n) in by_key {
            assert!(n <= 2, "{p}: key {key} delivered {n} times");
            if n == 2 {
                assert_eq!(
                    keys.get(&key),
                    Some(&true),
                    "{p}: key {key} was delivered twice but its step had not been interrupted"
                );
                twice += 1;
            }
        }
    }
    eprintln!(
        "crash suite: {runs} runs killed; states after the kills: {states:?}; side effects delivered twice (in flight at the kill, same key): {twice}"
    );
}

#[test]
fn two_resumes_of_a_dead_run_one_drives_the_other_conflicts() {
    let fake = Fake::start();
    fake.always(
        "/effect",
        Reply::text(200, "done").delayed(Duration::from_millis(300)),
    );
    let w = Weir::new();
    w.short_lease(0.5, 0.1);
    let f = w.file(
        "dead.yaml",
        &format!(
            "name: dead\nnodes:\n  - {{id: wait, type: tool, config: {{tool_name: delay, params: {{ms: 2000}}}}}}\n  - {{id: effect, type: tool, config: {{tool_name: http_request, params: {{method: POST, url: \"{}/effect\"}}}}}}\nedges:\n  - {{source: wait, target: effect}}\n",
            fake.url
        ),
    );
    let mut child = w.spawn(&["run", &f]);
    let lines = stderr_lines(&mut child);
    wait_until("the run id", || !lines.lock().unwrap().is_empty());
    let id = lines.lock().unwrap()[0][4..].to_string();
    signal(&child, Signal::SIGKILL);
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let a = w.spawn(&["resume", &id, "--json"]);
    let b = w.spawn(&["resume", &id, "--json"]);
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let mut codes = [a.status.code().unwrap(), b.status.code().unwrap()];
    codes.sort();
    assert_eq!(
        codes,
        [0, 5],
        "{}\n{}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
    let loser = if a.status.code() == Some(5) { &a } else { &b };
    assert!(
        String::from_utf8_lossy(&loser.stderr).contains("is being driven by"),
        "{}",
        String::from_utf8_lossy(&loser.stderr)
    );
    // The side effect happened once.
    assert_eq!(fake.seen("/effect").len(), 1);
    let r = w.show(&id);
    assert_eq!(r["status"], "succeeded");
    no_step_completed_twice(&r);
}
