//! OpenTelemetry traces of runs, exported over OTLP (HTTP/protobuf) when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; the
//! exporter honours the standard `OTEL_*` variables (headers, timeout, compression), the
//! resource `OTEL_SERVICE_NAME` (default `weir`) and `OTEL_RESOURCE_ATTRIBUTES`, and
//! `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn it off.
//!
//! A run's trace is built from its record once the run has ended: a span for the run, one per
//! step under it, one per attempt under its step, and one per model call (`chat MODEL`, with
//! the GenAI semantic conventions' attributes) or tool call (`execute_tool NAME`) under its
//! attempt; weir's own attributes carry costs, node ids, the run id, fallbacks and repairs.
//! The trace id is the run id's 128 bits (`weir runs show` prints it), so a trace is found
//! from a run without storing anything more. Prompts and replies are added as span events
//! only with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`; they are the
//! recorded (secret-redacted) texts, and no credential is ever an attribute.

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::WithHttpConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use serde_json::Value;
use weir_core::record::{Request, RunRecord, RunStatus, StepStatus};

/// Whether traces go anywhere: an OTLP endpoint is set and the SDK is not disabled.
pub fn enabled() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    let off = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v.eq_ignore_ascii_case("none"));
    !off && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The trace id of a run: its id's 128 bits, as 32 hex digits.
pub fn trace_id(run_id: &str) -> Option<String> {
    uuid::Uuid::parse_str(run_id)
        .ok()
        .map(|u| u.simple().to_string())
}

/// Exports the trace of an ended run; does nothing unless [`enabled`] or while the run has
/// not ended. A failure to export is logged, never fatal: the run is recorded either way.
pub async fn export(record: &RunRecord) {
    if !enabled() || !record.status.is_terminal() {
        return;
    }
    let spans = spans(record, capture_content());
    let count = spans.len();
    let result = async {
        // weir's own HTTP client (rustls on ring, as every other call weir makes), so the
        // exporter brings no second TLS stack into the build.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .build()
            .map_err(|e| e.to_string())?;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .build()
            .map_err(|e| e.to_string())?;
        exporter.set_resource(&resource());
        let sent = exporter.export(spans).await.map_err(|e| e.to_string());
        let _ = exporter.shutdown();
        sent
    }
    .await;
    match result {
        Ok(()) => tracing::debug!(run_id = %record.run_id, spans = count, "trace exported"),
        Err(e) => tracing::warn!(run_id = %record.run_id, "exporting the run's trace failed: {e}"),
    }
}

fn capture_content() -> bool {
    std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .is_ok_and(|v| v.eq_ignore_ascii_case("true"))
}

fn resource() -> Resource {
    let b = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty()) {
        b.build()
    } else {
        b.with_service_name("weir").build()
    }
}

/// A record's timestamp as a time: its milliseconds, or its text read as RFC 3339.
fn stamp_at(t: &weir_core::store::Stamp) -> Option<SystemTime> {
    match t.millis() {
        Some(ms) => Some(SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).ok()?)),
        None => at(&t.to_string()),
    }
}

fn at(rfc3339: &str) -> Option<SystemTime> {
    let t = chrono::DateTime::parse_from_rfc3339(rfc3339).ok()?;
    let ms = u64::try_from(t.timestamp_millis()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

/// A span id that is the same for the same run and place, never zero.
fn span_id(run: &TraceId, place: &str) -> SpanId {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    run.hash(&mut h);
    place.hash(&mut h);
    SpanId::from_bytes(h.finish().max(1).to_be_bytes())
}

struct Builder {
    trace: TraceId,
    scope: InstrumentationScope,
    out: Vec<SpanData>,
}

impl Builder {
    #[allow(clippy::too_many_arguments)]
    fn span(
        &mut self,
        place: &str,
        parent: SpanId,
        name: String,
        kind: SpanKind,
        (start, end): (SystemTime, SystemTime),
        attributes: Vec<KeyValue>,
        events: Vec<Event>,
        status: Status,
    ) -> SpanId {
        let id = span_id(&self.trace, place);
        let mut span_events = SpanEvents::default();
        span_events.events = events;
        self.out.push(SpanData {
            span_context: SpanContext::new(
                self.trace,
                id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: false,
            span_kind: kind,
            name: name.into(),
            start_time: start,
            end_time: end.max(start),
            attributes,
            dropped_attributes_count: 0,
            events: span_events,
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        });
        id
    }
}

fn failed(message: Option<&str>) -> Status {
    Status::error(message.unwrap_or("failed").to_string())
}

/// Every span of an ended run, the run's first.
#[expect(
    clippy::too_many_lines,
    reason = "the spans of a run in trace order (run, steps, attempts, tool calls) with their OpenTelemetry attributes, a list read against the semantic conventions"
)]
pub fn spans(r: &RunRecord, content: bool) -> Vec<SpanData> {
    let trace = uuid::Uuid::parse_str(&r.run_id).map_or(TraceId::from_bytes([1; 16]), |u| {
        TraceId::from_bytes(*u.as_bytes())
    });
    let mut b = Builder {
        trace,
        scope: InstrumentationScope::builder("weir")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
        out: Vec::new(),
    };
    let run_start = at(&r.started_at).unwrap_or(SystemTime::UNIX_EPOCH);
    let run_end = r
        .finished_at
        .as_deref()
        .and_then(at)
        .unwrap_or_else(SystemTime::now);
    let mut attrs = vec![
        KeyValue::new("weir.run_id", r.run_id.clone()),
        KeyValue::new("weir.workflow", r.workflow.clone()),
        KeyValue::new("weir.dialect", r.dialect.clone()),
        KeyValue::new("weir.status", r.status.as_str()),
        KeyValue::new("weir.cost_usd", r.cost_usd),
        KeyValue::new("weir.steps", r.steps.len() as i64),
        KeyValue::new("gen_ai.operation.name", "invoke_agent"),
        KeyValue::new("gen_ai.agent.name", r.workflow.clone()),
    ];
    if let Some(e) = &r.error {
        attrs.push(KeyValue::new("error.type", e.code.to_string()));
    }
    let status = match r.status {
        RunStatus::Succeeded => Status::Ok,
        RunStatus::Failed | RunStatus::Aborted | RunStatus::Cancelled => {
            failed(r.error.as_ref().map(|e| e.message.as_str()))
        }
        _ => Status::Unset,
    };
    let root = b.span(
        "run",
        SpanId::INVALID,
        format!("invoke_agent {}", r.workflow),
        SpanKind::Internal,
        (run_start, run_end),
        attrs,
        Vec::new(),
        status,
    );
    for s in &r.steps {
        let start = stamp_at(&s.started_at).unwrap_or(run_start);
        let end = s
            .finished_at
            .as_ref()
            .and_then(stamp_at)
            .or_else(|| s.duration_ms.map(|d| start + Duration::from_millis(d)))
            .unwrap_or(start);
        let mut attrs = vec![
            KeyValue::new("weir.run_id", r.run_id.clone()),
            KeyValue::new("weir.node_id", s.node_id.clone()),
            KeyValue::new("weir.node_type", s.node_type.to_string()),
            KeyValue::new("weir.step", i64::from(s.seq)),
            KeyValue::new("weir.visit", i64::from(s.visit)),
            KeyValue::new("weir.status", s.status.as_str()),
            KeyValue::new("weir.cost_usd", s.cost_usd),
            KeyValue::new("weir.attempts", s.attempts.len() as i64),
        ];
        if let Some(route) = &s.route {
            attrs.push(KeyValue::new("weir.route", route.clone()));
        }
        let status = match s.status {
            StepStatus::Failed => failed(s.error.as_deref()),
            StepStatus::Succeeded => Status::Ok,
            _ => Status::Unset,
        };
        let step = b.span(
            &format!("step/{}", s.seq),
            root,
            format!("step {}", s.node_id),
            SpanKind::Internal,
            (start, end),
            attrs,
            Vec::new(),
            status,
        );
        // Attempts one after another from the step's start; the last ends with the step.
        let mut t = start;
        let n = s.attempts.len();
        for (i, a) in s.attempts.iter().enumerate() {
            let a_end = if i + 1 == n {
                end.max(t)
            } else {
                t + Duration::from_millis(a.duration_ms)
            };
            let mut attrs = vec![
                KeyValue::new("weir.node_id", s.node_id.clone()),
                KeyValue::new("weir.attempt", i64::from(a.n)),
                KeyValue::new("weir.cost_usd", a.cost_usd),
            ];
            if let Some(c) = &a.error_class {
                attrs.push(KeyValue::new("error.type", c.clone()));
            }
            let repairs = a
                .calls
                .iter()
                .filter(|c| c.get("validation_errors").is_some())
                .count();
            if repairs > 0 {
                attrs.push(KeyValue::new("weir.repair_attempts", repairs as i64));
            }
            let status = match a.status {
                StepStatus::Failed => failed(a.error.as_deref()),
                _ => Status::Ok,
            };
            let attempt = b.span(
                &format!("step/{}/attempt/{}", s.seq, a.n),
                step,
                format!("attempt {}", a.n),
                SpanKind::Internal,
                (t, a_end),
                attrs,
                Vec::new(),
                status,
            );
            let requested = match &a.request {
                Some(Request::Model(m)) => Some(String::from(&*m.model)),
                Some(Request::Other(v)) => v["model"].as_str().map(str::to_string),
                None => None,
            };
            let prompt = match &a.request {
                Some(Request::Model(m)) => Some((m.system.clone(), m.user.clone())),
                Some(Request::Other(v)) => v["user"]
                    .as_str()
                    .map(|u| (v["system"].as_str().map(str::to_string), u.to_string())),
                None => None,
            };
            let mut ct = t;
            let mut turn = 0;
            for (k, c) in a.calls.iter().enumerate() {
                let c_end = ct + Duration::from_millis(c["duration_ms"].as_u64().unwrap_or(0));
                let (attrs, events, status) =
                    model_call(s, c, requested.as_deref(), k, prompt.as_ref(), content, ct);
                let model = c["model"].as_str().unwrap_or("unknown");
                b.span(
                    &format!("step/{}/attempt/{}/call/{k}", s.seq, a.n),
                    attempt,
                    format!("chat {model}"),
                    SpanKind::Client,
                    (ct, c_end),
                    attrs,
                    events,
                    status,
                );
                ct = c_end;
                // The tool calls this turn asked for, made together after it.
                if c["tool_uses"].as_array().is_some_and(|u| !u.is_empty()) {
                    turn += 1;
                    ct = agent_tools(&mut b, attempt, s, a, turn, ct);
                }
            }
            if s.node_type == "tool"
                && let Some(Request::Other(v)) = &a.request
                && let Some(tool) = v["tool"].as_str()
            {
                let mut attrs = vec![
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", tool.to_string()),
                    KeyValue::new("weir.node_id", s.node_id.clone()),
                ];
                if let Some(c) = &a.error_class {
                    attrs.push(KeyValue::new("error.type", c.clone()));
                }
                let status = match a.status {
                    StepStatus::Failed => failed(a.error.as_deref()),
                    _ => Status::Ok,
                };
                b.span(
                    &format!("step/{}/attempt/{}/tool", s.seq, a.n),
                    attempt,
                    format!("execute_tool {tool}"),
                    SpanKind::Client,
                    (t, a_end),
                    attrs,
                    Vec::new(),
                    status,
                );
            }
            t = a_end;
        }
    }
    b.out
}

/// The `execute_tool` spans of an agent's tool calls in turn `turn`, all starting at `from`
/// (a turn's calls run together); returns when the last of them ended.
fn agent_tools(
    b: &mut Builder,
    attempt: SpanId,
    s: &weir_core::record::StepRecord,
    a: &weir_core::record::Attempt,
    turn: u32,
    from: SystemTime,
) -> SystemTime {
    let mut end = from;
    for (i, t) in a
        .tool_calls
        .iter()
        .enumerate()
        .filter(|(_, t)| t.turn == turn)
    {
        let t_end = from + Duration::from_millis(t.duration_ms);
        end = end.max(t_end);
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", t.name.clone()),
            KeyValue::new("gen_ai.tool.call.id", t.id.clone()),
            KeyValue::new("weir.tool", t.tool.clone()),
            KeyValue::new("weir.node_id", s.node_id.clone()),
            KeyValue::new("weir.turn", i64::from(turn)),
        ];
        if let Some(d) = &t.approval {
            attrs.push(KeyValue::new(
                "weir.approval",
                if d["approved"] == false {
                    "rejected"
                } else {
                    "approved"
                },
            ));
        }
        let status = match &t.error {
            Some(e) => {
                attrs.push(KeyValue::new("error.type", "tool"));
                failed(Some(e))
            }
            None => Status::Ok,
        };
        b.span(
            &format!("step/{}/attempt/{}/tool/{i}", s.seq, a.n),
            attempt,
            format!("execute_tool {}", t.name),
            SpanKind::Internal,
            (from, t_end),
            attrs,
            Vec::new(),
            status,
        );
    }
    end
}

/// A model call's GenAI attributes, its message events (when content is captured) and
/// status.
fn model_call(
    s: &weir_core::record::StepRecord,
    c: &Value,
    requested: Option<&str>,
    index: usize,
    prompt: Option<&(Option<String>, String)>,
    content: bool,
    t: SystemTime,
) -> (Vec<KeyValue>, Vec<Event>, Status) {
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    let provider = text("provider");
    let model = text("model");
    let mut attrs = vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.system", provider.clone()),
        KeyValue::new("gen_ai.provider.name", provider),
        KeyValue::new(
            "gen_ai.request.model",
            requested.map_or_else(|| model.clone(), str::to_string),
        ),
        KeyValue::new(
            "gen_ai.usage.input_tokens",
            c["input_tokens"].as_i64().unwrap_or(0),
        ),
        KeyValue::new(
            "gen_ai.usage.output_tokens",
            c["output_tokens"].as_i64().unwrap_or(0),
        ),
        KeyValue::new("weir.node_id", s.node_id.clone()),
        KeyValue::new(
            "weir.fallback_used",
            requested.is_some_and(|r| r != model) && index > 0,
        ),
    ];
    if let Some(cost) = c["cost_usd"].as_f64() {
        attrs.push(KeyValue::new("weir.cost_usd", cost));
    }
    let ok = c["status"] == "succeeded";
    if ok {
        attrs.push(KeyValue::new("gen_ai.response.model", model));
    }
    if let Some(class) = c["error_class"].as_str() {
        attrs.push(KeyValue::new("error.type", class.to_string()));
    }
    if let Some(errs) = c["validation_errors"].as_array() {
        attrs.push(KeyValue::new("weir.validation_errors", errs.len() as i64));
    }
    let mut events = Vec::new();
    if content {
        if let Some((system, user)) = prompt {
            if let Some(sys) = system {
                events.push(Event::new(
                    "gen_ai.system.message",
                    t,
                    vec![KeyValue::new("content", sys.clone())],
                    0,
                ));
            }
            events.push(Event::new(
                "gen_ai.user.message",
                t,
                vec![KeyValue::new("content", user.clone())],
                0,
            ));
        }
        if let Some(reply) = c["reply"].as_str() {
            events.push(Event::new(
                "gen_ai.choice",
                t,
                vec![
                    KeyValue::new("index", 0),
                    KeyValue::new("message.content", reply.to_string()),
                ],
                0,
            ));
        }
    }
    let status = if ok {
        Status::Ok
    } else {
        failed(c["error"].as_str())
    };
    (attrs, events, status)
}

#[cfg(test)]
mod tests {
    /// An agent's tool calls are `execute_tool` spans under its attempt, each after the
    /// `chat` span of the turn that asked for it.
    #[test]
    fn an_agents_tool_calls_are_execute_tool_spans_after_their_turn() {
        let record: weir_core::record::RunRecord = serde_json::from_str(r#"{
            "run_id": "6f1c2a3e-0000-4000-8000-000000000001", "workflow": "w", "dialect": "graph",
            "status": "succeeded", "input": {}, "state": {}, "output": null, "error": null,
            "pending_gate": null, "cost_usd": 0.0, "events": [],
            "started_at": "2026-12-07T10:00:00.000Z", "finished_at": "2026-12-07T10:00:01.000Z",
            "duration_ms": 1000,
            "steps": [{"seq": 1, "node_id": "advise", "node_type": "agent", "visit": 1,
                "status": "succeeded", "route": null, "input": null, "output": {}, "error": null,
                "cost_usd": 0.0, "tokens": {"input": 0, "output": 0},
                "started_at": "2026-12-07T10:00:00.000Z", "finished_at": "2026-12-07T10:00:01.000Z",
                "duration_ms": 1000,
                "attempts": [{"n": 1, "status": "succeeded", "error": null, "duration_ms": 1000,
                    "request": {"model": "mock", "system": null, "user": "hi"}, "response": "ok",
                    "cost_usd": 0.0,
                    "calls": [
                        {"model": "mock", "provider": "mock", "status": "succeeded", "input_tokens": 1,
                         "output_tokens": 1, "cost_usd": 0.0, "priced": true, "duration_ms": 10,
                         "reply": "", "tool_uses": [{"id": "c1", "name": "weather", "arguments": {}},
                                                    {"id": "c2", "name": "delay", "arguments": {}}]},
                        {"model": "mock", "provider": "mock", "status": "succeeded", "input_tokens": 1,
                         "output_tokens": 1, "cost_usd": 0.0, "priced": true, "duration_ms": 10,
                         "reply": "ok"}],
                    "tool_calls": [
                        {"turn": 1, "id": "c1", "name": "weather", "tool": "custom:weather",
                         "arguments": {}, "result": "rain", "duration_ms": 30},
                        {"turn": 1, "id": "c2", "name": "delay", "tool": "delay",
                         "arguments": {}, "error": "bad seconds", "duration_ms": 5}]}]}]
        }"#)
        .unwrap();
        let spans = super::spans(&record, false);
        let names: Vec<String> = spans.iter().map(|s| s.name.to_string()).collect();
        assert_eq!(
            &names[3..],
            [
                "chat mock",
                "execute_tool weather",
                "execute_tool delay",
                "chat mock"
            ],
            "{names:?}"
        );
        let attempt = spans[2].span_context.span_id();
        assert!(spans[3..].iter().all(|s| s.parent_span_id == attempt));
        // The next turn starts once the slower of the two calls ended.
        assert_eq!(spans[4].start_time, spans[5].start_time);
        assert_eq!(spans[6].start_time, spans[4].end_time);
        assert!(matches!(
            spans[5].status,
            opentelemetry::trace::Status::Error { .. }
        ));
    }
}
