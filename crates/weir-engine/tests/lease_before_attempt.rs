//! A drive checks its lease before each attempt, not only when it writes: a process that
//! was frozen past its lease (SIGSTOP, a suspended laptop) must not start a side effect for
//! a step that another driver has taken over, and must go on as before when nobody did.
//! Heartbeats are switched off here (one an hour), so only that check renews the lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use weir_core::{Lifecycle, RunReads};

use async_trait::async_trait;
use serde_json::json;
use weir_core::ir::{Dialect, Workflow};
use weir_core::model::ErrorClass;
use weir_core::record::RunStatus;
use weir_core::store::{Claim, RunFilter};
use weir_core::{ModelClient, ModelError, ModelRequest, ModelResponse};
use weir_engine::{Engine, ErrorKind, LeaseTiming, Quiet, Services, Source};

mod common;
use common::{NoScripts, NoTools, agent, node, reply};

/// Fails the first call with a server error that asks for a retry after `backoff`, then
/// answers; counts every call (every side effect a driver started).
struct FailsOnce {
    calls: AtomicU32,
    backoff: Duration,
}

#[async_trait]
impl ModelClient for FailsOnce {
    async fn complete(&self, req: ModelRequest) -> Result<ModelResponse, ModelError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            let mut e = ModelError::new(ErrorClass::ServerError, "503 from the fake");
            e.retry_after = Some(self.backoff);
            return Err(e);
        }
        Ok(reply(req.model, "done".into()))
    }
    fn check_model(&self, _: &str) -> Result<(), String> {
        Ok(())
    }
}

fn setup() -> (
    Engine,
    Arc<FailsOnce>,
    Arc<weir_store::Memory>,
    Arc<Workflow>,
) {
    let model = Arc::new(FailsOnce {
        calls: AtomicU32::new(0),
        backoff: Duration::from_millis(700),
    });
    let store = Arc::new(weir_store::Memory::new());
    let mut engine = Engine::new(
        Services {
            models: model.clone(),
            tools: Arc::new(NoTools),
            scripts: Arc::new(NoScripts),
            secrets: Arc::new(weir_core::settings::Settings::default()),
            store: store.clone(),
        },
        Arc::new(Quiet),
    );
    engine.lease = LeaseTiming {
        ttl: Duration::from_millis(300),
        heartbeat: Duration::from_secs(3600),
        max_takeovers: 3,
    };
    let mut ask = node("ask", agent("hello"));
    ask.policy.retry_count = 1;
    let wf = Arc::new(Workflow {
        name: "lease".into(),
        dialect: Dialect::Graph,
        nodes: vec![ask],
        edges: Vec::new(),
        hop_ceiling: 10,
        layout: weir_core::ir::StateLayout::Flat,
        input_schema: None,
        start: None,
        budget: None,
        triggers: Vec::new(),
        index: Default::default(),
    });
    (engine, model, store, wf)
}

fn source() -> Source {
    Source {
        path: "lease.json".into(),
        text: "".into(),
        pin: None,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn an_attempt_is_not_started_after_another_driver_took_the_run_over() {
    let (engine, model, store, wf) = setup();
    runtime().block_on(async {
        let drive = engine.start(wf, source(), json!({}));
        // While the first driver waits out the retry's backoff, its lease expires and a
        // second driver claims the run.
        let take_over = async {
            tokio::time::sleep(Duration::from_millis(450)).await;
            let filter = RunFilter {
                limit: 10,
                ..RunFilter::default()
            };
            let runs = store.list_runs(&filter).await.unwrap();
            let claim = Claim {
                owner: "successor".into(),
                ttl: Duration::from_secs(60),
            };
            store.claim_run(&runs[0].run_id, &claim).await.unwrap()
        };
        let (driven, (lease, _)) = tokio::join!(drive, take_over);
        assert_eq!(lease.owner, "successor");
        let err = driven.expect_err("the first driver lost its lease");
        assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    });
    assert_eq!(
        model.calls.load(Ordering::SeqCst),
        1,
        "the retry was not sent by a driver that no longer held the run"
    );
}

#[test]
fn a_drive_whose_lease_expired_unclaimed_renews_it_and_goes_on() {
    let (engine, model, store, wf) = setup();
    let outcome = runtime()
        .block_on(engine.start(wf, source(), json!({})))
        .expect("nobody else claimed the run");
    assert_eq!(outcome.status, RunStatus::Succeeded, "{:?}", outcome.error);
    assert_eq!(model.calls.load(Ordering::SeqCst), 2);
    let record = runtime()
        .block_on(store.get_record(&outcome.run_id))
        .unwrap();
    assert_eq!(record.steps[0].attempts.len(), 2);
}
