//! Secrets in tool params (`{secrets.NAME}`): finding the names a template uses, resolving
//! them, and redacting their values from anything recorded. Secret values never appear in
//! step inputs, outputs, errors or logs: inputs are public state (secrets are not in it) and
//! outputs and errors pass through [`redact`].

use serde_json::Value;

use crate::settings::Settings;

/// Where secret values come from.
pub trait Secrets: Send + Sync {
    fn secret(&self, name: &str) -> Result<String, String>;
    /// Whether the workspace declares `name`; only declared names ever resolve.
    fn is_declared(&self, name: &str) -> bool;
    /// Every declared name, for messages.
    fn declared(&self) -> Vec<String>;
}

impl Secrets for Settings {
    fn secret(&self, name: &str) -> Result<String, String> {
        Settings::secret(self, name)
    }
    fn is_declared(&self, name: &str) -> bool {
        self.secrets.contains_key(name)
    }
    fn declared(&self) -> Vec<String> {
        self.secrets.keys().cloned().collect()
    }
}

/// Names referenced as `secrets.NAME` anywhere in the strings of `v`.
pub fn referenced(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect(v, &mut out);
    out
}

fn collect(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => scan(s, out),
        Value::Array(a) => a.iter().for_each(|x| collect(x, out)),
        Value::Object(m) => m.values().for_each(|x| collect(x, out)),
        _ => {}
    }
}

/// Adds the names of `secrets.NAME` references in `text`.
pub fn scan(text: &str, out: &mut Vec<String>) {
    let mut rest = text;
    while let Some(i) = rest.find("secrets.") {
        let before = rest[..i].chars().last();
        let after = &rest[i + "secrets.".len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty()
            && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && !out.contains(&name)
        {
            out.push(name.clone());
        }
        rest = &after[name.len()..];
    }
}

/// Replaces every secret value in the strings of `v` with `[redacted]`.
pub fn redact(v: &mut Value, values: &[String]) {
    match v {
        Value::String(s) => *s = redact_str(s, values),
        Value::Array(a) => a.iter_mut().for_each(|x| redact(x, values)),
        Value::Object(m) => m.values_mut().for_each(|x| redact(x, values)),
        _ => {}
    }
}

pub fn redact_str(s: &str, values: &[String]) -> String {
    let mut out = s.to_string();
    for v in values {
        if v.len() >= 4 && out.contains(v.as_str()) {
            out = out.replace(v.as_str(), "[redacted]");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_and_redacts() {
        let v = json!({"h": "Bearer {secrets.CRM_TOKEN}", "x": ["{ secrets.OTHER }", "mysecrets.NOPE"]});
        assert_eq!(referenced(&v), ["CRM_TOKEN", "OTHER"]);
        let mut out = json!({"echo": "token=abc123xyz", "n": 1});
        redact(&mut out, &["abc123xyz".to_string()]);
        assert_eq!(out, json!({"echo": "token=[redacted]", "n": 1}));
    }
}
