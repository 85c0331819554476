#![allow(
    clippy::too_many_lines,
    reason = "a test reads top to bottom as one story"
)]

//! Property test of the scheduler on random acyclic graphs of agents, conditions and merges,
//! with fake model and tool implementations (the engine's own traits) and the in-memory
//! store. For each graph and input the run must succeed without hanging, run exactly the
//! nodes that routing reaches, run each at most once, and start every merge after all its
//! arrived branches committed (by the event log's commit order, not by timestamps).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use weir_core::RunReads;

use async_trait::async_trait;
use serde_json::json;
use weir_core::event::EventKind;
use weir_core::ir::{ConditionSpec, Dialect, Edge, NodeKind, Workflow};
use weir_core::record::RunStatus;
use weir_core::{ModelClient, ModelError, ModelRequest, ModelResponse};
use weir_engine::{Engine, Quiet, Services, Source};

mod common;
use common::{NoScripts, NoTools, agent, node, reply};

struct FakeModel;

#[async_trait]
impl ModelClient for FakeModel {
    async fn complete(&self, req: ModelRequest) -> Result<ModelResponse, ModelError> {
        // Vary completion order so concurrency is exercised.
        let jitter = req.last_user().len() as u64 % 3;
        tokio::time::sleep(Duration::from_millis(jitter)).await;
        Ok(reply(req.model.clone(), req.last_user().into()))
    }
    fn check_model(&self, _: &str) -> Result<(), String> {
        Ok(())
    }
}

/// A small deterministic generator (no external crate needed for this one property).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random DAG: edges only go from lower to higher index.
fn random_graph(rng: &mut Rng) -> Workflow {
    let n = 3 + rng.below(10) as usize;
    let mut nodes = Vec::new();
    for i in 0..n {
        let id = format!("n{i}");
        let kind = match rng.below(4) {
            0 if i > 0 => NodeKind::Merge,
            1 => NodeKind::Condition(ConditionSpec {
                expression: weir_core::expr::Expr::parse(&format!("flag{}", rng.below(3))).unwrap(),
            }),
            _ => agent(&"x".repeat(1 + i)),
        };
        nodes.push(node(&id, kind));
    }
    let mut edges = Vec::new();
    for j in 1..n {
        let fan_in = 1 + rng.below(3);
        for _ in 0..fan_in {
            let i = rng.below(j as u64) as usize;
            let selector = if matches!(nodes[i].kind, NodeKind::Condition(_)) {
                Some(if rng.below(2) == 0 { "true" } else { "false" }.to_string())
            } else {
                None
            };
            let id = format!("e{}", edges.len());
            if edges
                .iter()
                .any(|e: &Edge| e.source == nodes[i].id && e.target == nodes[j].id)
            {
                continue;
            }
            edges.push(Edge {
                source_span: None,
                target_span: None,
                id,
                source: nodes[i].id.clone(),
                target: nodes[j].id.clone(),
                selector,
                span: None,
            });
        }
    }
    Workflow {
        name: "prop".into(),
        dialect: Dialect::Graph,
        nodes,
        edges,
        hop_ceiling: 1000,
        layout: weir_core::ir::StateLayout::Flat,
        input_schema: None,
        start: None,
        budget: None,
        triggers: Vec::new(),
        index: Default::default(),
    }
}

/// Which nodes routing reaches, computed independently of the scheduler.
fn expected(wf: &Workflow, flags: &[bool; 3]) -> Vec<String> {
    let mut ran: HashMap<&str, bool> = HashMap::new();
    for n in &wf.nodes {
        let incoming: Vec<&Edge> = wf.incoming(&n.id).collect();
        let runs = incoming.is_empty()
            || incoming.iter().any(|e| {
                let src = wf.node(&e.source).unwrap();
                ran[e.source.as_str()]
                    && match &src.kind {
                        NodeKind::Condition(c) => {
                            let idx: usize = c.expression.source()[4..].parse().unwrap();
                            e.matches(&flags[idx].to_string())
                        }
                        _ => true,
                    }
            });
        ran.insert(&n.id, runs);
    }
    wf.nodes
        .iter()
        .filter(|n| ran[n.id.as_str()])
        .map(|n| n.id.clone())
        .collect()
}

#[test]
fn random_graphs_run_exactly_the_routed_nodes() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rng = Rng(0x9e3779b97f4a7c15);
    for case in 0..300 {
        let wf = Arc::new(random_graph(&mut rng));
        let flags = [rng.below(2) == 0, rng.below(2) == 0, rng.below(2) == 0];
        let store = Arc::new(weir_store::Memory::new());
        let engine = Engine::new(
            Services {
                models: Arc::new(FakeModel),
                tools: Arc::new(NoTools),
                scripts: Arc::new(NoScripts),
                secrets: Arc::new(weir_core::settings::Settings::default()),
                store: store.clone(),
            },
            Arc::new(Quiet),
        );
        let input = json!({"flag0": flags[0], "flag1": flags[1], "flag2": flags[2]});
        let record = rt
            .block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(20),
                    engine.start(
                        wf.clone(),
                        Source {
                            path: "p".into(),
                            text: "".into(),
                            pin: None,
                        },
                        input,
                    ),
                )
                .await
            })
            .unwrap_or_else(|_| panic!("case {case} hung: {wf:#?}"))
            .unwrap();
        let record = rt.block_on(store.get_record(&record.run_id)).unwrap();
        assert_eq!(record.status, RunStatus::Succeeded, "case {case}");
        let mut ran: Vec<String> = record
            .steps
            .iter()
            .map(|s| String::from(&*s.node_id))
            .collect();
        let seqs: HashMap<String, u32> = record
            .steps
            .iter()
            .map(|s| (String::from(&*s.node_id), s.seq))
            .collect();
        // Commit order: the sequence number of each node's step_started / step_finished.
        let events = rt.block_on(store.events_after(&record.run_id, 0)).unwrap();
        let mut started_at: HashMap<String, u64> = HashMap::new();
        let mut finished: HashMap<String, u64> = HashMap::new();
        for e in &events {
            match &e.kind {
                EventKind::StepStarted { node_id, .. } => {
                    started_at.insert(node_id.to_string(), e.seq);
                }
                EventKind::StepFinished { node_id, .. } => {
                    finished.insert(node_id.to_string(), e.seq);
                }
                _ => {}
            }
        }
        ran.sort();
        let total = ran.len();
        ran.dedup();
        assert_eq!(total, ran.len(), "case {case}: a node ran twice");
        let mut want = expected(&wf, &flags);
        want.sort();
        assert_eq!(ran, want, "case {case} flags {flags:?}: {wf:#?}");
        // A merge starts only after every branch that arrived has finished.
        for m in wf
            .nodes
            .iter()
            .filter(|n| matches!(n.kind, NodeKind::Merge))
        {
            if !seqs.contains_key(&m.id) {
                continue;
            }
            let mstart = started_at[&m.id];
            for e in wf.incoming(&m.id) {
                if let Some(f) = finished.get(&e.source) {
                    assert!(
                        *f < mstart,
                        "case {case}: merge {} started before {} finished",
                        m.id,
                        e.source
                    );
                }
            }
        }
    }
}
