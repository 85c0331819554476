//! OpenTelemetry: a run with a fan-out, a retry, a fallback and a tool call exports its
//! trace over OTLP/HTTP (protobuf) to a receiver here, decoded with the OpenTelemetry
//! protobuf definitions: the tree of spans, their GenAI attributes, and no secret anywhere.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

use crate::support::{Fake, Reply, Weir, wait_until};

fn value(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs.iter().find(|a| a.key == key).map(|a| value(&a.value))
}

const SECRET_KEY: &str = "sk-ant-SECRETKEY-123";
const SECRET_TOKEN: &str = "tok-SECRET-456";

#[test]
fn a_run_exports_its_span_tree_with_genai_attributes_and_no_secret() {
    let fake = Fake::start();
    fake.always("/v1/traces", Reply::text(200, ""));
    fake.always(
        "/v1/messages",
        Reply::json(
            429,
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
        ),
    );
    fake.always("/data", Reply::json(200, json!({"rows": 3})));
    let w = Weir::new()
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &fake.url)
        .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", SECRET_KEY)
        .env("API_TOKEN", SECRET_TOKEN)
        .env(
            "WEIR_MOCK",
            r#"[{"match": "branch A", "error": "server_error", "message": "mock boom", "times": 1}]"#,
        );
    std::fs::write(
        w.path("weir.toml"),
        "[secrets]\nAPI_TOKEN = { env = \"API_TOKEN\" }\n",
    )
    .unwrap();
    let f = w.file(
        "fan.json",
        &r#"{"name": "Traced", "nodes": [
          {"id": "plan", "type": "agent", "config": {"model": "mock", "user_message": "Plan it"}},
          {"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "branch A", "retry_count": 1}},
          {"id": "b", "type": "agent", "config": {"model": "claude-haiku-4-5", "fallback_models": ["mock"], "user_message": "branch B"}},
          {"id": "join", "type": "merge", "config": {}},
          {"id": "fetch", "type": "tool", "config": {"tool_name": "http_request",
            "params": {"url": "URL/data", "method": "GET", "headers": {"Authorization": "Bearer {secrets.API_TOKEN}"}},
            "output_key": "data"}}
        ], "edges": [
          {"id": "e1", "source": "plan", "target": "a"}, {"id": "e2", "source": "plan", "target": "b"},
          {"id": "e3", "source": "a", "target": "join"}, {"id": "e4", "source": "b", "target": "join"},
          {"id": "e5", "source": "join", "target": "fetch"}
        ]}"#
            .replace("URL", &fake.url),
    );
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let run_id = ran.json()["run_id"].as_str().unwrap().to_string();
    wait_until("the trace arrives", || !fake.seen("/v1/traces").is_empty());
    let posts = fake.seen("/v1/traces");
    assert_eq!(
        posts[0].headers.get("content-type").map(String::as_str),
        Some("application/x-protobuf")
    );
    let mut spans: Vec<Span> = Vec::new();
    let mut service = None;
    for p in &posts {
        let req = ExportTraceServiceRequest::decode(p.raw.as_slice()).expect("OTLP protobuf");
        for rs in req.resource_spans {
            if let Some(r) = &rs.resource {
                service = attr(&r.attributes, "service.name");
            }
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
    assert_eq!(service.as_deref(), Some("weir"));
    let trace: Vec<u8> = uuid::Uuid::parse_str(&run_id).unwrap().as_bytes().to_vec();
    assert!(
        spans.iter().all(|s| s.trace_id == trace),
        "one trace, the run's id"
    );

    // The tree: run → steps → attempts → calls.
    let root = spans
        .iter()
        .find(|s| s.parent_span_id.is_empty())
        .expect("a root span");
    assert_eq!(root.name, "invoke_agent Traced");
    assert_eq!(
        attr(&root.attributes, "weir.run_id").as_deref(),
        Some(run_id.as_str())
    );
    assert_eq!(
        attr(&root.attributes, "weir.status").as_deref(),
        Some("succeeded")
    );
    let children = |parent: &Span| -> Vec<&Span> {
        spans
            .iter()
            .filter(|s| s.parent_span_id == parent.span_id)
            .collect()
    };
    let steps = children(root);
    let mut names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["step a", "step b", "step fetch", "step join", "step plan"]
    );
    let step = |n: &str| {
        *steps
            .iter()
            .find(|s| s.name == format!("step {n}"))
            .unwrap()
    };

    // The retry: two attempts, the first failed with its class, on the chat span too.
    let attempts = children(step("a"));
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    let first = attempts.iter().find(|s| s.name == "attempt 1").unwrap();
    assert_eq!(
        attr(&first.attributes, "error.type").as_deref(),
        Some("server_error")
    );
    let chat = children(first);
    assert_eq!(chat.len(), 1);
    assert_eq!(chat[0].name, "chat mock");
    assert_eq!(
        attr(&chat[0].attributes, "error.type").as_deref(),
        Some("server_error")
    );

    // The fallback: the primary's rate limit, then the mock's answer.
    let b_attempt = children(step("b"));
    assert_eq!(b_attempt.len(), 1);
    let mut calls = children(b_attempt[0]);
    calls.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(calls.len(), 2, "{calls:#?}");
    let (primary, fallback) = (calls[0], calls[1]);
    assert_eq!(primary.name, "chat claude-haiku-4-5");
    assert_eq!(
        attr(&primary.attributes, "gen_ai.system").as_deref(),
        Some("anthropic")
    );
    assert_eq!(
        attr(&primary.attributes, "gen_ai.request.model").as_deref(),
        Some("claude-haiku-4-5")
    );
    assert_eq!(
        attr(&primary.attributes, "error.type").as_deref(),
        Some("rate_limit")
    );
    assert_eq!(fallback.name, "chat mock");
    assert_eq!(
        attr(&fallback.attributes, "gen_ai.response.model").as_deref(),
        Some("mock")
    );
    assert_eq!(
        attr(&fallback.attributes, "weir.fallback_used").as_deref(),
        Some("true")
    );
    assert_eq!(
        attr(&fallback.attributes, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    for k in [
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "weir.cost_usd",
    ] {
        assert!(attr(&fallback.attributes, k).is_some(), "{k} missing");
    }
    // Prompts and replies as events, since capture is on.
    let events: Vec<&str> = fallback.events.iter().map(|e| e.name.as_str()).collect();
    assert!(
        events.contains(&"gen_ai.user.message") && events.contains(&"gen_ai.choice"),
        "{events:?}"
    );
    let user = fallback
        .events
        .iter()
        .find(|e| e.name == "gen_ai.user.message")
        .unwrap();
    assert_eq!(
        attr(&user.attributes, "content").as_deref(),
        Some("branch B")
    );

    // The tool call.
    let tool = children(children(step("fetch"))[0]);
    assert_eq!(tool[0].name, "execute_tool http_request");
    assert_eq!(
        attr(&tool[0].attributes, "gen_ai.tool.name").as_deref(),
        Some("http_request")
    );

    // No secret in any attribute or event, anywhere in what was sent.
    for p in &posts {
        let bytes = &p.raw;
        for secret in [SECRET_KEY, SECRET_TOKEN] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "a secret was exported"
            );
        }
    }
    // The trace id is on the run's trace view.
    let shown = w.run(&["runs", "show", &run_id[..8]]);
    let hex = uuid::Uuid::parse_str(&run_id).unwrap().simple().to_string();
    assert!(
        shown.stdout.contains(&format!("trace {hex}")),
        "{}",
        shown.stdout
    );
}

#[test]
fn without_an_endpoint_nothing_is_exported_and_the_run_is_unchanged() {
    let fake = Fake::start();
    fake.always("/v1/traces", Reply::text(200, ""));
    let w = Weir::new();
    let f = w.file(
        "one.json",
        r#"{"nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "hi"}}], "edges": []}"#,
    );
    assert_eq!(w.run(&["run", &f]).code, 0);
    // A dead endpoint does not fail the run either.
    let dead = Weir::new().env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9");
    let f = dead.file(
        "one.json",
        r#"{"nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "hi"}}], "edges": []}"#,
    );
    let ran = dead.run(&["run", &f]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(fake.seen("/v1/traces").is_empty());
}
