//! The structured-reply loop: ask a model, parse and check its reply, and on failure
//! re-prompt with the exact problems, up to a repair budget. Every call is recorded and
//! charged. It is one mechanism, used by `response_schema` on agent nodes and shaped so
//! validators and gates can plug in their own [`ReplyCheck`].

use serde_json::{Value, json};
use weir_core::model::Message;
use weir_core::schema::{CompiledSchema, extract_json};
use weir_core::{ModelClient, ModelError, ModelRequest, ModelResponse};

use crate::nodes::Spent;

/// How a reply is parsed and judged.
pub trait ReplyCheck: Send + Sync {
    /// The parsed value, or every problem with the reply.
    fn check(&self, text: &str) -> Result<Value, Vec<String>>;
    /// The message that asks the model to fix its reply, sent after the bad reply in the
    /// same conversation.
    fn repair_prompt(&self, errors: &[String]) -> String;

    /// A single fresh prompt for the retry instead of a continued conversation: `Some` for
    /// checks whose retry must restate the original prompt, the bad response and the error.
    fn retry_prompt(&self, _original: &str, _bad: &str, _errors: &[String]) -> Option<String> {
        None
    }
}

/// Checks replies against a JSON Schema.
pub struct SchemaCheck {
    schema: CompiledSchema,
}

impl SchemaCheck {
    /// Over a schema compiled when the workflow loaded.
    pub fn new(schema: CompiledSchema) -> Self {
        Self { schema }
    }
}

impl ReplyCheck for SchemaCheck {
    fn check(&self, text: &str) -> Result<Value, Vec<String>> {
        let Some(value) = extract_json(text) else {
            return Err(vec!["the reply contains no JSON value".into()]);
        };
        let errors = self.schema.errors(&value);
        if errors.is_empty() {
            Ok(value)
        } else {
            Err(errors)
        }
    }

    fn repair_prompt(&self, errors: &[String]) -> String {
        let list: String = errors.iter().map(|e| format!("- {e}\n")).collect();
        format!(
            "Your previous reply did not match the required JSON Schema:\n{list}\nReply again with only the corrected JSON value, and no other text."
        )
    }
}

/// A reply that passed its response schema.
pub struct Structured {
    /// The answer that passed the check.
    pub response: ModelResponse,
    /// The reply as JSON.
    pub parsed: Value,
    /// Re-prompts it took.
    pub repairs: u32,
}

/// Why a structured reply could not be had.
pub enum StructuredError {
    /// The model could not be reached (after fallbacks).
    Model(ModelError),
    /// Still invalid after the last repair.
    Invalid {
        /// What the last reply got wrong against the schema.
        errors: Vec<String>,
        /// Re-prompts tried.
        repairs: u32,
    },
}

/// Runs the loop. `spent` receives every call (with validation errors on rejected replies)
/// and every governance event, so costs are complete even when the loop fails.
pub async fn ask(
    models: &dyn ModelClient,
    mut req: ModelRequest,
    check: &dyn ReplyCheck,
    max_repairs: u32,
    spent: &mut Spent,
) -> Result<Structured, StructuredError> {
    let mut repairs = 0;
    let original = req.last_user().to_string();
    loop {
        let mut response = match models.complete(req.clone()).await {
            Ok(r) => r,
            Err(mut e) => {
                spent.add(std::mem::take(&mut e.calls), &e.events);
                return Err(StructuredError::Model(e));
            }
        };
        spent.add(std::mem::take(&mut response.calls), &response.events);
        match check.check(&response.text) {
            Ok(parsed) => {
                return Ok(Structured {
                    response,
                    parsed,
                    repairs,
                });
            }
            Err(errors) => {
                if let Some(last) = spent.calls.last_mut() {
                    let last = last.value_mut();
                    last["validation_errors"] = json!(errors);
                    last["repair"] = json!(repairs);
                }
                if repairs >= max_repairs {
                    return Err(StructuredError::Invalid { errors, repairs });
                }
                match check.retry_prompt(&original, &response.text, &errors) {
                    Some(prompt) => req.messages = vec![Message::user(prompt)],
                    None => {
                        req.messages.push(Message::assistant(&*response.text));
                        req.messages
                            .push(Message::user(check.repair_prompt(&errors)));
                    }
                }
                repairs += 1;
            }
        }
    }
}
