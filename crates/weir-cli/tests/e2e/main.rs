#![allow(
    clippy::too_many_lines,
    reason = "a test reads top to bottom as one story"
)]

//! End-to-end tests: the real `weir` binary on real workflow files, with fakes only at the
//! network edge (a loopback HTTP server standing in for providers, webhooks and APIs).

mod agents;
mod cli;
mod docs;
mod durability;
mod enrichment;
mod examples;
mod faults;
mod gates;
mod gateway;
mod hardening;
mod help;
mod hostile;
mod json_contract;
mod lifecycle;
mod machine;
mod newcomer;
mod otel;
mod pipeline;
mod postgres;
mod progress;
mod providers;
mod replay;
mod scheduling;
mod secrets;
mod serve;
mod streaming;
mod support;
mod testing;
mod tools;
mod trace;
mod triggers;
