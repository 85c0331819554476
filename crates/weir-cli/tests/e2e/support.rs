//! Test support: run the real `weir` binary on real workflow files, with a fake HTTP server
//! on loopback standing in for providers, webhooks and APIs (the network edge).

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::http::{Request, Response, StatusCode};
use futures_util::StreamExt as _;
use serde_json::Value;

/// A recorded request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: HashMap<String, String>,
    pub body: String,
    /// The body's bytes (a protobuf body is not text).
    pub raw: Vec<u8>,
    /// When the request arrived.
    pub at: std::time::Instant,
}

impl Seen {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// An Anthropic Messages API reply with `text` and the given usage.
pub fn anthropic(text: &str, input: u64, output: u64) -> Reply {
    Reply::json(
        200,
        serde_json::json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": input, "output_tokens": output}
        }),
    )
}

/// A scripted reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub content_type: &'static str,
    pub headers: Vec<(String, String)>,
    pub delay: Duration,
    /// A streamed body: each piece sent after its pause (then `body`, when not empty).
    pub pieces: Vec<(Duration, String)>,
    /// The connection drops after the pieces, without the rest of the body.
    pub cut: bool,
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            body: body.to_string(),
            content_type: "application/json",
            headers: Vec::new(),
            delay: Duration::ZERO,
            pieces: Vec::new(),
            cut: false,
        }
    }

    pub fn text(status: u16, body: &str) -> Self {
        Self {
            status,
            body: body.to_string(),
            content_type: "text/plain",
            headers: Vec::new(),
            delay: Duration::ZERO,
            pieces: Vec::new(),
            cut: false,
        }
    }

    /// Server-sent events (`(event type, data)` each; no type: data only), `gap` apart.
    pub fn sse(events: &[(Option<&str>, Value)], gap: Duration) -> Self {
        let mut r = Self::text(200, "");
        r.content_type = "text/event-stream";
        r.pieces = events
            .iter()
            .map(|(kind, data)| {
                let data = match data {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                let frame = match kind {
                    Some(k) => format!("event: {k}\ndata: {data}\n\n"),
                    None => format!("data: {data}\n\n"),
                };
                (gap, frame)
            })
            .collect();
        r
    }

    /// Only the first `n` pieces are sent, then the connection drops.
    pub fn cut_after(mut self, n: usize) -> Self {
        self.pieces.truncate(n);
        self.cut = true;
        self
    }

    pub fn delayed(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
}

#[derive(Default)]
struct Script {
    /// path → replies used once each, in order
    queued: HashMap<String, VecDeque<Reply>>,
    /// path → reply used when the queue is empty
    fallback: HashMap<String, Reply>,
    seen: Vec<Seen>,
}

/// A fake HTTP server on 127.0.0.1 with its own runtime thread.
pub struct Fake {
    pub url: String,
    script: Arc<Mutex<Script>>,
    _rt: tokio::runtime::Runtime,
}

impl Fake {
    pub fn start() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("test runtime");
        let script = Arc::new(Mutex::new(Script::default()));
        let s2 = script.clone();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        rt.spawn(async move {
            let app = axum::Router::new().fallback(move |req: Request<Body>| {
                let script = s2.clone();
                async move { handle(script, req).await }
            });
            axum::serve(listener, app).await.expect("fake server");
        });
        Self {
            url: format!("http://{addr}"),
            script,
            _rt: rt,
        }
    }

    /// Replies used once each, in order, for `path`.
    pub fn queue(&self, path: &str, replies: Vec<Reply>) -> &Self {
        self.script
            .lock()
            .unwrap()
            .queued
            .entry(path.into())
            .or_default()
            .extend(replies);
        self
    }

    /// The reply for `path` once its queue is empty.
    pub fn always(&self, path: &str, reply: Reply) -> &Self {
        self.script
            .lock()
            .unwrap()
            .fallback
            .insert(path.into(), reply);
        self
    }

    pub fn seen(&self, path: &str) -> Vec<Seen> {
        self.script
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|s| s.path == path)
            .cloned()
            .collect()
    }
}

async fn handle(script: Arc<Mutex<Script>>, req: Request<Body>) -> Response<Body> {
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = to_bytes(req.into_body(), 10 << 20)
        .await
        .unwrap_or_default();
    let reply = {
        let mut s = script.lock().unwrap();
        s.seen.push(Seen {
            method,
            path: path.clone(),
            query,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
            raw: body.to_vec(),
            at: std::time::Instant::now(),
        });
        let queued = s.queued.get_mut(&path).and_then(VecDeque::pop_front);
        queued.or_else(|| s.fallback.get(&path).cloned())
    };
    let Some(reply) = reply else {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from(format!("no script for {path}")))
            .unwrap();
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut b = Response::builder()
        .status(reply.status)
        .header("content-type", reply.content_type);
    for (k, v) in &reply.headers {
        b = b.header(k, v);
    }
    if reply.pieces.is_empty() {
        return b.body(Body::from(reply.body)).unwrap();
    }
    let cut = reply.cut;
    let pieces = futures_util::stream::iter(reply.pieces)
        .then(|(gap, piece)| async move {
            tokio::time::sleep(gap).await;
            Ok::<_, std::io::Error>(axum::body::Bytes::from(piece))
        })
        .chain(futures_util::stream::iter(cut.then(|| {
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "the fake drops the connection",
            ))
        })));
    b.body(Body::from_stream(pieces)).unwrap()
}

/// An Anthropic Messages stream of `pieces` of text, `gap` apart, with its usage: the input
/// tokens in `message_start`, the output tokens in the closing `message_delta`.
pub fn anthropic_stream(pieces: &[&str], input: u64, output: u64, gap: Duration) -> Reply {
    let mut events = vec![
        (
            Some("message_start"),
            serde_json::json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "content": [], "model": "claude", "stop_reason": null,
                "usage": {"input_tokens": input, "output_tokens": 1}}}),
        ),
        (
            Some("content_block_start"),
            serde_json::json!({"type": "content_block_start", "index": 0,
                               "content_block": {"type": "text", "text": ""}}),
        ),
        (Some("ping"), serde_json::json!({"type": "ping"})),
    ];
    for p in pieces {
        events.push((
            Some("content_block_delta"),
            serde_json::json!({"type": "content_block_delta", "index": 0,
                               "delta": {"type": "text_delta", "text": p}}),
        ));
    }
    events.extend([
        (
            Some("content_block_stop"),
            serde_json::json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            Some("message_delta"),
            serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                               "usage": {"output_tokens": output}}),
        ),
        (
            Some("message_stop"),
            serde_json::json!({"type": "message_stop"}),
        ),
    ]);
    Reply::sse(&events, gap)
}

/// An OpenAI Chat Completions stream of `pieces` of text, `gap` apart, ending with the usage
/// chunk (`stream_options.include_usage`) and `[DONE]`.
pub fn openai_stream(pieces: &[&str], prompt: u64, completion: u64, gap: Duration) -> Reply {
    let chunk = |delta: Value, finish: Value| {
        (
            None,
            serde_json::json!({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let mut events = vec![chunk(
        serde_json::json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for p in pieces {
        events.push(chunk(serde_json::json!({"content": p}), Value::Null));
    }
    events.push(chunk(serde_json::json!({}), serde_json::json!("stop")));
    events.push((
        None,
        serde_json::json!({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o",
            "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}}),
    ));
    events.push((None, Value::String("[DONE]".into())));
    Reply::sse(&events, gap)
}

/// A scratch directory with its own database; runs `weir` with a clean environment.
pub struct Weir {
    pub dir: tempfile::TempDir,
    env: Vec<(String, String)>,
}

pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_weir")
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

impl Weir {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("weir.db").to_string_lossy().into_owned();
        Self {
            dir,
            env: vec![("WEIR_DB".into(), db)],
        }
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Short leases (`[lease]` in the scratch directory's weir.toml), so a test can wait out
    /// the lease of a driver it killed.
    pub fn short_lease(&self, ttl_seconds: f64, heartbeat_seconds: f64) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("weir.toml"))
            .expect("weir.toml");
        writeln!(
            f,
            "\n[lease]\nttl_seconds = {ttl_seconds}\nheartbeat_seconds = {heartbeat_seconds}"
        )
        .expect("write weir.toml");
    }

    /// A path inside the scratch directory (the database is `weir.db` there).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a workflow file into the scratch directory and returns its path.
    pub fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("write workflow");
        p.to_string_lossy().into_owned()
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .current_dir(self.dir.path());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    pub fn run(&self, args: &[&str]) -> Ran {
        let out: Output = self.command(args).output().expect("run weir");
        Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// [`run`](Self::run) with extra environment variables.
    pub fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Ran {
        let mut c = self.command(args);
        for (k, v) in env {
            c.env(k, v);
        }
        let out: Output = c.output().expect("run weir");
        Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn weir")
    }

    /// `weir run examples/graph/approval.yaml --json` for a customer and an amount: it parks
    /// at its review gate (exit 3) from 100 up, and succeeds (exit 0) below.
    pub fn run_approval(&self, customer: &str, amount: u32) -> Ran {
        let gate = repo_root().join("examples/graph/approval.yaml");
        let input = serde_json::json!({"customer": customer, "amount": amount}).to_string();
        self.run(&["run", &gate.to_string_lossy(), "--input", &input, "--json"])
    }

    /// The ids of every recorded run, newest first (`weir runs list --json`).
    pub fn run_ids(&self) -> Vec<String> {
        self.run(&["runs", "list", "--limit", "100000", "--json"])
            .json()
            .as_array()
            .expect("a list")
            .iter()
            .map(|r| r["run_id"].as_str().expect("run_id").to_string())
            .collect()
    }

    /// `weir runs show ID --json`.
    pub fn show(&self, run_id: &str) -> Value {
        self.run(&["runs", "show", run_id, "--json"]).json()
    }
}

/// The steps of a record for one node.
pub fn steps<'a>(record: &'a Value, node: &str) -> Vec<&'a Value> {
    record["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["node_id"] == node)
        .collect()
}

/// Waits (polling, bounded) until `cond` holds.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
