//! The benchmark's stand-ins, as the peer benchmark has them: a model that answers a fixed
//! reply after an optional delay, no tools and no scripts. Workloads without persistence use
//! `weir_store::Memory::ephemeral()`, like the peer's runs without a checkpointer.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use weir_core::model::Usage;
use weir_core::script::{ScriptCall, ScriptError, ScriptResult, ScriptRunner};
use weir_core::{
    ModelClient, ModelError, ModelRequest, ModelResponse, ToolCall, ToolError, ToolRunner,
};

pub struct FakeModel {
    pub latency: Duration,
    /// The reply: "fake llm reply", or this many bytes of text (`durable_state`).
    pub reply_bytes: usize,
}

/// Calls of a chain's first node (`node 0: …`) since the process started, the number of the
/// call to time, and when it began.
static CALLS: AtomicUsize = AtomicUsize::new(0);
static MARK: AtomicUsize = AtomicUsize::new(usize::MAX);
static MARKED: Mutex<Option<Instant>> = Mutex::new(None);

/// Times the `n`-th call of a chain's first node from now: [`marked`] says when it began.
pub fn mark_call(n: usize) {
    *MARKED.lock().expect("mark") = None;
    MARK.store(CALLS.load(Ordering::SeqCst) + n, Ordering::SeqCst);
}

/// When the call [`mark_call`] named began, once it has; no call is timed after this.
pub fn marked() -> Option<Instant> {
    MARK.store(usize::MAX, Ordering::SeqCst);
    *MARKED.lock().expect("mark")
}

#[async_trait]
impl ModelClient for FakeModel {
    async fn complete(&self, req: ModelRequest) -> Result<ModelResponse, ModelError> {
        // (Only while a call is to be timed: the other workloads count instructions.)
        if MARK.load(Ordering::Relaxed) != usize::MAX
            && req.last_user().starts_with("node 0:")
            && CALLS.fetch_add(1, Ordering::Relaxed) + 1 == MARK.load(Ordering::Relaxed)
        {
            *MARKED.lock().expect("mark") = Some(Instant::now());
        }
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        Ok(ModelResponse {
            text: if self.reply_bytes == 0 {
                "fake llm reply".into()
            } else {
                "fake llm reply ".repeat(self.reply_bytes / 15 + 1)[..self.reply_bytes].into()
            },
            model: req.model,
            provider: "fake".into(),
            usage: Usage::default(),
            cost_usd: Some(0.0),
            fallback_used: false,
            calls: Vec::new(),
            events: Vec::new(),
        })
    }

    fn check_model(&self, _: &str) -> Result<(), String> {
        Ok(())
    }
}

pub struct NoTools;

#[async_trait]
impl ToolRunner for NoTools {
    fn has_tool(&self, _: &str) -> bool {
        false
    }
    fn tool_names(&self) -> Vec<String> {
        Vec::new()
    }
    async fn call(&self, _: ToolCall) -> Result<Value, ToolError> {
        Err(ToolError::fatal("no tools in the benchmark"))
    }
}

pub struct NoScripts;

#[async_trait]
impl ScriptRunner for NoScripts {
    async fn run(&self, _: ScriptCall) -> Result<ScriptResult, ScriptError> {
        Err(ScriptError::Runtime("no scripts in the benchmark".into()))
    }
}
