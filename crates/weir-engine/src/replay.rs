//! Replay: a recorded run driven again with every model call, tool call and script answered
//! from its record, never live. Calls are matched by where they happen (node, visit and
//! attempt, then their order within the attempt), not by their position in the run, so a
//! changed prompt still gets the recorded reply and the difference shows. A call the record
//! cannot answer fails its step with "not in the recording".
//!
//! The engine tells the replay clients where a call comes from through a task-local
//! [`CallSite`], set around each attempt while [`crate::Engine::replay`] is on (and only
//! then: a live drive pays nothing for it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use weir_core::model::{ErrorClass, ModelCall, ModelClient, ModelError, ModelRequest};
use weir_core::model::{ModelResponse, Usage};
use weir_core::record::{Attempt, RunRecord, StepRecord, StepStatus};
use weir_core::script::{ScriptCall, ScriptError, ScriptResult, ScriptRunner, ScriptValue};
use weir_core::tool::{ToolCall, ToolError, ToolRunner};

/// Where a call is made: the node, its visit (1-based) and the attempt (1-based).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallSite {
    /// The node making the call.
    pub node_id: String,
    /// Which visit of the node (1-based).
    pub visit: u32,
    /// Which attempt of that visit (1-based).
    pub attempt: u32,
}

tokio::task_local! {
    static SITE: CallSite;
}

/// The call site of the attempt being polled, when the engine is replaying.
pub fn call_site() -> Option<CallSite> {
    SITE.try_with(Clone::clone).ok()
}

/// Runs `f` with `site` as its call site.
pub(crate) async fn at<F: Future>(site: CallSite, f: F) -> F::Output {
    SITE.scope(site, f).await
}

/// The prefix of every error a replay gives for a call its record cannot answer.
pub const NOT_RECORDED: &str = "not in the recording";

/// A recorded run's steps by node and visit: what the replay clients answer from.
pub struct Recording {
    steps: HashMap<(weir_core::record::NodeId, u32), StepRecord>,
    /// How many calls of each attempt were answered so far (a schema repair, a fallback
    /// and a consensus round make several calls in one attempt).
    used: Mutex<HashMap<CallSite, usize>>,
}

impl Recording {
    /// The recording of `record`'s steps.
    pub fn new(record: &RunRecord) -> Arc<Self> {
        let steps = record
            .steps
            .iter()
            .map(|s| {
                let mut s = s.clone();
                reused_as_attempt(&mut s);
                ((s.node_id.clone(), s.visit), s)
            })
            .collect();
        Arc::new(Self {
            steps,
            used: Mutex::default(),
        })
    }

    fn attempt(&self, site: &CallSite) -> Result<(&StepRecord, &Attempt), String> {
        let step = self
            .steps
            .get(&(site.node_id.as_str().into(), site.visit))
            .ok_or_else(|| {
                format!(
                    "{NOT_RECORDED}: node `{}` did not run a visit {} in the recorded run",
                    site.node_id, site.visit
                )
            })?;
        let attempt = step
            .attempts
            .iter()
            .find(|a| a.n == site.attempt)
            .ok_or_else(|| {
                format!(
                    "{NOT_RECORDED}: node `{}` (visit {}) made {} attempt{} in the recorded run, not {}",
                    site.node_id,
                    site.visit,
                    step.attempts.len(),
                    if step.attempts.len() == 1 { "" } else { "s" },
                    site.attempt
                )
            })?;
        Ok((step, attempt))
    }

    /// Whether the recording has another attempt after this one (so a failure is retried).
    fn retried(&self, site: &CallSite) -> bool {
        self.steps
            .get(&(site.node_id.as_str().into(), site.visit))
            .is_some_and(|s| s.attempts.iter().any(|a| a.n > site.attempt))
    }

    /// The next `n` unused calls of the attempt at `site`.
    fn take_calls(
        &self,
        site: &CallSite,
        calls: &[weir_core::record::Call],
        most: usize,
    ) -> Vec<ModelCall> {
        let mut used = self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let from = used.entry(site.clone()).or_insert(0);
        let mut out = Vec::new();
        while *from < calls.len() && out.len() < most {
            let typed = match calls[*from].as_typed() {
                Some(c) => Ok(c.clone()),
                None => serde_json::from_value::<ModelCall>((*calls[*from]).clone()),
            };
            let Ok(c) = typed else {
                *from += 1;
                continue;
            };
            *from += 1;
            let answered = c.status == "succeeded";
            out.push(c);
            if answered {
                break;
            }
        }
        out
    }
}

/// A step a re-run reused (no attempts, its output taken from an earlier run) answers a
/// replay as one attempt that returned that output: a tool's or script's result as it is,
/// an agent's reply as one model call rebuilt from its output.
fn reused_as_attempt(s: &mut StepRecord) {
    if !s.attempts.is_empty() || s.status != StepStatus::Succeeded {
        return;
    }
    let out = s.output.as_ref();
    let calls = match (out["text"].as_str(), out["model"].as_str()) {
        (Some(text), Some(model)) => vec![
            serde_json::json!({
                "model": model,
                "provider": out["provider"].as_str().unwrap_or("replay"),
                "status": "succeeded",
                "error_class": null,
                "error": null,
                "input_tokens": out["input_tokens"].as_u64().unwrap_or(0),
                "output_tokens": out["output_tokens"].as_u64().unwrap_or(0),
                "cost_usd": 0.0,
                "priced": true,
                "duration_ms": 0,
                "reply": text,
            })
            .into(),
        ],
        _ => Vec::new(),
    };
    s.attempts.push(Attempt {
        n: 1,
        status: StepStatus::Succeeded,
        error: None,
        error_class: None,
        duration_ms: 0,
        request: None,
        response: out["text"].as_str().map(Into::into),
        calls,
        tool_calls: Vec::new(),
        cost_usd: 0.0,
    });
}

fn site_or(what: &str) -> Result<CallSite, String> {
    call_site().ok_or_else(|| format!("{NOT_RECORDED}: a {what} outside any step"))
}

/// Model calls answered from the record: each `complete` takes the attempt's next recorded
/// calls, through the first one that answered (a failed primary and its fallback are one
/// `complete`), at most one per candidate model.
pub struct ReplayModels(pub Arc<Recording>);

#[async_trait]
impl ModelClient for ReplayModels {
    async fn complete(&self, req: ModelRequest) -> Result<ModelResponse, ModelError> {
        let unanswered = |m: String| {
            let mut e = ModelError::new(ErrorClass::HttpError, m);
            e.retryable = false;
            e
        };
        let site = site_or("model call").map_err(unanswered)?;
        let (_, attempt) = self.0.attempt(&site).map_err(unanswered)?;
        let candidates = 1 + req.fallback_models.len();
        let calls = self.0.take_calls(&site, &attempt.calls, candidates);
        let Some(last) = calls.last().cloned() else {
            return Err(unanswered(format!(
                "{NOT_RECORDED}: node `{}` (visit {}, attempt {}) made {} model call{} in the recorded run, and this is one more",
                site.node_id,
                site.visit,
                site.attempt,
                attempt.calls.len(),
                if attempt.calls.len() == 1 { "" } else { "s" }
            )));
        };
        if last.status == "succeeded" {
            return Ok(ModelResponse {
                text: last.reply.clone().unwrap_or_default(),
                model: last.model.clone(),
                provider: last.provider.clone(),
                usage: Usage {
                    input_tokens: last.input_tokens,
                    output_tokens: last.output_tokens,
                },
                cost_usd: last.cost_usd,
                fallback_used: last.model != req.model,
                tool_uses: last.tool_uses.clone(),
                calls,
                events: Vec::new(),
            });
        }
        let mut e = ModelError::new(
            last.error_class.unwrap_or(ErrorClass::HttpError),
            last.error.clone().unwrap_or_else(|| "failed".into()),
        );
        e.retryable = self.0.retried(&site);
        e.calls = calls;
        Err(e)
    }

    fn check_model(&self, _model: &str) -> Result<(), String> {
        Ok(())
    }
}

/// Tool calls answered from the record: a succeeded attempt's result, a failed one's error.
pub struct ReplayTools(pub Arc<Recording>);

#[async_trait]
impl ToolRunner for ReplayTools {
    fn has_tool(&self, _tool_name: &str) -> bool {
        true
    }

    fn tool_names(&self) -> Vec<String> {
        Vec::new()
    }

    /// The tools an agent offered, by the names its model called them in the recording
    /// (the model's turns are answered from the record, so only the names matter).
    async fn describe(
        &self,
        tool_ref: &str,
    ) -> Result<Vec<(String, weir_core::model::ToolDef)>, ToolError> {
        let prefix = tool_ref.strip_suffix('*');
        let mut out: Vec<(String, weir_core::model::ToolDef)> = Vec::new();
        for step in self.0.steps.values() {
            for call in step.attempts.iter().flat_map(|a| &a.tool_calls) {
                let ours = match prefix {
                    Some(p) => call.tool.starts_with(p),
                    None => call.tool == tool_ref,
                };
                if ours && !out.iter().any(|(_, d)| d.name == call.name) {
                    out.push((
                        call.tool.clone(),
                        weir_core::model::ToolDef {
                            name: call.name.clone(),
                            description: String::new(),
                            parameters: serde_json::json!({}),
                        },
                    ));
                }
            }
        }
        if out.is_empty() && prefix.is_none() {
            // Never called in the recording: offered under a name a model accepts.
            let name: String = tool_ref
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            out.push((
                tool_ref.to_string(),
                weir_core::model::ToolDef {
                    name,
                    description: String::new(),
                    parameters: serde_json::json!({}),
                },
            ));
        }
        Ok(out)
    }

    async fn call(&self, call: ToolCall) -> Result<Value, ToolError> {
        let unanswered = |message| ToolError {
            message,
            retryable: false,
        };
        let site = site_or("tool call").map_err(unanswered)?;
        let (step, attempt) = self.0.attempt(&site).map_err(unanswered)?;
        if !attempt.tool_calls.is_empty() {
            // An agent's tool call: the recorded call of that turn and place (its key ends
            // `:{turn}:{index}`).
            let mut parts = call.idempotency_key.rsplitn(3, ':');
            let index = parts.next().and_then(|i| i.parse::<usize>().ok());
            let turn = parts.next().and_then(|t| t.parse::<u32>().ok());
            let recorded = match (turn, index) {
                (Some(t), Some(i)) => attempt.tool_calls.iter().filter(|r| r.turn == t).nth(i),
                _ => None,
            };
            return match recorded {
                Some(r) => match (&r.result, &r.error) {
                    (Some(v), _) => Ok(v.clone()),
                    (None, e) => Err(unanswered(e.clone().unwrap_or_else(|| "failed".into()))),
                },
                None => Err(unanswered(format!(
                    "{NOT_RECORDED}: node `{}` (visit {}) made no such tool call in the recorded run",
                    site.node_id, site.visit
                ))),
            };
        }
        match attempt.status {
            StepStatus::Succeeded => Ok(Value::clone(&step.output)),
            _ => Err(ToolError {
                message: attempt.error.clone().unwrap_or_else(|| "failed".into()),
                retryable: self.0.retried(&site),
            }),
        }
    }
}

/// Scripts answered from the record: the output a succeeded attempt recorded, the failure a
/// failed one did.
pub struct ReplayScripts(pub Arc<Recording>);

#[async_trait]
impl ScriptRunner for ReplayScripts {
    async fn run(&self, _call: ScriptCall) -> Result<ScriptResult, ScriptError> {
        let site = site_or("script").map_err(ScriptError::Runtime)?;
        let (step, attempt) = self.0.attempt(&site).map_err(ScriptError::Runtime)?;
        let text = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
        if attempt.status == StepStatus::Succeeded {
            let out = step.output.as_ref();
            return Ok(ScriptResult {
                stdout: text(out, "stdout"),
                stderr: text(out, "stderr"),
                exit_code: out["exitCode"].as_i64().unwrap_or(0) as i32,
                value: js_value(&out["value"], out.get("score").and_then(Value::as_f64)),
                duration_ms: attempt.duration_ms,
            });
        }
        let message = attempt.error.clone().unwrap_or_default();
        if attempt.error_class.as_deref() == Some("timeout") {
            return Err(ScriptError::Timeout(std::time::Duration::from_millis(
                attempt.duration_ms,
            )));
        }
        let streams = match &attempt.request {
            Some(weir_core::record::Request::Other(v)) => v.clone(),
            _ => Value::Null,
        };
        // "script failed (exit code N): why"
        let (exit_code, why) = message
            .strip_prefix("script failed (exit code ")
            .and_then(|r| r.split_once("): "))
            .and_then(|(code, why)| Some((code.parse().ok()?, why.to_string())))
            .unwrap_or((1, message.clone()));
        Err(ScriptError::Failed {
            exit_code,
            message: why,
            stdout: text(&streams, "stdout"),
            stderr: text(&streams, "stderr"),
        })
    }
}

/// A script's value as JavaScript would see it, from its recorded JSON form: `!!value`,
/// `String(value)` and the score a confidence validator reads.
fn js_value(json: &Value, recorded_score: Option<f64>) -> ScriptValue {
    let (js_type, truthy, string) = match json {
        Value::Null => ("undefined", false, "undefined".to_string()),
        Value::Bool(b) => ("boolean", *b, b.to_string()),
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            let s = if f.fract() == 0.0 && f.abs() < 1e21 {
                format!("{}", f as i64)
            } else {
                n.to_string()
            };
            ("number", f != 0.0, s)
        }
        Value::String(s) => ("string", !s.is_empty(), s.clone()),
        Value::Array(a) => (
            "object",
            true,
            a.iter()
                .map(|v| match v {
                    Value::Null => String::new(),
                    other => js_value(other, None).string,
                })
                .collect::<Vec<_>>()
                .join(","),
        ),
        Value::Object(_) => ("object", true, "[object Object]".to_string()),
    };
    let score = recorded_score.or_else(|| match json {
        Value::Number(n) => n.as_f64(),
        Value::Object(m) => m.get("score").and_then(Value::as_f64),
        _ => None,
    });
    ScriptValue {
        json: json.clone(),
        js_type: js_type.to_string(),
        truthy,
        string,
        score,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn script_values_read_as_javascript_does() {
        let v = js_value(&json!(3.0), None);
        assert_eq!(
            (v.truthy, v.string.as_str(), v.score),
            (true, "3", Some(3.0))
        );
        assert!(!js_value(&json!(""), None).truthy);
        assert_eq!(js_value(&json!([1, "a", null]), None).string, "1,a,");
        assert_eq!(js_value(&json!({"score": 0.7}), None).score, Some(0.7));
        assert_eq!(js_value(&json!({"a": 1}), None).string, "[object Object]");
    }
}
