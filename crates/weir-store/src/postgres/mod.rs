//! The Postgres store (scale-out, DESIGN §8): any number of `weir serve` and `weir worker`
//! processes share one database. `READ COMMITTED` throughout.
//!
//! - **Queue**: a small hot table (`queue`) holds a row per queued or leased run and nothing
//!   else; `visible_at` is when a row may be claimed (its enqueue time, or its lease's expiry),
//!   and two partial indexes serve the claim (expired leases first, then queued runs oldest
//!   first), which takes a batch with `FOR UPDATE SKIP LOCKED`.
//! - **Fencing**: every write of a drive is one statement whose first part is
//!   `UPDATE runs … WHERE id = $1 AND epoch = $2 AND status = 'running'`; the step rows,
//!   attempts, events and queue change only happen when that matched, so a stale driver's
//!   write changes nothing. A refusal leaves a `stale_write_refused` event. Heartbeats renew
//!   through the lease row (`queue … WHERE run_id = $1 AND epoch = $2`).
//! - **Durability**: step commits, claims, decisions and ends of drives commit with the
//!   server's `synchronous_commit`; writes that only make progress visible (a step's
//!   `running` row, a failed attempt, a heartbeat) use a pool with `synchronous_commit=off`,
//!   as SQLite commits them without a sync.
//! - **Wake-ups**: `NOTIFY` is sent by a task of its own, batched, from its own transaction,
//!   so it never serialises the commits of the hot path; `LISTEN` feeds [`RunStore::watch`].
//!   Workers and readers also poll: a lost notification only delays.

mod catalog;
mod claims;
mod lifecycle;
mod notify;
mod reads;
mod schema;
mod sql;
mod store;
#[cfg(test)]
mod tests;
mod write;

pub use notify::Faults;
pub use store::{Postgres, is_postgres_url};
