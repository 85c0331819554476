//! The SQLite store (embedded default): WAL journal, explicit statements, one `BEGIN
//! IMMEDIATE` transaction per change. Every write of a drive is fenced by the run's epoch:
//! the first statement of its transaction is an `UPDATE … WHERE id = ? AND epoch = ?` that
//! also reserves the event sequence numbers, so a stale driver's write changes nothing. A
//! drive's writes (a step commit, started steps, events, the end of the drive, lease
//! renewals) go to a dedicated writer thread (`writer.rs`, rusqlite, cached statements): one
//! hand-off per write; the other changes (create, claim, decide, cancel, prune, the
//! catalog) are jobs of the same writer, so one connection writes and SQLite's busy handler
//! arbitrates only between processes. Reads go to connections of their own (`readers.rs`).
//! One library, rusqlite, for all of it.

mod catalog;
mod drive;
mod lifecycle;
mod readers;
mod reads;
mod rows;
mod running;
mod sql;
mod stmts;
mod store;
#[cfg(test)]
mod tests;
mod wal;
mod writer;

pub use store::Sqlite;
