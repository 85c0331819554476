//! A connection for the length of one group commit (or one job), with the statements its
//! writes prepare held between them. rusqlite's own statement cache hashes a statement's
//! SQL text on every take and again on every return; a group of a hundred writes takes the
//! same half-dozen statements hundreds of times, and that hashing was a tenth of the writer
//! thread's instructions (BENCHMARKS.md). Here each statement is taken from rusqlite's cache
//! once per group and found again by the address and length of its SQL text, a `&'static str`.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

use rusqlite::{CachedStatement, Connection, Statement};
use weir_core::store::StoreError;

use super::writer::backend;

type Key = (usize, usize);

pub struct Conn<'c> {
    conn: &'c Connection,
    /// Statements not in use, by the address and length of their SQL text.
    idle: RefCell<Vec<(Key, CachedStatement<'c>)>>,
}

impl<'c> Conn<'c> {
    pub fn new(conn: &'c Connection) -> Self {
        Self {
            conn,
            idle: RefCell::new(Vec::new()),
        }
    }

    /// The prepared statement for `sql`: the one an earlier write of this group used, or
    /// one from the connection's cache. Back with the others once the returned guard drops.
    pub fn prepare(&self, sql: &'static str) -> Result<Stmt<'_, 'c>, StoreError> {
        let key = (sql.as_ptr() as usize, sql.len());
        let held = {
            let mut idle = self.idle.borrow_mut();
            idle.iter()
                .position(|(k, _)| *k == key)
                .map(|i| idle.swap_remove(i).1)
        };
        let stmt = match held {
            Some(s) => s,
            None => self.conn.prepare_cached(sql).map_err(backend)?,
        };
        Ok(Stmt {
            stmt: Some(stmt),
            key,
            home: &self.idle,
        })
    }
}

impl Deref for Conn<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

/// A statement in use; it goes back to its group's idle list when dropped.
pub struct Stmt<'a, 'c> {
    stmt: Option<CachedStatement<'c>>,
    key: Key,
    home: &'a RefCell<Vec<(Key, CachedStatement<'c>)>>,
}

impl<'c> Deref for Stmt<'_, 'c> {
    type Target = Statement<'c>;

    fn deref(&self) -> &Statement<'c> {
        self.stmt.as_ref().expect("held until dropped")
    }
}

impl<'c> DerefMut for Stmt<'_, 'c> {
    fn deref_mut(&mut self) -> &mut Statement<'c> {
        self.stmt.as_mut().expect("held until dropped")
    }
}

impl Drop for Stmt<'_, '_> {
    fn drop(&mut self) {
        if let Some(s) = self.stmt.take() {
            self.home.borrow_mut().push((self.key, s));
        }
    }
}
