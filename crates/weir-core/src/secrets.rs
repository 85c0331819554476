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
    /// Every value that must never be recorded: the declared secrets that are set, and the
    /// credentials the providers and tools use (API keys, webhook and SMTP URLs).
    fn values(&self) -> Vec<String> {
        Vec::new()
    }
    /// The environment variables `[scripts] env` passes to scripts (beyond
    /// [`crate::script::BASE_ENV`]).
    fn script_env(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Replaces every known secret value, wherever it appears in a string, with `[redacted]`:
/// the engine passes everything it records through one (step outputs, errors, attempts,
/// state, events), so a provider that echoes its API key or a script that prints a secret
/// leaves no trace of it. Redaction goes by value, never by the name of a variable.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Longest first, so a secret that contains another is replaced whole.
    values: Vec<String>,
}

/// Values shorter than this are not secrets worth hiding (and would mangle ordinary text).
const MIN_SECRET_LEN: usize = 4;

/// A secret value in each form it may be written in; the value itself first.
fn forms(v: &str) -> Vec<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    let mut out = vec![v.to_string()];
    // Percent-encoding of everything but the unreserved characters (RFC 3986).
    const URL: &percent_encoding::AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    let url = utf8_percent_encode(v, URL).to_string();
    let lower_hex = {
        // `%2F` as `%2f`: only the two hex digits after each `%` change case.
        let mut s = String::with_capacity(url.len());
        let mut after = 0;
        for c in url.chars() {
            if c == '%' {
                after = 2;
                s.push(c);
            } else if after > 0 {
                after -= 1;
                s.push(c.to_ascii_lowercase());
            } else {
                s.push(c);
            }
        }
        s
    };
    let (form, lower_form) = (url.replace("%20", "+"), lower_hex.replace("%20", "+"));
    let json = serde_json::to_string(v).unwrap_or_default();
    let json = json
        .strip_prefix('"')
        .and_then(|j| j.strip_suffix('"'))
        .unwrap_or_default()
        .to_string();
    for f in [
        url,
        lower_hex,
        form,
        lower_form,
        json,
        STANDARD.encode(v),
        STANDARD_NO_PAD.encode(v),
        URL_SAFE.encode(v),
        URL_SAFE_NO_PAD.encode(v),
    ] {
        if !f.is_empty() && !out.contains(&f) {
            out.push(f);
        }
    }
    out
}

impl Redactor {
    /// A redactor of `values`, each in every form it may travel in: as it is, URL-encoded
    /// (`%20` or `+` for a space, upper- or lower-case hex), JSON-escaped, and base64
    /// (standard and URL-safe, with and without padding). A service that echoes a key it
    /// was sent in a query string, or a script that prints it encoded, leaves no trace.
    pub fn new(values: impl IntoIterator<Item = String>) -> Self {
        let mut values: Vec<String> = values
            .into_iter()
            .filter(|v| v.len() >= MIN_SECRET_LEN)
            .flat_map(|v| forms(&v))
            .collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Self { values }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `s` with every secret replaced, or `None` when it holds none.
    pub fn redacted(&self, s: &str) -> Option<String> {
        if !self.values.iter().any(|v| s.contains(v.as_str())) {
            return None;
        }
        let mut out = s.to_string();
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), "[redacted]");
            }
        }
        Some(out)
    }

    pub fn string(&self, s: &mut String) {
        if let Some(r) = self.redacted(s) {
            *s = r;
        }
    }

    /// A shared string (a model's name, a reply): replaced, not changed in place, when it holds a
    /// secret.
    pub fn shared(&self, s: &mut std::sync::Arc<str>) {
        if let Some(r) = self.redacted(s) {
            *s = r.into();
        }
    }

    /// Every string in `v`, object keys included.
    pub fn value(&self, v: &mut Value) {
        if self.is_empty() {
            return;
        }
        match v {
            Value::String(s) => self.string(s),
            Value::Array(a) => a.iter_mut().for_each(|x| self.value(x)),
            Value::Object(m) => {
                if m.keys().any(|k| self.redacted(k).is_some()) {
                    let old = std::mem::take(m);
                    for (k, mut x) in old {
                        self.value(&mut x);
                        m.insert(self.redacted(&k).unwrap_or(k), x);
                    }
                } else {
                    m.values_mut().for_each(|x| self.value(x));
                }
            }
            _ => {}
        }
    }

    /// Whether any string in `v`, object keys included, holds a secret value.
    pub fn holds(&self, v: &Value) -> bool {
        if self.is_empty() {
            return false;
        }
        match v {
            Value::String(s) => self.redacted(s).is_some(),
            Value::Array(a) => a.iter().any(|x| self.holds(x)),
            Value::Object(m) => m
                .iter()
                .any(|(k, x)| self.redacted(k).is_some() || self.holds(x)),
            _ => false,
        }
    }

    /// Whether a step output holds a secret (a model reply's fields are read as they are,
    /// without building its JSON).
    pub fn output_holds(&self, o: &crate::record::Output) -> bool {
        match o.as_reply() {
            Some(r) => [&*r.text, &*r.model, &*r.provider]
                .iter()
                .any(|s| self.redacted(s).is_some()),
            None => self.holds(o),
        }
    }

    /// Every string in a step output.
    pub fn output(&self, o: &mut crate::record::Output) {
        if self.is_empty() {
            return;
        }
        match o.reply_mut() {
            Some(r) => {
                self.shared(&mut r.text);
                self.shared(&mut r.model);
                self.string(&mut r.provider);
            }
            None => self.value(o.value_mut()),
        }
    }

    /// Everything a step record carries: output, error, input and each attempt's error,
    /// request, reply, model calls and tool calls.
    pub fn step(&self, s: &mut crate::record::StepRecord) {
        if self.is_empty() {
            return;
        }
        // The output is shared with the run's snapshot: copied only when it holds a secret.
        if self.output_holds(&s.output) {
            self.output(std::sync::Arc::make_mut(&mut s.output));
        }
        self.value(&mut s.input);
        if let Some(e) = &mut s.error {
            self.string(e);
        }
        for a in &mut s.attempts {
            if let Some(e) = &mut a.error {
                self.string(e);
            }
            match &mut a.request {
                Some(crate::record::Request::Model(m)) => {
                    self.shared(&mut m.model);
                    if let Some(s) = &mut m.system {
                        self.string(s);
                    }
                    self.string(&mut m.user);
                }
                Some(crate::record::Request::Other(v)) => self.value(v),
                None => {}
            }
            if let Some(r) = &mut a.response {
                self.shared(r);
            }
            for c in &mut a.calls {
                match c.typed_mut() {
                    Some(t) => {
                        self.shared(&mut t.model);
                        for f in [&mut t.provider, &mut t.status] {
                            self.string(f);
                        }
                        if let Some(e) = &mut t.error {
                            self.string(e);
                        }
                        if let Some(r) = &mut t.reply {
                            self.shared(r);
                        }
                        for u in &mut t.tool_uses {
                            self.value(&mut u.arguments);
                        }
                    }
                    None => self.value(c.value_mut()),
                }
            }
            // An agent's tool calls: what the model asked and what came back.
            for t in &mut a.tool_calls {
                self.value(&mut t.arguments);
                if let Some(r) = &mut t.result {
                    self.value(r);
                }
                if let Some(e) = &mut t.error {
                    self.string(e);
                }
            }
        }
    }
}

impl Secrets for Settings {
    fn secret(&self, name: &str) -> Result<String, String> {
        Settings::secret(self, name)
    }
    fn script_env(&self) -> Vec<String> {
        self.scripts.env.clone()
    }
    fn values(&self) -> Vec<String> {
        let mut vars: Vec<&str> = vec![
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "SLACK_WEBHOOK_URL",
            "SMTP_URL",
        ];
        vars.extend(self.secrets.values().map(|r| r.env.as_str()));
        vars.extend(
            self.providers
                .named
                .values()
                .filter_map(|p| p.api_key_env.as_deref()),
        );
        let mut out: Vec<String> = vars
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .filter(|v| !v.is_empty())
            .collect();
        // The password inside an SMTP URL is a secret on its own too.
        if let Ok(url) = std::env::var("SMTP_URL")
            && let Some((userinfo, _)) = url.split_once("://").and_then(|(_, r)| r.split_once('@'))
            && let Some((_, password)) = userinfo.split_once(':')
        {
            out.push(password.to_string());
        }
        out
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
    fn every_form_of_a_secret_is_redacted() {
        use base64::Engine as _;
        let key = "sk live/123+abc=\"q\"";
        let r = Redactor::new([key.to_string()]);
        for written in [
            key.to_string(),
            "sk%20live%2F123%2Babc%3D%22q%22".to_string(),
            "sk+live%2f123%2babc%3d%22q%22".to_string(),
            "sk live/123+abc=\\\"q\\\"".to_string(),
            base64::engine::general_purpose::STANDARD.encode(key),
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key),
        ] {
            let got = r.redacted(&format!("echo: {written}!"));
            assert_eq!(got.as_deref(), Some("echo: [redacted]!"), "{written}");
        }
    }

    #[test]
    fn a_redactor_replaces_every_value_everywhere() {
        let r = Redactor::new(["sk-ant-0123456789".to_string(), "xyz".to_string()]);
        let mut v = json!({"text": "key sk-ant-0123456789!", "sk-ant-0123456789": ["a sk-ant-0123456789"], "n": 3, "short": "xyz"});
        r.value(&mut v);
        assert_eq!(
            v,
            json!({"text": "key [redacted]!", "[redacted]": ["a [redacted]"], "n": 3, "short": "xyz"})
        );
        assert!(Redactor::new(Vec::new()).is_empty());
    }

    /// A step's model calls are redacted whether they are the gateway's typed records or
    /// JSON read back from a store.
    #[test]
    fn a_steps_calls_are_redacted_typed_or_json() {
        let r = Redactor::new(["sk-ant-0123456789".to_string()]);
        let typed = crate::record::Call::typed(crate::model::ModelCall {
            model: "m".into(),
            provider: "p".into(),
            status: "failed".into(),
            error_class: None,
            error: Some("bad key sk-ant-0123456789".into()),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: None,
            priced: false,
            duration_ms: 0,
            reply: Some("echo sk-ant-0123456789".into()),
            tool_uses: Vec::new(),
        });
        let json: crate::record::Call = json!({"reply": "sk-ant-0123456789", "n": 1}).into();
        let mut s: crate::record::StepRecord = serde_json::from_value(json!({
            "seq": 1, "node_id": "a", "status": "failed", "route": null, "input": null,
            "output": null, "error": null, "cost_usd": 0.0,
            "tokens": {"input": 0, "output": 0}, "attempts": [], "started_at": "t"
        }))
        .unwrap();
        s.attempts.push(crate::record::Attempt {
            n: 1,
            status: crate::record::StepStatus::Failed,
            error: None,
            error_class: None,
            duration_ms: 0,
            request: None,
            response: None,
            calls: vec![typed, json],
            tool_calls: Vec::new(),
            cost_usd: 0.0,
        });
        r.step(&mut s);
        let calls = &s.attempts[0].calls;
        assert!(calls[0].as_typed().is_some(), "still typed");
        assert_eq!(calls[0]["error"], "bad key [redacted]");
        assert_eq!(calls[0]["reply"], "echo [redacted]");
        assert_eq!(*calls[1], json!({"reply": "[redacted]", "n": 1}));
    }

    #[test]
    fn finds_and_redacts() {
        let v = json!({"h": "Bearer {secrets.CRM_TOKEN}", "x": ["{ secrets.OTHER }", "mysecrets.NOPE"]});
        assert_eq!(referenced(&v), ["CRM_TOKEN", "OTHER"]);
        let mut out = json!({"echo": "token=abc123xyz", "n": 1});
        redact(&mut out, &["abc123xyz".to_string()]);
        assert_eq!(out, json!({"echo": "token=[redacted]", "n": 1}));
    }
}
