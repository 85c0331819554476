//! weir's expression interpreter (spec 002: "a sandboxed AST interpreter"): a parser for the
//! language of docs/expressions.md into a whitelisted syntax tree, and an evaluator over
//! JSON run state that is metered three ways, so no expression can run away:
//! - steps: every node of the tree evaluated costs one ([`STEPS`] at most),
//! - work: every element or byte an operation touches is charged ([`WORK`] at most),
//! - memory: every string or list an evaluation builds counts against [`MEMORY`] bytes.
//!
//! State is read in place (a value from state is borrowed, not copied), and nothing is
//! built lazily: a value is charged when it is made.

use std::rc::Rc;

use serde_json::{Map, Number, Value};

use crate::expr::ExprError;

/// Tree nodes one evaluation may visit.
pub const STEPS: u64 = 20_000;
/// Elements and bytes (per 16) one evaluation may touch.
pub const WORK: u64 = 4_000_000;
/// Bytes of strings and lists one evaluation may build.
pub const MEMORY: usize = 64 << 20;
/// The longest string one operation may build.
pub const MAX_STRING: usize = 1 << 20;
/// The longest list one operation may build.
pub const MAX_ITEMS: usize = 1_000_000;

fn err(msg: impl Into<String>) -> ExprError {
    ExprError {
        message: msg.into(),
    }
}

// ---------------------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Int(i64),
    Float(f64),
    Str(String),
    Name(String),
    Op(&'static str),
}

const OPS: &[&str] = &[
    "**", "//", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ",", ":", ".", "~", "+", "-",
    "*", "/", "%", "<", ">",
];

fn lex(src: &str) -> Result<Vec<(Tok, usize)>, ExprError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
                i += 1;
            }
            let mut float = false;
            if i < b.len() && b[i] == b'.' && b.get(i + 1).is_none_or(|n| n.is_ascii_digit()) {
                float = true;
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
                let mut j = i + 1;
                if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
                    j += 1;
                }
                if j < b.len() && b[j].is_ascii_digit() {
                    float = true;
                    i = j;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let text: String = src[start..i].chars().filter(|c| *c != '_').collect();
            let tok = if float {
                let f: f64 = text
                    .parse()
                    .map_err(|_| err(format!("invalid number `{text}`")))?;
                if !f.is_finite() {
                    return Err(err(format!("number `{text}` is too large")));
                }
                Tok::Float(f)
            } else {
                match text.parse::<i64>() {
                    Ok(n) => Tok::Int(n),
                    Err(_) => return Err(err(format!("integer `{text}` is too large"))),
                }
            };
            out.push((tok, start));
            continue;
        }
        if c == b'\'' || c == b'"' {
            let quote = c as char;
            let mut s = String::new();
            let mut chars = src[i + 1..].char_indices();
            let mut closed = None;
            while let Some((k, ch)) = chars.next() {
                match ch {
                    '\\' => match chars.next() {
                        Some((_, 'n')) => s.push('\n'),
                        Some((_, 't')) => s.push('\t'),
                        Some((_, 'r')) => s.push('\r'),
                        Some((_, '0')) => s.push('\0'),
                        Some((_, e)) => s.push(e),
                        None => break,
                    },
                    ch if ch == quote => {
                        closed = Some(k);
                        break;
                    }
                    ch => s.push(ch),
                }
            }
            let Some(k) = closed else {
                return Err(err(format!(
                    "unterminated string starting at character {}",
                    start + 1
                )));
            };
            i = i + 1 + k + 1;
            out.push((Tok::Str(s), start));
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Name(src[start..i].to_string()), start));
            continue;
        }
        match OPS.iter().find(|op| src[i..].starts_with(**op)) {
            Some(op) => {
                out.push((Tok::Op(op), start));
                i += op.len();
            }
            None => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(err(format!(
                    "unexpected character `{ch}` at character {}",
                    start + 1
                )));
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Syntax tree and parser

#[derive(Debug, Clone, Copy, PartialEq)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Pow,
    Concat,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    NotIn,
}

/// The functions an expression may call.
const FUNCTIONS: &[&str] = &[
    "str", "int", "float", "len", "bool", "min", "max", "abs", "round",
];

#[derive(Debug, Clone)]
enum Expr {
    Lit(Value),
    Name(String),
    List(Vec<Expr>),
    Dict(Vec<(Expr, Expr)>),
    Attr(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    Slice(Box<Expr>, Option<Box<Expr>>, Option<Box<Expr>>),
    Call(&'static str, Vec<Expr>),
    Method(Box<Expr>, String, Vec<Expr>),
    Not(Box<Expr>),
    Neg(Box<Expr>),
    Bin(Bin, Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Compare(Box<Expr>, Vec<(Cmp, Expr)>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
}

/// A parsed expression, ready to evaluate any number of times.
#[derive(Debug, Clone)]
pub struct Program(Expr);

/// Deepest nesting the parser accepts.
const MAX_DEPTH: usize = 64;

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    depth: usize,
    len: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(t, _)| t)
    }

    fn at(&self) -> usize {
        self.toks.get(self.pos).map_or(self.len, |(_, p)| *p) + 1
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Some(Tok::Op(o)) if *o == op)
    }

    fn is_name(&self, n: &str) -> bool {
        matches!(self.peek(), Some(Tok::Name(x)) if x == n)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        if self.is_op(op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_name(&mut self, n: &str) -> bool {
        if self.is_name(n) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_op(&mut self, op: &str) -> Result<(), ExprError> {
        if self.eat_op(op) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("`{op}`")))
        }
    }

    fn unexpected(&self, wanted: &str) -> ExprError {
        match self.peek() {
            None => err(format!("unexpected end of input, expected {wanted}")),
            Some(t) => err(format!(
                "unexpected {} at character {}, expected {wanted}",
                describe(t),
                self.at()
            )),
        }
    }

    fn enter(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(err(format!(
                "expression is nested more than {MAX_DEPTH} levels deep"
            )));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<Expr, ExprError> {
        self.enter()?;
        let body = self.or()?;
        let out = if self.eat_name("if") {
            let cond = self.or()?;
            if !self.eat_name("else") {
                return Err(self.unexpected("`else`"));
            }
            let other = self.expr()?;
            Expr::Cond(Box::new(body), Box::new(cond), Box::new(other))
        } else {
            body
        };
        self.depth -= 1;
        Ok(out)
    }

    fn or(&mut self) -> Result<Expr, ExprError> {
        let mut l = self.and()?;
        while self.eat_name("or") {
            l = Expr::Or(Box::new(l), Box::new(self.and()?));
        }
        Ok(l)
    }

    fn and(&mut self) -> Result<Expr, ExprError> {
        let mut l = self.not()?;
        while self.eat_name("and") {
            l = Expr::And(Box::new(l), Box::new(self.not()?));
        }
        Ok(l)
    }

    fn not(&mut self) -> Result<Expr, ExprError> {
        if self.is_name("not")
            && !matches!(self.toks.get(self.pos + 1), Some((Tok::Name(n), _)) if n == "in")
        {
            self.pos += 1;
            self.enter()?;
            let inner = self.not()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner)));
        }
        self.compare()
    }

    fn compare(&mut self) -> Result<Expr, ExprError> {
        let first = self.concat()?;
        let mut rest = Vec::new();
        loop {
            let op = match self.peek() {
                Some(Tok::Op("==")) => Cmp::Eq,
                Some(Tok::Op("!=")) => Cmp::Ne,
                Some(Tok::Op("<")) => Cmp::Lt,
                Some(Tok::Op("<=")) => Cmp::Le,
                Some(Tok::Op(">")) => Cmp::Gt,
                Some(Tok::Op(">=")) => Cmp::Ge,
                Some(Tok::Name(n)) if n == "in" => Cmp::In,
                Some(Tok::Name(n))
                    if n == "not"
                        && matches!(self.toks.get(self.pos + 1), Some((Tok::Name(m), _)) if m == "in") =>
                {
                    self.pos += 1;
                    Cmp::NotIn
                }
                Some(Tok::Name(n)) if n == "is" => {
                    return Err(err(format!(
                        "`is` tests are not part of the language (character {}); compare with == or !=",
                        self.at()
                    )));
                }
                _ => break,
            };
            self.pos += 1;
            rest.push((op, self.concat()?));
        }
        Ok(if rest.is_empty() {
            first
        } else {
            Expr::Compare(Box::new(first), rest)
        })
    }

    fn concat(&mut self) -> Result<Expr, ExprError> {
        let mut l = self.add()?;
        while self.eat_op("~") {
            l = Expr::Bin(Bin::Concat, Box::new(l), Box::new(self.add()?));
        }
        Ok(l)
    }

    fn add(&mut self) -> Result<Expr, ExprError> {
        let mut l = self.mul()?;
        loop {
            let op = if self.eat_op("+") {
                Bin::Add
            } else if self.eat_op("-") {
                Bin::Sub
            } else {
                break;
            };
            l = Expr::Bin(op, Box::new(l), Box::new(self.mul()?));
        }
        Ok(l)
    }

    fn mul(&mut self) -> Result<Expr, ExprError> {
        let mut l = self.unary()?;
        loop {
            let op = if self.eat_op("*") {
                Bin::Mul
            } else if self.eat_op("//") {
                Bin::FloorDiv
            } else if self.eat_op("/") {
                Bin::Div
            } else if self.eat_op("%") {
                Bin::Mod
            } else {
                break;
            };
            l = Expr::Bin(op, Box::new(l), Box::new(self.unary()?));
        }
        Ok(l)
    }

    fn unary(&mut self) -> Result<Expr, ExprError> {
        if self.eat_op("-") {
            self.enter()?;
            let inner = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Neg(Box::new(inner)));
        }
        if self.eat_op("+") {
            return self.unary();
        }
        self.power()
    }

    fn power(&mut self) -> Result<Expr, ExprError> {
        let base = self.postfix()?;
        if self.eat_op("**") {
            self.enter()?;
            let exp = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Bin(Bin::Pow, Box::new(base), Box::new(exp)));
        }
        Ok(base)
    }

    fn args(&mut self, close: &str) -> Result<Vec<Expr>, ExprError> {
        let mut out = Vec::new();
        if self.eat_op(close) {
            return Ok(out);
        }
        loop {
            out.push(self.expr()?);
            if self.eat_op(close) {
                return Ok(out);
            }
            self.expect_op(",")?;
            if self.eat_op(close) {
                return Ok(out);
            }
        }
    }

    fn postfix(&mut self) -> Result<Expr, ExprError> {
        let mut e = self.primary()?;
        loop {
            if self.eat_op(".") {
                let Some(Tok::Name(name)) = self.peek().cloned() else {
                    return Err(self.unexpected("a name after `.`"));
                };
                self.pos += 1;
                if self.eat_op("(") {
                    let args = self.args(")")?;
                    e = Expr::Method(Box::new(e), name, args);
                } else {
                    e = Expr::Attr(Box::new(e), name);
                }
            } else if self.eat_op("[") {
                self.enter()?;
                let start = if self.is_op(":") {
                    None
                } else {
                    Some(Box::new(self.expr()?))
                };
                if self.eat_op(":") {
                    let end = if self.is_op("]") {
                        None
                    } else {
                        Some(Box::new(self.expr()?))
                    };
                    self.expect_op("]")?;
                    e = Expr::Slice(Box::new(e), start, end);
                } else {
                    self.expect_op("]")?;
                    let Some(i) = start else {
                        return Err(self.unexpected("an index"));
                    };
                    e = Expr::Index(Box::new(e), i);
                }
                self.depth -= 1;
            } else if self.is_op("(") {
                let Expr::Name(n) = &e else {
                    return Err(err(format!(
                        "only the functions {} can be called (character {})",
                        FUNCTIONS.join(", "),
                        self.at()
                    )));
                };
                let Some(f) = FUNCTIONS.iter().find(|f| **f == n.as_str()) else {
                    return Err(err(format!(
                        "unknown function `{n}`; the functions are {}",
                        FUNCTIONS.join(", ")
                    )));
                };
                self.pos += 1;
                let args = self.args(")")?;
                e = Expr::Call(f, args);
            } else {
                return Ok(e);
            }
        }
    }

    fn primary(&mut self) -> Result<Expr, ExprError> {
        let Some(t) = self.peek().cloned() else {
            return Err(self.unexpected("an expression"));
        };
        self.pos += 1;
        Ok(match t {
            Tok::Int(n) => Expr::Lit(Value::from(n)),
            Tok::Float(f) => Expr::Lit(Number::from_f64(f).map_or(Value::Null, Value::Number)),
            Tok::Str(s) => {
                // Adjacent string literals join, as in Python.
                let mut s = s;
                while let Some(Tok::Str(more)) = self.peek().cloned() {
                    self.pos += 1;
                    s.push_str(&more);
                }
                Expr::Lit(Value::String(s))
            }
            Tok::Name(n) => match n.as_str() {
                "True" | "true" => Expr::Lit(Value::Bool(true)),
                "False" | "false" => Expr::Lit(Value::Bool(false)),
                "None" | "none" => Expr::Lit(Value::Null),
                "and" | "or" | "if" | "else" | "in" | "is" | "not" => {
                    self.pos -= 1;
                    return Err(self.unexpected("an expression"));
                }
                "lambda" | "import" | "for" => {
                    return Err(err(format!("`{n}` is not part of the language")));
                }
                _ => Expr::Name(n),
            },
            Tok::Op("(") => {
                self.enter()?;
                if self.eat_op(")") {
                    self.depth -= 1;
                    return Ok(Expr::List(Vec::new()));
                }
                let first = self.expr()?;
                let out = if self.eat_op(",") {
                    let mut items = vec![first];
                    items.extend(self.args(")")?);
                    Expr::List(items)
                } else {
                    self.expect_op(")")?;
                    first
                };
                self.depth -= 1;
                out
            }
            Tok::Op("[") => {
                self.enter()?;
                let items = self.args("]")?;
                self.depth -= 1;
                Expr::List(items)
            }
            Tok::Op("{") => {
                self.enter()?;
                let mut items = Vec::new();
                if !self.eat_op("}") {
                    loop {
                        let k = self.expr()?;
                        self.expect_op(":")?;
                        let v = self.expr()?;
                        items.push((k, v));
                        if self.eat_op("}") {
                            break;
                        }
                        self.expect_op(",")?;
                        if self.eat_op("}") {
                            break;
                        }
                    }
                }
                self.depth -= 1;
                Expr::Dict(items)
            }
            other => {
                self.pos -= 1;
                return Err(err(format!(
                    "unexpected {} at character {}, expected an expression",
                    describe(&other),
                    self.at()
                )));
            }
        })
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Int(n) => format!("number `{n}`"),
        Tok::Float(f) => format!("number `{f}`"),
        Tok::Str(_) => "string".into(),
        Tok::Name(n) => format!("`{n}`"),
        Tok::Op(o) => format!("`{o}`"),
    }
}

/// Parses `src` into a program, or says what is wrong and where.
pub fn parse(src: &str) -> Result<Program, ExprError> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
        len: src.len(),
    };
    let e = p.expr()?;
    if p.pos < p.toks.len() {
        return Err(p.unexpected("the end of the expression"));
    }
    Ok(Program(e))
}

// ---------------------------------------------------------------------------------------
// Values

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
enum Kind {
    Null,
    Bool,
    Num,
    Str,
    List,
    Map,
}

impl<'a> V<'a> {
    fn kind(&self) -> Kind {
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

    fn type_name(&self) -> &'static str {
        match self.kind() {
            Kind::Null => "None",
            Kind::Bool => "a boolean",
            Kind::Num => "a number",
            Kind::Str => "a string",
            Kind::List => "a list",
            Kind::Map => "a map",
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            V::J(Value::String(s)) => Some(s),
            V::Str(s) => Some(s.as_ref()),
            _ => None,
        }
    }

    fn as_bool(&self) -> Option<bool> {
        match self {
            V::J(Value::Bool(b)) | V::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// A number as an integer when it is one, else a float.
    fn num(&self) -> Option<Num> {
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

    fn truthy(&self) -> bool {
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
    fn items(&self) -> Option<Vec<V<'a>>> {
        match self {
            V::J(Value::Array(a)) => Some(a.iter().map(V::J).collect()),
            V::J(Value::Object(m)) => Some(m.keys().map(|k| V::Str(k.as_str().into())).collect()),
            V::List(l) => Some(l.as_ref().clone()),
            V::Map(m) => Some(m.iter().map(|(k, _)| V::Str(k.as_str().into())).collect()),
            _ => None,
        }
    }

    fn len(&self) -> Option<usize> {
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

    fn key(&self, k: &str) -> Option<V<'a>> {
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
    fn json_limited(&self, bytes: usize) -> Result<Value, ExprError> {
        let mut budget = (MAX_ITEMS, bytes);
        self.json_within(&mut budget)
    }

    fn json_within(&self, budget: &mut (usize, usize)) -> Result<Value, ExprError> {
        if budget.0 == 0 {
            return Err(err(format!(
                "expression result is too large (more than {MAX_ITEMS} values)"
            )));
        }
        budget.0 -= 1;
        let text = match self {
            V::Str(s) => s.len(),
            V::J(Value::String(s)) => s.len(),
            // A value of state is copied whole: count it by its size.
            V::J(v @ (Value::Array(_) | Value::Object(_))) => v.to_string().len(),
            _ => 0,
        };
        if text > budget.1 {
            return Err(err(format!(
                "expression result is too large (more than {} MiB written out)",
                (MEMORY >> 20).max(1)
            )));
        }
        budget.1 -= text;
        Ok(match self {
            V::J(v) => (*v).clone(),
            V::Null => Value::Null,
            V::Bool(b) => Value::Bool(*b),
            V::Int(i) => Value::from(*i),
            V::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            V::Str(s) => Value::String(s.to_string()),
            V::List(l) => Value::Array(
                l.iter()
                    .map(|v| v.json_within(budget))
                    .collect::<Result<_, _>>()?,
            ),
            V::Map(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| Ok((k.clone(), v.json_within(budget)?)))
                    .collect::<Result<_, ExprError>>()?,
            ),
        })
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

fn float_text(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e16 {
        format!("{f:.1}")
    } else {
        format!("{f}")
    }
}

#[derive(Clone, Copy)]
enum Num {
    I(i64),
    F(f64),
}

impl Num {
    fn f(self) -> f64 {
        match self {
            Num::I(i) => i as f64,
            Num::F(f) => f,
        }
    }
}

fn float<'a>(f: f64) -> Result<V<'a>, ExprError> {
    if f.is_finite() {
        Ok(V::Float(f))
    } else {
        Err(err("the result is not a finite number"))
    }
}

// ---------------------------------------------------------------------------------------
// Evaluation

/// What one evaluation may still spend.
struct Meter {
    steps: u64,
    work: u64,
    memory: usize,
}

impl Meter {
    fn step(&mut self) -> Result<(), ExprError> {
        if self.steps == 0 {
            return Err(err(format!("expression ran out of fuel ({STEPS} steps)")));
        }
        self.steps -= 1;
        Ok(())
    }

    fn work(&mut self, units: usize) -> Result<(), ExprError> {
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
    fn text(&mut self, bytes: usize) -> Result<(), ExprError> {
        if bytes > MAX_STRING {
            return Err(err(format!(
                "expression result is too large (a string over {} MiB)",
                MAX_STRING >> 20
            )));
        }
        self.build(bytes)
    }

    /// Charges a list about to be built.
    fn list(&mut self, items: usize) -> Result<(), ExprError> {
        if items > MAX_ITEMS {
            return Err(err(format!(
                "expression result is too large (a list over {MAX_ITEMS} items)"
            )));
        }
        self.build(items.saturating_mul(std::mem::size_of::<V>()))
    }

    /// Charges a value about to be built (`bytes` long).
    fn build(&mut self, bytes: usize) -> Result<(), ExprError> {
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

struct Eval<'n, 'm> {
    names: &'n dyn Names,
    m: &'m mut Meter,
}

fn type_error(op: &str, a: &V, b: &V) -> ExprError {
    err(format!(
        "cannot apply `{op}` to {} and {}",
        a.type_name(),
        b.type_name()
    ))
}

impl<'n> Eval<'n, '_> {
    fn eval(&mut self, e: &Expr) -> Result<V<'n>, ExprError> {
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

    fn index(&mut self, b: &V<'n>, i: &V<'n>) -> Result<V<'n>, ExprError> {
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

    fn slice(
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

    fn equal(&mut self, a: &V<'n>, b: &V<'n>) -> Result<bool, ExprError> {
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
                let (x, y) = (a.items().unwrap_or_default(), b.items().unwrap_or_default());
                if x.len() != y.len() {
                    return Ok(false);
                }
                for (p, q) in x.iter().zip(&y) {
                    if !self.equal(p, q)? {
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

    fn order(&mut self, a: &V<'n>, b: &V<'n>, op: &str) -> Result<std::cmp::Ordering, ExprError> {
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

    fn contains(&mut self, hay: &V<'n>, needle: &V<'n>) -> Result<bool, ExprError> {
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

    fn compare(&mut self, op: Cmp, a: &V<'n>, b: &V<'n>) -> Result<bool, ExprError> {
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

    fn repeat(&mut self, v: &V<'n>, n: &V<'n>) -> Result<V<'n>, ExprError> {
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

    fn binary(&mut self, op: Bin, a: V<'n>, b: V<'n>) -> Result<V<'n>, ExprError> {
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
                let mut x = a.items().unwrap_or_default();
                let y = b.items().unwrap_or_default();
                self.m.list(x.len() + y.len())?;
                x.extend(y);
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

// ---------------------------------------------------------------------------------------
// Functions and methods

fn arity(name: &str, args: &[V], min: usize, max: usize) -> Result<(), ExprError> {
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

fn text_arg<'x>(name: &str, v: &'x V) -> Result<&'x str, ExprError> {
    v.as_str()
        .ok_or_else(|| err(format!("{name}() needs a string, not {}", v.type_name())))
}

impl<'n> Eval<'n, '_> {
    fn call(&mut self, f: &str, args: Vec<V<'n>>) -> Result<V<'n>, ExprError> {
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

    fn method(&mut self, b: V<'n>, name: &str, args: Vec<V<'n>>) -> Result<V<'n>, ExprError> {
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

    fn string_method(&mut self, s: &str, name: &str, args: Vec<V<'n>>) -> Result<V<'n>, ExprError> {
        self.m.work(s.len() / 16 + 1)?;
        let chars_arg = |args: &[V]| -> Result<Option<String>, ExprError> {
            match args.first() {
                None => Ok(None),
                Some(V::Null) | Some(V::J(Value::Null)) => Ok(None),
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
            "isdigit" | "isnumeric" => flag(!s.is_empty() && s.chars().all(|c| c.is_numeric())),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(src: &str, state: &Map<String, Value>) -> Result<Value, ExprError> {
        parse(src)?.eval(state)?.to_json()
    }

    /// The hostile corpus: escapes, resource bombs and numeric edge cases. Every one is
    /// refused at parse time or fails (or finishes) within the evaluation budget.
    #[test]
    fn a_hostile_corpus_is_refused_or_bounded() {
        let Value::Object(state) = json!({
            "s": "x".repeat(1000), "big": (0..10_000).collect::<Vec<_>>(),
            "m": {"k": 1}, "__loop_l": 3, "n": 100000000
        }) else {
            unreachable!()
        };
        let mut corpus: Vec<String> = Vec::new();
        for n in [
            "1000000",
            "100000000",
            "2000000000",
            "n",
            "9223372036854775807",
            "-1",
        ] {
            for base in [
                "'a'",
                "'ab'",
                "[0]",
                "[0, 1]",
                "s",
                "big",
                "[[0] * 1000]",
                "(1,)",
            ] {
                corpus.push(format!("{base} * {n}"));
                corpus.push(format!("{n} * {base}"));
                corpus.push(format!("len({base} * {n})"));
                corpus.push(format!("{base} * {n} == {base} * {n}"));
                corpus.push(format!("max({base} * {n})"));
                corpus.push(format!("0 in {base} * {n}"));
            }
            corpus.push(format!("' '.join(['x'] * {n})"));
            corpus.push(format!("s.replace('x', 'y' * {n})"));
            corpus.push(format!("('x' * 1000).replace('', 'abc' * {n})"));
        }
        for e in [
            "__import__('os')",
            "().__class__.__bases__",
            "''.__class__",
            "m.__class__",
            "__loop_l",
            "lambda: 1",
            "[x for x in big]",
            "{% if 1 %}",
            "open('/etc/passwd')",
            "range(1000000000)",
            "eval('1')",
            "exec('1')",
            "getattr(m, 'k')",
            "s.format(1)",
            "'{:>999999999}'.format(1)",
            "m.get.__self__",
            "self",
            "s.__len__()",
            "big.append(1)",
            "big.pop()",
            "s.encode()",
            "globals()",
            "x is None",
            "1 if 1",
            "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))",
            "1e308 * 10",
            "-1e308 * 10",
            "2 ** 64",
            "10 ** 100",
            "2 ** 0.5 ** 1000",
            "(-8) ** 0.5",
            "9223372036854775807 + 1",
            "-9223372036854775807 - 2",
            "9223372036854775807 * 2",
            "1 / 0",
            "1 // 0",
            "5 % 0",
            "1.0 / 0.0",
            "float('nan')",
            "float('inf')",
            "float('-inf') < 0",
            "float('1e400')",
            "int('9' * 30)",
            "int(1e300)",
            "round(1e400)",
            "round(1e19)",
            "abs(-9223372036854775807 - 1)",
            "-(-9223372036854775807 - 1)",
            "'a' < 3",
            "[1] < 'a'",
            "m < m",
            "None < 1",
            "len(5)",
            "big[100000]",
            "big[-100000]",
            "s[10 ** 18]",
            "m['missing']",
            "m.missing",
            "missing",
            "missing.x",
            "min()",
            "max([])",
            "str(1, 2)",
            "int()",
            "s.split('')",
            "s.count('x') ** s.count('x')",
            "big == big and big == big and big == big and big == big and big == big",
            "[big, big, big, big, big] == [big, big, big, big, big]",
            "s * 1000",
            "s * 1048",
            "s * 1049",
            "str(big * 100)",
            "big + big + big + big + big + big + big + big + big + big + big + big",
            "' '.join([s] * 1000)",
            "' '.join([s] * 2000)",
            // Found by the fuzzer: a 1 MB string repeated 51,076 times (shared, not copied).
            "226*226*[2226*226*[2]~s[2]]~s[2]~s",
            "226*226*[2226*226*[2]~s[2]]",
            "[2226*226*[2]~s] + [2226*226*[2]~s] + [2226*226*[2]~s] + [2226*226*[2]~s]",
            "str([2226*226*[2]~s] * 100)",
        ] {
            corpus.push(e.to_string());
        }
        let depth = format!("{}1{}", "(".repeat(200), ")".repeat(200));
        corpus.push(depth);
        corpus.push("not ".repeat(200) + "1");
        corpus.push("-".repeat(500) + "1");
        corpus.push("1 + ".repeat(240) + "1");
        corpus.push("s ~ ".repeat(240) + "s");
        assert!(corpus.len() >= 300, "{} expressions", corpus.len());
        let (mut refused, mut failed, mut ran) = (0, 0, 0);
        for src in &corpus {
            if std::env::var_os("WEIR_CORPUS_TRACE").is_some() {
                eprintln!("{src}");
            }
            match parse(src) {
                Err(_) => refused += 1,
                Ok(p) => match p.eval(&state).and_then(|v| v.to_json()) {
                    Err(e) => {
                        assert!(!e.message.is_empty());
                        failed += 1;
                    }
                    Ok(v) => {
                        // What runs to the end stays within the budget.
                        let size = serde_json::to_string(&v).unwrap().len();
                        assert!(size <= MEMORY + MAX_ITEMS * 8, "{src}: {size} bytes");
                        ran += 1;
                    }
                },
            }
        }
        eprintln!(
            "hostile corpus: {} expressions: {refused} refused at parse, {failed} failed cleanly, {ran} finished within the budget",
            corpus.len()
        );
        // The escapes never reach anything: none of them evaluates.
        for e in [
            "__import__('os')",
            "().__class__",
            "__loop_l",
            "open('/etc/passwd')",
            "eval('1')",
        ] {
            assert!(run(e, &state).is_err(), "{e}");
        }
    }

    #[test]
    fn python_semantics() {
        let Value::Object(st) = json!({"x": 7, "name": "Ada", "items": [3, 1, 2], "m": {"a": 1}})
        else {
            unreachable!()
        };
        for (src, want) in [
            ("-7 // 2", json!(-4)),
            ("-7 % 3", json!(2)),
            ("7 / 2", json!(3.5)),
            ("2 ** 10", json!(1024)),
            ("0 < x < 10", json!(true)),
            ("1 < x > 10", json!(false)),
            ("'d' in name.lower()", json!(true)),
            ("'a' in m", json!(true)),
            ("3 not in items", json!(false)),
            ("name ~ '-' ~ x", json!("Ada-7")),
            ("str(1.0) ~ str(None) ~ str(True)", json!("1.0NoneTrue")),
            ("'yes' if x > 5 else 'no'", json!("yes")),
            ("items[-1]", json!(2)),
            ("name[1:]", json!("da")),
            ("items[:2]", json!([3, 1])),
            ("max(items) - min(items)", json!(2)),
            ("m.get('b', 5)", json!(5)),
            ("' a b '.split()", json!(["a", "b"])),
            ("'a,b'.split(',')", json!(["a", "b"])),
            ("'Ada Lovelace'.startswith(('X', 'Ada'))", json!(true)),
            ("x and 'y' or 'z'", json!("y")),
            ("[] or 'empty'", json!("empty")),
            ("{'k': x}['k']", json!(7)),
            ("len(m.items())", json!(1)),
            ("round(2.567, 2)", json!(2.57)),
            // Python rounds half to even.
            (
                "[round(0.5), round(1.5), round(2.5), round(-2.5)]",
                json!([0, 2, 2, -2]),
            ),
            ("int(' 42 ') + int(3.9)", json!(45)),
            ("'x' + 'y' == 'xy' and [1] + [2] == [1, 2]", json!(true)),
            ("1 == 1.0", json!(true)),
            ("'hello world'.title()", json!("Hello World")),
        ] {
            assert_eq!(run(src, &st).unwrap(), want, "{src}");
        }
    }
}
