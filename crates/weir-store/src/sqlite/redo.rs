//! The redo log of a SQLite store opened with full sync (`sqlite://path?sync=full`): a
//! step commit is durable once its record is on disk in this log, so SQLite itself commits
//! it without an fsync (`synchronous=NORMAL`), at the same time as the log's fsync runs on a
//! thread of its own. A durable commit then costs one fsync of a small append to a file of
//! fixed size instead of SQLite's statements followed by an fsync of the WAL frames they
//! wrote (five pages per step): the statements run while the disk flushes.
//!
//! Readers see nothing of the log: every write is in SQLite, committed, before its writer
//! hears back, as without the log. The log only matters after a power loss (or a crash of
//! the machine) that took SQLite's unsynced WAL frames with it: the next open replays the
//! records SQLite does not have. SQLite keeps the number of the last record it applied
//! (`redo_applied`, migration 16) in the same transaction as the record's writes, and the
//! WAL survives a power loss as a prefix of its transactions, so what it lost is exactly the
//! records after that number, which the log has.
//!
//! The file (`<db>-redo`) is [`CAPACITY`] bytes, written with zeros when it is made, so an
//! append changes no file size and its fsync flushes the data alone. A header page holds the
//! log's generation; records follow it, each with its generation, number, length and CRC.
//! When the log is full it starts over: the WAL is fsynced (everything the log covered is
//! then in SQLite on disk) and the generation goes up, which makes the old records stale.
//! One process at a time owns a log (an exclusive lock on the file); another one that opens
//! the database meanwhile commits with `synchronous=FULL` instead.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rusqlite::Connection;
use weir_core::store::StoreError;

use super::writer::backend;

/// The log file's size.
pub const CAPACITY: u64 = 4 << 20;
/// Records start after the header page.
const START: u64 = 4096;
const HEADER_MAGIC: &[u8; 8] = b"weirredo";
/// The format of the records' payloads; a log of another format is not replayed.
const FORMAT: u32 = 1;
const RECORD_MAGIC: u32 = 0x5752_4431;
/// magic, length, generation, number, CRC.
const RECORD_HEAD: usize = 4 + 4 + 8 + 8 + 4;

/// The log's path beside the database.
pub fn path_of(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-redo");
    PathBuf::from(p)
}

pub struct RedoLog {
    file: Arc<File>,
    /// The database's WAL, fsynced when the log starts over.
    wal: PathBuf,
    generation: u64,
    next_lsn: u64,
    offset: u64,
    /// A record being built (kept allocated).
    buf: Vec<u8>,
    syncer: Syncer,
    /// Asked of the syncer by the last append, not yet waited for.
    asked: Option<u64>,
    /// An I/O error made the log unusable: writes are then made durable by an fsync of the
    /// WAL instead.
    broken: bool,
}

/// One record found by [`RedoLog::open`]: its number and payload.
pub struct Found {
    pub lsn: u64,
    pub payload: Vec<u8>,
}

impl RedoLog {
    /// Opens (or makes) the log of the database at `db`, and returns it with the records of
    /// its current generation numbered above `applied`, for the caller to replay before the
    /// first write. `None`: another process owns the log.
    pub fn open(db: &Path, applied: u64) -> Result<Option<(Self, Vec<Found>)>, StoreError> {
        let path = path_of(db);
        let err = |what: &str, e: std::io::Error| {
            StoreError::Backend(format!("redo log {}: {what}: {e}", path.display()))
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| err("open", e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(e)) => return Err(err("lock", e)),
        }
        let len = file.metadata().map_err(|e| err("stat", e))?.len();
        let mut found = Vec::new();
        let mut generation = 0;
        let mut last = applied;
        if len < CAPACITY {
            // New (or cut short by a crash while it was being made): zeros to its full size.
            let zeros = vec![0u8; 1 << 20];
            let mut at = 0;
            while at < CAPACITY {
                file.write_all_at(&zeros, at).map_err(|e| err("write", e))?;
                at += zeros.len() as u64;
            }
            file.sync_all().map_err(|e| err("fsync", e))?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| err("fsync its folder", e))?;
            }
        } else if let Some(g) = read_header(&file).map_err(|e| err("read", e))? {
            generation = g;
            let mut offset = START;
            let mut seen = applied;
            while let Some((lsn, payload, next)) =
                read_record(&file, offset, generation).map_err(|e| err("read", e))?
            {
                seen = seen.max(lsn);
                // The records SQLite lacks follow the last one it applied, in order.
                if lsn == last + 1 {
                    last = lsn;
                    found.push(Found { lsn, payload });
                }
                offset = next;
            }
            // No number is used twice, even one of a record SQLite never got.
            last = last.max(seen);
        }
        let syncer = Syncer::spawn(Arc::new(file.try_clone().map_err(|e| err("open", e))?))
            .map_err(|e| err("start its thread", e))?;
        let log = RedoLog {
            file: Arc::new(file),
            wal: {
                let mut p = db.as_os_str().to_owned();
                p.push("-wal");
                PathBuf::from(p)
            },
            generation,
            next_lsn: last + 1,
            offset: CAPACITY,
            buf: Vec::new(),
            syncer,
            asked: None,
            broken: false,
        };
        Ok(Some((log, found)))
    }

    /// Appends a record of `payload` and starts its fsync; its number, for the applying
    /// transaction's `redo_applied`. `None`: not logged (larger than the log, or the log is
    /// broken); the caller makes the write durable with [`sync_wal`](Self::sync_wal).
    pub fn append(&mut self, payload: &[u8]) -> Option<u64> {
        let len = RECORD_HEAD + payload.len();
        if self.broken || len as u64 > CAPACITY - START {
            return None;
        }
        if self.offset + len as u64 > CAPACITY && self.start_over().is_err() {
            self.broken = true;
            return None;
        }
        let lsn = self.next_lsn;
        self.buf.clear();
        self.buf.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
        self.buf
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(&self.generation.to_le_bytes());
        self.buf.extend_from_slice(&lsn.to_le_bytes());
        self.buf
            .extend_from_slice(&crc(self.generation, lsn, payload).to_le_bytes());
        self.buf.extend_from_slice(payload);
        if self.file.write_all_at(&self.buf, self.offset).is_err() {
            self.broken = true;
            return None;
        }
        self.offset += len as u64;
        self.next_lsn += 1;
        self.asked = Some(self.syncer.ask());
        Some(lsn)
    }

    /// Waits for the fsync the last append started.
    pub fn wait(&mut self) -> Result<(), StoreError> {
        let Some(ticket) = self.asked.take() else {
            return Ok(());
        };
        self.syncer.wait(ticket).map_err(|e| {
            self.broken = true;
            StoreError::Backend(format!("redo log fsync: {e}"))
        })
    }

    /// Makes every write SQLite has committed durable: an fsync of its WAL. (A checkpoint
    /// under `synchronous=NORMAL` syncs what it copies into the database before the WAL
    /// starts over, so the WAL's frames are all that may not be on disk yet.)
    pub fn sync_wal(&self) -> Result<(), StoreError> {
        match File::open(&self.wal) {
            Ok(f) => f.sync_data().map_err(backend),
            // No WAL: every commit went into the database through a checkpoint, synced.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(backend(e)),
        }
    }

    /// Makes the records written so far stale, once SQLite has all of them on disk: the
    /// next record goes at the start, under a new generation. Also the way to drop a
    /// record whose writes SQLite did not all keep (a write of its group failed).
    pub fn start_over(&mut self) -> Result<(), StoreError> {
        let started = self.wait().and_then(|()| self.sync_wal()).and_then(|()| {
            let next = self.generation + 1;
            let mut head = Vec::with_capacity(24);
            head.extend_from_slice(HEADER_MAGIC);
            head.extend_from_slice(&FORMAT.to_le_bytes());
            head.extend_from_slice(&next.to_le_bytes());
            head.extend_from_slice(&crc32fast::hash(&head).to_le_bytes());
            // The new header is on disk before any record of its generation is written.
            self.file
                .write_all_at(&head, 0)
                .and_then(|()| self.file.sync_data())
                .map_err(backend)?;
            self.generation = next;
            self.offset = START;
            Ok(())
        });
        if started.is_err() {
            self.broken = true;
        }
        started
    }
}

/// The CRC of a record: its generation, number and payload.
fn crc(generation: u64, lsn: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&generation.to_le_bytes());
    h.update(&lsn.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// The header's generation, when the header is whole and of this format.
fn read_header(file: &File) -> std::io::Result<Option<u64>> {
    let mut head = [0u8; 24];
    file.read_exact_at(&mut head, 0)?;
    let ok = &head[..8] == HEADER_MAGIC
        && u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) == FORMAT
        && u32::from_le_bytes(head[20..24].try_into().expect("4 bytes"))
            == crc32fast::hash(&head[..20]);
    Ok(ok.then(|| u64::from_le_bytes(head[12..20].try_into().expect("8 bytes"))))
}

/// The record at `offset`, when there is a whole one of `generation`: its number, payload
/// and the next record's offset.
fn read_record(
    file: &File,
    offset: u64,
    generation: u64,
) -> std::io::Result<Option<(u64, Vec<u8>, u64)>> {
    if offset + RECORD_HEAD as u64 > CAPACITY {
        return Ok(None);
    }
    let mut head = [0u8; RECORD_HEAD];
    file.read_exact_at(&mut head, offset)?;
    let word = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().expect("4 bytes"));
    let long = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().expect("8 bytes"));
    let len = word(4) as u64;
    let end = offset + RECORD_HEAD as u64 + len;
    if word(0) != RECORD_MAGIC || long(8) != generation || end > CAPACITY {
        return Ok(None);
    }
    let mut payload = vec![0u8; len as usize];
    file.read_exact_at(&mut payload, offset + RECORD_HEAD as u64)?;
    if crc(generation, long(16), &payload) != word(24) {
        return Ok(None);
    }
    Ok(Some((long(16), payload, end)))
}

/// The thread that fsyncs the log, so that SQLite's statements run meanwhile.
struct Syncer {
    shared: Arc<(Mutex<SyncState>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct SyncState {
    asked: u64,
    done: u64,
    failed: Option<String>,
    stop: bool,
}

impl Syncer {
    fn spawn(file: Arc<File>) -> std::io::Result<Self> {
        let shared = Arc::new((Mutex::new(SyncState::default()), Condvar::new()));
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("weir-redo-fsync".into())
            .spawn(move || {
                let (state, cv) = &*theirs;
                let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    while s.asked == s.done && !s.stop {
                        s = cv.wait(s).unwrap_or_else(|p| p.into_inner());
                    }
                    if s.asked == s.done {
                        return;
                    }
                    let target = s.asked;
                    drop(s);
                    let r = file.sync_data();
                    s = state.lock().unwrap_or_else(|p| p.into_inner());
                    s.done = target;
                    if let Err(e) = r {
                        s.failed = Some(e.to_string());
                    }
                    cv.notify_all();
                }
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Starts an fsync of everything written so far; the ticket to wait for.
    fn ask(&self) -> u64 {
        let (state, cv) = &*self.shared;
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.asked += 1;
        cv.notify_all();
        s.asked
    }

    fn wait(&self, ticket: u64) -> Result<(), String> {
        let (state, cv) = &*self.shared;
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        while s.done < ticket {
            s = cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        match s.failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        let (state, cv) = &*self.shared;
        state.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The number of the last record SQLite applied.
pub fn applied(conn: &Connection) -> Result<u64, StoreError> {
    conn.query_row("SELECT lsn FROM redo_applied WHERE id = 0", [], |r| {
        r.get::<_, i64>(0)
    })
    .map(|v| v as u64)
    .map_err(backend)
}

/// Records `lsn` as applied, in the transaction of its writes.
pub fn mark(conn: &Connection, lsn: u64) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE redo_applied SET lsn = ?1 WHERE id = 0")
        .and_then(|mut s| s.execute([lsn as i64]))
        .map(|_| ())
        .map_err(backend)
}
