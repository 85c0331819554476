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
/// Whether the fake reports its call's record (`WEIR_BENCH_CALLS=1`).
static REPORT_CALLS: std::sync::LazyLock<bool> =
    std::sync::LazyLock::new(|| std::env::var("WEIR_BENCH_CALLS").as_deref() == Ok("1"));

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
        let text: weir_core::model::ReplyText = if self.reply_bytes == 0 {
            "fake llm reply".into()
        } else {
            "fake llm reply ".repeat(self.reply_bytes / 15 + 1)[..self.reply_bytes].into()
        };
        // WEIR_BENCH_CALLS=1: the record of the call, as the real gateway reports every
        // model it reached (the peer's fake model reports none, so the comparisons leave it
        // out; BENCHMARKS.md measures both).
        let calls = if *REPORT_CALLS {
            vec![weir_core::model::ModelCall {
                model: req.model.clone(),
                provider: "fake".into(),
                status: "succeeded".into(),
                error_class: None,
                error: None,
                input_tokens: 0,
                output_tokens: 0,
                cost_usd: Some(0.0),
                priced: true,
                duration_ms: 0,
                reply: Some(text.clone()),
                tool_uses: Vec::new(),
            }]
        } else {
            Vec::new()
        };
        Ok(ModelResponse {
            text,
            model: req.model,
            provider: "fake".into(),
            usage: Usage::default(),
            cost_usd: Some(0.0),
            fallback_used: false,
            calls,
            events: Vec::new(),
            tool_uses: Vec::new(),
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
