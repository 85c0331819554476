//! Values during evaluation: borrowed from state, or built (and shared) by the expression.

use std::rc::Rc;

use serde_json::{Map, Number, Value};

use super::{MAX_ITEMS, MAX_STRING, MEMORY, err};
use crate::expr::ExprError;

/// A value during evaluation: borrowed from state, or built by the expression.
#[derive(Debug, Clone)]
pub enum V<'a> {
    /// A value of run state, read in place.
    J(&'a Value),
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Shared, like lists and maps: copying a value copies a pointer.
    Str(Rc<str>),
    /// Shared: copying a value (`x * 1000`, an index) copies a pointer, not the items.
    List(Rc<Vec<V<'a>>>),
    Map(Rc<Vec<(String, V<'a>)>>),
}

/// Lookup of top-level names.
pub trait Names {
    fn get(&self, name: &str) -> Option<&Value>;
}

impl Names for Map<String, Value> {
    fn get(&self, name: &str) -> Option<&Value> {
        Map::get(self, name)
    }
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Kind {
    Null,
    Bool,
    Num,
    Str,
    List,
    Map,
}

impl<'a> V<'a> {
    pub(super) fn kind(&self) -> Kind {
        match self {
            V::J(v) => match v {
                Value::Null => Kind::Null,
                Value::Bool(_) => Kind::Bool,
                Value::Number(_) => Kind::Num,
                Value::String(_) => Kind::Str,
                Value::Array(_) => Kind::List,
                Value::Object(_) => Kind::Map,
            },
            V::Null => Kind::Null,
            V::Bool(_) => Kind::Bool,
            V::Int(_) | V::Float(_) => Kind::Num,
            V::Str(_) => Kind::Str,
            V::List(_) => Kind::List,
            V::Map(_) => Kind::Map,
        }
    }

    pub(super) fn type_name(&self) -> &'static str {
        match self.kind() {
            Kind::Null => "None",
            Kind::Bool => "a boolean",
            Kind::Num => "a number",
            Kind::Str => "a string",
            Kind::List => "a list",
            Kind::Map => "a map",
        }
    }

    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            V::J(Value::String(s)) => Some(s),
            V::Str(s) => Some(s.as_ref()),
            _ => None,
        }
    }

    pub(super) fn as_bool(&self) -> Option<bool> {
        match self {
            V::J(Value::Bool(b)) | V::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// A number as an integer when it is one, else a float.
    pub(super) fn num(&self) -> Option<Num> {
        match self {
            V::Int(i) => Some(Num::I(*i)),
            V::Float(f) => Some(Num::F(*f)),
            V::J(Value::Number(n)) => Some(match n.as_i64() {
                Some(i) => Num::I(i),
                None => Num::F(n.as_f64().unwrap_or(f64::NAN)),
            }),
            _ => None,
        }
    }

    pub(super) fn truthy(&self) -> bool {
        match self {
            V::J(v) => match v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
                Value::String(s) => !s.is_empty(),
                Value::Array(a) => !a.is_empty(),
                Value::Object(m) => !m.is_empty(),
            },
            V::Null => false,
            V::Bool(b) => *b,
            V::Int(i) => *i != 0,
            V::Float(f) => *f != 0.0,
            V::Str(s) => !s.is_empty(),
            V::List(l) => !l.is_empty(),
            V::Map(m) => !m.is_empty(),
        }
    }

    /// The items of a list (or the keys of a map), borrowed where they can be.
    pub(super) fn items(&self) -> Option<Vec<V<'a>>> {
        match self {
            V::J(Value::Array(a)) => Some(a.iter().map(V::J).collect()),
            V::J(Value::Object(m)) => Some(m.keys().map(|k| V::Str(k.as_str().into())).collect()),
            V::List(l) => Some(l.as_ref().clone()),
            V::Map(m) => Some(m.iter().map(|(k, _)| V::Str(k.as_str().into())).collect()),
            _ => None,
        }
    }

    /// The `i`-th item of a list, without copying the list out.
    pub(super) fn item(&self, i: usize) -> Option<V<'a>> {
        match self {
            V::J(Value::Array(a)) => a.get(i).map(V::J),
            V::List(l) => l.get(i).cloned(),
            _ => None,
        }
    }

    pub(super) fn len(&self) -> Option<usize> {
        match self {
            V::J(Value::Array(a)) => Some(a.len()),
            V::J(Value::Object(m)) => Some(m.len()),
            V::J(Value::String(s)) => Some(s.chars().count()),
            V::Str(s) => Some(s.chars().count()),
            V::List(l) => Some(l.len()),
            V::Map(m) => Some(m.len()),
            _ => None,
        }
    }

    pub(super) fn key(&self, k: &str) -> Option<V<'a>> {
        match self {
            V::J(Value::Object(m)) => m.get(k).map(V::J),
            V::Map(m) => m.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone()),
            _ => None,
        }
    }

    /// Truthiness, Python's.
    pub fn truthy_public(&self) -> bool {
        self.truthy()
    }

    /// The value when it is a string.
    pub fn text(&self) -> Option<&str> {
        self.as_str()
    }

    /// The value as JSON, or an error when it would be larger than [`MAX_ITEMS`] values
    /// (a list repeated from a list shares its items; written out, it may not fit).
    pub fn to_json(&self) -> Result<Value, ExprError> {
        self.json_limited(MEMORY)
    }

    /// [`to_json`](Self::to_json) with at most `bytes` of string text written out (strings
    /// are shared while evaluating; written out, each copy counts).
    pub(super) fn json_limited(&self, bytes: usize) -> Result<Value, ExprError> {
        // Measured first, building nothing: a list of a million shared lists is refused
        // without writing out the million values that fit before the limit.
        self.measure(&mut (MAX_ITEMS, bytes))?;
        Ok(self.json())
    }

    /// Counts the values and the string text `self` would write out against `budget`
    /// (values, bytes), without building any of it.
    fn measure(&self, budget: &mut (usize, usize)) -> Result<(), ExprError> {
        if budget.0 == 0 {
            return Err(err(format!(
                "expression result is too large (more than {MAX_ITEMS} values)"
            )));
        }
        budget.0 -= 1;
        let text = match self {
            V::Str(s) => s.len(),
            V::J(Value::String(s)) => s.len(),
            // A value of state is copied whole: count it by its size, up to what is left.
            V::J(v @ (Value::Array(_) | Value::Object(_))) => {
                crate::json::len_within(v, budget.1).unwrap_or(usize::MAX)
            }
            _ => 0,
        };
        if text > budget.1 {
            return Err(err(format!(
                "expression result is too large (more than {} MiB written out)",
                (MEMORY >> 20).max(1)
            )));
        }
        budget.1 -= text;
        match self {
            V::List(l) => l.iter().try_for_each(|v| v.measure(budget)),
            V::Map(m) => m.iter().try_for_each(|(_, v)| v.measure(budget)),
            _ => Ok(()),
        }
    }

    /// The value as JSON, once [`measure`](Self::measure) has found it fits.
    fn json(&self) -> Value {
        match self {
            V::J(v) => (*v).clone(),
            V::Null => Value::Null,
            V::Bool(b) => Value::Bool(*b),
            V::Int(i) => Value::from(*i),
            V::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            V::Str(s) => Value::String(s.to_string()),
            V::List(l) => Value::Array(l.iter().map(V::json).collect()),
            V::Map(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), v.json())).collect()),
        }
    }

    /// Python-like text: strings as they are, `None`/`True`/`False`, lists and maps as JSON.
    pub fn display(&self) -> Result<String, ExprError> {
        if let Some(s) = self.as_str() {
            return Ok(s.to_string());
        }
        Ok(match self.kind() {
            Kind::Null => "None".into(),
            Kind::Bool => {
                if self.truthy() {
                    "True".into()
                } else {
                    "False".into()
                }
            }
            Kind::Num => match self.num() {
                Some(Num::I(i)) => i.to_string(),
                Some(Num::F(f)) => float_text(f),
                None => String::new(),
            },
            _ => {
                let text =
                    serde_json::to_string(&self.json_limited(MAX_STRING)?).unwrap_or_default();
                if text.len() > MAX_STRING {
                    return Err(err(format!(
                        "expression result is too large (a string over {} MiB)",
                        MAX_STRING >> 20
                    )));
                }
                text
            }
        })
    }
}

pub(super) fn float_text(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e16 {
        format!("{f:.1}")
    } else {
        format!("{f}")
    }
}

#[derive(Clone, Copy)]
pub(super) enum Num {
    I(i64),
    F(f64),
}

impl Num {
    pub(super) fn f(self) -> f64 {
        match self {
            Num::I(i) => i as f64,
            Num::F(f) => f,
        }
    }
}

pub(super) fn float<'a>(f: f64) -> Result<V<'a>, ExprError> {
    if f.is_finite() {
        Ok(V::Float(f))
    } else {
        Err(err("the result is not a finite number"))
    }
}
