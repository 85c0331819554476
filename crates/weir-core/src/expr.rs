//! The sandboxed expression language and templates (DESIGN §4).
//!
//! Conditions, loops and templates share one language (docs/expressions.md), run by weir's
//! own interpreter over a whitelisted syntax tree (`interp.rs`), so truthiness and the
//! undefined-name policy are the same everywhere. The sandbox:
//! - source is capped at [`MAX_SOURCE_LEN`] characters and 64 levels of nesting,
//! - every evaluation has a fixed budget: [`FUEL`] tree steps, a bound on the elements and
//!   bytes its operations touch, and 64 MiB of values it may build (`'a' * 2000000000` or
//!   `[0]*100000000 == [0]*100000000` fail at once with a clear error),
//! - undefined names are errors, never silently false,
//! - the only functions are `str int float len bool min max abs round`, and the only methods
//!   are the string, map and list methods listed in the docs; NaN and infinity are errors.
//!
//! Graph templates are `{key}` / `{key.path}` with `{{` and `}}` as literal braces; each
//! placeholder is an expression in the same language.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::interp::{self, Program};

/// Longest expression source accepted.
pub const MAX_SOURCE_LEN: usize = 1000;
/// Tree steps one evaluation may take.
pub const FUEL: u64 = interp::STEPS;
/// Largest string (or serialized value) an expression may produce.
pub const MAX_RESULT_LEN: usize = 1 << 20;
/// The most bytes one evaluation of a whole template may build, all its placeholders
/// together: a tool's body or an end node's output of twenty placeholders, each within
/// [`MAX_RESULT_LEN`], still cannot build gigabytes. Refused before a placeholder's value
/// is written out, not after.
pub const MAX_TEMPLATE_BYTES: usize = 8 * MAX_RESULT_LEN;

/// What is left of a template's budget in one evaluation, and the whole budget (for the
/// message).
struct Budget(usize, usize);

impl Budget {
    fn new(limit: usize) -> Self {
        Budget(limit, limit)
    }

    fn spend(&mut self, n: usize) -> Result<(), ExprError> {
        self.0 = self.0.checked_sub(n).ok_or_else(|| self.over())?;
        Ok(())
    }

    fn over(&self) -> ExprError {
        ExprError::new(format!(
            "the rendered template is larger than {}, the most one template may build (all \
             its placeholders together, `[limits] template_bytes` in weir.toml); render less \
             of the values it uses",
            crate::json::bytes(self.1)
        ))
    }
}

/// `v`'s JSON size, counted against the budget (without building the text).
fn charge_json(v: &Value, budget: &mut Budget) -> Result<(), ExprError> {
    let n = crate::json::len_within(v, budget.0).ok_or_else(|| budget.over())?;
    budget.0 -= n;
    Ok(())
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ExprError {
    pub message: String,
}

impl ExprError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// Checks an expression at load time: length and syntax.
pub fn check(src: &str) -> Result<(), ExprError> {
    parse(src).map(|_| ())
}

fn parse(src: &str) -> Result<Program, ExprError> {
    if src.trim().is_empty() {
        return Err(ExprError::new("expression is empty"));
    }
    if src.chars().count() > MAX_SOURCE_LEN {
        return Err(ExprError::new(format!(
            "expression is longer than {MAX_SOURCE_LEN} characters"
        )));
    }
    interp::parse(src)
}

/// A compiled expression: its source (what records, diagnostics and the IR's JSON show) and
/// its syntax tree, parsed once when the workflow loads and shared by every run of it.
#[derive(Clone)]
pub struct Expr {
    source: String,
    program: Arc<Program>,
}

impl Expr {
    /// Parses and checks an expression (length, nesting, syntax).
    pub fn parse(src: &str) -> Result<Self, ExprError> {
        Ok(Self {
            program: Arc::new(parse(src)?),
            source: src.to_string(),
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Expr({:?})", self.source)
    }
}

impl std::fmt::Display for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Serialize for Expr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

/// A prepared evaluation scope over shared run state; build it once per node and evaluate
/// every template and expression of that node against it. State is read in place.
#[derive(Debug, Clone)]
pub struct Scope(Arc<Map<String, Value>>, usize);

impl Scope {
    /// A scope over `state` whose templates may build [`MAX_TEMPLATE_BYTES`] each.
    pub fn new(state: Arc<Map<String, Value>>) -> Self {
        Scope(state, MAX_TEMPLATE_BYTES)
    }

    /// The most bytes one template rendered in this scope may build.
    pub fn template_bytes(&self) -> usize {
        self.1
    }

    /// The same scope, its templates limited to `bytes` each (`[limits] template_bytes`).
    #[must_use]
    pub fn with_template_bytes(mut self, bytes: usize) -> Self {
        self.1 = bytes;
        self
    }

    pub fn eval_bool(&self, e: &Expr) -> Result<bool, ExprError> {
        Ok(e.program.eval(self.0.as_ref())?.truthy_public())
    }

    pub fn eval_value(&self, e: &Expr) -> Result<Value, ExprError> {
        to_json(&e.program.eval(self.0.as_ref())?)
    }

    /// The text a placeholder renders to: strings as they are, other values as JSON, each
    /// within what `budget` has left.
    fn render(&self, e: &Expr, out: &mut String, budget: &mut Budget) -> Result<(), ExprError> {
        let v = e.program.eval(self.0.as_ref())?;
        match v.text() {
            Some(s) => {
                budget.spend(s.len())?;
                out.push_str(s);
            }
            None => {
                // Counted before it is written: a list of sixty 1 MB strings is refused
                // without building its 60 MB of JSON.
                let json = to_json(&v)?;
                charge_json(&json, budget)?;
                out.push_str(
                    &serde_json::to_string(&json).map_err(|e| ExprError::new(e.to_string()))?,
                );
            }
        }
        Ok(())
    }
}

/// Any serializable state as the map of names an expression sees.
fn scope_of<S: Serialize>(state: &S) -> Scope {
    match serde_json::to_value(state) {
        Ok(Value::Object(m)) => Scope::new(Arc::new(m)),
        _ => Scope::new(Arc::new(Map::new())),
    }
}

/// Parses an expression and evaluates it against `state` for its truthiness (one-off
/// evaluations; a workflow's expressions are compiled once, as [`Expr`]).
pub fn eval_bool<S: Serialize>(src: &str, state: &S) -> Result<bool, ExprError> {
    scope_of(state).eval_bool(&Expr::parse(src)?)
}

/// Parses an expression and evaluates it to a JSON value (one-off evaluations).
pub fn eval_value<S: Serialize>(src: &str, state: &S) -> Result<Value, ExprError> {
    scope_of(state).eval_value(&Expr::parse(src)?)
}

fn to_json(v: &interp::V<'_>) -> Result<Value, ExprError> {
    let out = v.to_json()?;
    if let Value::String(s) = &out
        && s.len() > MAX_RESULT_LEN
    {
        return Err(ExprError::new("expression result is too large"));
    }
    Ok(out)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Segment {
    Lit(String),
    Expr(Expr),
}

/// A graph-dialect template: literal text and `{expr}` placeholders.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Template {
    pub source: String,
    pub segments: Vec<Segment>,
}

impl Template {
    /// Parses `{key.path}` templates; `{{` and `}}` are literal braces. Every placeholder is
    /// checked as an expression.
    pub fn parse(source: &str) -> Result<Self, ExprError> {
        let mut segments = Vec::new();
        let mut lit = String::new();
        let mut chars = source.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '{' if matches!(chars.peek(), Some((_, '{'))) => {
                    chars.next();
                    lit.push('{');
                }
                '}' if matches!(chars.peek(), Some((_, '}'))) => {
                    chars.next();
                    lit.push('}');
                }
                '{' => {
                    let rest = &source[i + 1..];
                    let end = rest.find('}').ok_or_else(|| {
                        ExprError::new(format!(
                            "unclosed `{{` at character {}; write `{{{{` for a literal brace",
                            i + 1
                        ))
                    })?;
                    let inner = rest[..end].trim();
                    let e = Expr::parse(inner).map_err(|e| {
                        ExprError::new(format!("in placeholder `{{{inner}}}`: {}", e.message))
                    })?;
                    if !lit.is_empty() {
                        segments.push(Segment::Lit(std::mem::take(&mut lit)));
                    }
                    segments.push(Segment::Expr(e));
                    // Skip past the closing brace (`end` is a byte offset).
                    let close = i + 1 + end;
                    while chars.next_if(|&(j, _)| j <= close).is_some() {}
                }
                '}' => {
                    return Err(ExprError::new(format!(
                        "unmatched `}}` at character {}; write `}}}}` for a literal brace",
                        i + 1
                    )));
                }
                _ => lit.push(c),
            }
        }
        if !lit.is_empty() {
            segments.push(Segment::Lit(lit));
        }
        Ok(Self {
            source: source.to_string(),
            segments,
        })
    }

    /// Parses a machine-dialect template: `{{ expr }}` placeholders (Jinja-style), every
    /// other character literal. Statements (`{% … %}`) are not part of the language.
    pub fn parse_jinja(source: &str) -> Result<Self, ExprError> {
        let mut segments = Vec::new();
        let mut rest = source;
        let mut offset = 0;
        while let Some(start) = rest.find("{{").or_else(|| rest.find("{%")) {
            let open = rest.find("{{");
            let stmt = rest.find("{%");
            if let Some(st) = stmt
                && open.is_none_or(|o| st < o)
            {
                return Err(ExprError::new(format!(
                    "`{{%` at character {} : template statements are not supported; use a condition node, or write {{{{ '{{%' }}}} for the literal text",
                    offset + st + 1
                )));
            }
            let start = open.unwrap_or(start);
            if start > 0 {
                segments.push(Segment::Lit(rest[..start].to_string()));
            }
            let after = &rest[start + 2..];
            let end = after.find("}}").ok_or_else(|| {
                ExprError::new(format!(
                    "unclosed `{{{{` at character {}",
                    offset + start + 1
                ))
            })?;
            let inner = after[..end].trim();
            let e = Expr::parse(inner).map_err(|e| {
                ExprError::new(format!("in placeholder `{{{{ {inner} }}}}`: {}", e.message))
            })?;
            segments.push(Segment::Expr(e));
            let consumed = start + 2 + end + 2;
            offset += consumed;
            rest = &rest[consumed..];
        }
        if !rest.is_empty() {
            segments.push(Segment::Lit(rest.to_string()));
        }
        Ok(Self {
            source: source.to_string(),
            segments,
        })
    }

    /// Renders against state: strings are inserted as-is, other values as JSON.
    pub fn render<S: Serialize>(&self, state: &S) -> Result<String, ExprError> {
        if let [Segment::Lit(s)] = self.segments.as_slice() {
            return Ok(s.clone());
        }
        self.render_in(&scope_of(state))
    }

    /// Renders against a prepared [`Scope`].
    pub fn render_in(&self, scope: &Scope) -> Result<String, ExprError> {
        self.render_budgeted(scope, &mut Budget::new(scope.1))
    }

    fn render_budgeted(&self, scope: &Scope, budget: &mut Budget) -> Result<String, ExprError> {
        // A template without placeholders is its text.
        if let [Segment::Lit(s)] = self.segments.as_slice() {
            return Ok(s.clone());
        }
        let mut out = String::with_capacity(self.source.len() + 64);
        for seg in &self.segments {
            match seg {
                Segment::Lit(s) => out.push_str(s),
                Segment::Expr(e) => scope
                    .render(e, &mut out, budget)
                    .map_err(|err| ExprError::new(format!("{{{e}}}: {}", err.message)))?,
            }
        }
        Ok(out)
    }
}

/// A JSON value whose string leaves are templates (a tool's `params`, an end node's
/// `output`), compiled once. A string that is exactly one placeholder keeps the
/// placeholder's JSON type (so `"{items}"` stays a list); parts without placeholders are
/// kept as they are.
#[derive(Debug, Clone)]
pub struct ValueTemplate {
    source: Value,
    root: Part,
}

#[derive(Debug, Clone)]
enum Part {
    Lit(Value),
    Whole(Expr),
    Text(Template),
    Array(Vec<Part>),
    Object(Vec<(String, Part)>),
}

impl Part {
    fn parse(v: &Value) -> Result<Self, ExprError> {
        Ok(match v {
            Value::String(s) => {
                let t = Template::parse(s)?;
                match t.segments.as_slice() {
                    [Segment::Expr(e)] => Part::Whole(e.clone()),
                    [] | [Segment::Lit(_)] => Part::Lit(v.clone()),
                    _ => Part::Text(t),
                }
            }
            Value::Array(a) => {
                let parts = a.iter().map(Part::parse).collect::<Result<Vec<_>, _>>()?;
                if parts.iter().all(|p| matches!(p, Part::Lit(_))) {
                    Part::Lit(v.clone())
                } else {
                    Part::Array(parts)
                }
            }
            Value::Object(m) => {
                let parts = m
                    .iter()
                    .map(|(k, x)| Ok((k.clone(), Part::parse(x)?)))
                    .collect::<Result<Vec<_>, ExprError>>()?;
                if parts.iter().all(|(_, p)| matches!(p, Part::Lit(_))) {
                    Part::Lit(v.clone())
                } else {
                    Part::Object(parts)
                }
            }
            other => Part::Lit(other.clone()),
        })
    }

    /// Renders the part, every placeholder of the whole value counted against one
    /// `budget`.
    fn render(&self, scope: &Scope, budget: &mut Budget) -> Result<Value, ExprError> {
        Ok(match self {
            Part::Lit(v) => v.clone(),
            Part::Whole(e) => {
                let v = scope.eval_value(e)?;
                charge_json(&v, budget)
                    .map_err(|err| ExprError::new(format!("{{{e}}}: {}", err.message)))?;
                v
            }
            Part::Text(t) => Value::String(t.render_budgeted(scope, budget)?),
            Part::Array(a) => Value::Array(
                a.iter()
                    .map(|p| p.render(scope, budget))
                    .collect::<Result<_, _>>()?,
            ),
            Part::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, p)| Ok((k.clone(), p.render(scope, budget)?)))
                    .collect::<Result<_, ExprError>>()?,
            ),
        })
    }
}

impl ValueTemplate {
    /// Compiles every string leaf of `v` as a template.
    pub fn parse(v: &Value) -> Result<Self, ExprError> {
        Ok(Self {
            root: Part::parse(v)?,
            source: v.clone(),
        })
    }

    /// The value as the workflow wrote it.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Renders against a prepared [`Scope`].
    pub fn render_in(&self, scope: &Scope) -> Result<Value, ExprError> {
        self.root.render(scope, &mut Budget::new(scope.1))
    }

    /// Renders against any serializable state.
    pub fn render<S: Serialize>(&self, state: &S) -> Result<Value, ExprError> {
        self.root
            .render(&scope_of(state), &mut Budget::new(MAX_TEMPLATE_BYTES))
    }
}

impl Serialize for ValueTemplate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.source.serialize(s)
    }
}

/// Renders every string leaf of a JSON value as a template (one-off: compiles it first).
pub fn render_value<S: Serialize>(v: &Value, state: &S) -> Result<Value, ExprError> {
    ValueTemplate::parse(v)?.render(state)
}

/// Checks every string leaf of a JSON value parses as a template.
pub fn check_value(v: &Value) -> Result<(), ExprError> {
    ValueTemplate::parse(v).map(|_| ())
}

#[cfg(test)]
mod tests {
    #[test]
    fn non_finite_numbers_are_errors() {
        use super::eval_bool;
        let s = serde_json::json!({});
        for src in [
            "float('nan') > 1",
            "float('inf') > 1",
            "round(1e300 * 1e300) > 0",
            "round(1e19) > 0",
            "max([0] * 100000000) == 0",
            "[0] * 100000000 == [0] * 100000000",
            "len(' '.join(['x'] * 100000000)) > 0",
        ] {
            assert!(eval_bool(src, &s).is_err(), "{src}");
        }
        assert!(eval_bool("round(2.4) == 2 and float(' 1.5 ') == 1.5", &s).unwrap());
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn python_style_conditions() {
        let s = json!({"summary": "Something UNUSUAL here", "confidence": "75", "items": [1], "ok": true});
        assert!(eval_bool("'unusual' in str(summary).lower()", &s).unwrap());
        assert!(eval_bool("int(confidence) < 80", &s).unwrap());
        assert!(eval_bool("len(items) > 0 and ok", &s).unwrap());
        assert!(!eval_bool("not ok", &s).unwrap());
        assert_eq!(eval_value("max(3, 9, 4)", &s).unwrap(), json!(9));
        assert_eq!(eval_value("str(None)", &s).unwrap(), json!("None"));
    }

    #[test]
    fn undefined_names_are_errors() {
        let e = eval_bool("missing > 3", &json!({})).unwrap_err();
        assert!(e.message.contains("undefined"), "{}", e.message);
    }

    #[test]
    fn huge_values_are_refused() {
        let e = eval_value("'a' * 2000000000", &json!({})).unwrap_err();
        assert!(
            e.message.contains("too large") || e.message.contains("fuel"),
            "{}",
            e.message
        );
        assert!(eval_value("str('a' * 50000000)", &json!({})).is_err());
        let e = eval_value("('a' * 100000).replace('a', 'bbbbbbbbbb')", &json!({})).unwrap_err();
        assert!(e.message.contains("too large"), "{}", e.message);
        assert!(eval_value("'{:>999999999}'.format(1)", &json!({})).is_err());
    }

    #[test]
    fn syntax_and_length_checked() {
        assert!(check("1 +").is_err());
        assert!(check(&"1+".repeat(600)).is_err());
        assert!(check("a and b").is_ok());
    }

    #[test]
    fn templates() {
        let s = json!({"lead": {"name": "Ada"}, "n": 3});
        let t = Template::parse("Lead: {lead.name} ({n}) {{literal}}").unwrap();
        assert_eq!(t.render(&s).unwrap(), "Lead: Ada (3) {literal}");
        assert!(Template::parse("oops {").is_err());
        let u = Template::parse("→ {'日本' ~ name} ← done").unwrap();
        assert_eq!(u.render(&json!({"name": "語"})).unwrap(), "→ 日本語 ← done");
        let j =
            Template::parse_jinja("Diff: {{ diff.stdout }} and { braces } {{ n + 1 }}").unwrap();
        let st = json!({"diff": {"stdout": "+1 line"}, "n": 1});
        assert_eq!(j.render(&st).unwrap(), "Diff: +1 line and { braces } 2");
        assert!(Template::parse_jinja("{{ unclosed").is_err());
        assert!(Template::parse_jinja("{% if x %}y{% endif %}").is_err());
        assert!(Template::parse("{ 1 + }").is_err());
        assert_eq!(
            render_value(&json!({"a": "{lead}", "b": "x{n}"}), &s).unwrap(),
            json!({"a": {"name": "Ada"}, "b": "x3"})
        );
    }
}
