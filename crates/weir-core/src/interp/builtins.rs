//! The functions and the string, map and list methods.

use std::rc::Rc;

use serde_json::Value;

use super::eval::Eval;
use super::value::{Kind, Num, V, float};
use super::{MAX_STRING, err};
use crate::expr::ExprError;

pub(super) fn arity(name: &str, args: &[V], min: usize, max: usize) -> Result<(), ExprError> {
    if args.len() < min || args.len() > max {
        let want = if min == max {
            format!("{min}")
        } else {
            format!("{min} to {max}")
        };
        return Err(err(format!(
            "{name}() takes {want} argument{}, not {}",
            if max == 1 { "" } else { "s" },
            args.len()
        )));
    }
    Ok(())
}

pub(super) fn text_arg<'x>(name: &str, v: &'x V) -> Result<&'x str, ExprError> {
    v.as_str()
        .ok_or_else(|| err(format!("{name}() needs a string, not {}", v.type_name())))
}

impl<'n> Eval<'n, '_> {
    #[expect(
        clippy::too_many_lines,
        reason = "one arm per built-in function of the expression language: a table, read by the function's name"
    )]
    pub(super) fn call(&mut self, f: &str, args: Vec<V<'n>>) -> Result<V<'n>, ExprError> {
        match f {
            "str" => {
                arity("str", &args, 1, 1)?;
                let s = args[0].display()?;
                self.m.text(s.len())?;
                Ok(V::Str(s.into()))
            }
            "bool" => {
                arity("bool", &args, 1, 1)?;
                Ok(V::Bool(args[0].truthy()))
            }
            "len" => {
                arity("len", &args, 1, 1)?;
                args[0]
                    .len()
                    .map(|n| V::Int(n as i64))
                    .ok_or_else(|| err(format!("len() of {} is not defined", args[0].type_name())))
            }
            "int" => {
                arity("int", &args, 1, 1)?;
                let v = &args[0];
                if let Some(s) = v.as_str() {
                    return s.trim().parse::<i64>().map(V::Int).map_err(|_| {
                        err(format!(
                            "int(): invalid literal for int(): {:?}",
                            s.chars().take(60).collect::<String>()
                        ))
                    });
                }
                match (v.as_bool(), v.num()) {
                    (Some(b), _) => Ok(V::Int(i64::from(b))),
                    (_, Some(Num::I(i))) => Ok(V::Int(i)),
                    (_, Some(Num::F(f))) if f.is_finite() && f.abs() < 9.2e18 => {
                        Ok(V::Int(f.trunc() as i64))
                    }
                    (_, Some(Num::F(_))) => Err(err("int(): number out of range")),
                    _ => Err(err(format!("int(): cannot convert {}", v.type_name()))),
                }
            }
            "float" => {
                arity("float", &args, 1, 1)?;
                let v = &args[0];
                if let Some(s) = v.as_str() {
                    let f: f64 = s.trim().parse().map_err(|_| {
                        err(format!(
                            "float(): cannot convert {:?}",
                            s.chars().take(60).collect::<String>()
                        ))
                    })?;
                    if !f.is_finite() {
                        return Err(err(format!(
                            "float(): {:?} is not a finite number",
                            s.chars().take(60).collect::<String>()
                        )));
                    }
                    return Ok(V::Float(f));
                }
                match (v.as_bool(), v.num()) {
                    (Some(b), _) => Ok(V::Float(if b { 1.0 } else { 0.0 })),
                    (_, Some(n)) => Ok(V::Float(n.f())),
                    _ => Err(err(format!(
                        "float(): cannot convert {} to float",
                        v.type_name()
                    ))),
                }
            }
            "abs" => {
                arity("abs", &args, 1, 1)?;
                match args[0].num() {
                    Some(Num::I(i)) => i
                        .checked_abs()
                        .map(V::Int)
                        .ok_or_else(|| err("abs(): overflow")),
                    Some(Num::F(f)) => Ok(V::Float(f.abs())),
                    None => Err(err("abs(): not a number")),
                }
            }
            "round" => {
                arity("round", &args, 1, 2)?;
                let Some(n) = args[0].num() else {
                    return Err(err("round(): not a number"));
                };
                let f = n.f();
                if !f.is_finite() {
                    return Err(err("round(): cannot round infinity or NaN"));
                }
                match args.get(1) {
                    None => {
                        if let Num::I(i) = n {
                            return Ok(V::Int(i));
                        }
                        if f.abs() >= 9.2e18 {
                            return Err(err("round(): number out of range"));
                        }
                        Ok(V::Int(f.round_ties_even() as i64))
                    }
                    Some(d) => {
                        let Some(Num::I(d)) = d.num() else {
                            return Err(err("round(): the number of digits is an integer"));
                        };
                        let m = 10f64.powi(d.clamp(-15, 15) as i32);
                        float((f * m).round_ties_even() / m)
                    }
                }
            }
            "min" | "max" => {
                let items = match args.len() {
                    0 => return Err(err(format!("{f}() needs values"))),
                    1 => args[0]
                        .items()
                        .ok_or_else(|| err(format!("{f}(): expected a list or several values")))?,
                    _ => args,
                };
                self.m.work(items.len())?;
                let want = if f == "min" {
                    std::cmp::Ordering::Less
                } else {
                    std::cmp::Ordering::Greater
                };
                let mut best: Option<V> = None;
                for item in items {
                    best = Some(match best {
                        None => item,
                        Some(b) => {
                            if self.order(&item, &b, f)? == want {
                                item
                            } else {
                                b
                            }
                        }
                    });
                }
                best.ok_or_else(|| err(format!("{f}(): empty sequence")))
            }
            _ => Err(err(format!("unknown function `{f}`"))),
        }
    }

    pub(super) fn method(
        &mut self,
        b: V<'n>,
        name: &str,
        args: Vec<V<'n>>,
    ) -> Result<V<'n>, ExprError> {
        if let Some(s) = b.as_str() {
            return self.string_method(s, name, args);
        }
        match (b.kind(), name) {
            (Kind::Map, "keys") => {
                arity("keys", &args, 0, 0)?;
                let k = b.items().unwrap_or_default();
                self.m.list(k.len())?;
                Ok(V::List(Rc::new(k)))
            }
            (Kind::Map, "values" | "items") => {
                arity(name, &args, 0, 0)?;
                let keys = b.items().unwrap_or_default();
                self.m.list(keys.len() * 2)?;
                let mut out = Vec::with_capacity(keys.len());
                for k in keys {
                    let v = b.key(k.as_str().unwrap_or("")).unwrap_or(V::Null);
                    out.push(if name == "values" {
                        v
                    } else {
                        V::List(Rc::new(vec![k, v]))
                    });
                }
                Ok(V::List(Rc::new(out)))
            }
            (Kind::Map, "get") => {
                arity("get", &args, 1, 2)?;
                let k = text_arg("get", &args[0])?.to_string();
                Ok(b.key(&k)
                    .unwrap_or_else(|| args.get(1).cloned().unwrap_or(V::Null)))
            }
            (Kind::List, "count") => {
                arity("count", &args, 1, 1)?;
                let items = b.items().unwrap_or_default();
                self.m.work(items.len())?;
                let mut n = 0;
                for i in &items {
                    if self.equal(i, &args[0])? {
                        n += 1;
                    }
                }
                Ok(V::Int(n))
            }
            _ => Err(err(format!(
                "{} has no method `{name}` (strings, maps and lists have the methods in docs/expressions.md)",
                b.type_name()
            ))),
        }
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one arm of one or two lines per string method of the expression language: a table, read by the method's name"
    )]
    pub(super) fn string_method(
        &mut self,
        s: &str,
        name: &str,
        args: Vec<V<'n>>,
    ) -> Result<V<'n>, ExprError> {
        self.m.work(s.len() / 16 + 1)?;
        let chars_arg = |args: &[V]| -> Result<Option<String>, ExprError> {
            match args.first() {
                None => Ok(None),
                Some(V::Null | V::J(Value::Null)) => Ok(None),
                Some(v) => Ok(Some(text_arg(name, v)?.to_string())),
            }
        };
        let out = |me: &mut Self, t: String| -> Result<V<'n>, ExprError> {
            me.m.text(t.len())?;
            Ok(V::Str(t.into()))
        };
        let flag = |b: bool| Ok(V::Bool(b));
        match name {
            "lower" => out(self, s.to_lowercase()),
            "upper" => out(self, s.to_uppercase()),
            "strip" | "lstrip" | "rstrip" => {
                arity(name, &args, 0, 1)?;
                let set = chars_arg(&args)?;
                let pat = |c: char| match &set {
                    Some(cs) => cs.contains(c),
                    None => c.is_whitespace(),
                };
                let t = match name {
                    "strip" => s.trim_matches(pat),
                    "lstrip" => s.trim_start_matches(pat),
                    _ => s.trim_end_matches(pat),
                };
                out(self, t.to_string())
            }
            "title" => {
                let mut t = String::with_capacity(s.len());
                let mut prev_alpha = false;
                for c in s.chars() {
                    if prev_alpha {
                        t.extend(c.to_lowercase());
                    } else {
                        t.extend(c.to_uppercase());
                    }
                    prev_alpha = c.is_alphabetic();
                }
                out(self, t)
            }
            "capitalize" => {
                let mut cs = s.chars();
                let t = match cs.next() {
                    Some(f) => f
                        .to_uppercase()
                        .chain(cs.flat_map(char::to_lowercase))
                        .collect(),
                    None => String::new(),
                };
                out(self, t)
            }
            "replace" => {
                arity("replace", &args, 2, 3)?;
                let old = text_arg("replace", &args[0])?;
                let new = text_arg("replace", &args[1])?;
                let limit = match args.get(2).map(V::num) {
                    None => usize::MAX,
                    Some(Some(Num::I(n))) if n >= 0 => n as usize,
                    Some(_) => usize::MAX,
                };
                let hits = if old.is_empty() {
                    s.chars().count() + 1
                } else {
                    s.matches(old).count()
                }
                .min(limit);
                self.m
                    .text(s.len().saturating_add(hits.saturating_mul(new.len())))?;
                out(self, s.replacen(old, new, limit))
            }
            "split" => {
                arity("split", &args, 0, 2)?;
                let sep = chars_arg(&args)?;
                let max = match args.get(1).map(V::num) {
                    Some(Some(Num::I(n))) if n >= 0 => n as usize,
                    _ => usize::MAX,
                };
                let parts: Vec<String> = match &sep {
                    Some(sep) if sep.is_empty() => return Err(err("split(): empty separator")),
                    Some(sep) => s
                        .splitn(max.saturating_add(1), sep.as_str())
                        .map(str::to_string)
                        .collect(),
                    None => {
                        let mut parts = Vec::new();
                        let mut rest = s.trim_start();
                        while !rest.is_empty() {
                            if parts.len() == max {
                                parts.push(rest.trim_end().to_string());
                                break;
                            }
                            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                            parts.push(rest[..end].to_string());
                            rest = rest[end..].trim_start();
                        }
                        parts
                    }
                };
                self.m.text(s.len())?;
                self.m.list(parts.len())?;
                Ok(V::List(Rc::new(
                    parts.into_iter().map(|p| V::Str(p.into())).collect(),
                )))
            }
            "splitlines" => {
                let parts: Vec<V> = s.lines().map(|l| V::Str(l.into())).collect();
                self.m.text(s.len())?;
                self.m.list(parts.len())?;
                Ok(V::List(Rc::new(parts)))
            }
            "count" => {
                arity("count", &args, 1, 1)?;
                let sub = text_arg("count", &args[0])?;
                Ok(V::Int(if sub.is_empty() {
                    s.chars().count() as i64 + 1
                } else {
                    s.matches(sub).count() as i64
                }))
            }
            "find" | "rfind" => {
                arity(name, &args, 1, 1)?;
                let sub = text_arg(name, &args[0])?;
                let at = if name == "find" {
                    s.find(sub)
                } else {
                    s.rfind(sub)
                };
                Ok(V::Int(at.map_or(-1, |b| s[..b].chars().count() as i64)))
            }
            "startswith" | "endswith" => {
                arity(name, &args, 1, 1)?;
                let options: Vec<String> = match args[0].as_str() {
                    Some(p) => vec![p.to_string()],
                    None => args[0]
                        .items()
                        .filter(|_| args[0].kind() == Kind::List)
                        .ok_or_else(|| {
                            err(format!("{name}() needs a string or a list of strings"))
                        })?
                        .iter()
                        .map(|v| text_arg(name, v).map(str::to_string))
                        .collect::<Result<_, _>>()?,
                };
                flag(options.iter().any(|p| {
                    if name == "startswith" {
                        s.starts_with(p.as_str())
                    } else {
                        s.ends_with(p.as_str())
                    }
                }))
            }
            "join" => {
                arity("join", &args, 1, 1)?;
                let items = args[0].items().ok_or_else(|| {
                    err(format!("join() needs a list, not {}", args[0].type_name()))
                })?;
                self.m.work(items.len())?;
                let mut size = 0usize;
                let mut parts = Vec::with_capacity(items.len());
                for i in &items {
                    let Some(t) = i.as_str() else {
                        return Err(err(format!(
                            "join(): items are strings, not {}",
                            i.type_name()
                        )));
                    };
                    size = size.saturating_add(t.len()).saturating_add(s.len());
                    if size > MAX_STRING {
                        return Err(err(format!(
                            "expression result is too large (a string over {} MiB)",
                            MAX_STRING >> 20
                        )));
                    }
                    parts.push(t.to_string());
                }
                out(self, parts.join(s))
            }
            "islower" => {
                flag(s.chars().any(char::is_alphabetic) && !s.chars().any(char::is_uppercase))
            }
            "isupper" => {
                flag(s.chars().any(char::is_alphabetic) && !s.chars().any(char::is_lowercase))
            }
            "isspace" => flag(!s.is_empty() && s.chars().all(char::is_whitespace)),
            "isdigit" | "isnumeric" => flag(!s.is_empty() && s.chars().all(char::is_numeric)),
            "isalnum" => flag(!s.is_empty() && s.chars().all(char::is_alphanumeric)),
            "isalpha" => flag(!s.is_empty() && s.chars().all(char::is_alphabetic)),
            "isascii" => flag(s.is_ascii()),
            "format" => Err(err(
                "str.format() is not available in expressions; join strings with ~ or +",
            )),
            _ => Err(err(format!(
                "a string has no method `{name}` (see docs/expressions.md for the methods)"
            ))),
        }
    }
}
