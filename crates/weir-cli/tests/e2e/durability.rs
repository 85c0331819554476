//! Crash recovery: a run whose process is killed continues with `weir resume`.

use std::time::Duration;

use serde_json::json;

use crate::support::{Fake, Reply, Weir, steps, wait_until};

/// A fake whose `/first` answers "one" and `/second` "two", except that the first call to
/// `/second` hangs (the process is killed meanwhile).
fn second_hangs_once() -> Fake {
    let fake = Fake::start();
    fake.always("/first", Reply::text(200, "one"));
    fake.queue(
        "/second",
        vec![Reply::text(200, "never").delayed(Duration::from_secs(120))],
    );
    fake.always("/second", Reply::text(200, "two"));
    fake
}

#[test]
fn resume_after_kill_reruns_only_the_step_in_flight() {
    let fake = second_hangs_once();
    fake.always("/third", Reply::text(200, "three"));
    let w = Weir::new();
    w.short_lease(1.0, 0.25);
    let f = w.file("chain.json", &format!(r#"{{"name": "chain", "nodes": [
        {{"id": "first", "type": "tool", "config": {{"tool_name": "http_request", "params": {{"url": "{u}/first"}}}}}},
        {{"id": "second", "type": "tool", "config": {{"tool_name": "http_request", "params": {{"url": "{u}/second"}}}}}},
        {{"id": "third", "type": "tool", "config": {{"tool_name": "http_request", "params": {{"url": "{u}/third?got={{second.body}}"}}}}}}],
      "edges": [{{"source": "first", "target": "second"}}, {{"source": "second", "target": "third"}}]}}"#, u = fake.url));
    // The input stays in state untouched, and it is more than a kilobyte: each step commit
    // writes a snapshot patch (what the step changed), not the whole snapshot (DESIGN §8).
    let input = json!({"ticket": "T-1", "brief": "b".repeat(2048)}).to_string();
    let mut child = w.spawn(&["run", &f, "--input", &input, "--json"]);
    wait_until("the second step to start", || {
        fake.seen("/second").len() == 1
    });
    child.kill().expect("kill -9");
    child.wait().expect("reap");

    let list = w.run(&["runs", "list", "--json"]).json();
    let id = list[0]["run_id"].as_str().unwrap().to_string();
    assert_eq!(list[0]["status"], "running");
    let before = w.show(&id);
    assert_eq!(steps(&before, "first")[0]["status"], "succeeded");
    assert_eq!(steps(&before, "second")[0]["status"], "running");
    // The killed driver's last commit is a patch on the run's whole snapshot; a reader sees
    // both together.
    let db = rusqlite::Connection::open(w.path("weir.db")).expect("open the database");
    let patches: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM run_patches WHERE run_key = (SELECT key FROM runs WHERE id = ?1)",
            [&id],
            |r| r.get(0),
        )
        .expect("count patches");
    assert_eq!(patches, 1, "the first step's commit is a patch");
    assert_eq!(before["state"]["ticket"], "T-1");
    assert_eq!(before["state"]["first"]["body"], "one");

    // The killed driver's lease is still alive: resume refuses, saying who holds it and
    // when it expires (exit 5, a conflict). Once it expired, resume takes the run over.
    let early = w.run(&["resume", &id, "--json"]);
    assert_eq!(early.code, 5, "{}", early.stderr);
    assert!(
        early.stderr.contains("is being driven by") && early.stderr.contains("expires at"),
        "{}",
        early.stderr
    );
    std::thread::sleep(Duration::from_millis(1200));
    let ran = w.run(&["resume", &id, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["status"], "succeeded");
    // Completed steps were not executed again; the one in flight was.
    assert_eq!(fake.seen("/first").len(), 1);
    assert_eq!(fake.seen("/second").len(), 2);
    assert_eq!(fake.seen("/third").len(), 1);
    // The re-run's output flowed on into the next step's template.
    assert_eq!(fake.seen("/third")[0].query, "got=two");
    let second = steps(&r, "second");
    assert_eq!(second.len(), 2);
    assert_eq!(second[0]["status"], "cancelled");
    assert!(second[0]["error"].as_str().unwrap().contains("interrupted"));
    assert_eq!(second[1]["status"], "succeeded");
    assert_eq!(r["state"]["second"]["body"], "two");
    assert_eq!(r["state"]["ticket"], "T-1");
    assert_eq!(r["state"]["first"]["body"], "one");
    let left: i64 = db
        .query_row("SELECT COUNT(*) FROM run_patches", [], |r| r.get(0))
        .expect("count patches");
    assert_eq!(
        left, 0,
        "the run's end wrote its whole snapshot and deleted the patches"
    );
    // The re-run carried the same idempotency key as the interrupted request.
    let keys: Vec<_> = fake
        .seen("/second")
        .iter()
        .map(|s| s.headers["idempotency-key"].clone())
        .collect();
    assert_eq!(keys[0], keys[1]);
    let resumed: Vec<&serde_json::Value> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "run_resumed")
        .collect();
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0]["epoch"], json!(2));
    assert!(resumed[0]["took_over_from"].is_string(), "{}", resumed[0]);
    // The event log is gap-free.
    let seqs: Vec<u64> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    // A finished run cannot be resumed: a conflict.
    let again = w.run(&["resume", &id]);
    assert_eq!(again.code, 5, "{}", again.stderr);
    assert!(again.stderr.contains("already ended"), "{}", again.stderr);
}

/// `?sync=full` on the database's URL: every commit is on disk before it returns (the
/// write-ahead log synced after each commit). A run killed mid-step resumes from what was committed, as without
/// it; an unknown sync mode is a usage error.
#[test]
fn a_full_sync_database_resumes_after_kill() {
    let fake = second_hangs_once();
    let plain = Weir::new();
    let url = format!("sqlite://{}?sync=full", plain.path("weir.db").display());
    let w = plain.env("WEIR_DB", &url);
    w.short_lease(1.0, 0.25);
    let f = w.file("two.json", &format!(r#"{{"name": "two", "nodes": [
        {{"id": "first", "type": "tool", "config": {{"tool_name": "http_request", "params": {{"url": "{u}/first"}}}}}},
        {{"id": "second", "type": "tool", "config": {{"tool_name": "http_request", "params": {{"url": "{u}/second?got={{first.body}}"}}}}}}],
      "edges": [{{"source": "first", "target": "second"}}]}}"#, u = fake.url));
    let mut child = w.spawn(&["run", &f, "--json"]);
    wait_until("the second step to start", || {
        fake.seen("/second").len() == 1
    });
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    assert!(
        w.path("weir.db").exists(),
        "the database is the URL's path, without its `?sync=full`"
    );

    let id = w.run(&["runs", "list", "--json"]).json()[0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let before = w.show(&id);
    assert_eq!(steps(&before, "first")[0]["status"], "succeeded");
    assert_eq!(before["state"]["first"]["body"], "one");
    std::thread::sleep(Duration::from_millis(1200));
    let ran = w.run(&["resume", &id, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["status"], "succeeded");
    assert_eq!(
        fake.seen("/first").len(),
        1,
        "the committed step is not run again"
    );
    assert_eq!(fake.seen("/second")[1].query, "got=one");

    let bad = w.run_with(&["runs", "list"], &[("WEIR_DB", &format!("{url}x"))]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("unknown sync mode `fullx`"),
        "{}",
        bad.stderr
    );
}
