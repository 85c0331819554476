//! The tracker and patches checked against whole snapshots, commit by commit.

use super::*;
use serde_json::json;

/// A snapshot whose state holds a document no node writes: patches leave it out.
fn snap() -> Snapshot {
    let mut s = Snapshot::default();
    let state = Arc::make_mut(&mut s.state);
    state.insert("input".into(), json!({"q": 1}));
    state.insert("doc".into(), json!("d".repeat(2 * WHOLE_BELOW)));
    s.pending = vec!["a".into()];
    s
}

/// Node `node_{i}` ran: completed, visited once more, and it wrote `last`; each change
/// told to the tracker first, as the scheduler tells it.
fn ran(now: &mut Snapshot, t: &mut Tracker, i: usize) {
    let id: NodeId = format!("node_{i}").into();
    t.touch_node(&id, now);
    now.completed.insert(id.clone());
    *now.visits.entry(id).or_default() += 1;
    Arc::make_mut(&mut now.state).insert("last".into(), json!(i));
    t.touch("last", None);
}

/// A stored whole snapshot with the patches written after it (as JSON), applied in order.
fn replay(whole: &Snapshot, patches: &[String]) -> Snapshot {
    let mut s: Snapshot = serde_json::from_str(&serde_json::to_string(whole).unwrap()).unwrap();
    for p in patches {
        let p: SnapshotPatch = serde_json::from_str(p).unwrap();
        p.apply(&mut s);
    }
    s
}

/// An agent's loop to go on from, as a decision leaves it.
fn resume() -> crate::record::Resume {
    crate::record::Resume {
        visit: 1,
        attempt: crate::record::Attempt {
            n: 1,
            status: crate::record::StepStatus::Running,
            error: None,
            error_class: None,
            duration_ms: 3,
            request: None,
            response: None,
            calls: Vec::new(),
            tool_calls: Vec::new(),
            cost_usd: 0.0,
        },
        decision: None,
    }
}

#[test]
fn patches_applied_in_order_rebuild_every_commit() {
    let mut now = snap();
    let whole = now.clone();
    let mut t = Tracker::new();
    let mut patches = Vec::new();
    for i in 0..(COMPACT_EVERY - 1) {
        let id = format!("n{i}");
        // A node ran: state written (flat and as a variable), bookkeeping moved.
        let state = Arc::make_mut(&mut now.state);
        state.insert(format!("k{}", i % 3), json!(i));
        t.touch(&format!("k{}", i % 3), None);
        let vars = state.entry("variables").or_insert_with(|| json!({}));
        vars.as_object_mut()
            .unwrap()
            .insert(id.clone(), json!({"i": i}));
        t.touch("variables", Some(&id));
        now.pending = vec![format!("n{}", i + 1).into()];
        let node: NodeId = id.as_str().into();
        t.touch_node(&node, &now);
        now.completed.insert(node.clone());
        if i % 4 == 3 {
            let before: NodeId = format!("n{}", i - 1).into();
            t.touch_node(&before, &now);
            now.completed.remove(&before);
        }
        *now.visits.entry(node).or_default() += 1;
        now.hops += 1;
        now.next_seq += 2;
        now.cost_usd += 0.25;
        now.usage.model_calls += 1;
        if i % 2 == 0 {
            now.output = Arc::new(json!({"last": i}).into());
            t.touch_output();
        }
        if i == 5 {
            now.loops.insert("l".into(), 2);
            now.arrivals
                .insert("m".into(), ["e1".to_string()].into_iter().collect());
            now.gates.push(PendingGate {
                node_id: "g".into(),
                prompt: "ok?".into(),
                seq: 3,
                kind: crate::record::GateKind::ToolCall,
                detail: Some(json!({"tool": "custom:crm"})),
            });
            now.resume.insert("a".into(), resume());
            t.touch_resume();
            now.history.insert(
                "p".into(),
                vec![StepPass {
                    pass: 1,
                    visible: vec![json!("x")],
                }],
            );
            t.touch_history("p");
            now.reuse.insert("r".into(), vec![]);
            t.touch_reuse();
        }
        if i == 8 {
            now.loops.remove("l");
            now.arrivals.remove("m");
            now.gates.clear();
            now.resume.clear();
            t.touch_resume();
            now.history.remove("p");
            t.touch_history("p");
            now.pass = 2;
        }
        let p = t.next(&now).expect("a patch between whole snapshots");
        patches.push(serde_json::to_string(&p).unwrap());
        assert_eq!(replay(&whole, &patches), now, "after commit {i}");
    }
    // The COMPACT_EVERY-th commit writes the whole snapshot; the next is a patch again,
    // of what changed since.
    assert!(t.next(&now).is_none());
    assert!(t.whole(), "the whole snapshot covers the patches");
    let whole = now.clone();
    Arc::make_mut(&mut now.state).insert("late".into(), json!(1));
    t.touch("late", None);
    let p = serde_json::to_string(&t.next(&now).unwrap()).unwrap();
    assert!(!p.contains("\"k1\""), "only the state written since: {p}");
    assert_eq!(replay(&whole, &[p]), now);
}

/// The nodes completed and visited grow with a run: after a driver's first write, a
/// patch carries only those that changed, so a long run's commits do not grow with it.
/// A patch an earlier weir wrote (both whole) still applies.
#[test]
fn a_patch_carries_the_completed_nodes_and_visits_that_changed() {
    let mut now = snap();
    for i in 0..200 {
        let id: NodeId = format!("node_{i}").into();
        now.completed.insert(id.clone());
        now.visits.insert(id, 1);
    }
    let whole = now.clone();
    let mut t = Tracker::new();
    let mut patches = Vec::new();
    let step = |now: &mut Snapshot, t: &mut Tracker, i: usize| {
        ran(now, t, i);
        serde_json::to_string(&t.next(now).unwrap()).unwrap()
    };
    let first = step(&mut now, &mut t, 200);
    assert!(
        first.contains("node_17"),
        "the first patch is whole: {first}"
    );
    patches.push(first);
    let second = step(&mut now, &mut t, 201);
    assert!(second.len() < 300, "{second}");
    assert!(
        second.contains(r#""completed_add":["node_201"]"#),
        "{second}"
    );
    assert!(
        second.contains(r#""visits_set":[["node_201",1]]"#),
        "{second}"
    );
    patches.push(second);
    // A node runs again (its count changes) and one leaves both.
    t.touch_node(&"node_5".into(), &now);
    now.completed.remove("node_5");
    now.visits.remove("node_5");
    let third = step(&mut now, &mut t, 7);
    assert!(third.contains(r#""completed_del":["node_5"]"#), "{third}");
    assert!(third.contains(r#""visits_set":[["node_7",2]]"#), "{third}");
    assert!(third.contains(r#""visits_del":["node_5"]"#), "{third}");
    patches.push(third);
    assert_eq!(replay(&whole, &patches), now);
    // After a whole snapshot the store holds the driver's lists: the patches after it
    // carry their changes only. A new driver's first patch carries them whole.
    assert!(t.whole());
    let whole = now.clone();
    let again = step(&mut now, &mut t, 300);
    assert!(!again.contains("node_17"), "{again}");
    assert!(again.contains(r#""completed_add":["node_300"]"#), "{again}");
    let after = step(&mut now, &mut t, 301);
    assert!(!after.contains("node_17"), "{after}");
    assert_eq!(replay(&whole, &[again, after]), now);
    let mut t = Tracker::new();
    let first = step(&mut now, &mut t, 302);
    assert!(first.contains("node_17"), "{first}");

    let earlier = r#"{"loops":{},"pending":[],"completed":["a","b"],"arrivals":{},
        "hops":2,"visits":{"a":1,"b":3},"next_seq":4,"cost_usd":0.0,"gates":[],"pass":0}"#;
    let back = replay(&whole, &[earlier.to_string()]);
    assert_eq!(
        back.completed,
        ["a".into(), "b".into()].into_iter().collect()
    );
    assert_eq!(
        back.visits,
        [("a".into(), 1), ("b".into(), 3)].into_iter().collect()
    );
}

/// A run that has completed many nodes writes its (large) whole snapshot less often:
/// every quarter of those nodes' worth of commits, not every `COMPACT_EVERY`.
#[test]
fn a_long_runs_whole_snapshot_is_written_at_an_interval_that_grows_with_it() {
    let mut now = snap();
    for i in 0..200 {
        now.completed.insert(format!("node_{i}").into());
    }
    let mut t = Tracker::new();
    let mut wholes = Vec::new();
    for i in 0..120 {
        Arc::make_mut(&mut now.state).insert(format!("k{i}"), json!(i));
        t.touch(&format!("k{i}"), None);
        if t.next(&now).is_none() {
            t.whole();
            wholes.push(i);
        }
    }
    assert_eq!(wholes, [49, 99], "every 200 / 4 commits");
}

#[test]
fn a_commit_that_changed_everything_writes_the_whole_snapshot() {
    let mut now = Snapshot::default();
    let mut t = Tracker::new();
    Arc::make_mut(&mut now.state).insert("last".into(), json!("reply"));
    t.touch("last", None);
    now.output = Arc::new(json!("reply").into());
    t.touch_output();
    assert!(t.next(&now).is_none(), "nothing to leave out");
    assert!(
        t.whole(),
        "a drive's first whole snapshot covers an earlier driver's patches"
    );
    now.output = Arc::new(json!("again").into());
    t.touch_output();
    Arc::make_mut(&mut now.state).insert("last".into(), json!("again"));
    t.touch("last", None);
    assert!(t.next(&now).is_none(), "nothing to leave out");
    assert!(!t.whole(), "no patch since the last whole snapshot");
    now.output = Arc::new(json!("next").into());
    t.touch_output();
    assert!(
        t.next(&now).is_none(),
        "`last` is left out, but it is small: the whole snapshot is the cheaper write"
    );
    t.whole();
    Arc::make_mut(&mut now.state).insert("doc".into(), json!("d".repeat(WHOLE_BELOW)));
    now.output = Arc::new(json!("after").into());
    t.touch_output();
    assert!(t.next(&now).is_some(), "`doc` is left out, and it is large");
}

/// What a patch leaves out is weighed: a run whose state holds a few small values no
/// node writes (its input, typically) writes the whole snapshot at every commit, one
/// row; a run with a large untouched value, or many nodes completed, writes patches.
#[test]
fn a_small_left_out_part_writes_the_whole_snapshot_a_large_one_a_patch() {
    let mut now = Snapshot::default();
    Arc::make_mut(&mut now.state).insert("topic".into(), json!("rivers"));
    let mut t = Tracker::new();
    let mut wholes = 0;
    for i in 0..200 {
        ran(&mut now, &mut t, i);
        now.output = Arc::new(json!(i).into());
        t.touch_output();
        match t.next(&now) {
            None => {
                t.whole();
                wholes += 1;
            }
            Some(p) => {
                let p = serde_json::to_string(&p).unwrap();
                assert!(i >= 40, "node {i}: the left-out part is still small: {p}");
                assert!(!p.contains("rivers"), "{p}");
            }
        }
    }
    // Whole snapshots until the lists of completed and visited nodes pass a kilobyte
    // (about 45 nodes), then one every quarter of the nodes' worth of commits.
    assert!((40..60).contains(&wholes), "{wholes} whole snapshots");
}

/// After a whole snapshot of a long run, the next patch carries the bookkeeping's
/// changes, not its lists whole: the driver kept what the store now holds.
#[test]
fn a_long_run_after_a_whole_snapshot_patches_only_the_changes() {
    let mut now = snap();
    for i in 0..100 {
        let id: NodeId = format!("node_{i}").into();
        now.completed.insert(id.clone());
        now.visits.insert(id, 1);
    }
    let mut t = Tracker::new();
    let mut sizes = Vec::new();
    let mut patches = Vec::new();
    let mut whole = now.clone();
    for i in 100..160 {
        ran(&mut now, &mut t, i);
        match t.next(&now) {
            None => {
                t.whole();
                whole = now.clone();
                patches.clear();
                sizes.push(0);
            }
            Some(p) => {
                let p = serde_json::to_string(&p).unwrap();
                sizes.push(p.len());
                patches.push(p);
                assert_eq!(replay(&whole, &patches), now, "after node {i}");
            }
        }
    }
    // The first commit patches with the lists whole (the driver did not know them);
    // the whole snapshot comes at the compaction interval (25 commits at 100 nodes);
    // every patch after it carries one node's changes.
    assert!(sizes[0] > 1000, "{sizes:?}");
    let at = sizes
        .iter()
        .position(|n| *n == 0)
        .expect("a whole snapshot");
    assert!(sizes[at + 1..].iter().all(|n| *n < 300), "{sizes:?}");
}

/// Debug builds check the changes a driver told against a walk of both lists: a change
/// the tracker was not told is caught at the next patch, not when a run taken over
/// reads a wrong snapshot.
#[test]
#[should_panic(expected = "without the Tracker being told")]
fn a_change_not_told_to_the_tracker_is_caught_in_debug_builds() {
    let mut now = snap();
    for i in 0..40 {
        now.completed.insert(format!("done_{i}").into());
    }
    let mut t = Tracker::new();
    for i in 0..3 {
        let id: NodeId = format!("n{i}").into();
        if i < 2 {
            t.touch_node(&id, &now);
        }
        now.completed.insert(id);
        Arc::make_mut(&mut now.state).insert("last".into(), json!(i));
        t.touch("last", None);
        assert!(t.next(&now).is_some());
    }
}

#[test]
fn a_patch_carries_only_the_state_written_since_the_last_write() {
    let mut now = snap();
    Arc::make_mut(&mut now.state).insert("big".into(), json!("x".repeat(10_000)));
    let mut t = Tracker::new();
    Arc::make_mut(&mut now.state).insert("small".into(), json!(1));
    t.touch("small", None);
    let text = serde_json::to_string(&t.next(&now).unwrap()).unwrap();
    assert!(text.len() < 300, "{text}");
    assert!(
        text.contains(r#""state":[{"key":"small","value":1}]"#),
        "{text}"
    );
    assert!(
        !text.contains("output"),
        "an unchanged output is left out: {text}"
    );
}
