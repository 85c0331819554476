//! The parser: tokens to a syntax tree of the whitelisted forms, or a located error.

use serde_json::{Number, Value};

use super::err;
use super::lex::{Tok, lex};
use crate::expr::ExprError;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Bin {
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
pub(super) enum Cmp {
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
pub(super) const FUNCTIONS: &[&str] = &[
    "str", "int", "float", "len", "bool", "min", "max", "abs", "round",
];

#[derive(Debug, Clone)]
pub(super) enum Expr {
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
pub struct Program(pub(super) Expr);

/// Deepest nesting the parser accepts.
pub(super) const MAX_DEPTH: usize = 64;

pub(super) struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    depth: usize,
    len: usize,
}

impl Parser {
    pub(super) fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(t, _)| t)
    }

    pub(super) fn at(&self) -> usize {
        self.toks.get(self.pos).map_or(self.len, |(_, p)| *p) + 1
    }

    pub(super) fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Some(Tok::Op(o)) if *o == op)
    }

    pub(super) fn is_name(&self, n: &str) -> bool {
        matches!(self.peek(), Some(Tok::Name(x)) if x == n)
    }

    pub(super) fn eat_op(&mut self, op: &str) -> bool {
        if self.is_op(op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn eat_name(&mut self, n: &str) -> bool {
        if self.is_name(n) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn expect_op(&mut self, op: &str) -> Result<(), ExprError> {
        if self.eat_op(op) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("`{op}`")))
        }
    }

    pub(super) fn unexpected(&self, wanted: &str) -> ExprError {
        match self.peek() {
            None => err(format!("unexpected end of input, expected {wanted}")),
            Some(t) => err(format!(
                "unexpected {} at character {}, expected {wanted}",
                describe(t),
                self.at()
            )),
        }
    }

    pub(super) fn enter(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(err(format!(
                "expression is nested more than {MAX_DEPTH} levels deep"
            )));
        }
        Ok(())
    }

    pub(super) fn expr(&mut self) -> Result<Expr, ExprError> {
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

    pub(super) fn or(&mut self) -> Result<Expr, ExprError> {
        let mut l = self.and()?;
        while self.eat_name("or") {
            l = Expr::Or(Box::new(l), Box::new(self.and()?));
        }
        Ok(l)
    }

    pub(super) fn and(&mut self) -> Result<Expr, ExprError> {
        let mut l = self.not()?;
        while self.eat_name("and") {
            l = Expr::And(Box::new(l), Box::new(self.not()?));
        }
        Ok(l)
    }

    pub(super) fn not(&mut self) -> Result<Expr, ExprError> {
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

    pub(super) fn compare(&mut self) -> Result<Expr, ExprError> {
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

    pub(super) fn concat(&mut self) -> Result<Expr, ExprError> {
        let mut l = self.add()?;
        while self.eat_op("~") {
            l = Expr::Bin(Bin::Concat, Box::new(l), Box::new(self.add()?));
        }
        Ok(l)
    }

    pub(super) fn add(&mut self) -> Result<Expr, ExprError> {
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

    pub(super) fn mul(&mut self) -> Result<Expr, ExprError> {
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

    pub(super) fn unary(&mut self) -> Result<Expr, ExprError> {
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

    pub(super) fn power(&mut self) -> Result<Expr, ExprError> {
        let base = self.postfix()?;
        if self.eat_op("**") {
            self.enter()?;
            let exp = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Bin(Bin::Pow, Box::new(base), Box::new(exp)));
        }
        Ok(base)
    }

    pub(super) fn args(&mut self, close: &str) -> Result<Vec<Expr>, ExprError> {
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

    pub(super) fn postfix(&mut self) -> Result<Expr, ExprError> {
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

    #[expect(
        clippy::too_many_lines,
        reason = "one arm per primary expression form (literal, name, call, list, map, lambda, group)"
    )]
    pub(super) fn primary(&mut self) -> Result<Expr, ExprError> {
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

pub(super) fn describe(t: &Tok) -> String {
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
