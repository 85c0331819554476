//! The memory store keeps its runs in shards by id (`memory.rs`): what spans runs must still
//! see all of them, in creation order, as one table would.

mod support;

use support::{claim, list, new_run};
use weir_core::record::RunStatus;
use weir_core::store::RunUpdate;
use weir_core::{Admin, DriveWrites, Lifecycle, RunReads};

fn ids(n: usize) -> Vec<String> {
    // Ids that differ in their last bytes, as run ids (UUIDs) do, so they land in many shards.
    (0..n).map(|i| format!("run-{:08x}", i * 7919)).collect()
}

#[tokio::test]
async fn claims_go_oldest_first_across_shards() {
    let s = weir_store::Memory::new();
    let all = ids(60);
    for id in &all {
        s.create_run(new_run(id)).await.unwrap();
    }
    let mut got = Vec::new();
    loop {
        let batch = s.claim_next(&claim("w", 30_000), 7).await.unwrap();
        if batch.is_empty() {
            break;
        }
        assert!(batch.len() <= 7);
        got.extend(batch.into_iter().map(|(l, _)| l.run_id));
    }
    assert_eq!(got, all);
}

#[tokio::test]
async fn listing_counting_keys_and_pruning_see_every_shard() {
    let s = weir_store::Memory::new();
    let all = ids(40);
    for (i, id) in all.iter().enumerate() {
        let mut n = new_run(id);
        n.idempotency_key = Some(format!("key-{i}"));
        let created = s.create_run(n).await.unwrap();
        assert!(created.created);
    }
    // A key already used gives back its run, whichever shard holds it.
    let mut again = new_run("run-other");
    again.idempotency_key = Some("key-17".into());
    let created = s.create_run(again).await.unwrap();
    assert!(!created.created);
    assert_eq!(created.run_id, all[17]);
    assert!(
        s.create_run(new_run(&all[3])).await.is_err(),
        "an id in use is refused"
    );

    let listed = list(&s, 100).await;
    assert_eq!(listed.len(), all.len());
    assert_eq!(
        s.count_by_status().await.unwrap(),
        [(RunStatus::Queued, 40)]
    );
    assert_eq!(
        s.run_ids_with_prefix("run-0000", 100).await.unwrap().len(),
        all.iter().filter(|id| id.starts_with("run-0000")).count()
    );

    // End half of them and prune those: the rest stay, and the pruned runs' keys are free.
    let claimed = s.claim_next(&claim("w", 30_000), 20).await.unwrap();
    for (lease, _) in &claimed {
        let stored = s.load_run(&lease.run_id).await.unwrap();
        s.finish_run(
            lease,
            &[],
            &RunUpdate {
                status: RunStatus::Succeeded,
                error: None,
                finished_at: Some("2000-01-01T00:00:00Z".into()),
                snapshot: stored.snapshot,
            },
            Vec::new(),
        )
        .await
        .unwrap();
    }
    let pruned = s
        .prune("2001-01-01T00:00:00Z", &[RunStatus::Succeeded])
        .await
        .unwrap();
    assert_eq!(pruned.len(), 20);
    assert_eq!(
        s.count_by_status().await.unwrap(),
        [(RunStatus::Queued, 20)]
    );
    let mut reused = new_run("run-new");
    reused.idempotency_key = Some("key-0".into());
    assert!(s.create_run(reused).await.unwrap().created);
    let next = s.claim_next(&claim("w", 30_000), 100).await.unwrap();
    let next: Vec<String> = next.into_iter().map(|(l, _)| l.run_id).collect();
    let mut want = all[20..].to_vec();
    want.push("run-new".into());
    assert_eq!(next, want);
}
