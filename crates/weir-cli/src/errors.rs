//! The one place errors become exit codes and `--json` error codes.

use weir_engine::ErrorKind as Kind;

use crate::wiring;

/// The exit codes of `weir`.
pub mod exit {
    pub const FAILED: u8 = 1;
    pub const INVALID: u8 = 2;
    /// Already decided, driven elsewhere, or not in a state that allows the command.
    pub const CONFLICT: u8 = 5;
    /// Ctrl-C: the run was released for `weir resume`.
    pub const INTERRUPTED: u8 = 130;
}

/// The engine's kind of an error (an engine or store error), if it is one.
pub fn engine_kind(e: &anyhow::Error) -> Option<Kind> {
    e.downcast_ref::<weir_engine::Error>()
        .map(weir_engine::Error::kind)
        .or_else(|| {
            e.downcast_ref::<weir_core::store::StoreError>()
                .map(|s| weir_engine::Error::from(s.clone()).kind())
        })
}

/// The one place errors become exit codes.
pub fn exit_code_of(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<Usage>().is_some() || e.downcast_ref::<wiring::NoDatabase>().is_some() {
        return exit::INVALID;
    }
    match engine_kind(e) {
        Some(Kind::NotFound | Kind::InvalidInput) => exit::INVALID,
        Some(Kind::Conflict | Kind::LeaseLost) => exit::CONFLICT,
        _ => exit::FAILED,
    }
}

/// The `code` of a `--json` error: what kind of failure, for scripts to branch on.
pub fn error_code_of(e: &anyhow::Error) -> &'static str {
    if e.downcast_ref::<wiring::NoDatabase>().is_some() {
        return "no_database";
    }
    if e.downcast_ref::<Usage>().is_some() {
        return "usage";
    }
    match engine_kind(e) {
        Some(Kind::NotFound) => "not_found",
        Some(Kind::InvalidInput) => "invalid_input",
        Some(Kind::Conflict) => "conflict",
        Some(Kind::LeaseLost) => "lease_lost",
        Some(Kind::Store) => "store",
        None => "error",
    }
}

/// An error in how weir was called (bad input JSON, unknown run id): exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// An error and its causes on one line, `outer: cause: cause`, leaving out a cause whose
/// text is already there (a database library's error repeats its own source's message).
pub fn chain(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        // SQLite's own errors read `Error code 13: database or disk is full`.
        let told = match part.strip_prefix("Error code ") {
            Some(rest) => rest.split_once(": ").map_or(rest, |(_, m)| m),
            None => &part,
        };
        if text.contains(told) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cause_already_told_is_left_out() {
        let e = anyhow::Error::from(std::io::Error::other(
            "Error code 13: database or disk is full",
        ))
        .context("database or disk is full")
        .context("writing the step");
        assert_eq!(
            super::chain(&e),
            "writing the step: database or disk is full"
        );
    }
}
