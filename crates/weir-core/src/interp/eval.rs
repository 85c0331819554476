//! The evaluator and its meter.

use std::rc::Rc;

use serde_json::Value;

use super::parse::{Bin, Cmp, Expr, Program};
use super::value::{Kind, Names, Num, V, float};
use super::{MAX_ITEMS, MAX_STRING, MEMORY, STEPS, WORK, err};
use crate::expr::ExprError;

/// What one evaluation may still spend.
pub(super) struct Meter {
    pub(super) steps: u64,
    pub(super) work: u64,
    pub(super) memory: usize,
}

impl Meter {
    pub(super) fn step(&mut self) -> Result<(), ExprError> {
        if self.steps == 0 {
            return Err(err(format!("expression ran out of fuel ({STEPS} steps)")));
        }
        self.steps -= 1;
        Ok(())
    }

    pub(super) fn work(&mut self, units: usize) -> Result<(), ExprError> {
        let units = units as u64;
        if units > self.work {
            return Err(err(format!(
                "expression ran out of fuel (it touches more than {WORK} elements or bytes)"
            )));
        }
        self.work -= units;
        Ok(())
    }

    /// Charges a string about to be built.
    pub(super) fn text(&mut self, bytes: usize) -> Result<(), ExprError> {
        if bytes > MAX_STRING {
            return Err(err(format!(
                "expression result is too large (a string over {} MiB)",
                MAX_STRING >> 20
            )));
        }
        self.build(bytes)
    }

    /// Charges a list about to be built.
    pub(super) fn list(&mut self, items: usize) -> Result<(), ExprError> {
        if items > MAX_ITEMS {
            return Err(err(format!(
                "expression result is too large (a list over {MAX_ITEMS} items)"
            )));
        }
        self.build(items.saturating_mul(size_of::<V>()))
    }

    /// Charges a value about to be built (`bytes` long).
    pub(super) fn build(&mut self, bytes: usize) -> Result<(), ExprError> {
        if bytes > self.memory {
            return Err(err(format!(
                "expression result is too large (it would build more than {} MiB)",
                MEMORY >> 20
            )));
        }
        self.memory -= bytes;
        self.work(bytes / 16)
    }
}

impl Program {
    /// Evaluates against `names`, within the fixed budget.
    pub fn eval<'a>(&self, names: &'a dyn Names) -> Result<V<'a>, ExprError> {
        let mut m = Meter {
            steps: STEPS,
            work: WORK,
            memory: MEMORY,
        };
        let mut ev = Eval { names, m: &mut m };
        ev.eval(&self.0)
    }
}

pub(super) struct Eval<'n, 'm> {
    pub(super) names: &'n dyn Names,
    pub(super) m: &'m mut Meter,
}

pub(super) fn type_error(op: &str, a: &V, b: &V) -> ExprError {
    err(format!(
        "cannot apply `{op}` to {} and {}",
        a.type_name(),
        b.type_name()
    ))
}

impl<'n> Eval<'n, '_> {
    #[expect(
        clippy::too_many_lines,
        reason = "one arm per expression node: the evaluator's whole semantics in one match, read by the node kind"
    )]
    pub(super) fn eval(&mut self, e: &Expr) -> Result<V<'n>, ExprError> {
        self.m.step()?;
        match e {
            Expr::Lit(v) => Ok(match v {
                Value::Null => V::Null,
                Value::Bool(b) => V::Bool(*b),
                Value::Number(n) => match n.as_i64() {
                    Some(i) => V::Int(i),
                    None => V::Float(n.as_f64().unwrap_or(0.0)),
                },
                Value::String(s) => {
                    self.m.text(s.len())?;
                    V::Str(s.as_str().into())
                }
                other => V::Str(other.to_string().into()),
            }),
            Expr::Name(n) => match self.names.get(n) {
                Some(v) if !n.starts_with("__") => Ok(V::J(v)),
                _ => Err(err(format!("undefined name: `{n}` is not in state"))),
            },
            Expr::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for i in items {
                    out.push(self.eval(i)?);
                }
                self.m.list(out.len())?;
                Ok(V::List(Rc::new(out)))
            }
            Expr::Dict(items) => {
                let mut out: Vec<(String, V)> = Vec::with_capacity(items.len());
                for (k, v) in items {
                    let k = self.eval(k)?;
                    let Some(k) = k.as_str().map(str::to_string) else {
                        return Err(err(format!("map keys are strings, not {}", k.type_name())));
                    };
                    let v = self.eval(v)?;
                    out.retain(|(x, _)| *x != k);
                    out.push((k, v));
                }
                self.m.list(out.len() * 2)?;
                Ok(V::Map(Rc::new(out)))
            }
            Expr::Attr(base, name) => {
                let b = self.eval(base)?;
                match b.key(name) {
                    Some(v) if !name.starts_with("__") => Ok(v),
                    _ if b.kind() == Kind::Map => {
                        Err(err(format!("undefined: `{name}` is not a key of the map")))
                    }
                    _ => Err(err(format!(
                        "undefined: {} has no attribute `{name}`",
                        b.type_name()
                    ))),
                }
            }
            Expr::Index(base, idx) => {
                let b = self.eval(base)?;
                let i = self.eval(idx)?;
                self.index(&b, &i)
            }
            Expr::Slice(base, s, e) => {
                let b = self.eval(base)?;
                let s = s.as_ref().map(|x| self.eval(x)).transpose()?;
                let e = e.as_ref().map(|x| self.eval(x)).transpose()?;
                self.slice(&b, s.as_ref(), e.as_ref())
            }
            Expr::Call(f, args) => {
                let mut vals = Vec::with_capacity(args.len());
                for a in args {
                    vals.push(self.eval(a)?);
                }
                self.call(f, vals)
            }
            Expr::Method(base, name, args) => {
                let b = self.eval(base)?;
                let mut vals = Vec::with_capacity(args.len());
                for a in args {
                    vals.push(self.eval(a)?);
                }
                self.method(b, name, vals)
            }
            Expr::Not(x) => Ok(V::Bool(!self.eval(x)?.truthy())),
            Expr::Neg(x) => match self.eval(x)?.num() {
                Some(Num::I(i)) => i
                    .checked_neg()
                    .map(V::Int)
                    .ok_or_else(|| err("integer overflow")),
                Some(Num::F(f)) => Ok(V::Float(-f)),
                None => Err(err("unary `-` needs a number")),
            },
            Expr::And(a, b) => {
                let l = self.eval(a)?;
                if !l.truthy() { Ok(l) } else { self.eval(b) }
            }
            Expr::Or(a, b) => {
                let l = self.eval(a)?;
                if l.truthy() { Ok(l) } else { self.eval(b) }
            }
            Expr::Cond(body, cond, other) => {
                if self.eval(cond)?.truthy() {
                    self.eval(body)
                } else {
                    self.eval(other)
                }
            }
            Expr::Compare(first, rest) => {
                let mut l = self.eval(first)?;
                for (op, r) in rest {
                    let r = self.eval(r)?;
                    if !self.compare(*op, &l, &r)? {
                        return Ok(V::Bool(false));
                    }
                    l = r;
                }
                Ok(V::Bool(true))
            }
            Expr::Bin(op, a, b) => {
                let l = self.eval(a)?;
                let r = self.eval(b)?;
                self.binary(*op, l, r)
            }
        }
    }

    pub(super) fn index(&mut self, b: &V<'n>, i: &V<'n>) -> Result<V<'n>, ExprError> {
        if let Some(k) = i.as_str() {
            return b.key(k).ok_or_else(|| {
                if b.kind() == Kind::Map {
                    err(format!("undefined: `{k}` is not a key of the map"))
                } else {
                    err(format!("{} cannot be indexed by a string", b.type_name()))
                }
            });
        }
        let Some(Num::I(n)) = i.num() else {
            return Err(err(format!(
                "an index is an integer, not {}",
                i.type_name()
            )));
        };
        let at = |len: usize| -> Option<usize> {
            let n = if n < 0 { len as i64 + n } else { n };
            (0..len as i64).contains(&n).then_some(n as usize)
        };
        match b {
            V::J(Value::Array(a)) => at(a.len()).map(|k| V::J(&a[k])),
            V::List(l) => at(l.len()).map(|k| l[k].clone()),
            _ => match b.as_str() {
                Some(s) => {
                    self.m.work(s.len() / 16)?;
                    let count = s.chars().count();
                    at(count)
                        .and_then(|k| s.chars().nth(k))
                        .map(|c| V::Str(c.to_string().into()))
                }
                None => {
                    return Err(err(format!(
                        "{} cannot be indexed by a number",
                        b.type_name()
                    )));
                }
            },
        }
        .ok_or_else(|| err(format!("index {n} is out of range")))
    }

    pub(super) fn slice(
        &mut self,
        b: &V<'n>,
        s: Option<&V<'n>>,
        e: Option<&V<'n>>,
    ) -> Result<V<'n>, ExprError> {
        let bound = |v: Option<&V>, len: usize, default: usize| -> Result<usize, ExprError> {
            match v.map(|v| (v, v.num())) {
                None => Ok(default),
                Some((_, Some(Num::I(i)))) => {
                    let i = if i < 0 { len as i64 + i } else { i };
                    Ok(i.clamp(0, len as i64) as usize)
                }
                Some((v, _)) => Err(err(format!(
                    "a slice bound is an integer, not {}",
                    v.type_name()
                ))),
            }
        };
        if let Some(text) = b.as_str() {
            let chars: Vec<char> = text.chars().collect();
            self.m.work(chars.len())?;
            let (a, z) = (
                bound(s, chars.len(), 0)?,
                bound(e, chars.len(), chars.len())?,
            );
            let out: String = if a < z {
                chars[a..z].iter().collect()
            } else {
                String::new()
            };
            self.m.text(out.len())?;
            return Ok(V::Str(out.into()));
        }
        let Some(items) = (b.kind() == Kind::List).then(|| b.items()).flatten() else {
            return Err(err(format!("{} cannot be sliced", b.type_name())));
        };
        self.m.work(items.len())?;
        let (a, z) = (
            bound(s, items.len(), 0)?,
            bound(e, items.len(), items.len())?,
        );
        let out: Vec<V> = if a < z {
            items[a..z].to_vec()
        } else {
            Vec::new()
        };
        self.m.list(out.len())?;
        Ok(V::List(Rc::new(out)))
    }

    pub(super) fn equal(&mut self, a: &V<'n>, b: &V<'n>) -> Result<bool, ExprError> {
        self.m.work(1)?;
        match (a.kind(), b.kind()) {
            (Kind::Num, Kind::Num) => Ok(match (a.num(), b.num()) {
                (Some(Num::I(x)), Some(Num::I(y))) => x == y,
                (Some(x), Some(y)) => x.f() == y.f(),
                _ => false,
            }),
            (Kind::Str, Kind::Str) => {
                let (x, y) = (a.as_str().unwrap_or(""), b.as_str().unwrap_or(""));
                self.m.work(x.len().min(y.len()) / 16)?;
                Ok(x == y)
            }
            (Kind::Bool, Kind::Bool) => Ok(a.as_bool() == b.as_bool()),
            (Kind::Null, Kind::Null) => Ok(true),
            (Kind::List, Kind::List) => {
                // Item by item, neither list copied out.
                let n = a.len().unwrap_or(0);
                if b.len() != Some(n) {
                    return Ok(false);
                }
                for i in 0..n {
                    let (Some(p), Some(q)) = (a.item(i), b.item(i)) else {
                        return Ok(false);
                    };
                    if !self.equal(&p, &q)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            (Kind::Map, Kind::Map) => {
                let keys = a.items().unwrap_or_default();
                if Some(keys.len()) != b.len() {
                    return Ok(false);
                }
                for k in keys {
                    let k = k.as_str().unwrap_or("").to_string();
                    match (a.key(&k), b.key(&k)) {
                        (Some(p), Some(q)) if self.equal(&p, &q)? => {}
                        _ => return Ok(false),
                    }
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    pub(super) fn order(
        &mut self,
        a: &V<'n>,
        b: &V<'n>,
        op: &str,
    ) -> Result<std::cmp::Ordering, ExprError> {
        self.m.work(1)?;
        match (a.kind(), b.kind()) {
            (Kind::Num, Kind::Num) => {
                let o = match (a.num(), b.num()) {
                    (Some(Num::I(x)), Some(Num::I(y))) => Some(x.cmp(&y)),
                    (Some(x), Some(y)) => x.f().partial_cmp(&y.f()),
                    _ => None,
                };
                o.ok_or_else(|| err(format!("cannot order NaN with `{op}`")))
            }
            (Kind::Str, Kind::Str) => {
                let (x, y) = (a.as_str().unwrap_or(""), b.as_str().unwrap_or(""));
                self.m.work(x.len().min(y.len()) / 16)?;
                Ok(x.cmp(y))
            }
            (Kind::Bool, Kind::Bool) => Ok(a.as_bool().cmp(&b.as_bool())),
            (Kind::List, Kind::List) => {
                let (x, y) = (a.items().unwrap_or_default(), b.items().unwrap_or_default());
                for (p, q) in x.iter().zip(&y) {
                    let o = self.order(p, q, op)?;
                    if o != std::cmp::Ordering::Equal {
                        return Ok(o);
                    }
                }
                Ok(x.len().cmp(&y.len()))
            }
            _ => Err(type_error(op, a, b)),
        }
    }

    pub(super) fn contains(&mut self, hay: &V<'n>, needle: &V<'n>) -> Result<bool, ExprError> {
        match hay.kind() {
            Kind::Str => {
                let Some(n) = needle.as_str() else {
                    return Err(err(format!(
                        "`in` a string needs a string, not {}",
                        needle.type_name()
                    )));
                };
                let h = hay.as_str().unwrap_or("");
                self.m.work(h.len() / 16 + 1)?;
                Ok(h.contains(n))
            }
            Kind::List => {
                let items = hay.items().unwrap_or_default();
                self.m.work(items.len())?;
                for i in &items {
                    if self.equal(i, needle)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            Kind::Map => Ok(needle.as_str().is_some_and(|k| hay.key(k).is_some())),
            _ => Err(err(format!(
                "`in` needs a string, list or map, not {}",
                hay.type_name()
            ))),
        }
    }

    pub(super) fn compare(&mut self, op: Cmp, a: &V<'n>, b: &V<'n>) -> Result<bool, ExprError> {
        use std::cmp::Ordering::*;
        Ok(match op {
            Cmp::Eq => self.equal(a, b)?,
            Cmp::Ne => !self.equal(a, b)?,
            Cmp::Lt => self.order(a, b, "<")? == Less,
            Cmp::Le => self.order(a, b, "<=")? != Greater,
            Cmp::Gt => self.order(a, b, ">")? == Greater,
            Cmp::Ge => self.order(a, b, ">=")? != Less,
            Cmp::In => self.contains(b, a)?,
            Cmp::NotIn => !self.contains(b, a)?,
        })
    }

    pub(super) fn repeat(&mut self, v: &V<'n>, n: &V<'n>) -> Result<V<'n>, ExprError> {
        let Some(Num::I(n)) = n.num() else {
            return Err(err(
                "a string or list can only be repeated an integer number of times",
            ));
        };
        let n = n.max(0) as usize;
        if let Some(s) = v.as_str() {
            self.m.text(s.len().saturating_mul(n))?;
            return Ok(V::Str(s.repeat(n).into()));
        }
        let items = v.items().unwrap_or_default();
        self.m.list(items.len().saturating_mul(n))?;
        let mut out = Vec::with_capacity(items.len() * n);
        for _ in 0..n {
            out.extend(items.iter().cloned());
        }
        Ok(V::List(Rc::new(out)))
    }

    pub(super) fn binary(&mut self, op: Bin, a: V<'n>, b: V<'n>) -> Result<V<'n>, ExprError> {
        if op == Bin::Concat {
            let (x, y) = (a.display()?, b.display()?);
            self.m.text(x.len() + y.len())?;
            return Ok(V::Str((x + &y).into()));
        }
        match (op, a.kind(), b.kind()) {
            (Bin::Add, Kind::Str, Kind::Str) => {
                let (x, y) = (a.as_str().unwrap_or(""), b.as_str().unwrap_or(""));
                self.m.text(x.len() + y.len())?;
                return Ok(V::Str(format!("{x}{y}").into()));
            }
            (Bin::Add, Kind::List, Kind::List) => {
                // Counted before either side is copied out.
                self.m
                    .list(a.len().unwrap_or(0).saturating_add(b.len().unwrap_or(0)))?;
                let mut x = a.items().unwrap_or_default();
                x.extend(b.items().unwrap_or_default());
                return Ok(V::List(Rc::new(x)));
            }
            (Bin::Mul, Kind::Str | Kind::List, Kind::Num) => return self.repeat(&a, &b),
            (Bin::Mul, Kind::Num, Kind::Str | Kind::List) => return self.repeat(&b, &a),
            _ => {}
        }
        let sym = match op {
            Bin::Add => "+",
            Bin::Sub => "-",
            Bin::Mul => "*",
            Bin::Div => "/",
            Bin::FloorDiv => "//",
            Bin::Mod => "%",
            Bin::Pow => "**",
            Bin::Concat => "~",
        };
        let (Some(x), Some(y)) = (a.num(), b.num()) else {
            return Err(type_error(sym, &a, &b));
        };
        let overflow = || err(format!("integer overflow in `{sym}`"));
        match (op, x, y) {
            (Bin::Add, Num::I(p), Num::I(q)) => p.checked_add(q).map(V::Int).ok_or_else(overflow),
            (Bin::Sub, Num::I(p), Num::I(q)) => p.checked_sub(q).map(V::Int).ok_or_else(overflow),
            (Bin::Mul, Num::I(p), Num::I(q)) => p.checked_mul(q).map(V::Int).ok_or_else(overflow),
            (Bin::Add, p, q) => float(p.f() + q.f()),
            (Bin::Sub, p, q) => float(p.f() - q.f()),
            (Bin::Mul, p, q) => float(p.f() * q.f()),
            (Bin::Div, _, q) if q.f() == 0.0 => Err(err("division by zero")),
            (Bin::Div, p, q) => float(p.f() / q.f()),
            (Bin::FloorDiv | Bin::Mod, _, q) if q.f() == 0.0 => Err(err("division by zero")),
            (Bin::FloorDiv, Num::I(p), Num::I(q)) => {
                let d = p.checked_div_euclid(q).ok_or_else(overflow)?;
                // Python floors toward negative infinity.
                let r = p - d * q;
                Ok(V::Int(if r != 0 && (r < 0) != (q < 0) {
                    d - 1
                } else {
                    d
                }))
            }
            (Bin::FloorDiv, p, q) => float((p.f() / q.f()).floor()),
            (Bin::Mod, Num::I(p), Num::I(q)) => {
                let r = p.checked_rem(q).ok_or_else(overflow)?;
                Ok(V::Int(if r != 0 && (r < 0) != (q < 0) {
                    r + q
                } else {
                    r
                }))
            }
            (Bin::Mod, p, q) => {
                let r = p.f() % q.f();
                float(if r != 0.0 && (r < 0.0) != (q.f() < 0.0) {
                    r + q.f()
                } else {
                    r
                })
            }
            (Bin::Pow, Num::I(p), Num::I(q)) if q >= 0 => u32::try_from(q)
                .ok()
                .and_then(|q| p.checked_pow(q))
                .map(V::Int)
                .ok_or_else(overflow),
            (Bin::Pow, p, q) => float(p.f().powf(q.f())),
            _ => Err(type_error(sym, &a, &b)),
        }
    }
}
