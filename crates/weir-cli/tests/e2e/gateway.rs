//! The model gateway (spec 002 "Structured output" and "Model fallback", DESIGN §5 and §7)
//! against fake Anthropic and OpenAI servers speaking their real wire formats.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Fake, Reply, Weir, anthropic, steps};

fn anthropic_error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(
        status,
        json!({"type": "error", "error": {"type": kind, "message": message}}),
    )
}

fn openai(text: &str, input: u64, output: u64) -> Reply {
    Reply::json(
        200,
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": input, "completion_tokens": output}
        }),
    )
}

fn openai_error(status: u16, code: &str, message: &str) -> Reply {
    Reply::json(
        status,
        json!({"error": {"message": message, "type": code, "code": code}}),
    )
}

/// A Weir pointed at the fake for both providers.
fn weir(fake: &Fake) -> Weir {
    Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("OPENAI_BASE_URL", &format!("{}/v1", fake.url))
        .env("OPENAI_API_KEY", "sk-test")
}

const SCORE_SCHEMA: &str = r#"{"type": "object",
  "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 100}, "reason": {"type": "string"}},
  "required": ["score", "reason"]}"#;

fn scored(extra: &str) -> String {
    format!(
        r#"{{"nodes": [{{"id": "score", "type": "agent", "config": {{"label": "Score Lead",
            "model": "claude-haiku-4-5", "user_message": "Lead: {{lead}}",
            "response_schema": {SCORE_SCHEMA}, "output_key": "score"{extra}}}}}], "edges": []}}"#
    )
}

fn near(a: &Value, b: f64) -> bool {
    (a.as_f64().unwrap() - b).abs() < 1e-12
}

#[test]
fn an_invalid_reply_is_repaired_with_the_exact_errors() {
    let fake = Fake::start();
    fake.queue(
        "/v1/messages",
        vec![
            anthropic(r#"Sure! Here is the score: {"score": 150}"#, 1000, 100),
            anthropic(
                "```json\n{\"score\": 87, \"reason\": \"CTO at a fit company\"}\n```",
                1200,
                50,
            ),
        ],
    );
    let w = weir(&fake);
    let f = w.file("s.json", &scored(""));
    let ran = w.run(&["run", &f, "--input", r#"{"lead": "Ada"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    // Downstream sees the typed object, not the raw string.
    assert_eq!(
        r["state"]["score"],
        json!({"score": 87, "reason": "CTO at a fit company"})
    );
    let step = steps(&r, "score")[0];
    assert_eq!(
        step["output"]["parsed"],
        json!({"score": 87, "reason": "CTO at a fit company"})
    );
    assert_eq!(step["output"]["schema_valid"], true);
    assert_eq!(step["output"]["repair_attempts"], 1);
    assert!(
        step["output"]["text"]
            .as_str()
            .unwrap()
            .starts_with("```json")
    );
    // Both calls are recorded, the rejected one with its errors, and both are charged:
    // (1000 + 1200) × $1 + (100 + 50) × $5 per million.
    let calls = step["attempts"][0]["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    let errors: Vec<&str> = calls[0]["validation_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("/score:") && e.contains("100")),
        "{errors:?}"
    );
    assert!(errors.iter().any(|e| e.contains("reason")), "{errors:?}");
    assert_eq!(
        calls[0]["reply"],
        r#"Sure! Here is the score: {"score": 150}"#
    );
    assert!(near(&step["cost_usd"], 0.00295));
    assert!(near(&r["cost_usd"], 0.00295));
    assert_eq!(step["tokens"], json!({"input": 2200, "output": 150}));
    // The repair prompt carried the conversation and the exact validation errors.
    let sent = fake.seen("/v1/messages");
    assert!(
        sent[0].json()["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("JSON Schema")
    );
    let second = sent[1].json();
    let msgs = second["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(
        msgs[1]["content"],
        r#"Sure! Here is the score: {"score": 150}"#
    );
    let repair = msgs[2]["content"].as_str().unwrap();
    for e in &errors {
        assert!(repair.contains(e), "repair prompt lacks {e:?}:\n{repair}");
    }
}

#[test]
fn a_reply_still_invalid_after_the_last_repair_fails_the_node() {
    let fake = Fake::start();
    fake.always(
        "/v1/messages",
        anthropic("I think it's a good lead.", 100, 10),
    );
    let w = weir(&fake);
    let f = w.file("s.json", &scored(r#", "retry_count": 2"#));
    let ran = w.run(&["run", &f, "--input", r#"{"lead": "Ada"}"#, "--json"]);
    assert_eq!(ran.code, 1);
    let r = ran.json();
    assert_eq!(r["error"]["node_id"], "score");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("after 2 repair attempts") && msg.contains("no JSON value"),
        "{msg}"
    );
    let step = steps(&r, "score")[0];
    // Schema exhaustion is not retried by retry_count: the repair loop was the retry.
    assert_eq!(step["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(step["attempts"][0]["error_class"], "schema");
    assert_eq!(step["attempts"][0]["calls"].as_array().unwrap().len(), 3);
    assert_eq!(fake.seen("/v1/messages").len(), 3);
    // All three calls were charged: 300 × $1 + 30 × $5 per million.
    assert!(near(&r["cost_usd"], 0.00045));
}

#[test]
fn repair_attempts_can_be_set() {
    let fake = Fake::start();
    fake.always("/v1/messages", anthropic("{\"score\": 5}", 10, 1));
    let w = weir(&fake);
    let f = w.file("s.json", &scored(r#", "repair_attempts": 0"#));
    let r = w
        .run(&["run", &f, "--input", r#"{"lead": "Ada"}"#, "--json"])
        .json();
    assert_eq!(r["status"], "failed");
    assert_eq!(fake.seen("/v1/messages").len(), 1);
    assert!(r["error"]["message"].as_str().unwrap().contains("reason"));
}

#[test]
fn the_mock_model_answers_a_schema_with_a_valid_value() {
    let w = Weir::new();
    let f = w.file("s.json", &scored("").replace("claude-haiku-4-5", "mock"));
    let r = w
        .run(&["run", &f, "--input", r#"{"lead": "Ada"}"#, "--json"])
        .json();
    assert_eq!(r["status"], "succeeded");
    let step = steps(&r, "score")[0];
    assert_eq!(step["output"]["repair_attempts"], 0);
    assert!(r["state"]["score"]["score"].is_i64());
    assert!(r["state"]["score"]["reason"].is_string());
}

fn agent(model: &str, extra: &str) -> String {
    format!(
        r#"{{"nodes": [{{"id": "summarize", "type": "agent", "config": {{"model": "{model}",
            "user_message": "Summarize: {{raw}}", "output_key": "summary"{extra}}}}}], "edges": []}}"#
    )
}

#[test]
fn every_error_class_is_recognised() {
    let cases: Vec<(&str, Reply, &str)> = vec![
        (
            "claude-haiku-4-5",
            anthropic_error(401, "authentication_error", "invalid x-api-key"),
            "auth",
        ),
        (
            "claude-haiku-4-5",
            anthropic_error(403, "permission_error", "forbidden"),
            "auth",
        ),
        (
            "claude-haiku-4-5",
            anthropic_error(429, "rate_limit_error", "too many"),
            "rate_limit",
        ),
        (
            "claude-haiku-4-5",
            anthropic_error(408, "timeout_error", "timeout"),
            "timeout",
        ),
        (
            "claude-haiku-4-5",
            anthropic_error(500, "api_error", "internal"),
            "server_error",
        ),
        (
            "claude-haiku-4-5",
            anthropic_error(529, "overloaded_error", "Overloaded"),
            "server_error",
        ),
        (
            "claude-haiku-4-5",
            anthropic_error(400, "invalid_request_error", "bad"),
            "http_error",
        ),
        (
            "claude-haiku-4-5",
            Reply::json(200, json!({"no": "content"})),
            "malformed",
        ),
        (
            "gpt-4o",
            openai_error(429, "rate_limit_exceeded", "slow down"),
            "rate_limit",
        ),
        (
            "gpt-4o",
            openai_error(503, "server_error", "unavailable"),
            "server_error",
        ),
        (
            "gpt-4o",
            openai_error(404, "model_not_found", "no such model"),
            "http_error",
        ),
        ("gpt-4o", Reply::text(200, "not json"), "malformed"),
    ];
    for (model, reply, class) in cases {
        let fake = Fake::start();
        fake.always("/v1/messages", reply.clone());
        fake.always("/v1/chat/completions", reply);
        let w = weir(&fake);
        let f = w.file("a.json", &agent(model, ""));
        let r = w
            .run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"])
            .json();
        let attempt = &steps(&r, "summarize")[0]["attempts"][0];
        assert_eq!(attempt["error_class"], class, "{model}: {attempt}");
        assert_eq!(r["status"], "failed");
    }
    // network: nothing listens; timeout: the reply comes too late.
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env("ANTHROPIC_API_KEY", "k");
    let f = w.file("a.json", &agent("claude-haiku-4-5", ""));
    let r = w
        .run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"])
        .json();
    assert_eq!(
        steps(&r, "summarize")[0]["attempts"][0]["error_class"],
        "network"
    );
    let fake = Fake::start();
    fake.always(
        "/v1/messages",
        anthropic("late", 1, 1).delayed(Duration::from_secs(5)),
    );
    let w = weir(&fake);
    let f = w.file(
        "a.json",
        &agent("claude-haiku-4-5", r#", "timeout_seconds": 0.3"#),
    );
    let r = w
        .run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"])
        .json();
    assert_eq!(
        steps(&r, "summarize")[0]["attempts"][0]["error_class"],
        "timeout"
    );
}

#[test]
fn an_exhausted_quota_is_not_retried() {
    let fake = Fake::start();
    fake.always(
        "/v1/chat/completions",
        openai_error(
            429,
            "insufficient_quota",
            "You exceeded your current quota, please check your plan and billing details.",
        ),
    );
    let w = weir(&fake);
    let f = w.file("a.json", &agent("gpt-4o", r#", "retry_count": 3"#));
    let r = w
        .run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"])
        .json();
    assert_eq!(r["status"], "failed");
    assert_eq!(
        steps(&r, "summarize")[0]["attempts"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(fake.seen("/v1/chat/completions").len(), 1);
}

#[test]
fn retry_after_is_honoured() {
    let fake = Fake::start();
    fake.queue(
        "/v1/messages",
        vec![anthropic_error(429, "rate_limit_error", "wait").header("retry-after", "2")],
    );
    fake.always("/v1/messages", anthropic("done", 5, 5));
    let w = weir(&fake);
    let f = w.file(
        "a.json",
        &agent("claude-haiku-4-5", r#", "retry_count": 1"#),
    );
    let t = Instant::now();
    let r = w
        .run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"])
        .json();
    assert_eq!(r["status"], "succeeded");
    // The default first backoff is 1 s; the server asked for 2 s.
    assert!(t.elapsed() >= Duration::from_secs(2), "{:?}", t.elapsed());
}

#[test]
fn a_timeout_fails_over_within_the_attempt_budget() {
    let fake = Fake::start();
    fake.always(
        "/v1/messages",
        anthropic("too late", 5, 5).delayed(Duration::from_secs(4)),
    );
    fake.always("/v1/chat/completions", openai("from the fallback", 5, 5));
    let w = weir(&fake);
    let f = w.file(
        "a.json",
        &agent(
            "claude-haiku-4-5",
            r#", "timeout_seconds": 2, "fallback_models": ["gpt-4o"], "fallback_error_classes": ["timeout"]"#,
        ),
    );
    let t = Instant::now();
    let ran = w.run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    let r = ran.json();
    let attempts = r["steps"][0]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1);
    let calls = attempts[0]["calls"].as_array().unwrap();
    // The timed-out call is on the record, then the fallback's.
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0]["model"], "claude-haiku-4-5");
    assert_eq!(calls[0]["error_class"], "timeout");
    assert_eq!(calls[1]["model"], "gpt-4o");
    assert_eq!(calls[1]["status"], "succeeded");
    assert_eq!(r["steps"][0]["output"]["text"], "from the fallback");
}

#[test]
fn any_retry_after_header_is_survived() {
    // Absurd, infinite and malformed values are capped or ignored: never a panic, and the
    // attempt is recorded and retried like any other rate limit.
    for value in [
        "1e30",
        "inf",
        "2e19",
        "2^64",
        "99999999999999999999",
        "-5",
        "soon",
    ] {
        let fake = Fake::start();
        fake.queue(
            "/v1/messages",
            vec![anthropic_error(429, "rate_limit_error", "wait").header("retry-after", value)],
        );
        fake.always("/v1/chat/completions", openai("from the fallback", 5, 5));
        let w = weir(&fake);
        let f = w.file(
            "a.json",
            &agent(
                "claude-haiku-4-5",
                r#", "fallback_models": ["gpt-4o"], "fallback_error_classes": ["rate_limit"]"#,
            ),
        );
        let ran = w.run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"]);
        assert_eq!(ran.code, 0, "retry-after: {value}: {}", ran.stderr);
        let r = ran.json();
        let calls = r["steps"][0]["attempts"][0]["calls"].as_array().unwrap();
        assert_eq!(calls.len(), 2, "retry-after: {value}: {calls:?}");
        assert_eq!(calls[0]["error_class"], "rate_limit", "{value}");
        assert_eq!(fake.seen("/v1/messages").len(), 1);
        assert_eq!(fake.seen("/v1/chat/completions").len(), 1);
    }
}

#[test]
fn fallback_fails_over_in_order_and_charges_every_call() {
    let fake = Fake::start();
    fake.queue(
        "/v1/messages",
        vec![
            anthropic_error(529, "overloaded_error", "Overloaded"),
            anthropic("fallback summary", 1000, 100),
        ],
    );
    fake.always(
        "/v1/chat/completions",
        openai_error(500, "server_error", "boom"),
    );
    let w = weir(&fake);
    let f = w.file(
        "a.json",
        &agent(
            "claude-sonnet-4-6",
            r#", "fallback_models": ["gpt-4o", "claude-haiku-4-5"]"#,
        ),
    );
    let ran = w.run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    let step = steps(&r, "summarize")[0];
    assert_eq!(step["output"]["model"], "claude-haiku-4-5");
    assert_eq!(step["output"]["provider"], "anthropic");
    assert_eq!(step["output"]["fallback_used"], true);
    assert_eq!(r["state"]["summary"], "fallback summary");
    let calls = step["attempts"][0]["calls"].as_array().unwrap();
    let tried: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c["model"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        tried,
        [
            ("claude-sonnet-4-6", "failed"),
            ("gpt-4o", "failed"),
            ("claude-haiku-4-5", "succeeded")
        ]
    );
    assert_eq!(calls[0]["error_class"], "server_error");
    let models: Vec<String> = fake
        .seen("/v1/messages")
        .iter()
        .map(|s| s.json()["model"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(models, ["claude-sonnet-4-6", "claude-haiku-4-5"]);
    // Haiku: 1000 × $1 + 100 × $5 per million.
    assert!(near(&r["cost_usd"], 0.0015));
}

#[test]
fn auth_errors_do_not_fail_over_by_default() {
    let fake = Fake::start();
    fake.always(
        "/v1/messages",
        anthropic_error(401, "authentication_error", "invalid x-api-key"),
    );
    fake.always("/v1/chat/completions", openai("should not be used", 1, 1));
    let w = weir(&fake);
    let f = w.file(
        "a.json",
        &agent("claude-sonnet-4-6", r#", "fallback_models": ["gpt-4o"]"#),
    );
    let r = w
        .run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"])
        .json();
    assert_eq!(r["status"], "failed");
    assert!(fake.seen("/v1/chat/completions").is_empty());
    // …unless the node approves auth for fail-over.
    let f = w.file(
        "b.json",
        &agent(
            "claude-sonnet-4-6",
            r#", "fallback_models": ["gpt-4o"], "fallback_error_classes": ["auth"]"#,
        ),
    );
    let r = w
        .run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"])
        .json();
    assert_eq!(r["status"], "succeeded");
    assert_eq!(r["state"]["summary"], "should not be used");
}

#[test]
fn only_approved_error_classes_fail_over() {
    let fake = Fake::start();
    fake.always(
        "/v1/messages",
        anthropic_error(500, "api_error", "internal"),
    );
    fake.always("/v1/chat/completions", openai("unused", 1, 1));
    let w = weir(&fake);
    let f = w.file("a.json", &agent("claude-sonnet-4-6", r#", "fallback_models": ["gpt-4o"], "fallback_error_classes": ["rate_limit", "timeout"]"#));
    let r = w
        .run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"])
        .json();
    assert_eq!(r["status"], "failed");
    assert!(fake.seen("/v1/chat/completions").is_empty());
}

#[test]
fn a_forbidden_fallback_is_skipped_and_recorded() {
    let fake = Fake::start();
    fake.queue(
        "/v1/messages",
        vec![
            anthropic_error(429, "rate_limit_error", "slow"),
            anthropic("ok", 10, 10),
        ],
    );
    fake.always("/v1/chat/completions", openai("forbidden", 1, 1));
    let w = weir(&fake);
    w.file("weir.toml", "[models]\nallow = [\"claude-*\"]\n");
    let f = w.file(
        "a.json",
        &agent(
            "claude-sonnet-4-6",
            r#", "fallback_models": ["gpt-4o", "claude-haiku-4-5"]"#,
        ),
    );
    let v = w.run(&["validate", &f, "--json"]).json()[0].clone();
    assert_eq!(v["valid"], true);
    assert_eq!(v["warnings"][0]["code"], "W104");
    let r = w
        .run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"])
        .json();
    assert_eq!(r["status"], "succeeded");
    assert!(fake.seen("/v1/chat/completions").is_empty());
    assert_eq!(
        steps(&r, "summarize")[0]["output"]["model"],
        "claude-haiku-4-5"
    );
    let blocked: Vec<&Value> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "model_fallback_blocked")
        .collect();
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0]["node_id"], "summarize");
    assert_eq!(blocked[0]["model"], "gpt-4o");
    assert!(blocked[0]["reason"].as_str().unwrap().contains("allowlist"));
}

#[test]
fn a_primary_model_outside_the_allowlist_is_a_validation_error() {
    let w = Weir::new();
    w.file(
        "weir.toml",
        "[models]\nallow = [\"claude-*\"]\n[providers]\nallow = [\"anthropic\"]\n",
    );
    let f = w.file("a.json", &agent("gpt-4o", ""));
    let ran = w.run(&["run", &f, "--input", r#"{"raw": "x"}"#]);
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("error[E018]"), "{}", ran.stderr);
    // The provider allowlist counts too: mock is a provider.
    w.file("weir.toml", "[providers]\nallow = [\"anthropic\"]\n");
    let f = w.file("m.json", &agent("mock", ""));
    let ran = w.run(&["validate", &f]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("provider `mock`"));
}

#[test]
fn named_openai_compatible_providers_and_pricing_overrides() {
    let fake = Fake::start();
    fake.always(
        "/ollama/v1/chat/completions",
        openai("local answer", 2_000_000, 1_000_000),
    );
    let w = Weir::new();
    w.file("weir.toml", &format!(
        "[providers.ollama]\nbase_url = \"{}/ollama/v1\"\n\n[pricing.\"ollama:llama3.2\"]\ninput_per_mtok = 0.5\noutput_per_mtok = 1.0\n",
        fake.url
    ));
    let f = w.file("a.json", &agent("ollama:llama3.2", ""));
    let ran = w.run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["state"]["summary"], "local answer");
    assert_eq!(steps(&r, "summarize")[0]["output"]["provider"], "ollama");
    assert!(near(&r["cost_usd"], 2.0));
    let sent = &fake.seen("/ollama/v1/chat/completions")[0];
    assert_eq!(sent.json()["model"], "llama3.2");
    assert!(!sent.headers.contains_key("authorization"));
    // A model with no price says so instead of a silent zero.
    let f = w.file("b.json", &agent("ollama:mistral", ""));
    let r = w
        .run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"])
        .json();
    let out = &steps(&r, "summarize")[0]["output"];
    assert_eq!(out["priced"], false);
    assert_eq!(out["unpriced_models"], json!(["ollama:mistral"]));
    // An unknown provider prefix is caught by validation.
    let f = w.file("c.json", &agent("vllm:qwen", ""));
    let ran = w.run(&["validate", &f]);
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("unknown provider `vllm`"));
}

#[test]
fn a_broken_weir_toml_is_reported() {
    let w = Weir::new();
    w.file("weir.toml", "[modles]\nallow = []\n");
    let f = w.file("a.json", &agent("mock", ""));
    let ran = w.run(&["validate", &f]);
    assert_eq!(ran.code, 2);
    assert!(
        ran.stderr.contains("unknown section [modles]"),
        "{}",
        ran.stderr
    );
}

/// The provider fault matrix (RELIABILITY.md): each fault, from both providers, on a node
/// with one retry and no fallback, then with a fallback to the other provider. For each: the
/// error class, the number of requests, the backoff slept, whether the fallback ran.
#[test]
fn provider_fault_matrix() {
    #[derive(Clone)]
    struct Case {
        name: &'static str,
        anthropic: Reply,
        openai: Reply,
        class: &'static str,
        /// Retried after the backoff (else one request only).
        retried: bool,
        /// The backoff before the retry, when retried.
        backoff_ms: u64,
        /// The fallback runs after it (default fallback classes: all but auth).
        fails_over: bool,
    }
    let quota = || {
        openai_error(
            429,
            "insufficient_quota",
            "You exceeded your current quota, please check your plan and billing details.",
        )
    };
    let both = |name, status: u16, a_kind: &str, o_code: &str, class, retried, over| Case {
        name,
        anthropic: anthropic_error(status, a_kind, "fault"),
        openai: openai_error(status, o_code, "fault"),
        class,
        retried,
        backoff_ms: 1000,
        fails_over: over,
    };
    let mut cases = vec![
        both(
            "429",
            429,
            "rate_limit_error",
            "rate_limit_exceeded",
            "rate_limit",
            true,
            true,
        ),
        both(
            "400",
            400,
            "invalid_request_error",
            "invalid_request",
            "http_error",
            false,
            true,
        ),
        both(
            "401",
            401,
            "authentication_error",
            "invalid_api_key",
            "auth",
            false,
            false,
        ),
        both(
            "403",
            403,
            "permission_error",
            "forbidden",
            "auth",
            false,
            false,
        ),
        both(
            "404",
            404,
            "not_found_error",
            "model_not_found",
            "http_error",
            false,
            true,
        ),
        both(
            "500",
            500,
            "api_error",
            "server_error",
            "server_error",
            true,
            true,
        ),
        both(
            "503",
            503,
            "api_error",
            "server_error",
            "server_error",
            true,
            true,
        ),
        both(
            "529",
            529,
            "overloaded_error",
            "server_error",
            "server_error",
            true,
            true,
        ),
        Case {
            name: "malformed",
            anthropic: Reply::json(200, json!({"no": "content"})),
            openai: Reply::text(200, "not json"),
            class: "malformed",
            retried: true,
            backoff_ms: 1000,
            fails_over: true,
        },
        Case {
            name: "insufficient_quota",
            anthropic: quota(),
            openai: quota(),
            class: "rate_limit",
            retried: false,
            backoff_ms: 0,
            fails_over: true,
        },
    ];
    for (value, wait) in [("2", 2000), ("0.5", 500), ("1e30", 60_000), ("inf", 1000)] {
        let name: &'static str = Box::leak(format!("429 retry-after {value}").into_boxed_str());
        let mut c = both(
            name,
            429,
            "rate_limit_error",
            "rate_limit_exceeded",
            "rate_limit",
            true,
            true,
        );
        c.anthropic = c.anthropic.header("retry-after", value);
        c.openai = c.openai.header("retry-after", value);
        // The engine waits at most a minute; the long forms are checked without waiting.
        c.backoff_ms = wait;
        cases.push(c);
    }
    let rows = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for c in &cases {
            for primary in ["claude-haiku-4-5", "gpt-4o"] {
                let rows = &rows;
                scope.spawn(move || {
                    let (path, other, reply) = if primary.starts_with("claude") {
                        ("/v1/messages", "gpt-4o", c.anthropic.clone())
                    } else {
                        ("/v1/chat/completions", "claude-haiku-4-5", c.openai.clone())
                    };
                    // No fallback, one retry (skipped when the wait would be a minute).
                    let fake = Fake::start();
                    fake.always(path, reply.clone());
                    let w = weir(&fake);
                    let retries = if c.backoff_ms > 5000 { 0 } else { 1 };
                    let f = w.file(
                        "a.json",
                        &agent(primary, &format!(r#", "retry_count": {retries}"#)),
                    );
                    let r = w
                        .run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"])
                        .json();
                    let a = &steps(&r, "summarize")[0]["attempts"];
                    assert_eq!(a[0]["error_class"], c.class, "{} {primary}", c.name);
                    let want = if c.retried && retries == 1 { 2 } else { 1 };
                    assert_eq!(
                        fake.seen(path).len(),
                        want,
                        "{} {primary}: requests",
                        c.name
                    );
                    let backoff: Vec<u64> = r["events"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|e| e["type"] == "attempt_failed")
                        .map(|e| e["backoff_ms"].as_u64().unwrap())
                        .collect();
                    if want == 2 {
                        assert_eq!(backoff, [c.backoff_ms], "{} {primary}: backoff", c.name);
                    }
                    // With a fallback to the other provider.
                    let fake2 = Fake::start();
                    fake2.always("/v1/messages", anthropic("from the fallback", 1, 1));
                    fake2.always("/v1/chat/completions", openai("from the fallback", 1, 1));
                    // The primary's path faults; the other provider answers.
                    fake2.always(path, reply);
                    let w2 = weir(&fake2);
                    let f2 = w2.file(
                        "b.json",
                        &agent(primary, &format!(r#", "fallback_models": ["{other}"]"#)),
                    );
                    let r2 = w2
                        .run(&["run", &f2, "--input", r#"{"raw": "x"}"#, "--json"])
                        .json();
                    let ran_fallback = r2["status"] == "succeeded";
                    assert_eq!(ran_fallback, c.fails_over, "{} {primary}: fallback", c.name);
                    rows.lock().unwrap().push(format!(
                        "| {} | {primary} | {} | {want} | {} | {} |",
                        c.name,
                        c.class,
                        backoff.first().map_or("-".into(), |b| format!("{b} ms")),
                        if ran_fallback { "yes" } else { "no" }
                    ));
                });
            }
        }
    });
    let mut rows = rows.into_inner().unwrap();
    rows.sort();
    eprintln!(
        "| fault | primary | class | requests | backoff | fallback ran |\n|---|---|---|---|---|---|\n{}",
        rows.join("\n")
    );
}

/// A provider that sends headers and part of the body, then closes the connection.
fn cut_mid_body() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 65536];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"id\": \"msg\", \"con",
            );
            let _ = s.flush();
            drop(s);
        }
    });
    (url, hits)
}

#[test]
fn a_connection_cut_mid_body_is_classified_and_retried() {
    let (url, hits) = cut_mid_body();
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &url)
        .env("ANTHROPIC_API_KEY", "k");
    let f = w.file(
        "a.json",
        &agent("claude-haiku-4-5", r#", "retry_count": 1"#),
    );
    let ran = w.run(&["run", &f, "--input", r#"{"raw": "x"}"#, "--json"]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    let r = ran.json();
    let attempts = steps(&r, "summarize")[0]["attempts"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(attempts.len(), 2);
    // The reply could not be read: `malformed`, retried like any other failed reply.
    assert_eq!(attempts[0]["error_class"], "malformed");
    assert!(
        attempts[0]["error"]
            .as_str()
            .unwrap()
            .contains("could not read the response"),
        "{}",
        attempts[0]
    );
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);
}
