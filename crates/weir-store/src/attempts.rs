//! A step's attempts as the stores keep them: the record's JSON, except that a reply text
//! the step's output already holds is not written again.
//!
//! An agent step that succeeded has its reply three times in its record: the output's
//! `text`, the attempt's `response` and the answering call's `reply`. Stored, the attempt's
//! `response` and a call's `reply` that equal the output's `text` are the JSON `true`, and
//! a read puts the text back: a 1 KB reply is written once per step instead of three times
//! (BENCHMARKS.md, `durable_state`). A response or reply that differs from the output (a
//! failed attempt's, a fallback's, a schema repair's) is written whole, as are the attempts
//! of a step whose output has no `text`. Rows written before this (every text whole) read
//! back as they are.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use weir_core::model::{ErrorClass, ModelCall};
use weir_core::record::{Attempt, Call, Output, Request, StepStatus, ToolCallRecord, cost};
use weir_core::store::{Fault, StoreError};

use crate::backend;

/// The text an attempt's response or a call's reply may repeat: the output's `text`.
pub(crate) fn output_text(output: &Output) -> Option<&str> {
    match output.as_reply() {
        Some(r) => Some(&r.text),
        None => output.get("text").and_then(Value::as_str),
    }
}

/// A step's attempts as stored (the `attempts` column of SQLite's `steps`), given the
/// step's output text ([`output_text`]).
pub(crate) fn to_json(attempts: &[Attempt], text: Option<&str>) -> Result<String, StoreError> {
    sonic_rs::to_string(&All(attempts, text)).map_err(backend)
}

/// One attempt as stored (a row of Postgres's `attempts`).
pub(crate) fn one_to_json(attempt: &Attempt, text: Option<&str>) -> Result<String, StoreError> {
    sonic_rs::to_string(&Stored::of(attempt, text)).map_err(backend)
}

/// A step's attempts from their stored JSON ([`to_json`]), given the step's output text.
pub(crate) fn from_json(s: &str, text: Option<&str>) -> Result<Vec<Attempt>, StoreError> {
    let stored: Vec<Read> = crate::parse(s)?;
    stored.into_iter().map(|a| a.into_attempt(text)).collect()
}

/// One attempt from its stored JSON ([`one_to_json`]).
pub(crate) fn one_from_json(s: &str, text: Option<&str>) -> Result<Attempt, StoreError> {
    crate::parse::<Read>(s)?.into_attempt(text)
}

struct All<'a>(&'a [Attempt], Option<&'a str>);

impl Serialize for All<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for a in self.0 {
            seq.serialize_element(&Stored::of(a, self.1))?;
        }
        seq.end()
    }
}

/// An attempt as written: [`Attempt`]'s fields in its order, less an error and its class
/// that are `null` and calls that are none (a read takes them as such): 43 bytes of a
/// succeeded attempt that no read needs.
#[derive(Serialize)]
struct Stored<'a> {
    n: u32,
    status: StepStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_class: &'a Option<String>,
    duration_ms: u64,
    request: &'a Option<Request>,
    response: Text<'a>,
    #[serde(skip_serializing_if = "Calls::is_empty")]
    calls: Calls<'a>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tool_calls: &'a [ToolCallRecord],
    #[serde(serialize_with = "cost::serialize")]
    cost_usd: f64,
}

impl<'a> Stored<'a> {
    fn of(a: &'a Attempt, text: Option<&'a str>) -> Self {
        Self {
            n: a.n,
            status: a.status,
            error: &a.error,
            error_class: &a.error_class,
            duration_ms: a.duration_ms,
            request: &a.request,
            response: Text(a.response.as_deref(), text),
            calls: Calls(&a.calls, text),
            tool_calls: &a.tool_calls,
            cost_usd: a.cost_usd,
        }
    }
}

/// A text that may repeat the output's: `true` when it does, else itself (or `null`).
struct Text<'a>(Option<&'a str>, Option<&'a str>);

impl Serialize for Text<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Text(Some(t), Some(same)) if t == same => s.serialize_bool(true),
            Text(t, _) => t.serialize(s),
        }
    }
}

/// The calls, each one whose `reply` may repeat the output's text.
struct Calls<'a>(&'a [Call], Option<&'a str>);

impl Calls<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Calls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for call in self.0 {
            // A typed call is written from its fields (reading it as JSON would build it).
            if let Some(typed) = call.as_typed() {
                seq.serialize_element(&Typed::of(typed, self.1))?;
                continue;
            }
            match &**call {
                Value::Object(fields) => seq.serialize_element(&Fields(fields, self.1))?,
                other => seq.serialize_element(other)?,
            }
        }
        seq.end()
    }
}

/// A gateway's call record as written: [`ModelCall`]'s fields in its order.
#[derive(Serialize)]
struct Typed<'a> {
    model: &'a str,
    provider: &'a str,
    status: &'a str,
    error_class: Option<ErrorClass>,
    error: &'a Option<String>,
    input_tokens: u64,
    output_tokens: u64,
    #[serde(serialize_with = "cost::opt")]
    cost_usd: Option<f64>,
    priced: bool,
    duration_ms: u64,
    reply: Text<'a>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tool_uses: &'a [weir_core::model::ToolUse],
}

impl<'a> Typed<'a> {
    fn of(c: &'a ModelCall, text: Option<&'a str>) -> Self {
        Self {
            model: &c.model,
            provider: &c.provider,
            status: &c.status,
            error_class: c.error_class,
            error: &c.error,
            input_tokens: c.input_tokens,
            output_tokens: c.output_tokens,
            cost_usd: c.cost_usd,
            priced: c.priced,
            duration_ms: c.duration_ms,
            reply: Text(c.reply.as_deref(), text),
            tool_uses: &c.tool_uses,
        }
    }
}

/// A call read back as JSON (or given fields of its own), its `reply` checked likewise.
struct Fields<'a>(&'a serde_json::Map<String, Value>, Option<&'a str>);

impl Serialize for Fields<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            if k == "reply" {
                map.serialize_entry(k, &Text(v.as_str(), self.1))?;
            } else {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// An attempt as read: a `response` (and a call's `reply`) may be `true`, the output's text.
#[derive(Deserialize)]
struct Read {
    n: u32,
    status: StepStatus,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_class: Option<String>,
    duration_ms: u64,
    #[serde(default)]
    request: Option<Request>,
    #[serde(default)]
    response: Option<Value>,
    #[serde(default)]
    calls: Vec<Value>,
    #[serde(default)]
    tool_calls: Vec<ToolCallRecord>,
    #[serde(default)]
    cost_usd: f64,
}

impl Read {
    fn into_attempt(self, text: Option<&str>) -> Result<Attempt, StoreError> {
        let same = || {
            text.map(str::to_string).ok_or_else(|| {
                StoreError::backend(
                    Fault::Corrupt,
                    "corrupt stored attempt: it repeats the output's text, which has none",
                )
            })
        };
        let response = match self.response {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => Some(t.into()),
            Some(Value::Bool(true)) => Some(same()?.into()),
            Some(other) => {
                return Err(StoreError::backend(
                    Fault::Corrupt,
                    format!("corrupt stored attempt: a response of {other}"),
                ));
            }
        };
        let mut calls = Vec::with_capacity(self.calls.len());
        for mut call in self.calls {
            if let Some(reply) = call.get_mut("reply")
                && *reply == Value::Bool(true)
            {
                *reply = Value::String(same()?);
            }
            calls.push(Call::from(call));
        }
        Ok(Attempt {
            n: self.n,
            status: self.status,
            error: self.error,
            error_class: self.error_class,
            duration_ms: self.duration_ms,
            request: self.request,
            response,
            calls,
            tool_calls: self.tool_calls,
            cost_usd: self.cost_usd,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use weir_core::record::Reply;

    fn attempt(n: u32, response: Option<&str>, replies: &[&str]) -> Attempt {
        Attempt {
            n,
            status: StepStatus::Succeeded,
            error: None,
            error_class: None,
            duration_ms: 3,
            request: Some(Request::Other(json!({"user": "hi"}))),
            response: response.map(Into::into),
            calls: replies
                .iter()
                .map(|r| {
                    json!({"model": "m", "status": "succeeded", "reply": r, "cost_usd": 0.5}).into()
                })
                .collect(),
            tool_calls: Vec::new(),
            cost_usd: 0.5,
        }
    }

    /// An attempt's (or a list's) record JSON without the fields a store leaves out: an
    /// error and its class that are `null`, calls that are none.
    fn trimmed(mut v: Value) -> Value {
        let one = |a: &mut Value| {
            if let Some(fields) = a.as_object_mut() {
                fields.retain(|k, v| match k.as_str() {
                    "error" | "error_class" => !v.is_null(),
                    "calls" => v.as_array().is_none_or(|c| !c.is_empty()),
                    _ => true,
                });
            }
        };
        match v.as_array_mut() {
            Some(list) => list.iter_mut().for_each(one),
            None => one(&mut v),
        }
        v
    }

    #[test]
    fn a_succeeded_attempt_is_stored_without_null_errors_or_empty_calls() {
        let a = attempt(1, Some("x"), &[]);
        let stored = one_to_json(&a, Some("x")).unwrap();
        for absent in ["error", "calls"] {
            assert!(!stored.contains(absent), "{absent} in {stored}");
        }
        assert_eq!(one_from_json(&stored, Some("x")).unwrap(), a);
        let mut failed = attempt(1, None, &[]);
        failed.status = StepStatus::Failed;
        failed.error = Some("boom".into());
        failed.error_class = Some("timeout".into());
        let stored = one_to_json(&failed, None).unwrap();
        assert!(
            stored.contains(r#""error":"boom","error_class":"timeout""#),
            "{stored}"
        );
        assert_eq!(one_from_json(&stored, None).unwrap(), failed);
    }

    fn output(text: &str) -> Output {
        Output::reply(Reply {
            text: text.into(),
            model: "m".into(),
            provider: "p".into(),
            fallback_used: false,
            input_tokens: 1,
            output_tokens: 2,
        })
    }

    #[test]
    fn a_reply_the_output_holds_is_written_once_and_read_back_whole() {
        let long = "the reply ".repeat(100);
        let out = output(&long);
        let attempts = vec![
            attempt(1, None, &["a failed fallback"]),
            attempt(2, Some(&long), &["an earlier model's reply", &long]),
        ];
        let text = output_text(&out);
        let stored = to_json(&attempts, text).unwrap();
        assert_eq!(
            stored.matches("the reply").count(),
            0,
            "the output's text is not repeated: {stored}"
        );
        assert!(stored.contains("an earlier model's reply"), "{stored}");
        assert_eq!(from_json(&stored, text).unwrap(), attempts);
        // The record's JSON wherever nothing repeats, less what a read restores.
        let plain = to_json(&attempts, Some("something else")).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&plain).unwrap(),
            trimmed(serde_json::to_value(&attempts).unwrap())
        );
        // One attempt alone (a row of Postgres's `attempts`).
        let one = one_to_json(&attempts[1], text).unwrap();
        assert_eq!(one_from_json(&one, text).unwrap(), attempts[1]);
    }

    /// A gateway's typed call record is written as its JSON would be, its reply left out
    /// when it repeats the output's text.
    #[test]
    fn a_typed_call_is_written_as_its_json_and_read_back_equal() {
        let typed = |reply: &str| {
            Call::typed(ModelCall {
                model: "m".into(),
                provider: "p".into(),
                status: "succeeded".into(),
                error_class: Some(ErrorClass::RateLimit),
                error: None,
                input_tokens: 3,
                output_tokens: 4,
                cost_usd: Some(0.000_001_234_567_89),
                priced: true,
                duration_ms: 7,
                reply: Some(reply.into()),
                tool_uses: Vec::new(),
            })
        };
        let mut a = attempt(1, Some("hello"), &[]);
        a.calls = vec![typed("hello"), typed("other")];
        let stored = one_to_json(&a, Some("hello")).unwrap();
        assert_eq!(stored.matches("hello").count(), 0, "{stored}");
        let back = one_from_json(&stored, Some("hello")).unwrap();
        assert_eq!(back, a);
        assert!(back.calls[0].as_typed().is_none(), "read back as JSON");
        // Nothing repeated: the record's own JSON, less what a read restores.
        assert_eq!(
            serde_json::from_str::<Value>(&one_to_json(&a, Some("neither")).unwrap()).unwrap(),
            trimmed(serde_json::to_value(&a).unwrap())
        );
        assert_eq!(
            serde_json::to_value(&a.calls[1]).unwrap(),
            serde_json::to_value(a.calls[1].as_typed().unwrap()).unwrap()
        );
    }

    #[test]
    fn attempts_written_whole_read_back_as_they_are() {
        let attempts = vec![attempt(1, Some("x"), &["x"])];
        let old = serde_json::to_string(&attempts).unwrap();
        assert_eq!(from_json(&old, Some("x")).unwrap(), attempts);
        assert_eq!(from_json(&old, None).unwrap(), attempts);
    }

    #[test]
    fn a_marker_without_an_output_text_is_an_error_not_a_panic() {
        let stored = to_json(&[attempt(1, Some("x"), &["x"])], Some("x")).unwrap();
        let err = from_json(&stored, None).unwrap_err();
        assert!(err.to_string().contains("corrupt"), "{err}");
        let odd = r#"[{"n": 1, "status": "succeeded", "duration_ms": 1, "response": 5}]"#;
        let err = from_json(odd, Some("x")).unwrap_err();
        assert!(err.to_string().contains("corrupt"), "{err}");
    }

    #[test]
    fn an_output_that_is_json_with_a_text_field_counts_too() {
        let out = Output::from(json!({"text": "hello", "other": 1}));
        assert_eq!(output_text(&out), Some("hello"));
        assert_eq!(output_text(&Output::from(json!({"n": 1}))), None);
        assert_eq!(output_text(&Output::from(json!({"text": 5}))), None);
    }
}
