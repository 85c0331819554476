//! Reading many runs: listing with filters and pages, retention.

use super::*;

pub(super) async fn retention_deletes_only_ended_runs(f: Fixture) {
    let s = f.store;
    s.create_run(new_run("queued")).await.unwrap();
    paused_run(s.as_ref(), "paused").await;
    s.create_run(new_run("cancelled")).await.unwrap();
    s.request_cancel("cancelled", "me").await.unwrap();
    let mut n = new_run("done");
    n.claim = Some(claim("driver", 30_000));
    let lease = s.create_run(n.clone()).await.unwrap().lease.unwrap();
    let mut running = new_run("running");
    running.claim = Some(claim("driver", 30_000));
    s.create_run(running.clone()).await.unwrap();
    s.finish_run(
        &lease,
        &[],
        &RunUpdate {
            status: RunStatus::Succeeded,
            error: None,
            finished_at: Some(weir_core::store::now_rfc3339()),
            snapshot: snap(&["a"], vec![]),
        },
        vec![EventKind::RunFinished {
            status: RunStatus::Succeeded,
            error: None,
        }],
    )
    .await
    .unwrap();
    let future = "9999-01-01T00:00:00.000Z";
    assert!(
        s.prune("2000-01-01T00:00:00.000Z", &[])
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        s.prune(future, &[RunStatus::Succeeded]).await.unwrap(),
        ["done"]
    );
    assert!(matches!(
        s.load_run("done").await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        s.get_record("done").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(s.prune(future, &[]).await.unwrap(), ["cancelled"]);
    for kept in ["queued", "paused", "running"] {
        assert!(s.load_run(kept).await.is_ok(), "{kept} is never pruned");
    }
    assert!(s.prune(future, &[]).await.unwrap().is_empty());
    let listed = list(s.as_ref(), 10).await;
    assert_eq!(listed.len(), 3);
}

pub(super) async fn run_listing_filters_and_pages(f: Fixture) {
    let s = f.store;
    for i in 0..7 {
        let mut n = new_run(&format!("run-{i}"));
        n.created_at = format!("2026-01-01T00:00:0{i}.000Z");
        if i % 2 == 0 {
            n.workflow = "even".into();
            n.pin = Some(weir_core::store::Pin {
                workflow_id: "evens".into(),
                version: 1,
            });
        }
        s.create_run(n.clone()).await.unwrap();
    }
    s.request_cancel("run-3", "me").await.unwrap();
    let counts = s.count_by_status().await.unwrap();
    assert_eq!(counts, [(RunStatus::Cancelled, 1), (RunStatus::Queued, 6)]);
    let ids = |v: Vec<weir_core::record::RunSummary>| -> Vec<String> {
        v.into_iter().map(|r| r.run_id).collect()
    };
    let all = s
        .list_runs(&RunFilter {
            limit: 100,
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(
        ids(all),
        [
            "run-6", "run-5", "run-4", "run-3", "run-2", "run-1", "run-0"
        ]
    );
    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = s
            .list_runs(&RunFilter {
                limit: 3,
                after: after.clone(),
                ..RunFilter::default()
            })
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(weir_core::store::Cursor {
            started_at: last.started_at.clone(),
            run_id: last.run_id.clone(),
        });
        pages.push(ids(page));
    }
    assert_eq!(pages.concat().len(), 7, "{pages:?}");
    assert_eq!(pages[0], ["run-6", "run-5", "run-4"]);
    let by = |f: RunFilter| {
        let s = s.clone();
        async move { ids(s.list_runs(&RunFilter { limit: 100, ..f }).await.unwrap()) }
    };
    assert_eq!(
        by(RunFilter {
            workflow: Some("even".into()),
            ..RunFilter::default()
        })
        .await
        .len(),
        4
    );
    assert_eq!(
        by(RunFilter {
            workflow: Some("evens".into()),
            ..RunFilter::default()
        })
        .await
        .len(),
        4
    );
    assert_eq!(
        by(RunFilter {
            status: Some(RunStatus::Cancelled),
            ..RunFilter::default()
        })
        .await,
        ["run-3"]
    );
    assert_eq!(
        by(RunFilter {
            since: Some("2026-01-01T00:00:05.000Z".into()),
            ..RunFilter::default()
        })
        .await,
        ["run-6", "run-5"]
    );
    assert_eq!(
        by(RunFilter {
            text: Some("N-1".into()),
            ..RunFilter::default()
        })
        .await,
        ["run-1"]
    );
    assert_eq!(
        by(RunFilter {
            text: Some("EVE".into()),
            ..RunFilter::default()
        })
        .await
        .len(),
        4
    );
    assert!(
        by(RunFilter {
            text: Some("%".into()),
            ..RunFilter::default()
        })
        .await
        .is_empty()
    );
    let pinned = s.load_run("run-2").await.unwrap();
    assert_eq!(pinned.pin.unwrap().workflow_id, "evens");
    assert_eq!(pinned.input, json!({"x": 1}));
}

pub(super) async fn short_ids_resolve_by_prefix(f: Fixture) {
    let s = f.store;
    for id in ["ab12-one", "ab12-two", "ab34-three", "abc", "b_%-odd"] {
        s.create_run(new_run(id)).await.unwrap();
    }
    assert_eq!(
        s.run_ids_with_prefix("ab12", 10).await.unwrap(),
        ["ab12-one", "ab12-two"]
    );
    assert_eq!(
        s.run_ids_with_prefix("ab12", 1).await.unwrap(),
        ["ab12-one"]
    );
    assert_eq!(
        s.run_ids_with_prefix("ab3", 10).await.unwrap(),
        ["ab34-three"]
    );
    assert_eq!(s.run_ids_with_prefix("abc", 10).await.unwrap(), ["abc"]);
    // Prefixes are literal: no wildcards, no case folding.
    assert_eq!(s.run_ids_with_prefix("b_%", 10).await.unwrap(), ["b_%-odd"]);
    assert!(s.run_ids_with_prefix("b_x", 10).await.unwrap().is_empty());
    assert!(s.run_ids_with_prefix("AB12", 10).await.unwrap().is_empty());
    assert!(s.run_ids_with_prefix("zz", 10).await.unwrap().is_empty());
}

/// Each run reads back the workflow source it was created with, while runs of the same text
/// are pruned around it (stores that keep a text once share it) and after the text's last
/// run went and a new run brought it back.
pub(super) async fn runs_keep_their_source_across_prunes(f: Fixture) {
    let s = f.store;
    let with = |id: &str, text: &str| {
        let mut n = new_run(id);
        n.source_text = text.into();
        n
    };
    let (one, two) = (r#"{"name": "one"}"#, r#"{"name": "two"}"#);
    for (id, text) in [("a", one), ("b", one), ("c", two)] {
        s.create_run(with(id, text)).await.unwrap();
    }
    let future = "9999-01-01T00:00:00.000Z";
    s.request_cancel("a", "me").await.unwrap();
    assert_eq!(s.prune(future, &[]).await.unwrap(), ["a"]);
    assert_eq!(s.load_run("b").await.unwrap().source_text, one);
    assert_eq!(s.load_run("c").await.unwrap().source_text, two);
    s.request_cancel("b", "me").await.unwrap();
    assert_eq!(s.prune(future, &[]).await.unwrap(), ["b"]);
    s.create_run(with("d", one)).await.unwrap();
    assert_eq!(s.load_run("d").await.unwrap().source_text, one);
    assert_eq!(s.load_run("c").await.unwrap().source_text, two);
}

pub(super) async fn runs_record_what_started_them_and_list_by_it(f: Fixture) {
    use weir_core::record::{RunTrigger, StartKind};
    let s = f.store;
    let made = [
        ("by-cli", RunTrigger::of(StartKind::Cli)),
        ("by-api", RunTrigger::of(StartKind::Api)),
        (
            "tick-1",
            RunTrigger::schedule("nightly", "2026-12-08T09:00:00Z"),
        ),
        (
            "tick-2",
            RunTrigger::schedule("hourly", "2026-12-08T10:00:00Z"),
        ),
    ];
    for (i, (id, trigger)) in made.iter().enumerate() {
        let mut n = new_run(id);
        n.created_at = format!("2026-01-01T00:00:0{i}.000Z");
        n.trigger = trigger.clone();
        s.create_run(n).await.unwrap();
    }
    let record = s.get_record("tick-1").await.unwrap();
    assert_eq!(record.trigger, made[2].1, "the record's trigger, whole");
    let by = |kind: StartKind, name: Option<&str>| {
        let s = s.clone();
        let name = name.map(str::to_string);
        async move {
            s.list_runs(&RunFilter {
                limit: 100,
                trigger: Some((kind, name)),
                ..RunFilter::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.run_id, r.trigger))
            .collect::<Vec<_>>()
        }
    };
    let scheduled = by(StartKind::Schedule, None).await;
    assert_eq!(
        scheduled,
        [
            ("tick-2".to_string(), made[3].1.clone()),
            ("tick-1".to_string(), made[2].1.clone())
        ]
    );
    assert_eq!(by(StartKind::Schedule, Some("nightly")).await.len(), 1);
    assert_eq!(by(StartKind::Api, None).await[0].0, "by-api");
    assert_eq!(by(StartKind::Cli, None).await[0].0, "by-cli");
    assert!(by(StartKind::Webhook, None).await.is_empty());
}
