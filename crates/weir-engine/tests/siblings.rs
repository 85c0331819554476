//! Parallel branches that finish at the same moment are committed together: one write (and,
//! on a durable store, one fsync) for all of them, each step recorded whole, and the merge
//! after them runs once, after every branch is in. A failing branch still cancels the rest.

use std::sync::{Arc, Mutex};
use weir_core::RunReads;

use async_trait::async_trait;
use serde_json::json;
use weir_core::event::EventKind;
use weir_core::ir::{Dialect, Edge, NodeKind, StateLayout, Workflow};
use weir_core::model::ErrorClass;
use weir_core::record::{RunStatus, StepStatus};
use weir_core::{ModelClient, ModelError, ModelRequest, ModelResponse};
use weir_engine::{Engine, EventSink, Services, Source};

mod common;
use common::{NoScripts, NoTools, agent, node, reply};

/// Answers at once, so branches launched together also finish together; a message that
/// says `fail` is a fatal error.
struct Instant;

#[async_trait]
impl ModelClient for Instant {
    async fn complete(&self, req: ModelRequest) -> Result<ModelResponse, ModelError> {
        if req.messages.iter().any(|m| m.content.contains("fail")) {
            return Err(ModelError::new(ErrorClass::Auth, "told to fail"));
        }
        Ok(reply(req.model, "ok".into()))
    }
    fn check_model(&self, _: &str) -> Result<(), String> {
        Ok(())
    }
}

/// Every write's events, as the engine published them (one entry per write).
#[derive(Default)]
struct Writes(Mutex<Vec<Vec<EventKind>>>);

impl EventSink for Writes {
    fn publish(&self, _: &str, events: &[EventKind]) {
        self.0.lock().unwrap().push(events.to_vec());
    }
}

fn edge(source: &str, target: &str) -> Edge {
    Edge {
        id: format!("{source}->{target}"),
        source: source.into(),
        target: target.into(),
        selector: None,
        span: None,
        source_span: None,
        target_span: None,
    }
}

/// `start → a, b, c → join (merge) → after`; branch `b` asks for `b_says`.
fn fan_out(b_says: &str) -> Arc<Workflow> {
    let mut edges = Vec::new();
    for b in ["a", "b", "c"] {
        edges.push(edge("start", b));
        edges.push(edge(b, "join"));
    }
    edges.push(edge("join", "after"));
    Arc::new(Workflow {
        name: "siblings".into(),
        dialect: Dialect::Graph,
        nodes: vec![
            node("start", agent("go")),
            node("a", agent("branch a")),
            node("b", agent(b_says)),
            node("c", agent("branch c")),
            node("join", NodeKind::Merge),
            node("after", agent("all in")),
        ],
        edges,
        hop_ceiling: 100,
        layout: StateLayout::Flat,
        input_schema: None,
        start: None,
        budget: None,
        triggers: Vec::new(),
        index: Default::default(),
    })
}

fn run(
    wf: Arc<Workflow>,
) -> (
    Arc<Writes>,
    Arc<weir_store::Memory>,
    weir_engine::RunOutcome,
) {
    let writes = Arc::new(Writes::default());
    let store = Arc::new(weir_store::Memory::new());
    let engine = Engine::new(
        Services {
            models: Arc::new(Instant),
            tools: Arc::new(NoTools),
            scripts: Arc::new(NoScripts),
            secrets: Arc::new(weir_core::settings::Settings::default()),
            store: store.clone(),
        },
        writes.clone(),
    );
    let source = Source {
        path: "siblings.json".into(),
        text: "".into(),
        pin: None,
    };
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(engine.start(wf, source, json!({})))
        .expect("the run is driven to its end");
    (writes, store, outcome)
}

/// The node ids of the `step_finished` events of each write that has any.
fn finished_per_write(writes: &Writes) -> Vec<Vec<String>> {
    writes
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|w| {
            w.iter()
                .filter_map(|e| match e {
                    EventKind::StepFinished { node_id, .. } => Some(node_id.to_string()),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .filter(|f| !f.is_empty())
        .collect()
}

#[test]
fn branches_that_finish_together_are_committed_in_one_write() {
    let (writes, store, outcome) = run(fan_out("branch b"));
    assert_eq!(outcome.status, RunStatus::Succeeded, "{:?}", outcome.error);
    assert_eq!(
        finished_per_write(&writes),
        [
            vec!["start"],
            vec!["a", "b", "c"],
            vec!["join"],
            vec!["after"]
        ],
        "the three branches are one write; the merge runs once, after all of them"
    );
    let record = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(store.get_record(&outcome.run_id))
        .unwrap();
    let steps: Vec<(&str, StepStatus, bool)> = record
        .steps
        .iter()
        .map(|s| (&*s.node_id, s.status, s.finished_at.is_some()))
        .collect();
    assert_eq!(
        steps,
        [
            ("start", StepStatus::Succeeded, true),
            ("a", StepStatus::Succeeded, true),
            ("b", StepStatus::Succeeded, true),
            ("c", StepStatus::Succeeded, true),
            ("join", StepStatus::Succeeded, true),
            ("after", StepStatus::Succeeded, true),
        ],
        "each branch's step is recorded whole, in launch order"
    );
    // Event numbers stay gapless and in order across the shared write.
    let seqs: Vec<u64> = record
        .events
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

#[test]
fn a_failing_branch_still_cancels_its_siblings() {
    let (writes, store, outcome) = run(fan_out("please fail"));
    assert_eq!(outcome.status, RunStatus::Failed);
    let record = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(store.get_record(&outcome.run_id))
        .unwrap();
    let status = |id: &str| {
        record
            .steps
            .iter()
            .find(|s| &*s.node_id == id)
            .map(|s| s.status)
    };
    assert_eq!(
        status("a"),
        Some(StepStatus::Succeeded),
        "finished before b"
    );
    assert_eq!(status("b"), Some(StepStatus::Failed));
    assert_eq!(
        status("c"),
        Some(StepStatus::Cancelled),
        "not gathered after the failure: cancelled, as before"
    );
    assert_eq!(status("join"), None, "the merge never ran");
    assert!(
        finished_per_write(&writes).iter().all(|w| !w.is_empty()),
        "every write names what it finished"
    );
}
