//! weir's expression interpreter (spec 002: "a sandboxed AST interpreter"): a parser for the
//! language of docs/expressions.md into a whitelisted syntax tree, and an evaluator over
//! JSON run state that is metered three ways, so no expression can run away:
//! - steps: every node of the tree evaluated costs one ([`STEPS`] at most),
//! - work: every element or byte an operation touches is charged ([`WORK`] at most),
//! - memory: every string or list an evaluation builds counts against [`MEMORY`] bytes.
//!
//! State is read in place (a value from state is borrowed, not copied), and nothing is
//! built lazily: a value is charged when it is made.

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

mod builtins;
mod eval;
mod lex;
mod parse;
#[cfg(test)]
mod tests;
mod value;

pub use parse::{Program, parse};
pub use value::{Names, V};
