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
    /// The edge it concerns (E003, E013, W101), when it is about an edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edge_id: Option<String>,
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
            edge_id: None,
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

    pub fn edge(mut self, id: impl Into<String>) -> Self {
        self.edge_id = Some(id.into());
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
        match (&self.edge_id, &self.node_id) {
            (Some(e), _) => out.push_str(&format!("  --> {loc} (edge `{e}`)\n")),
            (None, Some(n)) => out.push_str(&format!("  --> {loc} (node `{n}`)\n")),
            (None, None) => out.push_str(&format!("  --> {loc}\n")),
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
            let width = token_width(text, col);
            out.push_str(&format!("{pad} | {caret_pad}{}\n", "^".repeat(width)));
        }
        if let Some(h) = &self.hint {
            out.push_str(&format!("  = hint: {h}\n"));
        }
        out.push_str(&format!(
            "  = docs: weir explain {} (docs/errors/{}.md)\n",
            self.code, self.code
        ));
        out
    }
}

/// How many characters the value starting at 1-based column `col` of `line` spans: a quoted
/// string to its closing quote, a bracketed value to its closing bracket on the same line, a
/// plain scalar to the end of its token; at least 1.
fn token_width(line: &str, col: usize) -> usize {
    let chars: Vec<char> = line.chars().skip(col.saturating_sub(1)).collect();
    let Some(&first) = chars.first() else {
        return 1;
    };
    let width = match first {
        '"' | '\'' => {
            let mut escaped = false;
            chars
                .iter()
                .enumerate()
                .skip(1)
                .find(|&(_, &c)| {
                    let end = c == first && !escaped;
                    escaped = c == '\\' && !escaped && first == '"';
                    end
                })
                .map(|(i, _)| i + 1)
        }
        '{' | '[' => {
            let (mut depth, mut quote, mut escaped) = (0usize, None::<char>, false);
            let mut end = None;
            for (i, &c) in chars.iter().enumerate() {
                match quote {
                    Some(q) => {
                        if c == q && !escaped {
                            quote = None;
                        }
                        escaped = c == '\\' && !escaped;
                    }
                    None => match c {
                        '"' | '\'' => quote = Some(c),
                        '{' | '[' => depth += 1,
                        '}' | ']' => {
                            depth = depth.saturating_sub(1);
                            if depth == 0 {
                                end = Some(i + 1);
                                break;
                            }
                        }
                        _ => {}
                    },
                }
            }
            end
        }
        _ => {
            let stop = chars
                .iter()
                .enumerate()
                .position(|(i, &c)| {
                    matches!(c, ',' | '}' | ']')
                        || (c == '#' && i > 0 && chars[i - 1] == ' ')
                        || (c == ':' && chars.get(i + 1).is_none_or(|n| *n == ' '))
                })
                .unwrap_or(chars.len());
            let token: String = chars[..stop].iter().collect();
            Some(token.trim_end().chars().count())
        }
    };
    width.unwrap_or(1).max(1)
}

/// Splits diagnostics into (errors, warnings) counts.
pub fn count(diags: &[Diagnostic]) -> (usize, usize) {
    let errors = diags.iter().filter(|d| d.is_error()).count();
    (errors, diags.len() - errors)
}

#[cfg(test)]
mod tests {
    use super::token_width;

    #[test]
    fn the_caret_spans_the_value() {
        assert_eq!(token_width(r#"  "target": "notfy"}"#, 13), 7);
        assert_eq!(token_width(r#"x: "a \" b" # c"#, 4), 8);
        assert_eq!(token_width("model: claude-sonet-4-5  # typo", 8), 16);
        assert_eq!(token_width("on: {done: finish, x: [1, 2]} ", 5), 25);
        assert_eq!(token_width("config: {", 9), 1);
        assert_eq!(token_width("short", 40), 1);
        assert_eq!(token_width("nodse: []", 1), 5);
        assert_eq!(token_width("url: http://x.y/z", 6), 12);
    }
}
