//! `react`: the agent loop's own cost per model turn, on the script of the LangGraph peer
//! (`langgraph_agent_bench.py react`): the model asks for one tool, then two at once, then
//! one, then answers (four turns, four tool calls), the tools return short text at once.
//! weir runs it as a user would write it: one graph `agent` node with three tools, on the
//! real `mock` model scripted by rules (the provider router, pricing and all), tools that
//! answer at once, in memory (`react`) and durable on SQLite with full sync
//! (`react_durable`, like the peer's SQLite checkpointer); `react_streamed` is `react` with
//! every reply streamed to a watcher, as `weir serve` streams them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use weir_core::model::ToolDef;
use weir_core::{RunStore, ToolCall, ToolError, ToolRunner};
use weir_engine::{Engine, Quiet, Services};

use crate::{emit, load, run, runs_or};

/// The peer's script, as mock rules: each turn's rule matches what the model was sent last
/// (the user's question, then each turn's tool results).
const SCRIPT: &str = r#"[
  {"match": "where is order 42?", "tool_calls": [{"name": "lookup", "arguments": {"q": "order 42"}}]},
  {"match": "found order 42", "tool_calls": [{"name": "price", "arguments": {"sku": "A1"}},
                                             {"name": "stock", "arguments": {"sku": "A1"}}]},
  {"match": "12.50", "tool_calls": [{"name": "lookup", "arguments": {"q": "shipping"}}]},
  {"match": "found shipping", "reply": "final answer"}
]"#;

/// The model turns of one run.
const TURNS: usize = 4;

/// `lookup`, `price` and `stock`, answering at once (the peer's are trivial async functions).
struct ShopTools;

#[async_trait]
impl ToolRunner for ShopTools {
    fn has_tool(&self, tool_name: &str) -> bool {
        matches!(tool_name, "custom:lookup" | "custom:price" | "custom:stock")
    }

    fn tool_names(&self) -> Vec<String> {
        vec![
            "custom:lookup".into(),
            "custom:price".into(),
            "custom:stock".into(),
        ]
    }

    async fn call(&self, call: ToolCall) -> Result<Value, ToolError> {
        let arg = |k: &str| call.params[k].as_str().unwrap_or_default().to_string();
        Ok(match call.tool_name.as_str() {
            "custom:lookup" => json!(format!("found {}", arg("q"))),
            "custom:price" => json!("12.50"),
            "custom:stock" => json!("7"),
            other => return Err(ToolError::fatal(format!("no tool {other}"))),
        })
    }

    async fn describe(&self, tool_ref: &str) -> Result<Vec<(String, ToolDef)>, ToolError> {
        let name = tool_ref.trim_start_matches("custom:");
        let (description, arg) = match name {
            "lookup" => ("Look something up.", "q"),
            "price" => ("Price of a SKU.", "sku"),
            "stock" => ("Stock of a SKU.", "sku"),
            other => return Err(ToolError::fatal(format!("no tool {other}"))),
        };
        Ok(vec![(
            tool_ref.to_string(),
            ToolDef {
                name: name.into(),
                description: description.into(),
                parameters: json!({"type": "object", "properties": {arg: {"type": "string"}},
                                   "required": [arg]}),
            },
        )])
    }
}

/// A sink that watches replies as they are written (as `weir serve`'s does), counting pieces.
struct Watching(std::sync::atomic::AtomicUsize);

impl weir_engine::EventSink for Watching {
    fn publish(&self, _: &str, _: &[weir_core::event::EventKind]) {}

    fn streams(&self) -> bool {
        true
    }

    fn delta(&self, _: &str, d: &weir_core::event::Delta<'_>) {
        self.0
            .fetch_add(d.text.len(), std::sync::atomic::Ordering::Relaxed);
    }
}

fn engine(store: Arc<dyn RunStore>, sink: Arc<dyn weir_engine::EventSink>) -> Engine {
    let mock = weir_providers::mock::Mock::from_rules(SCRIPT, "react").expect("mock rules");
    let settings = weir_core::settings::Settings::default();
    Engine::new(
        Services {
            models: Arc::new(weir_providers::Router::with_mock(settings.clone(), mock)),
            tools: Arc::new(ShopTools),
            scripts: Arc::new(crate::fakes::NoScripts),
            store,
            secrets: Arc::new(settings),
        },
        sink,
    )
}

pub async fn bench_react() {
    let wf = load(
        &json!({"name": "react", "nodes": [{"id": "agent", "type": "agent", "config": {
            "model": "mock", "user_message": "where is order 42?",
            "tools": ["custom:lookup", "custom:price", "custom:stock"], "output_key": "answer"}}],
            "edges": []})
        .to_string(),
    );
    let r = runs_or(200);
    for (name, durable, streamed) in [
        ("react", false, false),
        ("react_durable", true, false),
        // The same, every reply streamed to a watcher: what streaming adds.
        ("react_streamed", false, true),
    ] {
        let dir = tempfile::tempdir().expect("temp dir");
        let store: Arc<dyn RunStore> = if durable {
            Arc::new(
                weir_store::Sqlite::open_with(Some(&dir.path().join("react.db")), true)
                    .await
                    .expect("sqlite"),
            )
        } else {
            Arc::new(weir_store::Memory::ephemeral())
        };
        let watcher = Arc::new(Watching(Default::default()));
        let sink: Arc<dyn weir_engine::EventSink> = if streamed {
            watcher.clone()
        } else {
            Arc::new(Quiet)
        };
        let e = engine(store, sink);
        // The script is played as the peer plays it: four turns, four tool calls, the answer.
        let first = run(&e, &wf, json!({})).await;
        let out: &Value = &first.output;
        assert_eq!(
            (&out["text"], &out["turns"], &out["tool_calls"]),
            (&json!("final answer"), &json!(TURNS), &json!(4)),
            "{out}"
        );
        let t = Instant::now();
        for _ in 0..r {
            run(&e, &wf, json!({})).await;
        }
        let took: Duration = t.elapsed();
        emit(
            name,
            "per_turn",
            took.as_secs_f64() / (r * TURNS) as f64 * 1e6,
            "us",
        );
        emit(name, "per_run", took.as_secs_f64() / r as f64 * 1e6, "us");
        if streamed {
            // Every run's answer reached the watcher.
            let bytes = watcher.0.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(bytes, (r + 1) * "final answer".len());
        }
    }
}
