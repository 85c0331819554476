//! Validators (spec 000): the JSON envelopes AI judges and consensus agents answer in, as
//! [`ReplyCheck`]s for the structured-reply loop. The instruction texts are the spec's, word
//! for word; a reply that cannot be parsed, or names a value outside the declared routes, is
//! re-asked with one prompt holding the original prompt, the bad response and the parser
//! error.

use serde_json::{Value, json};
use weir_core::ir::Validator;
use weir_core::schema::extract_json;

use crate::structured::ReplyCheck;

const HEAD: &str = "Respond with a JSON object and nothing else — no prose before or after,\nno markdown fences:\n{\n  \"reasoning\": \"<your step-by-step reasoning>\",\n";

/// What the envelope's value field must hold.
#[derive(Debug, Clone)]
pub enum Envelope {
    /// `"result": true | false`
    Boolean,
    /// `"result": "<one of routes>"`
    Enum(Vec<String>),
    /// `"score": 0..=100`
    Score,
    /// `"answer": "…"`, optionally one of `choices`
    Answer(Option<Vec<String>>),
    /// `"index": 1..=n, "agreeing": 0..=n` (the most-consistent aggregation pass)
    Pick(usize),
}

impl Envelope {
    /// The reply shape a validator asks its judge model for.
    pub fn for_validator(v: &Validator) -> Self {
        match v {
            Validator::Boolean => Envelope::Boolean,
            Validator::Enum { routes } => Envelope::Enum(routes.clone()),
            Validator::Confidence { .. } => Envelope::Score,
        }
    }

    /// The instruction appended to the prompt (spec 000, verbatim for the three validators).
    pub fn instruction(&self) -> String {
        match self {
            Envelope::Boolean => format!("{HEAD}  \"result\": <true or false>\n}}"),
            Envelope::Enum(routes) => format!(
                "{HEAD}  \"result\": \"<exactly one of: {}>\"\n}}\nThe \"result\" value must be reproduced exactly (case-sensitive).",
                routes.join(", ")
            ),
            Envelope::Score => format!("{HEAD}  \"score\": <integer from 0 to 100>\n}}"),
            Envelope::Answer(None) => format!("{HEAD}  \"answer\": \"<your answer>\"\n}}"),
            Envelope::Answer(Some(choices)) => format!(
                "{HEAD}  \"answer\": \"<exactly one of: {}>\"\n}}\nThe \"answer\" value must be reproduced exactly (case-sensitive).",
                choices.join(", ")
            ),
            Envelope::Pick(_) => format!(
                "{HEAD}  \"index\": <the number of the most consistent answer>,\n  \"agreeing\": <how many of the answers agree with it>\n}}"
            ),
        }
    }

    /// A JSON Schema of the envelope, given to the model client (the mock model answers it).
    pub fn schema(&self) -> Value {
        let (key, value) = match self {
            Envelope::Boolean => ("result", json!({"type": "boolean"})),
            Envelope::Enum(routes) => ("result", json!({"type": "string", "enum": routes})),
            Envelope::Score => (
                "score",
                json!({"type": "integer", "minimum": 0, "maximum": 100}),
            ),
            Envelope::Answer(None) => ("answer", json!({"type": "string"})),
            Envelope::Answer(Some(c)) => ("answer", json!({"type": "string", "enum": c})),
            Envelope::Pick(n) => {
                return json!({"type": "object", "required": ["reasoning", "index", "agreeing"], "properties": {
                    "reasoning": {"type": "string"},
                    "index": {"type": "integer", "minimum": 1, "maximum": n},
                    "agreeing": {"type": "integer", "minimum": 0, "maximum": n}}});
            }
        };
        json!({"type": "object", "required": ["reasoning", key],
               "properties": {"reasoning": {"type": "string"}, key: value}})
    }

    /// The original prompt with the instruction appended.
    pub fn prompt(&self, original: &str) -> String {
        format!("{original}\n\n{}", self.instruction())
    }
}

impl ReplyCheck for Envelope {
    fn check(&self, text: &str) -> Result<Value, Vec<String>> {
        let Some(v) = extract_json(text) else {
            return Err(vec!["the response is not a JSON object".into()]);
        };
        let Some(obj) = v.as_object() else {
            return Err(vec![format!("expected a JSON object, got {v}")]);
        };
        let reasoning = obj.get("reasoning").cloned().unwrap_or(Value::Null);
        let err = |m: String| Err(vec![m]);
        match self {
            Envelope::Boolean => match obj.get("result") {
                Some(Value::Bool(b)) => Ok(json!({"result": b, "reasoning": reasoning})),
                Some(other) => err(format!("\"result\" must be true or false, got {other}")),
                None => err("the JSON object has no \"result\" field".into()),
            },
            Envelope::Enum(routes) => match obj.get("result") {
                Some(Value::String(s)) if routes.contains(s) => {
                    Ok(json!({"result": s, "reasoning": reasoning}))
                }
                Some(other) => err(format!(
                    "\"result\" must be exactly one of: {} (case-sensitive), got {other}",
                    routes.join(", ")
                )),
                None => err("the JSON object has no \"result\" field".into()),
            },
            Envelope::Score => match obj.get("score").and_then(Value::as_f64) {
                Some(s) if (0.0..=100.0).contains(&s) => {
                    Ok(json!({"score": obj["score"], "reasoning": reasoning}))
                }
                Some(s) => err(format!("\"score\" must be from 0 to 100, got {s}")),
                None => err("the JSON object has no numeric \"score\" field".into()),
            },
            Envelope::Answer(choices) => match obj.get("answer") {
                Some(Value::String(a)) => match choices {
                    Some(c) if !c.contains(a) => err(format!(
                        "\"answer\" must be exactly one of: {} (case-sensitive), got {a:?}",
                        c.join(", ")
                    )),
                    _ => Ok(json!({"answer": a, "reasoning": reasoning})),
                },
                Some(other) => err(format!("\"answer\" must be a string, got {other}")),
                None => err("the JSON object has no \"answer\" field".into()),
            },
            Envelope::Pick(n) => {
                let index = obj.get("index").and_then(Value::as_u64);
                let agreeing = obj.get("agreeing").and_then(Value::as_u64);
                match (index, agreeing) {
                    (Some(i), Some(a)) if (1..=*n as u64).contains(&i) && a <= *n as u64 => {
                        Ok(json!({"index": i, "agreeing": a, "reasoning": reasoning}))
                    }
                    _ => err(format!(
                        "\"index\" must be a number from 1 to {n} and \"agreeing\" from 0 to {n}"
                    )),
                }
            }
        }
    }

    fn repair_prompt(&self, errors: &[String]) -> String {
        format!(
            "Error: {}\nRespond again with only the JSON object described above.",
            errors.join("; ")
        )
    }

    fn retry_prompt(&self, original: &str, bad: &str, errors: &[String]) -> Option<String> {
        Some(format!(
            "{original}\n\nYour previous response could not be used.\n\nPrevious response:\n{bad}\n\nParser error: {}\n\nRespond again with only the JSON object described above.",
            errors.join("; ")
        ))
    }
}
