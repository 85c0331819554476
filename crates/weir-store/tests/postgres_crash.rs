//! Postgres only: a crash between the statements of a claim or a decision, by the store's
//! fault injection (the `faults` feature, on for the crate's own tests).

mod support;

use support::*;
use weir_core::record::{RunStatus, StepStatus};
use weir_core::store::{RunStore, StepCommit, StoreError};

/// Whether a run's event numbers are 1, 2, 3 … with nothing missing or repeated.
async fn gap_free(s: &dyn RunStore, id: &str) {
    let seqs: Vec<u64> = s
        .events_after(id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{id}");
}

/// A crash between any two statements of a claim or a decision (the store's fault
/// injection stops the transaction there, and Postgres rolls it back as it does when the
/// connection dies) leaves the run as it was: claimable, or decidable, and then continuable.
/// Step commits and the other writes of a drive are one statement each: nothing is between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_crash_between_statements_leaves_every_run_continuable() {
    let Some(db) = weir_store::testdb::TestDb::create().await else {
        return;
    };
    let pg = weir_store::Postgres::open(&db.url).await.unwrap();
    let s: &dyn RunStore = &pg;
    // Claims: the named claim, then the batch claim.
    for at in 0..3 {
        let id = format!("claim-{at}");
        s.create_run(new_run(&id)).await.unwrap();
        pg.faults.arm("claim", at);
        assert!(matches!(
            s.claim_run(&id, &claim("alice", 30_000)).await,
            Err(StoreError::Backend(_))
        ));
        let run = s.load_run(&id).await.unwrap();
        assert_eq!((run.status, run.epoch), (RunStatus::Queued, 0), "{id}");
        s.claim_run(&id, &claim("bob", 30_000)).await.unwrap();
        gap_free(s, &id).await;
    }
    for at in 1..3 {
        let id = format!("next-{at}");
        s.create_run(new_run(&id)).await.unwrap();
        pg.faults.arm("claim", at);
        assert!(s.claim_next(&claim("alice", 30_000), 10).await.is_err());
        assert_eq!(s.load_run(&id).await.unwrap().status, RunStatus::Queued);
        let got = s.claim_next(&claim("bob", 30_000), 10).await.unwrap();
        assert_eq!(got.len(), 1, "{id}");
        assert_eq!(got[0].0.epoch, 1);
        gap_free(s, &id).await;
    }
    // A fenced write stopped before its one statement changes nothing.
    let mut n = new_run("commit");
    n.claim = Some(claim("alice", 30_000));
    let lease = s.create_run(n.clone()).await.unwrap().lease.unwrap();
    let a = step(1, "a", StepStatus::Succeeded);
    let after_a = snap(&["a"], vec![]);
    let commit = || StepCommit {
        step: &a,
        started: &[],
        snapshot: &after_a,
        patch: None,
        covers_patches: false,
        events: vec![],
    };
    pg.faults.arm("commit", 0);
    assert!(s.commit_step(&lease, commit()).await.is_err());
    assert!(s.get_record("commit").await.unwrap().steps.is_empty());
    s.commit_step(&lease, commit()).await.unwrap();
    assert_eq!(s.get_record("commit").await.unwrap().steps.len(), 1);
    // Decisions: after each statement of the transaction.
    for at in 1..5 {
        let id = format!("gate-{at}");
        let epoch = paused_run(s, &id).await;
        pg.faults.arm("decide", at);
        assert!(s.decide(&approve(&id, epoch, "ada")).await.is_err());
        let run = s.load_run(&id).await.unwrap();
        assert_eq!((run.status, run.epoch), (RunStatus::Paused, epoch), "{id}");
        assert!(
            !s.claim_next(&claim("w", 30_000), 10)
                .await
                .unwrap()
                .iter()
                .any(|(l, _)| l.run_id == id)
        );
        s.decide(&approve(&id, epoch, "ada")).await.unwrap();
        let (lease, _) = s.claim_run(&id, &claim("w", 30_000)).await.unwrap();
        assert_eq!(lease.epoch, epoch + 2);
        gap_free(s, &id).await;
    }
    assert_eq!(pg.faults.fired(), 10, "every armed fault fired");
}
