#![allow(
    clippy::too_many_lines,
    reason = "a test reads top to bottom as one story"
)]

//! The store conformance suite (DESIGN §8): every store must pass it unchanged. Each case
//! runs against the in-memory store, SQLite on a file (as it opens by default, and with
//! `sync=full`), and Postgres in a fresh database (skipped, loudly, without a server unless
//! `WEIR_REQUIRE_POSTGRES=1`). Fixtures and builders are in `support/`; the catalog, listing,
//! snapshot-patch and crash-recovery cases in `conformance/`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weir_core::event::EventKind;
use weir_core::record::{RunStatus, StepRecord, StepStatus};
use weir_core::store::{
    CancelOutcome, Lease, RunFilter, RunStore, RunUpdate, StepCommit, StoreError,
};

#[path = "conformance/catalog.rs"]
mod catalog;
#[path = "conformance/listing.rs"]
mod listing;
#[path = "conformance/patches.rs"]
mod patches;
#[path = "conformance/recovery.rs"]
mod recovery;
mod support;

use catalog::{
    tokens_and_tools, trigger_states_are_kept_per_trigger, workflow_versions_and_deletion,
};
use listing::{
    retention_deletes_only_ended_runs, run_listing_filters_and_pages,
    runs_keep_their_source_across_prunes, runs_record_what_started_them_and_list_by_it,
    short_ids_resolve_by_prefix,
};
use patches::patched_commits_rebuild_the_snapshot;
use recovery::{
    a_crash_between_writes_leaves_a_run_that_continues,
    a_running_step_written_again_keeps_its_attempt_so_far,
};

use support::*;

async fn claim_and_lease_conflict(f: Fixture) {
    let s = f.store;
    let created = s.create_run(new_run("r1")).await.unwrap();
    assert!(created.created && created.lease.is_none());
    assert_eq!(s.load_run("r1").await.unwrap().status, RunStatus::Queued);
    let (lease, w) = s.claim_run("r1", &claim("alice", 30_000)).await.unwrap();
    assert_eq!(lease.epoch, 1);
    assert_eq!(w.events[0].name(), "run_started");
    let err = s.claim_run("r1", &claim("bob", 30_000)).await.unwrap_err();
    match err {
        StoreError::Conflict(m) => assert!(m.contains("alice") && m.contains("expires"), "{m}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let stored = s.load_run("r1").await.unwrap();
    assert_eq!(
        (stored.status, stored.owner.as_deref()),
        (RunStatus::Running, Some("alice"))
    );
    assert!(matches!(
        s.claim_run("nope", &claim("bob", 1000)).await,
        Err(StoreError::NotFound(_))
    ));
}

async fn expired_lease_is_taken_over_and_the_old_one_fenced(f: Fixture) {
    let s = f.store;
    s.create_run(new_run("r1")).await.unwrap();
    let (mut old, _) = s.claim_run("r1", &claim("alice", 50)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    let (new, w) = s.claim_run("r1", &claim("bob", 30_000)).await.unwrap();
    assert_eq!(new.epoch, old.epoch + 1);
    match &w.events[0] {
        EventKind::RunResumed { took_over_from, .. } => {
            assert_eq!(took_over_from.as_deref(), Some("alice"));
        }
        other => panic!("expected run_resumed, got {other:?}"),
    }
    let before = s.get_record("r1").await.unwrap();
    // Every kind of write with the stale lease is refused and changes nothing.
    let e1 = commit_first(s.as_ref(), &old, "a").await.unwrap_err();
    match &e1 {
        StoreError::LeaseLost { message, .. } => assert!(message.contains("bob"), "{message}"),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(matches!(
        s.start_steps(&old, &[&step(1, "a", StepStatus::Running)], vec![])
            .await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(matches!(
        s.renew(&mut old, Duration::from_secs(30)).await,
        Err(StoreError::LeaseLost { .. })
    ));
    let done = RunUpdate {
        status: RunStatus::Succeeded,
        error: None,
        finished_at: Some(weir_core::store::now_rfc3339()),
        snapshot: snap(&["a"], vec![]),
    };
    assert!(matches!(
        s.finish_run(&old, &[], &done, vec![]).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(matches!(
        s.release(&old, &snap(&[], vec![]), vec![]).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(matches!(
        s.append_events(
            &old,
            vec![EventKind::RunCreated {
                workflow: "x".into()
            }]
        )
        .await,
        Err(StoreError::LeaseLost { .. })
    ));
    // A refused write changes nothing but the timeline, which shows each refusal.
    let mut after = s.get_record("r1").await.unwrap();
    let refused: Vec<Value> = after.events.split_off(before.events.len());
    assert_eq!(after, before, "a refused write must change nothing");
    let writes: Vec<&str> = refused
        .iter()
        .map(|e| {
            assert_eq!(e["type"], "stale_write_refused", "{e}");
            assert_eq!(e["owner"], "alice", "{e}");
            assert_eq!(e["current_owner"], "bob", "{e}");
            assert_eq!(e["epoch"].as_u64(), Some(old.epoch), "{e}");
            assert_eq!(e["current_epoch"].as_u64(), Some(new.epoch), "{e}");
            e["write"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        writes,
        [
            "commit_step",
            "start_steps",
            "heartbeat",
            "finish_run",
            "release",
            "append_events"
        ]
    );
    // The new lease still works.
    s.finish_run(&new, &[], &done, vec![]).await.unwrap();
    assert_eq!(s.load_run("r1").await.unwrap().status, RunStatus::Succeeded);
    // A finished run's lease is released: writing with it is refused too.
    assert!(matches!(
        s.start_steps(&new, &[&step(2, "b", StepStatus::Running)], vec![])
            .await,
        Err(StoreError::LeaseLost { .. })
    ));
}

async fn step_commit_is_atomic_with_snapshot_and_events(f: Fixture) {
    let s = f.store;
    let lease = claimed_run(s.as_ref(), "r1", "alice").await;
    let a_run = step(1, "a", StepStatus::Running);
    s.start_steps(
        &lease,
        &[&a_run],
        vec![EventKind::StepStarted {
            step: 1,
            node_id: "a".into(),
            node_type: "agent".into(),
            visit: 1,
        }],
    )
    .await
    .unwrap();
    let mut a = a_run.clone();
    a.status = StepStatus::Succeeded;
    a.finished_at = Some(weir_core::store::Stamp::now());
    // An agent's reply: the output's text, which the answering call's reply and the
    // attempt's response repeat (the stores keep it once); a failed attempt and a fallback's
    // reply differ from it.
    a.output = Arc::new(weir_core::record::Output::reply(weir_core::record::Reply {
        text: "hello".into(),
        model: "m".into(),
        provider: "p".into(),
        fallback_used: true,
        input_tokens: 1,
        output_tokens: 2,
    }));
    // As JSON (a call read back, or with fields of its own) or as the gateway's record.
    let call = |model: &str, reply: Option<&str>| -> weir_core::record::Call {
        json!({"model": model, "provider": "p", "status": "succeeded", "error_class": null,
               "error": null, "input_tokens": 1, "output_tokens": 2, "cost_usd": 0.25,
               "priced": true, "duration_ms": 1, "reply": reply})
        .into()
    };
    let answered = weir_core::record::Call::typed(weir_core::model::ModelCall {
        model: "m".into(),
        provider: "p".into(),
        status: "succeeded".into(),
        error_class: None,
        error: None,
        input_tokens: 1,
        output_tokens: 2,
        cost_usd: Some(0.25),
        priced: true,
        duration_ms: 1,
        reply: Some("hello".into()),
        tool_uses: vec![weir_core::model::ToolUse {
            id: "call_1".into(),
            name: "lookup".into(),
            arguments: json!({"id": 7}),
        }],
    });
    // An agent's tool call, as its tool-use loop records it.
    let tool_call = weir_core::record::ToolCallRecord {
        turn: 1,
        id: "call_1".into(),
        name: "lookup".into(),
        tool: "custom:lookup".into(),
        arguments: json!({"id": 7}),
        result: Some(json!({"name": "Ada"})),
        error: None,
        duration_ms: 4,
        approval: Some(json!({"approved": true, "by": "ana", "at": "2026-12-07T10:00:00.000Z"})),
    };
    a.attempts = vec![
        weir_core::Attempt {
            n: 1,
            status: StepStatus::Failed,
            error: Some("the reply failed its schema".into()),
            error_class: Some("schema".into()),
            duration_ms: 2,
            request: Some(json!({"user": "hi"}).into()),
            response: Some("not json".into()),
            calls: vec![call("m", Some("not json"))],
            tool_calls: Vec::new(),
            cost_usd: 0.25,
        },
        weir_core::Attempt {
            n: 2,
            status: StepStatus::Succeeded,
            error: None,
            error_class: None,
            duration_ms: 3,
            request: Some(json!({"user": "hi"}).into()),
            response: Some("hello".into()),
            calls: vec![call("primary", None), answered],
            tool_calls: vec![tool_call],
            cost_usd: 0.5,
        },
    ];
    let b = step(2, "b", StepStatus::Running);
    let w = s
        .commit_step(
            &lease,
            StepCommit {
                step: &a,
                started: &[&b],
                snapshot: &snap(&["a"], vec![]),
                patch: None,
                covers_patches: false,
                events: vec![EventKind::StepFinished {
                    step: 1,
                    node_id: "a".into(),
                    node_type: "agent".into(),
                    status: StepStatus::Succeeded,
                    route: None,
                    error: None,
                    duration_ms: 3,
                    cost_usd: 0.5,
                    attempts: 1,
                }],
            },
        )
        .await
        .unwrap();
    assert_eq!(w.events.len(), 1);
    let r = s.get_record("r1").await.unwrap();
    assert_eq!(r.steps.len(), 2);
    assert_eq!(
        r.steps[0], a,
        "the step round-trips exactly, attempts included"
    );
    assert_eq!(r.steps[1].status, StepStatus::Running);
    assert_eq!(r.state, json!({"a": true}));
    assert_eq!(r.cost_usd, 0.5);
    assert_eq!(
        types(&r.events),
        [
            "run_created",
            "run_started",
            "step_started",
            "step_finished"
        ]
    );
}

async fn a_runs_end_carries_its_last_steps(f: Fixture) {
    let s = f.store;
    let lease = claimed_run(s.as_ref(), "r1", "alice").await;
    let b_run = step(2, "b", StepStatus::Running);
    commit_first(s.as_ref(), &lease, "a").await.unwrap();
    s.start_steps(&lease, &[&b_run], vec![]).await.unwrap();
    // The last step, finished and not written on its own, goes in with the run's end; its
    // event comes before `run_finished`.
    let mut b = b_run.clone();
    b.status = StepStatus::Succeeded;
    b.finished_at = Some(weir_core::store::Stamp::now());
    let done = RunUpdate {
        status: RunStatus::Succeeded,
        error: None,
        finished_at: Some(weir_core::store::now_rfc3339()),
        snapshot: snap(&["a", "b"], vec![]),
    };
    let ended = vec![
        finished(2, "b", 1),
        EventKind::RunFinished {
            status: RunStatus::Succeeded,
            error: None,
        },
    ];
    // With a stale lease nothing of it is written, the step included.
    let mut stale = lease.clone();
    stale.epoch += 1;
    assert!(matches!(
        s.finish_run(&stale, &[&b], &done, ended.clone()).await,
        Err(StoreError::LeaseLost { .. })
    ));
    let r = s.get_record("r1").await.unwrap();
    assert_eq!(r.steps[1].status, StepStatus::Running);
    let w = s.finish_run(&lease, &[&b], &done, ended).await.unwrap();
    assert_eq!(
        w.events.iter().map(EventKind::name).collect::<Vec<_>>(),
        ["step_finished", "run_finished"]
    );
    let r = s.get_record("r1").await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(r.steps.len(), 2, "one row per step: {:?}", r.steps);
    assert_eq!(r.steps[1], b, "the last step as it finished");
    assert_eq!(r.state, json!({"a": true, "b": true}));
    let t = types(&r.events);
    assert_eq!(t[t.len() - 2..], ["step_finished", "run_finished"]);
}

async fn concurrent_decisions_exactly_one_wins(f: Fixture) {
    let s = f.store;
    let epoch = paused_run(s.as_ref(), "r1").await;
    let mut tasks = Vec::new();
    for i in 0..50 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.decide(&approve("r1", epoch, &format!("reviewer{i}")))
                .await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => wins += 1,
            Err(StoreError::Conflict(_)) => {}
            Err(other) => panic!("expected a conflict, got {other:?}"),
        }
    }
    assert_eq!(wins, 1, "exactly one decision wins");
    let r = s.get_record("r1").await.unwrap();
    assert_eq!(r.status, RunStatus::Queued);
    assert_eq!(
        r.events
            .iter()
            .filter(|e| e["type"] == "gate_decided")
            .count(),
        1
    );
    assert_eq!(r.steps[0].status, StepStatus::Succeeded);
    // A decision on a run that is not paused is a conflict too.
    assert!(matches!(
        s.decide(&approve("r1", epoch + 1, "late")).await,
        Err(StoreError::Conflict(_))
    ));
}

async fn event_sequence_is_gap_free_and_ordered(f: Fixture) {
    let s = f.store;
    let lease = claimed_run(s.as_ref(), "r1", "alice").await;
    s.create_run(new_run("other")).await.unwrap();
    for i in 0..20u32 {
        let kinds = vec![
            EventKind::StepStarted {
                step: i,
                node_id: "a".into(),
                node_type: "agent".into(),
                visit: 1,
            };
            (i % 3 + 1) as usize
        ];
        s.append_events(&lease, kinds).await.unwrap();
    }
    s.request_cancel("r1", "tester").await.unwrap();
    let all = s.events_after("r1", 0).await.unwrap();
    let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = (1..=all.len() as u64).collect();
    assert_eq!(seqs, expected);
    let tail = s.events_after("r1", 10).await.unwrap();
    assert_eq!(tail.first().map(|e| e.seq), Some(11));
    assert_eq!(tail.len(), all.len() - 10);
    // Another run's log is its own.
    let other = s.events_after("other", 0).await.unwrap();
    assert_eq!(other.iter().map(|e| e.seq).collect::<Vec<_>>(), [1]);
}

/// The events of step commits, of writes without steps, and of a step written a second
/// time read back whole and in order, from any point (SQLite keeps a step commit's events in
/// the step's row, migration 17: a row written again must keep them).
async fn events_read_back_whole_when_a_step_is_written_again(f: Fixture) {
    let s = f.store;
    let lease = claimed_run(s.as_ref(), "r1", "alice").await;
    let commit = |st: StepRecord, started: Vec<StepRecord>, events: Vec<EventKind>| {
        let s = s.clone();
        let lease = lease.clone();
        async move {
            let started: Vec<&StepRecord> = started.iter().collect();
            s.commit_step(
                &lease,
                StepCommit {
                    step: &st,
                    started: &started,
                    snapshot: &snap(&[&*st.node_id], vec![]),
                    patch: None,
                    covers_patches: false,
                    events,
                },
            )
            .await
            .unwrap()
        }
    };
    let b = step(2, "b", StepStatus::Running);
    let b_started = EventKind::StepStarted {
        step: 2,
        node_id: "b".into(),
        node_type: "agent".into(),
        visit: 1,
    };
    let first = step(1, "a", StepStatus::Succeeded);
    commit(first, vec![b.clone()], vec![finished(1, "a", 1), b_started]).await;
    s.append_events(
        &lease,
        vec![EventKind::CancelRequested {
            by: "nobody".into(),
        }],
    )
    .await
    .unwrap();
    let mut again = step(1, "a", StepStatus::Failed);
    again.output = Arc::new(json!({"node": "a", "again": true}).into());
    commit(again, vec![], vec![finished(1, "a", 2)]).await;
    let mut b_done = b;
    b_done.status = StepStatus::Succeeded;
    commit(
        b_done,
        vec![],
        vec![finished(2, "b", 1), finished(2, "b", 1)],
    )
    .await;

    let all = s.events_after("r1", 0).await.unwrap();
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=8).collect::<Vec<u64>>(),
        "every write's events, none lost to the step written again"
    );
    let kinds: Vec<&str> = all.iter().map(|e| e.kind.name()).collect();
    assert_eq!(
        kinds,
        [
            "run_created",
            "run_started",
            "step_finished",
            "step_started",
            "cancel_requested",
            "step_finished",
            "step_finished",
            "step_finished"
        ]
    );
    for after in 0..=8 {
        let tail = s.events_after("r1", after).await.unwrap();
        assert_eq!(
            tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (after + 1..=8).collect::<Vec<u64>>(),
            "the events after {after}"
        );
    }
    let r = s.get_record("r1").await.unwrap();
    assert_eq!(types(&r.events), kinds);
    assert_eq!(r.steps.len(), 2);
    let listed = list(s.as_ref(), 10).await;
    assert_eq!(
        listed.iter().find(|x| x.run_id == "r1").map(|x| x.steps),
        Some(2),
        "the run list counts the step written twice once"
    );
    assert_eq!(
        r.steps[0].status,
        StepStatus::Failed,
        "the step's second writing"
    );
    assert_eq!(
        r.steps[0].output.as_ref(),
        &json!({"node": "a", "again": true})
    );
}

/// A long run whose commits interleave with another run's reads its events back from any
/// point (SQLite walks the run's chain of step rows back from the newest to the point read
/// after: the other run's rows lie between its rows), writes with and without steps,
/// siblings committed together.
async fn a_long_runs_events_read_back_from_any_point(f: Fixture) {
    let s = f.store;
    let lease = claimed_run(s.as_ref(), "r1", "alice").await;
    let other = claimed_run(s.as_ref(), "r2", "bob").await;
    // A follower reads what is new after every write, as the SSE stream does.
    let mut followed: Vec<u64> = Vec::new();
    let mut follow = async || {
        let after = followed.last().copied().unwrap_or(0);
        for e in s.events_after("r1", after).await.unwrap() {
            followed.push(e.seq);
        }
    };
    for i in 1..=40u32 {
        for (lease, run) in [(&lease, "r1"), (&other, "r2")] {
            let node = format!("{run}-n{i}");
            let st = step(i, &node, StepStatus::Succeeded);
            let sibling = step(1000 + i, &format!("{node}-b"), StepStatus::Succeeded);
            // Every fifth commit of r1 ends two steps at once.
            let started: Vec<&StepRecord> = if run == "r1" && i % 5 == 0 {
                vec![&sibling]
            } else {
                vec![]
            };
            s.commit_step(
                lease,
                StepCommit {
                    step: &st,
                    started: &started,
                    snapshot: &snap(&[node.as_str()], vec![]),
                    patch: None,
                    covers_patches: false,
                    events: vec![finished(i, &node, 1)],
                },
            )
            .await
            .unwrap();
            follow().await;
        }
        if i % 7 == 0 {
            s.append_events(
                &lease,
                vec![EventKind::CancelRequested {
                    by: format!("note {i}"),
                }],
            )
            .await
            .unwrap();
        }
    }
    follow().await;
    let all = s.events_after("r1", 0).await.unwrap();
    assert_eq!(
        followed,
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        "the follower saw every event once, in order"
    );
    // run_created, run_started, 40 step ends, 5 notes.
    assert_eq!(all.len(), 2 + 40 + 5);
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=all.len() as u64).collect::<Vec<_>>()
    );
    for after in 0..=all.len() as u64 {
        let tail = s.events_after("r1", after).await.unwrap();
        assert_eq!(
            tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (after + 1..=all.len() as u64).collect::<Vec<_>>(),
            "the events after {after}"
        );
    }
    let record = s.get_record("r1").await.unwrap();
    assert_eq!(record.events.len(), all.len());
    assert_eq!(s.events_after("r2", 0).await.unwrap().len(), 2 + 40);
}

async fn idempotent_creation(f: Fixture) {
    let s = f.store;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = new_run(&format!("run{i}"));
            n.idempotency_key = Some("key-1".into());
            s.create_run(n.clone()).await.unwrap()
        }));
    }
    let mut ids = Vec::new();
    let mut created = 0;
    for t in tasks {
        let c = t.await.unwrap();
        created += usize::from(c.created);
        ids.push(c.run_id);
    }
    assert_eq!(created, 1);
    ids.dedup();
    assert_eq!(ids.len(), 1, "every request got the first run: {ids:?}");
    let listed = s
        .list_runs(&RunFilter {
            limit: 100,
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
}

async fn cancel_rules(f: Fixture) {
    let s = f.store;
    s.create_run(new_run("q")).await.unwrap();
    let (out, _) = s.request_cancel("q", "me").await.unwrap();
    assert_eq!(out, CancelOutcome::Cancelled);
    assert_eq!(s.load_run("q").await.unwrap().status, RunStatus::Cancelled);
    assert!(matches!(
        s.request_cancel("q", "me").await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        s.claim_run("q", &claim("x", 1000)).await,
        Err(StoreError::Conflict(_))
    ));

    paused_run(s.as_ref(), "p").await;
    let (out, _) = s.request_cancel("p", "me").await.unwrap();
    assert_eq!(out, CancelOutcome::Cancelled);
    let r = s.get_record("p").await.unwrap();
    assert_eq!(r.status, RunStatus::Cancelled);
    assert_eq!(r.steps[0].status, StepStatus::Cancelled);
    assert!(r.pending_gate.is_none());

    s.create_run(new_run("r")).await.unwrap();
    let (mut lease, _) = s.claim_run("r", &claim("x", 30_000)).await.unwrap();
    let (out, _) = s.request_cancel("r", "me").await.unwrap();
    assert_eq!(out, CancelOutcome::Requested);
    assert!(
        s.renew(&mut lease, Duration::from_secs(30))
            .await
            .unwrap()
            .cancel_requested
    );
    assert_eq!(s.load_run("r").await.unwrap().status, RunStatus::Running);

    // A drive that has written before a cancel request hears of it at its next write (a
    // store that remembers the row its drive last wrote must notice someone else wrote
    // since), and that write's events come after the request's.
    s.create_run(new_run("w")).await.unwrap();
    let (lease, _) = s.claim_run("w", &claim("x", 30_000)).await.unwrap();
    let started = |step| {
        vec![EventKind::StepStarted {
            step,
            node_id: "a".into(),
            node_type: "agent".into(),
            visit: 1,
        }]
    };
    for step in 1..=2 {
        let w = s.append_events(&lease, started(step)).await.unwrap();
        assert!(!w.cancel_requested);
    }
    let (out, requested) = s.request_cancel("w", "me").await.unwrap();
    assert_eq!(out, CancelOutcome::Requested);
    let after = s.append_events(&lease, started(3)).await.unwrap();
    assert!(after.cancel_requested);
    assert_eq!(
        requested.events.last().expect("the request's event").name(),
        "cancel_requested"
    );
    let log = s.events_after("w", 0).await.unwrap();
    let last: Vec<&str> = log.iter().rev().take(2).map(|e| e.kind.name()).collect();
    assert_eq!(last, ["step_started", "cancel_requested"]);
    let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

async fn claim_next_takes_runnable_runs_oldest_first(f: Fixture) {
    let s = f.store;
    for id in ["a", "b", "c"] {
        s.create_run(new_run(id)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    paused_run(s.as_ref(), "p").await;
    let got = s.claim_next(&claim("w1", 30_000), 2).await.unwrap();
    assert_eq!(
        got.iter()
            .map(|(l, _)| l.run_id.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    let got = s.claim_next(&claim("w2", 30_000), 10).await.unwrap();
    assert_eq!(
        got.iter()
            .map(|(l, _)| l.run_id.as_str())
            .collect::<Vec<_>>(),
        ["c"]
    );
    assert!(
        s.claim_next(&claim("w3", 30_000), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Writes of many drives at once (what a store may group into one transaction): each is
/// kept or refused on its own. 40 runs commit a step concurrently, every fifth with a stale
/// lease; the current ones are all durable (after a reopen), the stale ones change nothing
/// but leave their `stale_write_refused`, and a duplicate creation in the same burst fails
/// alone.
async fn concurrent_writes_of_many_runs_stand_or_fall_alone(f: Fixture) {
    let s = f.store.clone();
    let mut leases = Vec::new();
    for i in 0..40 {
        let id = format!("g{i}");
        s.create_run(new_run(&id)).await.unwrap();
        let (lease, _) = s.claim_run(&id, &claim("alice", 50)).await.unwrap();
        leases.push(lease);
    }
    tokio::time::sleep(Duration::from_millis(120)).await;
    // Every fifth run is taken over: alice's lease on it is stale.
    for i in (0..40).step_by(5) {
        s.claim_run(&format!("g{i}"), &claim("bob", 30_000))
            .await
            .unwrap();
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (i, lease) in leases.into_iter().enumerate() {
        let s = s.clone();
        tasks.spawn(async move { (i, commit_first(s.as_ref(), &lease, "a").await) });
    }
    // A duplicate creation in the same burst fails without taking the others with it.
    let dup = {
        let s = s.clone();
        tokio::spawn(async move { s.create_run(new_run("g3")).await })
    };
    let mut outcomes = Vec::new();
    while let Some(r) = tasks.join_next().await {
        outcomes.push(r.unwrap());
    }
    assert!(
        dup.await.unwrap().is_err(),
        "a second run g3 must be refused"
    );
    let s = f.after_crash().await;
    for (i, r) in outcomes {
        let rec = s.get_record(&format!("g{i}")).await.unwrap();
        let types = types(&rec.events);
        if i % 5 == 0 {
            assert!(
                matches!(r, Err(StoreError::LeaseLost { .. })),
                "g{i}: {r:?}"
            );
            assert!(rec.steps.is_empty(), "g{i}: a stale write left a step");
            assert_eq!(
                types.last().map(String::as_str),
                Some("stale_write_refused"),
                "g{i}: {types:?}"
            );
        } else {
            r.unwrap_or_else(|e| panic!("g{i}: {e}"));
            assert_eq!(rec.steps.len(), 1, "g{i}: the committed step is durable");
            assert!(
                !types.contains(&"stale_write_refused".to_string()),
                "g{i}: {types:?}"
            );
        }
    }
}

/// A run record is read at one moment: its state, events and steps agree while the run is
/// being written. A reader that read the run row, the event log and the steps at three
/// moments showed a run as still running beside the event that paused it, and a client that
/// follows the log after that event never learnt otherwise (the web UI's run page did).
async fn a_record_is_read_at_one_moment(f: Fixture) {
    const STEPS: u32 = 60;
    let s = f.store.clone();
    let lease = claimed_run(s.as_ref(), "r1", "alice").await;
    let writing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let reader = {
        let (s, writing) = (s.clone(), writing.clone());
        tokio::spawn(async move {
            let mut reads = 0u32;
            while writing.load(std::sync::atomic::Ordering::Relaxed) || reads == 0 {
                let r = s.get_record("r1").await.unwrap();
                let in_state = r.state.as_object().map_or(0, serde_json::Map::len);
                let finished = types(&r.events)
                    .iter()
                    .filter(|t| *t == "step_finished")
                    .count();
                assert!(
                    in_state == finished && finished == r.steps.len(),
                    "read {reads}: {in_state} nodes in the state, {finished} step_finished \
                     events, {} steps",
                    r.steps.len()
                );
                reads += 1;
                tokio::task::yield_now().await;
            }
            reads
        })
    };
    let names: Vec<String> = (1..=STEPS).map(|i| format!("n{i}")).collect();
    for i in 1..=STEPS {
        let node = &names[i as usize - 1];
        let done: Vec<&str> = names[..i as usize].iter().map(String::as_str).collect();
        let st = step(i, node, StepStatus::Succeeded);
        s.commit_step(
            &lease,
            StepCommit {
                step: &st,
                started: &[],
                snapshot: &snap(&done, vec![]),
                patch: None,
                covers_patches: false,
                events: vec![finished(i, node, 0)],
            },
        )
        .await
        .unwrap();
        tokio::task::yield_now().await;
    }
    writing.store(false, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.await.unwrap();
    assert!(reads > 0);
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod memory_store {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(super::memory().await).await })*
        }
        mod sqlite_store {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(super::sqlite().await).await })*
        }
        mod sqlite_full_sync_store {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(super::sqlite_full_sync().await).await })*
        }
        mod postgres_store {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if let Some(f) = super::postgres().await {
                    super::$case(f).await
                }
            })*
        }
    };
}

conformance!(
    claim_and_lease_conflict,
    expired_lease_is_taken_over_and_the_old_one_fenced,
    step_commit_is_atomic_with_snapshot_and_events,
    concurrent_decisions_exactly_one_wins,
    event_sequence_is_gap_free_and_ordered,
    events_read_back_whole_when_a_step_is_written_again,
    a_long_runs_events_read_back_from_any_point,
    idempotent_creation,
    cancel_rules,
    claim_next_takes_runnable_runs_oldest_first,
    a_crash_between_writes_leaves_a_run_that_continues,
    workflow_versions_and_deletion,
    tokens_and_tools,
    trigger_states_are_kept_per_trigger,
    run_listing_filters_and_pages,
    runs_record_what_started_them_and_list_by_it,
    short_ids_resolve_by_prefix,
    retention_deletes_only_ended_runs,
    runs_keep_their_source_across_prunes,
    concurrent_writes_of_many_runs_stand_or_fall_alone,
    patched_commits_rebuild_the_snapshot,
    a_record_is_read_at_one_moment,
    a_runs_end_carries_its_last_steps,
    a_running_step_written_again_keeps_its_attempt_so_far,
);
