//! Replies as they are written: fake Anthropic and OpenAI servers stream their server-sent
//! events in pieces with pauses; `weir serve` sends them on as `delta` events before the
//! step commits, `weir run` on a terminal shows them, and a stream cut before or after its
//! first piece fails over or retries as the docs say.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::serve::{Client, Server, block};
use crate::support::{Fake, Reply, Weir, anthropic_stream, openai_stream, steps};

/// How long a fake waits before it answers a streamed call: the test's event-stream client,
/// which connects once the run exists, is listening by then.
const SETTLE: Duration = Duration::from_secs(1);

/// Twenty pieces of a reply: "Piece 1. Piece 2. …".
fn twenty() -> Vec<String> {
    (1..=20).map(|i| format!("Piece {i}. ")).collect()
}

/// One agent asking `model` about a topic.
fn ask(model: &str, config: Value) -> Value {
    let mut cfg =
        json!({"model": model, "user_message": "Tell me about {topic}", "output_key": "answer"});
    for (k, v) in config.as_object().into_iter().flatten() {
        cfg[k] = v.clone();
    }
    json!({"name": "Ask", "nodes": [{"id": "answer", "type": "agent", "config": cfg}], "edges": []})
}

/// A frame of the event stream: its `event:` type, `id:` (none on a delta) and data.
#[derive(Debug)]
struct Frame {
    kind: String,
    id: Option<u64>,
    data: Value,
}

/// Every frame of the run's event stream until it ends.
async fn frames(server: &Server, token: &str, run: &str) -> Vec<Frame> {
    let mut resp = reqwest::Client::new()
        .get(format!("{}/api/runs/{run}/events", server.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let (mut buf, mut out) = (String::new(), Vec::new());
    let (mut kind, mut id, mut data) = (None, None, String::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Some(chunk) = tokio::time::timeout_at(deadline.into(), resp.chunk())
        .await
        .expect("the stream ends")
        .unwrap()
    {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(i) = buf.find('\n') {
            let line: String = buf.drain(..=i).collect();
            let line = line.trim_end();
            if let Some(v) = line.strip_prefix("event: ") {
                kind = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("id: ") {
                id = v.parse().ok();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push_str(v);
            } else if line.is_empty()
                && let Some(k) = kind.take()
            {
                out.push(Frame {
                    kind: k,
                    id: id.take(),
                    data: serde_json::from_str(&std::mem::take(&mut data)).unwrap(),
                });
            }
        }
    }
    out
}

/// Saves `flow` as `ask` and starts a run of it on `topic`.
async fn start(api: &Client, flow: &Value, topic: &str) -> String {
    let (status, saved) = api
        .send(
            reqwest::Method::PUT,
            "/api/workflows/ask",
            Some(flow.clone()),
        )
        .await;
    assert_eq!(status, 200, "{saved}");
    let (status, r) = api
        .post(
            "/api/workflows/ask/runs",
            json!({"input": {"topic": topic}}),
        )
        .await;
    assert_eq!(status, 202, "{r}");
    r["run_id"].as_str().unwrap().to_string()
}

/// The deltas before the agent's step commits, and that step's record.
fn deltas_before_commit(frames: &[Frame]) -> Vec<&Value> {
    let commit = frames
        .iter()
        .position(|f| f.kind == "step_finished" && f.data["node_id"] == "answer")
        .expect("the step commits");
    frames[..commit]
        .iter()
        .filter(|f| f.kind == "delta")
        .map(|f| &f.data)
        .collect()
}

#[test]
fn an_anthropic_reply_streams_to_sse_clients_before_its_step_commits() {
    let fake = Fake::start();
    let pieces = twenty();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    fake.queue(
        "/v1/messages",
        // (A second before the reply begins: the test's client connects in the meantime.)
        vec![anthropic_stream(&pieces, 31, 47, Duration::from_millis(40)).delayed(SETTLE)],
    );
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-TESTKEY");
    let server = Server::start(&w, &[]);
    let token = server.first_token().unwrap();
    block(async {
        let api = Client::new(&server, &token);
        let run = start(&api, &ask("claude-sonnet-4-5", json!({})), "rivers").await;
        let frames = frames(&server, &token, &run).await;
        let deltas = deltas_before_commit(&frames);
        assert!(
            deltas.len() >= 20,
            "{} deltas before the commit",
            deltas.len()
        );
        assert!(
            frames
                .iter()
                .filter(|f| f.kind == "delta")
                .all(|f| f.id.is_none())
        );
        let written: String = deltas.iter().map(|d| d["text"].as_str().unwrap()).collect();
        assert_eq!(written, pieces.concat());
        // Each piece says where it goes in the reply.
        assert_eq!(deltas[0]["offset"], 0);
        assert_eq!(deltas[3]["offset"], pieces[..3].concat().chars().count());
        assert!(deltas.iter().all(|d| d["node_id"] == "answer"
            && d["attempt"] == 1
            && d["reply"] == 1
            && d["type"] == "delta"));
        // The provider was asked for a stream.
        let sent = fake.seen("/v1/messages")[0].json();
        assert_eq!(sent["stream"], true);

        let record = api.get(&format!("/api/runs/{run}")).await;
        assert_eq!(record["status"], "succeeded", "{record}");
        assert_eq!(record["state"]["answer"], pieces.concat());
        // Usage comes from the stream: input from message_start, output from message_delta.
        let step = steps(&record, "answer")[0];
        assert_eq!(step["tokens"]["input"], 31, "{step}");
        assert_eq!(step["tokens"]["output"], 47, "{step}");
        assert!(step["cost_usd"].as_f64().unwrap() > 0.0);
        // Deltas are not in the log: a client that reconnects gets the committed step.
        let log = record["events"].as_array().unwrap();
        assert!(log.iter().all(|e| e["type"] != "delta"));
        let again = self::frames(&server, &token, &run).await;
        assert!(again.iter().all(|f| f.kind != "delta"));
        assert_eq!(again.len(), log.len());
    });
}

/// An OpenAI stream that asks for a tool, its arguments' JSON split over three chunks.
fn openai_tool_stream() -> Reply {
    let chunk = |delta: Value, finish: Value| {
        (
            None,
            json!({"id": "c0", "object": "chat.completion.chunk", "model": "gpt-4o",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let call = |c: Value| chunk(json!({"tool_calls": [c]}), Value::Null);
    Reply::sse(
        &[
            chunk(json!({"role": "assistant", "content": null}), Value::Null),
            call(json!({"index": 0, "id": "call_w1", "type": "function",
                        "function": {"name": "weather", "arguments": ""}})),
            call(json!({"index": 0, "function": {"arguments": "{\"ci"}})),
            call(json!({"index": 0, "function": {"arguments": "ty\": \"Os"}})),
            call(json!({"index": 0, "function": {"arguments": "lo\"}"}})),
            chunk(json!({}), json!("tool_calls")),
            (
                None,
                json!({"id": "c0", "object": "chat.completion.chunk", "choices": [],
                       "usage": {"prompt_tokens": 50, "completion_tokens": 12}}),
            ),
            (None, Value::String("[DONE]".into())),
        ],
        Duration::from_millis(5),
    )
}

#[test]
fn an_openai_agent_streams_tool_calls_and_its_answer_and_counts_the_usage_chunks() {
    let fake = Fake::start();
    fake.always(
        "/weather/Oslo",
        Reply::json(200, json!({"city": "Oslo", "sky": "snow"})),
    );
    let pieces = twenty();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    fake.queue(
        "/v1/chat/completions",
        vec![
            openai_tool_stream(),
            openai_stream(&pieces, 80, 30, Duration::from_millis(30)).delayed(SETTLE),
        ],
    );
    let w = Weir::new()
        .env("OPENAI_BASE_URL", &format!("{}/v1", fake.url))
        .env("OPENAI_API_KEY", "sk-TESTKEY");
    w.file(
        "weir.toml",
        &format!(
            "[network]\nallow = [\"{}\"]\n\n[tools.weather]\nkind = \"http\"\nurl = \"{}/weather/{{city}}\"\nresponse = \"body\"\ndescription = \"Today's weather in a city\"\n",
            fake.url.trim_start_matches("http://"),
            fake.url
        ),
    );
    let server = Server::start(&w, &[]);
    let token = server.first_token().unwrap();
    block(async {
        let api = Client::new(&server, &token);
        let flow = ask("gpt-4o", json!({"tools": ["custom:weather"]}));
        let run = start(&api, &flow, "Oslo").await;
        let frames = frames(&server, &token, &run).await;
        let deltas = deltas_before_commit(&frames);
        assert!(deltas.len() >= 20, "{} deltas", deltas.len());
        // The turn that asked for the tool wrote no text: the answer is the first reply.
        assert!(deltas.iter().all(|d| d["reply"] == 1), "{deltas:?}");

        let sent = fake.seen("/v1/chat/completions");
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0].json()["stream"], true);
        assert_eq!(sent[0].json()["stream_options"]["include_usage"], true);
        // The tool's result went back with the call's id.
        let second = sent[1].json();
        let tool_msg = second["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool")
            .expect("the tool's result is sent back");
        assert_eq!(tool_msg["tool_call_id"], "call_w1");
        assert!(
            tool_msg["content"].as_str().unwrap().contains("snow"),
            "{tool_msg}"
        );
        assert_eq!(fake.seen("/weather/Oslo").len(), 1);

        let record = api.get(&format!("/api/runs/{run}")).await;
        assert_eq!(record["status"], "succeeded", "{record}");
        assert_eq!(record["state"]["answer"], pieces.concat());
        let step = steps(&record, "answer")[0];
        let attempt = &step["attempts"][0];
        assert_eq!(
            attempt["tool_calls"][0]["arguments"],
            json!({"city": "Oslo"})
        );
        // Each call's usage is the stream's last chunk's.
        assert_eq!(step["tokens"]["input"], 130, "{step}");
        assert_eq!(step["tokens"]["output"], 42, "{step}");
    });
}

#[test]
fn a_stream_cut_before_its_first_piece_fails_over_and_one_cut_after_it_is_retried() {
    let fake = Fake::start();
    let pieces = ["The first ", "half of it"];
    // Before any text: the primary's stream drops after message_start; the fallback answers.
    fake.queue(
        "/v1/messages",
        vec![anthropic_stream(&pieces, 5, 5, Duration::from_millis(5)).cut_after(1)],
    );
    fake.queue(
        "/v1/chat/completions",
        vec![openai_stream(
            &["Fallback ", "answer."],
            9,
            3,
            Duration::from_millis(5),
        )],
    );
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-TESTKEY")
        .env("OPENAI_BASE_URL", &format!("{}/v1", fake.url))
        .env("OPENAI_API_KEY", "sk-TESTKEY");
    let server = Server::start(&w, &[]);
    let token = server.first_token().unwrap();
    block(async {
        let api = Client::new(&server, &token);
        let flow = ask(
            "claude-sonnet-4-5",
            json!({"fallback_models": ["gpt-4o"], "retry_count": 1}),
        );
        let run = start(&api, &flow, "fallbacks").await;
        let _ = frames(&server, &token, &run).await;
        let record = api.get(&format!("/api/runs/{run}")).await;
        assert_eq!(record["status"], "succeeded", "{record}");
        assert_eq!(record["state"]["answer"], "Fallback answer.");
        let step = steps(&record, "answer")[0];
        let calls = step["attempts"][0]["calls"].as_array().unwrap();
        assert_eq!(calls.len(), 2, "{step}");
        assert_eq!(calls[0]["status"], "failed");
        assert_eq!(calls[0]["error_class"], "network");
        assert_eq!(step["attempts"].as_array().unwrap().len(), 1);

        // After text was written: the cut fails the attempt (no fallback) and the retry
        // answers from the start.
        fake.queue(
            "/v1/messages",
            vec![
                anthropic_stream(&pieces, 5, 5, Duration::from_millis(5))
                    .cut_after(5)
                    .delayed(SETTLE),
                anthropic_stream(&["Whole ", "answer."], 7, 2, Duration::from_millis(5)),
            ],
        );
        let run = start(&api, &flow, "retries").await;
        let frames = frames(&server, &token, &run).await;
        let record = api.get(&format!("/api/runs/{run}")).await;
        assert_eq!(record["status"], "succeeded", "{record}");
        assert_eq!(record["state"]["answer"], "Whole answer.");
        let step = steps(&record, "answer")[0];
        let attempts = step["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{step}");
        let first = attempts[0]["calls"].as_array().unwrap();
        assert_eq!(first.len(), 1, "no fallback after text was written: {step}");
        assert_eq!(first[0]["error_class"], "network");
        assert!(
            first[0]["error"]
                .as_str()
                .unwrap()
                .contains("after the reply had begun"),
            "{step}"
        );
        // The second attempt's reply starts over in the live view.
        let deltas: Vec<&Value> = frames
            .iter()
            .filter(|f| f.kind == "delta")
            .map(|f| &f.data)
            .collect();
        assert!(
            deltas
                .iter()
                .any(|d| d["attempt"] == 1 && d["text"] == "The first ")
        );
        let second: String = deltas
            .iter()
            .filter(|d| d["attempt"] == 2)
            .map(|d| d["text"].as_str().unwrap())
            .collect();
        assert_eq!(second, "Whole answer.");
        assert_eq!(fake.seen("/v1/chat/completions").len(), 1);
    });
}

#[test]
fn weir_run_on_a_terminal_shows_the_reply_as_it_is_written() {
    use std::io::Read as _;
    let fake = Fake::start();
    let pieces: Vec<String> = (1..=20).map(|i| format!("word{i} ")).collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    fake.queue(
        "/v1/messages",
        vec![anthropic_stream(&pieces, 3, 20, Duration::from_millis(60))],
    );
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-TESTKEY")
        .env("TERM", "xterm-256color");
    let flow = w.file("ask.json", &ask("claude-sonnet-4-5", json!({})).to_string());
    // stderr on a pseudo-terminal: the live view is drawn.
    let size = nix::pty::Winsize {
        ws_row: 40,
        ws_col: 120,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).unwrap();
    let mut cmd = w.command(&["run", &flow, "--input", r#"{"topic": "rivers"}"#]);
    cmd.stderr(std::process::Stdio::from(pty.slave));
    let mut child = cmd.spawn().unwrap();
    let mut master = std::fs::File::from(pty.master);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let status = child.wait().unwrap();
    assert!(status.success());
    let mut screen = Vec::new();
    while let Ok(b) = rx.recv_timeout(Duration::from_millis(500)) {
        screen.extend(b);
    }
    let screen = String::from_utf8_lossy(&screen);
    // The reply's words were drawn while the step ran, the later ones after the earlier.
    let at = |word: &str| {
        screen
            .find(word)
            .unwrap_or_else(|| panic!("{word} not drawn:\n{screen}"))
    };
    assert!(at("word3 ") < at("word12 "));
    assert!(at("word12 ") < at("word19 "));
    // The step's line follows once it has committed.
    assert!(at("word19 ") < screen.rfind("answer").unwrap());
}
