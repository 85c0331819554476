//! Crash recovery: what a driver that died left, and what the next one finds.

use futures_util::FutureExt;

use super::*;

/// A crash between any two writes of a drive leaves a run another driver can continue from
/// its last commit: after each write, the "process" stops; once the lease expires a new
/// claim succeeds and sees exactly what was committed.
pub(super) async fn a_crash_between_writes_leaves_a_run_that_continues(f: Fixture) {
    for crash_after in 0..4 {
        let id = format!("r{crash_after}");
        let s = f.store.clone();
        let mut n = new_run(&id);
        n.claim = Some(claim("alice", 60));
        let lease: Lease = s.create_run(n.clone()).await.unwrap().lease.unwrap();
        let writes = [
            |s: Arc<dyn RunStore>, l: Lease| {
                async move {
                    s.start_steps(&l, &[&step(1, "a", StepStatus::Running)], vec![])
                        .await
                        .map(|_| ())
                }
                .boxed()
            },
            |s: Arc<dyn RunStore>, l: Lease| {
                async move {
                    let mut a = step(1, "a", StepStatus::Succeeded);
                    a.finished_at = Some(weir_core::store::Stamp::now());
                    s.commit_step(
                        &l,
                        StepCommit {
                            step: &a,
                            started: &[&step(2, "b", StepStatus::Running)],
                            snapshot: &snap(&["a"], vec![]),
                            patch: None,
                            covers_patches: false,
                            events: vec![],
                        },
                    )
                    .await
                    .map(|_| ())
                }
                .boxed()
            },
            |s: Arc<dyn RunStore>, l: Lease| {
                async move {
                    let mut b = step(2, "b", StepStatus::Succeeded);
                    b.finished_at = Some(weir_core::store::Stamp::now());
                    s.commit_step(
                        &l,
                        StepCommit {
                            step: &b,
                            started: &[],
                            snapshot: &snap(&["a", "b"], vec![]),
                            patch: None,
                            covers_patches: false,
                            events: vec![],
                        },
                    )
                    .await
                    .map(|_| ())
                }
                .boxed()
            },
        ];
        for w in writes.into_iter().take(crash_after) {
            w(s.clone(), lease.clone()).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let s2 = f.after_crash().await;
        let (_, _) = s2.claim_run(&id, &claim("bob", 30_000)).await.unwrap();
        let r = s2.get_record(&id).await.unwrap();
        let done = r
            .steps
            .iter()
            .filter(|st| st.status == StepStatus::Succeeded)
            .count();
        let committed = crash_after.saturating_sub(1).min(2);
        assert_eq!(done, committed, "crash after write {crash_after}");
        assert_eq!(
            r.state.as_object().map(serde_json::Map::len),
            Some(committed),
            "the snapshot matches the committed steps"
        );
    }
}

/// An agent's loop commits its turns as it goes: its running step is written again with
/// the attempt so far. A driver taking over finds the step once, with that attempt, and the
/// step's final commit replaces it.
pub(super) async fn a_running_step_written_again_keeps_its_attempt_so_far(f: Fixture) {
    let s = f.store.clone();
    let mut n = new_run("loop");
    n.claim = Some(claim("alice", 60));
    let lease: Lease = s.create_run(n).await.unwrap().lease.unwrap();
    let started = step(1, "a", StepStatus::Running);
    s.start_steps(&lease, &[&started], vec![]).await.unwrap();
    let mut so_far = started.clone();
    so_far.attempts = vec![weir_core::Attempt {
        n: 1,
        status: StepStatus::Running,
        error: None,
        error_class: None,
        duration_ms: 5,
        request: None,
        response: None,
        calls: Vec::new(),
        tool_calls: vec![weir_core::record::ToolCallRecord {
            turn: 1,
            id: "call_1".into(),
            name: "lookup".into(),
            tool: "custom:lookup".into(),
            arguments: json!({"id": 7}),
            result: Some(json!("Ada")),
            error: None,
            duration_ms: 2,
            approval: None,
        }],
        cost_usd: 0.25,
    }];
    s.start_steps(&lease, &[&so_far], vec![]).await.unwrap();
    let (last, open) = s.open_steps("loop").await.unwrap();
    assert_eq!(last, 1);
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0].attempts.len(), 1);
    assert_eq!(open[0].attempts[0].tool_calls[0].result, Some(json!("Ada")));
    let mut done = step(1, "a", StepStatus::Succeeded);
    done.finished_at = Some(weir_core::store::Stamp::now());
    let mut two = so_far.attempts[0].clone();
    two.status = StepStatus::Succeeded;
    two.tool_calls.push(two.tool_calls[0].clone());
    done.attempts = vec![two];
    s.commit_step(
        &lease,
        StepCommit {
            step: &done,
            started: &[],
            snapshot: &snap(&["a"], vec![]),
            patch: None,
            covers_patches: false,
            events: vec![],
        },
    )
    .await
    .unwrap();
    let (_, open) = s.open_steps("loop").await.unwrap();
    assert!(open.is_empty(), "{open:?}");
    let r = s.get_record("loop").await.unwrap();
    assert_eq!(r.steps.len(), 1);
    assert_eq!(r.steps[0].status, StepStatus::Succeeded);
    assert_eq!(r.steps[0].attempts.len(), 1);
    assert_eq!(r.steps[0].attempts[0].tool_calls.len(), 2);
}
