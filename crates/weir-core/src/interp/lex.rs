//! The lexer: numbers, strings, names and operators, each with its byte offset.

use super::err;
use crate::expr::ExprError;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Int(i64),
    Float(f64),
    Str(String),
    Name(String),
    Op(&'static str),
}

pub(super) const OPS: &[&str] = &[
    "**", "//", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ",", ":", ".", "~", "+", "-",
    "*", "/", "%", "<", ">",
];

#[expect(
    clippy::too_many_lines,
    reason = "the lexer's one loop with an arm per token class; split, each piece would need the cursor and the token list passed around"
)]
pub(super) fn lex(src: &str) -> Result<Vec<(Tok, usize)>, ExprError> {
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
            if i < b.len() && b[i] == b'.' && b.get(i + 1).is_none_or(u8::is_ascii_digit) {
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
