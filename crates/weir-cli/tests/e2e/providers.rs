//! Agent nodes against fake Anthropic and OpenAI servers speaking the real wire formats.

use serde_json::json;

use crate::support::{Fake, Reply, Weir, steps};

fn agent(model: &str, extra: &str) -> String {
    format!(
        r#"{{"nodes": [{{"id": "score", "type": "agent",
              "config": {{"model": "{model}", "system_prompt": "Score 0-100.",
                         "user_message": "Lead: {{lead}}", "temperature": 0.1,
                         "max_tokens": 20, "output_key": "score"{extra}}}}}],
           "edges": []}}"#
    )
}

fn anthropic_ok(text: &str, input: u64, output: u64) -> Reply {
    Reply::json(
        200,
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": input, "output_tokens": output}
        }),
    )
}

fn anthropic_env(fake: &Fake) -> Weir {
    Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-TESTKEY")
}

#[test]
fn anthropic_reply_is_recorded_and_priced() {
    let fake = Fake::start();
    fake.queue("/v1/messages", vec![anthropic_ok("87", 1000, 200)]);
    let w = anthropic_env(&fake);
    let f = w.file("a.json", &agent("claude-haiku-4-5", ""));
    let ran = w.run(&["run", &f, "--input", r#"{"lead": "Ada, CTO"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["state"]["score"], "87");
    let step = steps(&r, "score")[0];
    // $1 / $5 per million tokens: 1000 in, 200 out.
    assert!((step["cost_usd"].as_f64().unwrap() - 0.002).abs() < 1e-12);
    assert!((r["cost_usd"].as_f64().unwrap() - 0.002).abs() < 1e-12);
    assert_eq!(step["tokens"], json!({"input": 1000, "output": 200}));
    assert_eq!(step["output"]["text"], "87");
    assert_eq!(step["output"]["model"], "claude-haiku-4-5");
    assert_eq!(step["output"]["input_tokens"], 1000);
    assert_eq!(step["attempts"][0]["response"], "87");
    assert_eq!(step["attempts"][0]["request"]["user"], "Lead: Ada, CTO");
    // What went over the wire.
    let sent = &fake.seen("/v1/messages")[0];
    assert_eq!(sent.headers["x-api-key"], "sk-ant-TESTKEY");
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    let body = sent.json();
    assert_eq!(body["system"], "Score 0-100.");
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": "Lead: Ada, CTO"}])
    );
    assert_eq!(body["max_tokens"], 20);
    assert!(!ran.stdout.contains("TESTKEY"));
}

#[test]
fn openai_reply_is_recorded_and_priced() {
    let fake = Fake::start();
    fake.queue("/v1/chat/completions", vec![Reply::json(200, json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "42"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 2000, "completion_tokens": 100, "total_tokens": 2100}
    }))]);
    let w = Weir::new()
        .env("OPENAI_BASE_URL", &format!("{}/v1", fake.url))
        .env("OPENAI_API_KEY", "sk-TESTKEY");
    let f = w.file("o.json", &agent("gpt-4o", ""));
    let ran = w.run(&["run", &f, "--input", r#"{"lead": "Bo"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["state"]["score"], "42");
    // $2.50 / $10 per million: 2000 in, 100 out = 0.005 + 0.001.
    assert!((r["cost_usd"].as_f64().unwrap() - 0.006).abs() < 1e-12);
    let sent = &fake.seen("/v1/chat/completions")[0];
    assert_eq!(sent.headers["authorization"], "Bearer sk-TESTKEY");
    assert_eq!(
        sent.json()["messages"][0],
        json!({"role": "system", "content": "Score 0-100."})
    );
    assert_eq!(
        sent.json()["messages"][1],
        json!({"role": "user", "content": "Lead: Bo"})
    );
}

#[test]
fn server_errors_are_retried_with_backoff_and_every_attempt_recorded() {
    let fake = Fake::start();
    fake.queue("/v1/messages", vec![
        Reply::json(529, json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
        Reply::json(500, json!({"type": "error", "error": {"type": "api_error", "message": "Internal"}})),
        anthropic_ok("ok", 10, 2),
    ]);
    let w = anthropic_env(&fake);
    let f = w.file(
        "a.json",
        &agent("claude-haiku-4-5", r#", "retry_count": 2"#),
    );
    let started = std::time::Instant::now();
    let ran = w.run(&["run", &f, "--input", r#"{"lead": "x"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    let step = steps(&r, "score")[0];
    let attempts = step["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3);
    assert_eq!(attempts[0]["status"], "failed");
    assert_eq!(attempts[0]["error_class"], "server_error");
    assert!(
        attempts[0]["error"]
            .as_str()
            .unwrap()
            .contains("Overloaded")
    );
    assert_eq!(attempts[1]["error_class"], "server_error");
    assert_eq!(attempts[2]["status"], "succeeded");
    assert_eq!(fake.seen("/v1/messages").len(), 3);
    // Backoff of 1 s then 2 s happened between the attempts.
    assert!(started.elapsed() >= std::time::Duration::from_secs(3));
}

#[test]
fn exhausted_retries_fail_the_run_with_the_error_class() {
    let fake = Fake::start();
    fake.always(
        "/v1/messages",
        Reply::json(
            429,
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
        )
        .header("retry-after", "0"),
    );
    let w = anthropic_env(&fake);
    let f = w.file(
        "a.json",
        &agent("claude-haiku-4-5", r#", "retry_count": 1"#),
    );
    let ran = w.run(&["run", &f, "--input", r#"{"lead": "x"}"#, "--json"]);
    assert_eq!(ran.code, 1);
    let r = ran.json();
    assert_eq!(r["status"], "failed");
    assert_eq!(r["error"]["node_id"], "score");
    let attempts = steps(&r, "score")[0]["attempts"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(attempts.len(), 2);
    assert!(attempts.iter().all(|a| a["error_class"] == "rate_limit"));
    assert_eq!(fake.seen("/v1/messages").len(), 2);
}

#[test]
fn auth_errors_are_not_retried() {
    let fake = Fake::start();
    fake.always("/v1/messages", Reply::json(401, json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})));
    let w = anthropic_env(&fake);
    let f = w.file(
        "a.json",
        &agent("claude-haiku-4-5", r#", "retry_count": 3"#),
    );
    let ran = w.run(&["run", &f, "--input", r#"{"lead": "x"}"#, "--json"]);
    assert_eq!(ran.code, 1);
    let r = ran.json();
    let attempts = steps(&r, "score")[0]["attempts"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["error_class"], "auth");
    assert_eq!(fake.seen("/v1/messages").len(), 1);
}

#[test]
fn malformed_replies_and_dead_servers_are_classified() {
    let fake = Fake::start();
    fake.always("/v1/messages", Reply::text(200, "<html>not json</html>"));
    let w = anthropic_env(&fake);
    let f = w.file("a.json", &agent("claude-haiku-4-5", ""));
    let r = w
        .run(&["run", &f, "--input", r#"{"lead": "x"}"#, "--json"])
        .json();
    assert_eq!(
        steps(&r, "score")[0]["attempts"][0]["error_class"],
        "malformed"
    );

    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env("ANTHROPIC_API_KEY", "k");
    let f = w.file("a.json", &agent("claude-haiku-4-5", ""));
    let r = w
        .run(&["run", &f, "--input", r#"{"lead": "x"}"#, "--json"])
        .json();
    assert_eq!(
        steps(&r, "score")[0]["attempts"][0]["error_class"],
        "network"
    );
}

#[test]
fn a_missing_api_key_is_an_auth_error() {
    let w = Weir::new();
    let f = w.file(
        "a.json",
        &agent("claude-haiku-4-5", r#", "retry_count": 2"#),
    );
    let ran = w.run(&["run", &f, "--input", r#"{"lead": "x"}"#, "--json"]);
    assert_eq!(ran.code, 1);
    let r = ran.json();
    let a = &steps(&r, "score")[0]["attempts"];
    assert_eq!(a.as_array().unwrap().len(), 1);
    assert!(
        a[0]["error"]
            .as_str()
            .unwrap()
            .contains("ANTHROPIC_API_KEY")
    );
}

#[test]
fn mock_model_can_be_scripted() {
    let w = Weir::new().env(
        "WEIR_MOCK",
        r#"[{"match": "Lead: Ada", "reply": "93", "input_tokens": 7, "output_tokens": 1}]"#,
    );
    let f = w.file("m.json", &agent("mock", ""));
    let r = w
        .run(&["run", &f, "--input", r#"{"lead": "Ada"}"#, "--json"])
        .json();
    assert_eq!(r["state"]["score"], "93");
    assert_eq!(
        steps(&r, "score")[0]["tokens"],
        json!({"input": 7, "output": 1})
    );
    assert_eq!(r["cost_usd"], 0.0);
}
