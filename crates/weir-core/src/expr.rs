//! The sandboxed expression language and templates (DESIGN §4).
//!
//! One engine, minijinja's expression mode, serves both conditions/loops and templates, so
//! truthiness and the undefined-variable policy are the same everywhere. The sandbox:
//! - source is capped at [`MAX_SOURCE_LEN`] characters,
//! - evaluation is metered by fuel ([`FUEL`] instructions),
//! - undefined names are errors (strict undefined), never silently false,
//! - minijinja refuses string repetition past 100 MB and sequence repetition past its own cap,
//!   and results larger than [`MAX_RESULT_LEN`] bytes are refused,
//! - the only functions are `str int float len bool min max abs round`, and the only methods
//!   are Python's string/list/dict methods from minijinja-contrib's pycompat.
//!
//! Graph templates are `{key}` / `{key.path}` with `{{` and `}}` as literal braces; each
//! placeholder is an expression in the same language.

use std::sync::OnceLock;

use minijinja::value::{Rest, Value as JValue};
use minijinja::{Environment, Error as JError, ErrorKind, UndefinedBehavior};
use serde::Serialize;
use serde_json::Value;

/// Longest expression source accepted.
pub const MAX_SOURCE_LEN: usize = 1000;
/// Instructions one evaluation may execute.
pub const FUEL: u64 = 20_000;
/// Largest string (or serialized value) an expression may produce.
pub const MAX_RESULT_LEN: usize = 1 << 20;

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

fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::empty();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_fuel(Some(FUEL));
        env.set_unknown_method_callback(methods);
        env.add_function("str", fn_str);
        env.add_function("int", fn_int);
        env.add_function("float", fn_float);
        env.add_function("len", fn_len);
        env.add_function("bool", |v: JValue| v.is_true());
        env.add_function("min", |args: Rest<JValue>| {
            pick(args, std::cmp::Ordering::Less)
        });
        env.add_function("max", |args: Rest<JValue>| {
            pick(args, std::cmp::Ordering::Greater)
        });
        env.add_function("abs", fn_abs);
        env.add_function("round", fn_round);
        env
    })
}

/// Python's string/list/dict methods (minijinja-contrib pycompat), minus those that could
/// build an unbounded value: `str.format` is refused and `str.replace` is size-checked first.
fn methods(
    state: &mut minijinja::State,
    value: &JValue,
    method: &str,
    args: &[JValue],
) -> Result<JValue, JError> {
    if let Some(s) = value.as_str() {
        match method {
            "format" => {
                return Err(invalid(
                    "str.format() is not available in expressions; join strings with ~ or +",
                ));
            }
            "replace" => {
                if let (Some(old), Some(new)) = (
                    args.first().and_then(JValue::as_str),
                    args.get(1).and_then(JValue::as_str),
                ) {
                    let hits = if old.is_empty() {
                        s.chars().count() + 1
                    } else {
                        s.matches(old).count()
                    };
                    if s.len().saturating_add(hits.saturating_mul(new.len())) > MAX_RESULT_LEN {
                        return Err(invalid("str.replace(): result would be too large"));
                    }
                }
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

fn invalid(msg: impl Into<String>) -> JError {
    JError::new(ErrorKind::InvalidOperation, msg.into())
}

fn fn_str(v: JValue) -> Result<String, JError> {
    let s = display(&v);
    if s.len() > MAX_RESULT_LEN {
        return Err(invalid("str(): value too large"));
    }
    Ok(s)
}

/// Python-like display: strings as-is, `None`/`True`/`False` capitalised, maps and lists as
/// JSON.
fn display(v: &JValue) -> String {
    if let Some(s) = v.as_str() {
        return s.to_string();
    }
    match v.kind() {
        minijinja::value::ValueKind::None | minijinja::value::ValueKind::Undefined => "None".into(),
        minijinja::value::ValueKind::Bool => {
            if v.is_true() {
                "True".into()
            } else {
                "False".into()
            }
        }
        minijinja::value::ValueKind::Map | minijinja::value::ValueKind::Seq => {
            serde_json::to_string(v).unwrap_or_else(|_| v.to_string())
        }
        _ => v.to_string(),
    }
}

fn fn_int(v: JValue) -> Result<i64, JError> {
    if let Some(s) = v.as_str() {
        let t = s.trim();
        if let Ok(i) = t.parse::<i64>() {
            return Ok(i);
        }
        return Err(invalid(format!(
            "int(): invalid literal for int(): {:?}",
            truncate(s, 60)
        )));
    }
    match v.kind() {
        minijinja::value::ValueKind::Bool => Ok(i64::from(v.is_true())),
        minijinja::value::ValueKind::Number => {
            if let Some(i) = v.as_i64() {
                Ok(i)
            } else {
                let f = f64::try_from(v).map_err(|_| invalid("int(): not a number"))?;
                if f.is_finite() && f.abs() < 9.2e18 {
                    Ok(f.trunc() as i64)
                } else {
                    Err(invalid("int(): number out of range"))
                }
            }
        }
        _ => Err(invalid(format!(
            "int(): cannot convert {} to int",
            v.kind()
        ))),
    }
}

fn fn_float(v: JValue) -> Result<f64, JError> {
    if let Some(s) = v.as_str() {
        let f = s
            .trim()
            .parse::<f64>()
            .map_err(|_| invalid(format!("float(): cannot convert {:?}", truncate(s, 60))))?;
        // NaN compares true where Python says false, and infinity cannot be rounded: neither
        // is a number an expression may compute with.
        if !f.is_finite() {
            return Err(invalid(format!(
                "float(): {:?} is not a finite number",
                truncate(s, 60)
            )));
        }
        return Ok(f);
    }
    match v.kind() {
        minijinja::value::ValueKind::Bool => Ok(if v.is_true() { 1.0 } else { 0.0 }),
        minijinja::value::ValueKind::Number => {
            f64::try_from(v).map_err(|_| invalid("float(): not a number"))
        }
        _ => Err(invalid(format!(
            "float(): cannot convert {} to float",
            v.kind()
        ))),
    }
}

fn fn_len(v: JValue) -> Result<usize, JError> {
    if let Some(s) = v.as_str() {
        return Ok(s.chars().count());
    }
    v.len()
        .ok_or_else(|| invalid(format!("len(): {} has no length", v.kind())))
}

fn fn_abs(v: JValue) -> Result<JValue, JError> {
    if let Some(i) = v.as_i64() {
        return Ok(JValue::from(
            i.checked_abs().ok_or_else(|| invalid("abs(): overflow"))?,
        ));
    }
    let f = f64::try_from(v).map_err(|_| invalid("abs(): not a number"))?;
    Ok(JValue::from(f.abs()))
}

fn fn_round(v: JValue, digits: Option<i32>) -> Result<JValue, JError> {
    let f = f64::try_from(v).map_err(|_| invalid("round(): not a number"))?;
    if !f.is_finite() {
        return Err(invalid("round(): cannot round infinity or NaN"));
    }
    match digits {
        None if f.abs() >= 9.2e18 => Err(invalid("round(): number out of range")),
        None => Ok(JValue::from(f.round() as i64)),
        Some(d) => {
            let m = 10f64.powi(d.clamp(-15, 15));
            Ok(JValue::from((f * m).round() / m))
        }
    }
}

/// The most values `min()` / `max()` look at.
const MAX_PICK_ITEMS: usize = 100_000;

fn pick(args: Rest<JValue>, want: std::cmp::Ordering) -> Result<JValue, JError> {
    let items: Box<dyn Iterator<Item = JValue>> = if args.0.len() == 1 {
        Box::new(
            args.0[0]
                .try_iter()
                .map_err(|_| invalid("min()/max(): expected an iterable or several values"))?,
        )
    } else {
        Box::new(args.0.into_iter())
    };
    let mut best: Option<JValue> = None;
    for (n, item) in items.enumerate() {
        if n >= MAX_PICK_ITEMS {
            return Err(invalid(format!(
                "min()/max(): more than {MAX_PICK_ITEMS} values"
            )));
        }
        best = Some(match best {
            None => item,
            Some(b) => {
                if item.cmp(&b) == want {
                    item
                } else {
                    b
                }
            }
        });
    }
    best.ok_or_else(|| invalid("min()/max(): empty sequence"))
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

fn compile_error(e: &JError) -> ExprError {
    let mut msg = e.detail().unwrap_or("syntax error").to_string();
    if e.kind() != ErrorKind::SyntaxError {
        msg = e.to_string();
    }
    ExprError::new(msg)
}

/// Checks an expression at load time: length and syntax.
pub fn check(src: &str) -> Result<(), ExprError> {
    if src.trim().is_empty() {
        return Err(ExprError::new("expression is empty"));
    }
    if src.chars().count() > MAX_SOURCE_LEN {
        return Err(ExprError::new(format!(
            "expression is longer than {MAX_SOURCE_LEN} characters"
        )));
    }
    env()
        .compile_expression(src)
        .map(|_| ())
        .map_err(|e| compile_error(&e))
}

fn run_error(e: JError) -> ExprError {
    let msg = match e.kind() {
        ErrorKind::UndefinedError => {
            format!(
                "undefined name: {}",
                e.detail()
                    .unwrap_or("a name in the expression is not in state")
            )
        }
        ErrorKind::OutOfFuel => format!("expression ran out of fuel ({FUEL} steps)"),
        _ => match e.detail() {
            Some(d) => d.to_string(),
            None => e.to_string(),
        },
    };
    ExprError::new(msg)
}

fn context<S: Serialize>(state: &S) -> JValue {
    JValue::from(minijinja::value::Serde(state))
}

/// Run state as a template context that converts only the keys an expression reads, not
/// the whole state per render (states hold fetched pages and model replies).
#[derive(Debug)]
struct Lazy(std::sync::Arc<serde_json::Map<String, Value>>);

impl minijinja::value::Object for Lazy {
    fn get_value(self: &std::sync::Arc<Self>, key: &JValue) -> Option<JValue> {
        self.0
            .get(key.as_str()?)
            .map(|v| JValue::from(minijinja::value::Serde(v)))
    }

    fn enumerate(self: &std::sync::Arc<Self>) -> minijinja::value::Enumerator {
        minijinja::value::Enumerator::Values(
            self.0.keys().map(|k| JValue::from(k.as_str())).collect(),
        )
    }
}

/// A prepared evaluation scope over shared run state; build it once per node and render
/// every template and expression of that node against it.
#[derive(Debug, Clone)]
pub struct Scope(JValue);

impl Scope {
    pub fn new(state: std::sync::Arc<serde_json::Map<String, Value>>) -> Self {
        Scope(JValue::from_object(Lazy(state)))
    }

    pub fn eval_bool(&self, src: &str) -> Result<bool, ExprError> {
        Ok(eval_raw(src, self.0.clone())?.is_true())
    }

    pub fn eval_value(&self, src: &str) -> Result<Value, ExprError> {
        to_json(&eval_raw(src, self.0.clone())?)
    }
}

type Compiled = std::sync::Arc<minijinja::Expression<'static, 'static>>;

/// Compiled expressions by source: workflows evaluate the same few expressions over and over.
fn compiled(src: &str) -> Result<Compiled, ExprError> {
    static CACHE: OnceLock<std::sync::RwLock<std::collections::HashMap<String, Compiled>>> =
        OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(e) = cache.read().ok().and_then(|c| c.get(src).cloned()) {
        return Ok(e);
    }
    check(src)?;
    let expr = std::sync::Arc::new(
        env()
            .compile_expression_owned(src.to_string())
            .map_err(|e| compile_error(&e))?,
    );
    if let Ok(mut c) = cache.write() {
        // Bounded: a workflow has a handful of expressions; templates built at run time
        // must not grow the cache without limit.
        if c.len() >= 4096 {
            c.clear();
        }
        c.insert(src.to_string(), expr.clone());
    }
    Ok(expr)
}

fn eval_raw(src: &str, ctx: JValue) -> Result<JValue, ExprError> {
    let expr = compiled(src)?;
    let v = expr.eval(ctx).map_err(run_error)?;
    if v.is_undefined() {
        return Err(ExprError::new("expression evaluated to an undefined value"));
    }
    Ok(v)
}

/// Evaluates an expression against `state` and returns its truthiness.
pub fn eval_bool<S: Serialize>(src: &str, state: &S) -> Result<bool, ExprError> {
    Ok(eval_raw(src, context(state))?.is_true())
}

/// Evaluates an expression to a JSON value.
pub fn eval_value<S: Serialize>(src: &str, state: &S) -> Result<Value, ExprError> {
    let v = eval_raw(src, context(state))?;
    to_json(&v)
}

fn to_json(v: &JValue) -> Result<Value, ExprError> {
    let out = serde_json::to_value(v).map_err(|e| ExprError::new(e.to_string()))?;
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
    Expr(String),
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
                    check(inner).map_err(|e| {
                        ExprError::new(format!("in placeholder `{{{inner}}}`: {}", e.message))
                    })?;
                    if !lit.is_empty() {
                        segments.push(Segment::Lit(std::mem::take(&mut lit)));
                    }
                    segments.push(Segment::Expr(inner.to_string()));
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
            check(inner).map_err(|e| {
                ExprError::new(format!("in placeholder `{{{{ {inner} }}}}`: {}", e.message))
            })?;
            segments.push(Segment::Expr(inner.to_string()));
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
        self.render_ctx(|| context(state))
    }

    /// Renders against a prepared [`Scope`].
    pub fn render_in(&self, scope: &Scope) -> Result<String, ExprError> {
        self.render_ctx(|| scope.0.clone())
    }

    fn render_ctx(&self, make: impl FnOnce() -> JValue) -> Result<String, ExprError> {
        // A template without placeholders is its text: no context is built at all.
        if let [Segment::Lit(s)] = self.segments.as_slice() {
            return Ok(s.clone());
        }
        let mut out = String::new();
        let mut ctx = None;
        let mut make = Some(make);
        for seg in &self.segments {
            match seg {
                Segment::Lit(s) => out.push_str(s),
                Segment::Expr(e) => {
                    let ctx = ctx
                        .get_or_insert_with(|| (make.take().expect("built once"))())
                        .clone();
                    let v = eval_raw(e, ctx)
                        .map_err(|err| ExprError::new(format!("{{{e}}}: {}", err.message)))?;
                    match v.as_str() {
                        Some(s) => out.push_str(s),
                        None => out.push_str(
                            &serde_json::to_string(&to_json(&v)?)
                                .map_err(|e| ExprError::new(e.to_string()))?,
                        ),
                    }
                }
            }
            if out.len() > MAX_RESULT_LEN * 8 {
                return Err(ExprError::new("rendered template is too large"));
            }
        }
        Ok(out)
    }
}

/// Renders every string leaf of a JSON value as a template. A string that is exactly one
/// placeholder keeps the placeholder's JSON type (so `"{items}"` stays a list).
pub fn render_value<S: Serialize>(v: &Value, state: &S) -> Result<Value, ExprError> {
    render_value_in(v, &Scope(context(state)))
}

/// [`render_value`] against a prepared [`Scope`].
pub fn render_value_in(v: &Value, scope: &Scope) -> Result<Value, ExprError> {
    Ok(match v {
        Value::String(s) => {
            let t = Template::parse(s)?;
            if let [Segment::Expr(e)] = t.segments.as_slice() {
                scope.eval_value(e)?
            } else {
                Value::String(t.render_in(scope)?)
            }
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| render_value_in(x, scope))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| Ok((k.clone(), render_value_in(x, scope)?)))
                .collect::<Result<_, ExprError>>()?,
        ),
        other => other.clone(),
    })
}

/// Checks every string leaf of a JSON value parses as a template.
pub fn check_value(v: &Value) -> Result<(), ExprError> {
    match v {
        Value::String(s) => Template::parse(s).map(|_| ()),
        Value::Array(a) => a.iter().try_for_each(check_value),
        Value::Object(m) => m.values().try_for_each(check_value),
        _ => Ok(()),
    }
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
            "max([0] * 1000000) == 0",
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
