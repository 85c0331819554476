#![allow(
    clippy::too_many_lines,
    reason = "a test reads top to bottom as one story"
)]

//! The HTTP API in process (`tower::ServiceExt::oneshot` on the real router over a real
//! SQLite store): authorisation on every route, and the behaviour a client sees.

mod auth;
mod openapi;
mod runs;
mod support;
mod tools_tokens;
mod workflows;
