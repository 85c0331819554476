//! Snapshot patches: the lean durable path (DESIGN §8).

use super::*;

/// The lean durable path: commits that carry a patch instead of the whole snapshot (with a
/// whole one every `COMPACT_EVERY` commits) leave the same snapshot for a reader, for a
/// driver taking the run over after a crash, and after the run ends.
pub(super) async fn patched_commits_rebuild_the_snapshot(f: Fixture) {
    use weir_core::patch::{COMPACT_EVERY, Tracker};
    let s = f.store.clone();
    let mut n = new_run("p1");
    n.claim = Some(claim("alice", 60));
    // An input no commit writes again, larger than `WHOLE_BELOW`: every patch leaves it out.
    Arc::make_mut(&mut n.snapshot.state).insert(
        "input".into(),
        json!({"doc": "x".repeat(2 * weir_core::patch::WHOLE_BELOW)}),
    );
    let lease = s.create_run(n.clone()).await.unwrap().lease.unwrap();
    let mut now = n.snapshot.clone();
    let mut tracker = Tracker::new();
    let commits = COMPACT_EVERY + 5;
    for i in 1..=commits {
        let node = format!("n{i}");
        let mut st = step(i, &node, StepStatus::Succeeded);
        st.finished_at = Some(weir_core::store::Stamp::now());
        let state = Arc::make_mut(&mut now.state);
        state.insert(
            format!("k{}", i % 4),
            json!({"i": i, "text": "x".repeat(i as usize)}),
        );
        tracker.touch(&format!("k{}", i % 4), None);
        tracker.touch_output();
        // Each change of the completed nodes or visit counts is told first, as the engine
        // tells it.
        let id: weir_core::record::NodeId = node.as_str().into();
        tracker.touch_node(&id, &now);
        now.completed.insert(id.clone());
        now.pending = vec![format!("n{}", i + 1).into()];
        *now.visits.entry(id).or_default() += 1;
        // A loop goes round: a node completed before runs again, and one visit count
        // goes (patches carry what changed in both since the last write).
        if i % 5 == 0 {
            let again: weir_core::record::NodeId = format!("n{}", i - 2).into();
            tracker.touch_node(&again, &now);
            now.completed.remove(&again);
            tracker.touch_node(&"n1".into(), &now);
            *now.visits.entry("n1".into()).or_default() += 1;
        }
        if i == 7 {
            tracker.touch_node(&"n3".into(), &now);
            now.visits.remove("n3");
        }
        now.hops = i;
        now.next_seq = i + 1;
        now.cost_usd = 0.5 * f64::from(i);
        now.output = Arc::new(json!({"last": i}).into());
        let patch = tracker.next(&now);
        let covers_patches = patch.is_none() && tracker.whole();
        assert_eq!(patch.is_none(), i == COMPACT_EVERY, "commit {i}");
        s.commit_step(
            &lease,
            StepCommit {
                step: &st,
                started: &[],
                snapshot: &now,
                patch: patch.as_ref(),
                covers_patches,
                events: vec![finished(i, &node, 1)],
            },
        )
        .await
        .unwrap();
        if i == COMPACT_EVERY - 1 {
            let kept = f.patches_kept("p1").await;
            assert!(
                kept.is_none_or(|n| n == i64::from(i)),
                "{kept:?} patches kept"
            );
        }
        if i == COMPACT_EVERY {
            // The whole snapshot covers (and clears) the patches before it.
            let kept = f.patches_kept("p1").await;
            assert!(kept.is_none_or(|n| n == 0), "{kept:?} patches kept");
        }
        if i % 3 == 0 || i == commits {
            assert_eq!(s.load_run("p1").await.unwrap().snapshot, now, "commit {i}");
            let r = s.get_record("p1").await.unwrap();
            assert_eq!(
                r.state,
                Value::Object(now.state.as_ref().clone()),
                "commit {i}"
            );
            assert_eq!(r.output, *now.output);
        }
    }
    // The driver dies; the next one continues from the last commit.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let s2 = f.after_crash().await;
    let (bob, _) = s2.claim_run("p1", &claim("bob", 30_000)).await.unwrap();
    let stored = s2.load_run("p1").await.unwrap();
    assert_eq!(stored.snapshot, now);
    // A stale patch of the old driver is refused and changes nothing.
    let mut t2 = tracker.clone();
    now.hops += 100;
    let stale = t2.next(&now);
    let st = step(99, "late", StepStatus::Succeeded);
    let refused = s2
        .commit_step(
            &lease,
            StepCommit {
                step: &st,
                started: &[],
                snapshot: &now,
                patch: stale.as_ref(),
                covers_patches: false,
                events: vec![EventKind::RunReleased {
                    owner: "alice".into(),
                    reason: "late".into(),
                }],
            },
        )
        .await;
    assert!(matches!(refused, Err(StoreError::LeaseLost { .. })));
    now.hops -= 100;
    assert_eq!(s2.load_run("p1").await.unwrap().snapshot, now);
    // The new driver's first whole snapshot covers the patches the dead one left.
    let kept = f.patches_kept("p1").await;
    assert!(
        kept.is_none_or(|n| n > 0),
        "{kept:?} patches before the takeover's whole write"
    );
    let mut bobs = Tracker::new();
    now.hops += 1;
    let st = step(commits + 1, "bob", StepStatus::Succeeded);
    s2.commit_step(
        &bob,
        StepCommit {
            step: &st,
            started: &[],
            snapshot: &now,
            patch: None,
            covers_patches: bobs.whole(),
            events: vec![],
        },
    )
    .await
    .unwrap();
    assert_eq!(s2.load_run("p1").await.unwrap().snapshot, now);
    let kept = f.patches_kept("p1").await;
    assert!(kept.is_none_or(|n| n == 0), "{kept:?} patches after it");
    // A patch is numbered by its write's first event: a write without events stores the
    // whole snapshot instead, which covers the patches before it.
    for (i, with_event) in [(0u32, true), (1, false)] {
        Arc::make_mut(&mut now.state).insert("k1".into(), json!({"late": i}));
        bobs.touch("k1", None);
        now.hops += 1;
        let patch = bobs.next(&now);
        assert!(patch.is_some());
        let st = step(commits + 2 + i, "late", StepStatus::Succeeded);
        s2.commit_step(
            &bob,
            StepCommit {
                step: &st,
                started: &[],
                snapshot: &now,
                patch: patch.as_ref(),
                covers_patches: false,
                events: if with_event {
                    vec![EventKind::CancelRequested {
                        by: "nobody".into(),
                    }]
                } else {
                    vec![]
                },
            },
        )
        .await
        .unwrap();
        assert_eq!(s2.load_run("p1").await.unwrap().snapshot, now);
        let kept = f.patches_kept("p1").await;
        let want = i64::from(with_event);
        assert!(
            kept.is_none_or(|n| n == want),
            "{kept:?} patches, want {want}"
        );
    }
    // The end writes the whole snapshot: what a reader sees is the final one.
    let mut end = now.clone();
    end.pending.clear();
    Arc::make_mut(&mut end.state).insert("done".into(), json!(true));
    s2.finish_run(
        &bob,
        &[],
        &RunUpdate {
            status: RunStatus::Succeeded,
            error: None,
            finished_at: Some(weir_core::store::now_rfc3339()),
            snapshot: end.clone(),
        },
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(s2.load_run("p1").await.unwrap().snapshot, end);
    let kept = f.patches_kept("p1").await;
    assert!(
        kept.is_none_or(|n| n == 0),
        "{kept:?} patches kept after the end"
    );
    let r = s2.get_record("p1").await.unwrap();
    assert_eq!(r.state["done"], json!(true));
    assert_eq!(r.state["k1"], now.state["k1"]);
}
