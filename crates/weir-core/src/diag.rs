//! Diagnostics: every problem the loader or validator finds, with a stable code, the node it
//! concerns, where it is in the source and a hint on how to fix it.
//!
//! Validation collects all diagnostics instead of stopping at the first, so a user fixes a
//! file in one pass. Rendering follows compiler output (`error[E002]: … --> file:line:col`).

use serde::{Deserialize, Serialize};

/// A 1-based line and column in the source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub line: usize,
    pub column: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// Stable code, each documented in `docs/errors/<code>.md` (`E002`, `W101`, …).
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn error(code: &str, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, code, message)
    }

    pub fn warning(code: &str, message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, code, message)
    }

    fn new(severity: Severity, code: &str, message: impl Into<String>) -> Self {
        Self {
            severity,
            code: code.to_string(),
            message: message.into(),
            node_id: None,
            file: None,
            line: None,
            column: None,
            hint: None,
        }
    }

    pub fn node(mut self, id: impl Into<String>) -> Self {
        self.node_id = Some(id.into());
        self
    }

    pub fn at(mut self, span: Option<Span>) -> Self {
        if let Some(s) = span {
            self.line = Some(s.line);
            self.column = Some(s.column);
        }
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Renders the diagnostic like compiler output, quoting the source line when known.
    pub fn render(&self, source: Option<&str>) -> String {
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let mut out = format!("{kind}[{}]: {}\n", self.code, self.message);
        let file = self.file.as_deref().unwrap_or("<input>");
        let loc = match (self.line, self.column) {
            (Some(l), Some(c)) => format!("{file}:{l}:{c}"),
            _ => file.to_string(),
        };
        match &self.node_id {
            Some(n) => out.push_str(&format!("  --> {loc} (node `{n}`)\n")),
            None => out.push_str(&format!("  --> {loc}\n")),
        }
        if let (Some(src), Some(line), Some(col)) = (source, self.line, self.column)
            && let Some(text) = src.lines().nth(line.saturating_sub(1))
        {
            let num = line.to_string();
            let pad = " ".repeat(num.len());
            out.push_str(&format!("{pad} |\n{num} | {text}\n"));
            let caret_pad: String = text
                .chars()
                .take(col.saturating_sub(1))
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            out.push_str(&format!("{pad} | {caret_pad}^\n"));
        }
        if let Some(h) = &self.hint {
            out.push_str(&format!("  = hint: {h}\n"));
        }
        out.push_str(&format!("  = docs: docs/errors/{}.md\n", self.code));
        out
    }
}

/// Splits diagnostics into (errors, warnings) counts.
pub fn count(diags: &[Diagnostic]) -> (usize, usize) {
    let errors = diags.iter().filter(|d| d.is_error()).count();
    (errors, diags.len() - errors)
}
