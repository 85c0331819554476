//! The scheduling rules of DESIGN §2, through the binary.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Fake, Reply, Weir, steps, wait_until};

fn node_ids(r: &serde_json::Value) -> Vec<String> {
    r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["node_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_merge_after_a_condition_does_not_hang() {
    let w = Weir::new();
    let f = w.file(
        "m.yaml",
        r#"
name: merge-after-condition
nodes:
  - {id: start, type: agent, config: {model: mock, user_message: "go"}}
  - {id: check, type: condition, config: {expression: "flag"}}
  - {id: yes, type: agent, config: {model: mock, user_message: "yes branch"}}
  - {id: no, type: agent, config: {model: mock, user_message: "no branch"}}
  - {id: side, type: agent, config: {model: mock, user_message: "side branch"}}
  - {id: join, type: merge}
  - {id: after, type: agent, config: {model: mock, user_message: "after {join_seen}"}}
edges:
  - {source: start, target: check}
  - {source: start, target: side}
  - {source: check, target: "yes", condition_value: "true"}
  - {source: check, target: "no", condition_value: "false"}
  - {source: "yes", target: join}
  - {source: "no", target: join}
  - {source: side, target: join}
  - {source: join, target: after}
"#,
    );
    for (flag, taken, skipped) in [(true, "yes", "no"), (false, "no", "yes")] {
        let input = json!({"flag": flag, "join_seen": "joined"}).to_string();
        let ran = w.run(&["run", &f, "--input", &input, "--json"]);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        let r = ran.json();
        assert_eq!(r["status"], "succeeded");
        let ids = node_ids(&r);
        assert!(ids.contains(&taken.to_string()));
        assert!(!ids.contains(&skipped.to_string()));
        // The merge ran once, after both live branches, and then `after` ran.
        assert_eq!(steps(&r, "join").len(), 1);
        assert_eq!(steps(&r, "join")[0]["output"], json!({"merged": true}));
        let pos = |id: &str| ids.iter().position(|x| x == id).unwrap();
        assert!(pos("join") > pos(taken) && pos("join") > pos("side"));
        assert_eq!(ids.last().unwrap(), "after");
    }
}

#[test]
fn validate_warns_about_a_merge_behind_a_condition() {
    let w = Weir::new();
    let f = w.file("m.json", r#"{"nodes": [
        {"id": "c", "type": "condition", "config": {"expression": "x"}},
        {"id": "a", "type": "merge"}, {"id": "b", "type": "agent", "config": {"model": "mock", "user_message": "b"}}],
      "edges": [{"source": "c", "target": "b", "condition_value": "true"},
                {"source": "c", "target": "a", "condition_value": "false"},
                {"source": "b", "target": "a"}]}"#);
    let ran = w.run(&["validate", &f, "--json"]);
    assert_eq!(ran.code, 0);
    let v = ran.json()[0].clone();
    assert_eq!(v["warnings"][0]["code"], "W103");
}

#[test]
fn a_loop_reruns_its_body_up_to_max_iterations() {
    let w = Weir::new();
    let f = w.file("loop.json", r#"{"nodes": [
        {"id": "draft", "type": "agent", "config": {"model": "mock", "user_message": "draft", "output_key": "confidence"}},
        {"id": "refine", "type": "loop", "config": {"expression": "True", "max_iterations": 3}},
        {"id": "improve", "type": "agent", "config": {"model": "mock", "user_message": "improve {confidence}"}},
        {"id": "check", "type": "tool", "config": {"tool_name": "delay", "params": {"ms": 1}}},
        {"id": "publish", "type": "agent", "config": {"model": "mock", "user_message": "publish"}}],
      "edges": [{"source": "draft", "target": "refine"},
                {"source": "refine", "target": "improve", "condition_value": "true"},
                {"source": "improve", "target": "check"},
                {"source": "check", "target": "refine"},
                {"source": "refine", "target": "publish", "condition_value": "false"}]}"#);
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(steps(&r, "improve").len(), 3);
    assert_eq!(steps(&r, "check").len(), 3);
    let loops = steps(&r, "refine");
    assert_eq!(loops.len(), 4);
    let iters: Vec<_> = loops
        .iter()
        .map(|s| {
            (
                s["output"]["iteration"].clone(),
                s["output"]["continue"].clone(),
            )
        })
        .collect();
    assert_eq!(
        iters,
        vec![
            (json!(1), json!(true)),
            (json!(2), json!(true)),
            (json!(3), json!(true)),
            (json!(4), json!(false))
        ]
    );
    assert_eq!(steps(&r, "publish").len(), 1);
    // The counter is internal: not in public state.
    assert!(
        r["state"]
            .as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("__"))
    );
    // Visits count up, so each pass has its own step.
    assert_eq!(steps(&r, "improve")[2]["visit"], 3);
}

/// A long run with a loop, killed while its loop goes round and resumed: its step commits
/// write snapshot patches (a 2 KB input no node writes is left out of them), which carry
/// only the nodes whose completion or visit count changed (the loop re-arms its body: those
/// nodes are no longer completed). In this debug build every patch's changes are also
/// checked against a walk of both lists, and the run taken over reads the snapshot back
/// from the whole one and the patches after it.
#[test]
fn a_long_run_with_a_loop_patches_its_snapshot_and_resumes_from_it() {
    let fake = Fake::start();
    fake.always("/tick", Reply::text(200, "ok"));
    // The third pass's request hangs once: the process is killed while it waits.
    fake.queue(
        "/slow",
        vec![
            Reply::text(200, "1"),
            Reply::text(200, "2"),
            Reply::text(200, "hang").delayed(Duration::from_secs(120)),
        ],
    );
    fake.always("/slow", Reply::text(200, "3"));
    let w = Weir::new();
    w.short_lease(1.0, 0.25);
    let mut nodes = vec![json!({"id": "start", "type": "merge"})];
    let mut edges = Vec::new();
    let mut last = "start".to_string();
    for i in 0..40 {
        let id = format!("prep_{i}");
        nodes.push(json!({"id": id, "type": "merge"}));
        edges.push(json!({"source": last, "target": id}));
        last = id;
    }
    nodes.extend([
        json!({"id": "refine", "type": "loop", "config": {"expression": "True", "max_iterations": 4}}),
        json!({"id": "tick", "type": "tool", "config": {"tool_name": "http_request", "params": {"url": format!("{}/tick", fake.url)}}}),
        json!({"id": "slow", "type": "tool", "config": {"tool_name": "http_request", "params": {"url": format!("{}/slow", fake.url)}}}),
        json!({"id": "publish", "type": "merge"}),
    ]);
    edges.extend([
        json!({"source": last, "target": "refine"}),
        json!({"source": "refine", "target": "tick", "condition_value": "true"}),
        json!({"source": "tick", "target": "slow"}),
        json!({"source": "slow", "target": "refine"}),
        json!({"source": "refine", "target": "publish", "condition_value": "false"}),
    ]);
    let f = w.file(
        "long.json",
        &json!({"name": "long", "nodes": nodes, "edges": edges}).to_string(),
    );
    let input = json!({"brief": "b".repeat(2048)}).to_string();
    let mut child = w.spawn(&["run", &f, "--input", &input, "--json"]);
    wait_until("the third pass to wait, or the run to end", || {
        fake.seen("/slow").len() == 3 || child.try_wait().expect("wait").is_some()
    });
    assert!(
        child.try_wait().expect("wait").is_none(),
        "the run ended before its third pass (a panic?)"
    );
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    let list = w.run(&["runs", "list", "--json"]).json();
    let id = list[0]["run_id"].as_str().unwrap().to_string();
    let db = rusqlite::Connection::open(w.path("weir.db")).expect("open the database");
    let patches: i64 = db
        .query_row("SELECT COUNT(*) FROM run_patches", [], |r| r.get(0))
        .expect("count patches");
    assert!(patches > 0, "the killed driver's last commits are patches");
    std::thread::sleep(Duration::from_millis(1200));
    let ran = w.run(&["resume", &id, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["status"], "succeeded");
    // Every node before the loop ran once; the loop's body four times, the interrupted
    // request again; nothing ran twice that had finished.
    assert_eq!(steps(&r, "prep_39").len(), 1);
    assert_eq!(fake.seen("/tick").len(), 4);
    assert_eq!(fake.seen("/slow").len(), 5);
    assert_eq!(steps(&r, "refine").len(), 5);
    assert_eq!(steps(&r, "publish").len(), 1);
    assert_eq!(r["state"]["brief"].as_str().map(str::len), Some(2048));
    assert_eq!(r["state"]["slow"]["body"], "3");
    let left: i64 = db
        .query_row("SELECT COUNT(*) FROM run_patches", [], |r| r.get(0))
        .expect("count patches");
    assert_eq!(left, 0, "the end's whole snapshot covers them");
}

#[test]
fn a_loop_exits_when_its_expression_turns_false() {
    let w = Weir::new().env(
        "WEIR_MOCK",
        r#"[{"match": "improve", "reply": "95", "times": 1}, {"match": "draft", "reply": "40"}]"#,
    );
    let f = w.file("loop.json", r#"{"nodes": [
        {"id": "draft", "type": "agent", "config": {"model": "mock", "user_message": "draft", "output_key": "confidence"}},
        {"id": "refine", "type": "loop", "config": {"expression": "int(confidence) < 80", "max_iterations": 5}},
        {"id": "improve", "type": "agent", "config": {"model": "mock", "user_message": "improve {confidence}", "output_key": "confidence"}},
        {"id": "publish", "type": "agent", "config": {"model": "mock", "user_message": "publish {confidence}"}}],
      "edges": [{"source": "draft", "target": "refine"},
                {"source": "refine", "target": "improve", "condition_value": "true"},
                {"source": "improve", "target": "refine"},
                {"source": "refine", "target": "publish", "condition_value": "false"}]}"#);
    let r = w.run(&["run", &f, "--json"]).json();
    assert_eq!(r["status"], "succeeded");
    assert_eq!(steps(&r, "improve").len(), 1);
    assert_eq!(r["state"]["confidence"], "95");
}

#[test]
fn the_hop_ceiling_stops_a_runaway_loop() {
    let w = Weir::new();
    let f = w.file(
        "spin.json",
        r#"{"hop_ceiling": 9, "nodes": [
        {"id": "start", "type": "agent", "config": {"model": "mock", "user_message": "go"}},
        {"id": "spin", "type": "loop", "config": {"expression": "True", "max_iterations": 1000}},
        {"id": "work", "type": "tool", "config": {"tool_name": "delay", "params": {"ms": 0}}},
        {"id": "never", "type": "agent", "config": {"model": "mock", "user_message": "x"}}],
      "edges": [{"source": "start", "target": "spin"},
                {"source": "spin", "target": "work", "condition_value": "true"},
                {"source": "work", "target": "spin"},
                {"source": "spin", "target": "never", "condition_value": "false"}]}"#,
    );
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 1);
    let r = ran.json();
    assert_eq!(r["status"], "failed");
    assert_eq!(r["error"]["code"], "hop_ceiling_exceeded");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("hop ceiling of 9")
    );
    assert_eq!(r["steps"].as_array().unwrap().len(), 9);
}

#[test]
fn a_failing_node_cancels_its_in_flight_siblings() {
    let fake = Fake::start();
    fake.always("/fail", Reply::text(503, "down"));
    let w = Weir::new();
    let f = w.file("fan.json", &format!(r#"{{"nodes": [
        {{"id": "start", "type": "agent", "config": {{"model": "mock", "user_message": "go"}}}},
        {{"id": "slow", "type": "tool", "config": {{"tool_name": "delay", "params": {{"seconds": 20}}}}}},
        {{"id": "broken", "type": "tool", "config": {{"tool_name": "http_request", "params": {{"url": "{}/fail"}}}}}},
        {{"id": "after", "type": "agent", "config": {{"model": "mock", "user_message": "after"}}}}],
      "edges": [{{"source": "start", "target": "slow"}}, {{"source": "start", "target": "broken"}},
                {{"source": "slow", "target": "after"}}]}}"#, fake.url));
    let t = Instant::now();
    let ran = w.run(&["run", &f, "--json"]);
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "the slow sibling was not cancelled"
    );
    assert_eq!(ran.code, 1);
    let r = ran.json();
    assert_eq!(r["error"]["node_id"], "broken");
    assert!(r["error"]["message"].as_str().unwrap().contains("HTTP 503"));
    assert_eq!(steps(&r, "slow")[0]["status"], "cancelled");
    assert!(
        steps(&r, "slow")[0]["error"]
            .as_str()
            .unwrap()
            .contains("`broken` failed")
    );
    assert!(steps(&r, "after").is_empty());
}

#[test]
fn each_attempt_runs_under_the_timeout_and_is_retried() {
    let fake = Fake::start();
    fake.queue(
        "/slow",
        vec![Reply::text(200, "late").delayed(Duration::from_secs(10))],
    );
    fake.always("/slow", Reply::text(200, "fast"));
    let w = Weir::new();
    let f = w.file("t.json", &format!(r#"{{"nodes": [
        {{"id": "fetch", "type": "tool", "config": {{"tool_name": "http_request", "timeout_seconds": 0.5, "retry_count": 1,
           "params": {{"url": "{}/slow"}}}}}}], "edges": []}}"#, fake.url));
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    let a = steps(&r, "fetch")[0]["attempts"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["error"], "attempt timed out after 0.5s");
    assert_eq!(a[0]["error_class"], "timeout");
    assert_eq!(r["state"]["fetch"]["body"], "fast");
    // Both attempts carried the same idempotency key.
    let keys: Vec<String> = fake
        .seen("/slow")
        .iter()
        .map(|s| s.headers["idempotency-key"].clone())
        .collect();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1]);
}

#[test]
fn fan_out_branches_run_concurrently() {
    let w = Weir::new();
    let f = w.file(
        "fan.json",
        r#"{"nodes": [
        {"id": "a", "type": "tool", "config": {"tool_name": "delay", "params": {"seconds": 1}}},
        {"id": "b", "type": "tool", "config": {"tool_name": "delay", "params": {"seconds": 1}}},
        {"id": "c", "type": "tool", "config": {"tool_name": "delay", "params": {"seconds": 1}}},
        {"id": "d", "type": "tool", "config": {"tool_name": "delay", "params": {"seconds": 1}}},
        {"id": "j", "type": "merge"}],
      "edges": [{"source": "a", "target": "j"}, {"source": "b", "target": "j"},
                {"source": "c", "target": "j"}, {"source": "d", "target": "j"}]}"#,
    );
    let r = w.run(&["run", &f, "--json"]).json();
    assert_eq!(r["status"], "succeeded");
    // Four one-second delays overlapped: every one started before any finished.
    let starts: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| steps(&r, n)[0]["started_at"].as_str().unwrap().to_string())
        .collect();
    let ends: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| steps(&r, n)[0]["finished_at"].as_str().unwrap().to_string())
        .collect();
    assert!(starts.iter().max().unwrap() < ends.iter().min().unwrap());
}

#[test]
fn expression_errors_fail_the_node_instead_of_counting_as_false() {
    let w = Weir::new();
    for (expr, needle) in [
        ("missing_name > 3", "undefined"),
        ("len('a' * 2000000000) > 0", ""),
    ] {
        let f = w.file(
            "e.json",
            &format!(
                r#"{{"nodes": [
            {{"id": "check", "type": "condition", "config": {{"expression": "{expr}"}}}},
            {{"id": "t", "type": "agent", "config": {{"model": "mock", "user_message": "t"}}}},
            {{"id": "f", "type": "agent", "config": {{"model": "mock", "user_message": "f"}}}}],
          "edges": [{{"source": "check", "target": "t", "condition_value": "true"}},
                    {{"source": "check", "target": "f", "condition_value": "false"}}]}}"#
            ),
        );
        let ran = w.run(&["run", &f, "--json"]);
        assert_eq!(ran.code, 1, "{expr}: {}", ran.stderr);
        let r = ran.json();
        assert_eq!(r["error"]["node_id"], "check");
        assert!(
            r["error"]["message"].as_str().unwrap().contains(needle),
            "{}",
            r["error"]
        );
        assert_eq!(r["steps"].as_array().unwrap().len(), 1);
    }
}

#[test]
fn an_end_node_sets_status_and_output() {
    let w = Weir::new();
    let f = w.file(
        "end.yaml",
        r#"
nodes:
  - {id: a, type: agent, config: {model: mock, user_message: "hello {who}"}}
  - {id: stop, type: end, config: {status: aborted, output: {said: "{a}", who: "{who}"}}}
edges:
  - {source: a, target: stop}
"#,
    );
    let ran = w.run(&["run", &f, "--input", r#"{"who": "Ada"}"#, "--json"]);
    assert_eq!(ran.code, 4);
    let r = ran.json();
    assert_eq!(r["status"], "aborted");
    assert_eq!(
        r["output"],
        json!({"said": "mock reply to: hello Ada", "who": "Ada"})
    );
}

#[test]
fn output_is_the_last_nodes_output_without_an_end_node() {
    let w = Weir::new();
    let f = w.file("o.json", r#"{"nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "hi"}}], "edges": []}"#);
    let r = w.run(&["run", &f, "--json"]).json();
    assert_eq!(r["output"]["text"], "mock reply to: hi");
    assert!(r["finished_at"].is_string());
    assert!(r["duration_ms"].is_u64());
}
