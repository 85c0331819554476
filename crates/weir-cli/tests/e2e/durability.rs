//! Crash recovery: a run whose process is killed continues with `weir resume`.

use std::time::Duration;

use serde_json::json;

use crate::support::{Fake, Reply, Weir, steps, wait_until};

#[test]
fn resume_after_kill_reruns_only_the_step_in_flight() {
    let fake = Fake::start();
    fake.always("/first", Reply::text(200, "one"));
    // The first call to /second hangs (the process is killed meanwhile); later ones answer.
    fake.queue(
        "/second",
        vec![Reply::text(200, "never").delayed(Duration::from_secs(120))],
    );
    fake.always("/second", Reply::text(200, "two"));
    fake.always("/third", Reply::text(200, "three"));
    let w = Weir::new();
    let f = w.file("chain.json", &format!(r#"{{"name": "chain", "nodes": [
        {{"id": "first", "type": "tool", "config": {{"tool_name": "http_request", "params": {{"url": "{u}/first"}}}}}},
        {{"id": "second", "type": "tool", "config": {{"tool_name": "http_request", "params": {{"url": "{u}/second"}}}}}},
        {{"id": "third", "type": "tool", "config": {{"tool_name": "http_request", "params": {{"url": "{u}/third?got={{second.body}}"}}}}}}],
      "edges": [{{"source": "first", "target": "second"}}, {{"source": "second", "target": "third"}}]}}"#, u = fake.url));
    let mut child = w.spawn(&["run", &f, "--json"]);
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
    // The re-run carried the same idempotency key as the interrupted request.
    let keys: Vec<_> = fake
        .seen("/second")
        .iter()
        .map(|s| s.headers["idempotency-key"].clone())
        .collect();
    assert_eq!(keys[0], keys[1]);
    assert!(
        r["events"]
            .as_array()
            .unwrap()
            .contains(&json!({"type": "run_resumed", "at": r["events"][0]["at"]}))
    );
    // A finished run cannot be resumed.
    assert_eq!(w.run(&["resume", &id]).code, 2);
}
