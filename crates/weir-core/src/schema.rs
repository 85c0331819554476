//! JSON replies checked against a JSON Schema: the pieces of the structured-reply loop that
//! need no IO (extracting a JSON value from a model's prose, compiling a schema, listing
//! every validation error). The loop itself, which re-prompts, lives in the engine.
//!
//! Schemas are compiled with no resolver at all: a `$ref` to a file or URL is an error, so a
//! workflow can never make the engine read a file or fetch a URL through its schema.

use serde_json::Value;

/// A compiled JSON Schema.
pub struct Schema {
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Schema")
    }
}

impl Schema {
    /// Compiles a schema; the error says what is wrong with it.
    pub fn compile(schema: &Value) -> Result<Self, String> {
        if !schema.is_object() && !schema.is_boolean() {
            return Err("a JSON Schema must be an object".into());
        }
        jsonschema::validator_for(schema)
            .map(|validator| Self { validator })
            .map_err(|e| e.to_string())
    }

    /// Every validation error, as `path: message` lines (empty when valid).
    pub fn errors(&self, instance: &Value) -> Vec<String> {
        self.validator
            .iter_errors(instance)
            .map(|e| {
                let path = e.instance_path().as_str().to_string();
                let path = if path.is_empty() {
                    "(root)".to_string()
                } else {
                    path
                };
                format!("{path}: {e}")
            })
            .collect()
    }
}

/// A JSON Schema as the workflow states it, compiled once when the workflow loads and
/// shared by every run (serialises as the schema it was compiled from).
#[derive(Clone)]
pub struct CompiledSchema {
    source: Value,
    schema: std::sync::Arc<Schema>,
}

impl CompiledSchema {
    pub fn compile(source: &Value) -> Result<Self, String> {
        Ok(Self {
            schema: std::sync::Arc::new(Schema::compile(source)?),
            source: source.clone(),
        })
    }

    /// The schema as written.
    /// Fills the keys an object input leaves out with the `default` its schema's
    /// `properties` give them (top level only), as a form would.
    pub fn fill_defaults(&self, input: &mut Value) {
        let (Some(props), Value::Object(map)) = (
            self.source.get("properties").and_then(Value::as_object),
            input,
        ) else {
            return;
        };
        for (key, prop) in props {
            if let Some(default) = prop.get("default")
                && !map.contains_key(key)
            {
                map.insert(key.clone(), default.clone());
            }
        }
    }

    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Every validation error, as `path: message` lines (empty when valid).
    pub fn errors(&self, instance: &Value) -> Vec<String> {
        self.schema.errors(instance)
    }

    pub fn is_valid(&self, instance: &Value) -> bool {
        self.schema.validator.is_valid(instance)
    }
}

impl std::fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompiledSchema({})", self.source)
    }
}

impl serde::Serialize for CompiledSchema {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.source.serialize(s)
    }
}

/// Finds the JSON value in a model reply: the whole reply, else the first fenced code block
/// that parses, else the first balanced `{…}` or `[…]` that parses.
pub fn extract_json(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        return Some(v);
    }
    // Fenced blocks: ```json … ``` or ``` … ```.
    let mut rest = trimmed;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let body_start = after.find('\n').map_or(0, |i| i + 1);
        let Some(end) = after[body_start..].find("```") else {
            break;
        };
        let body = after[body_start..body_start + end].trim();
        if let Ok(v) = serde_json::from_str::<Value>(body) {
            return Some(v);
        }
        rest = &after[body_start + end + 3..];
    }
    // The first balanced object or array that parses.
    for (i, c) in trimmed.char_indices() {
        if (c == '{' || c == '[')
            && let Some(end) = balanced_end(&trimmed[i..])
            && let Ok(v) = serde_json::from_str::<Value>(&trimmed[i..i + end])
        {
            return Some(v);
        }
    }
    None
}

/// Byte length of the balanced bracket expression at the start of `s`, string-aware.
fn balanced_end(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_str = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if in_str {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn extracts_json_from_prose_and_fences() {
        assert_eq!(extract_json(r#"{"a": 1}"#), Some(json!({"a": 1})));
        assert_eq!(
            extract_json("Sure! Here it is:\n```json\n{\"score\": 80}\n```\nThanks"),
            Some(json!({"score": 80}))
        );
        assert_eq!(
            extract_json(r#"The answer is {"reason": "has } brace", "score": 3} as requested."#),
            Some(json!({"reason": "has } brace", "score": 3}))
        );
        assert_eq!(extract_json("no json here"), None);
    }

    #[test]
    fn lists_every_error_with_its_path() {
        let s = Schema::compile(&json!({
            "type": "object",
            "properties": {"score": {"type": "integer", "maximum": 100}, "reason": {"type": "string"}},
            "required": ["score", "reason"]
        }))
        .unwrap();
        assert!(s.errors(&json!({"score": 5, "reason": "ok"})).is_empty());
        let errs = s.errors(&json!({"score": 150}));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs.iter()
                .any(|e| e.starts_with("/score: ") && e.contains("100"))
        );
        assert!(errs.iter().any(|e| e.contains("reason")));
        assert!(Schema::compile(&json!({"type": "nonsense"})).is_err());
        assert!(Schema::compile(&json!({"$ref": "https://example.com/s.json"})).is_err());
    }
}
