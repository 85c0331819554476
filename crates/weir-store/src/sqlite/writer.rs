//! The SQLite store's writer: a rusqlite connection (two where the store's syncs fall back to
//! SQLite's `synchronous=FULL`: one synced, one with `synchronous=OFF` for writes that only
//! make progress visible) and a thread. Each write of
//! a drive is one job: a `BEGIN IMMEDIATE` transaction of cached prepared statements. When
//! the writer is idle a write runs in place, on the caller's thread; otherwise it goes to
//! the thread, which commits the writes queued together in one transaction (group commit).
//! Either way a write costs at most one hand-off to the thread and one back, where sqlx's
//! worker hands every statement's result back on its own (see BENCHMARKS.md). The
//! statements of those writes are in `drive.rs`.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use weir_core::store::{Fault, StoreError};

use super::stmts::Conn;
use super::wal::{self, Checkpointer, WalFile, Watched};

/// The connections a job may use.
pub struct Conns {
    pub synced: Connection,
    /// A connection with `synchronous=OFF` for the writes that only make progress visible,
    /// where the synced one commits with `FULL` (the store cannot sync its log itself).
    /// Else those writes go through the synced connection too, marked so that the store
    /// does not sync them ([`wal::visible_only`]): a second connection's commits made the
    /// first drop its whole page cache at its next transaction, and read its pages again
    /// (about 5% of a durable step: BENCHMARKS.md).
    unsynced: Option<Connection>,
}

impl Conns {
    /// Runs `f` with the connection for writes that only make progress visible.
    pub fn visible<T>(&mut self, f: impl FnOnce(&mut Connection) -> T) -> T {
        match &mut self.unsynced {
            Some(conn) => f(conn),
            None => wal::visible_only(|| f(&mut self.synced)),
        }
    }

    /// Runs `f` with the synced connection, or with the one for writes that only make
    /// progress visible.
    fn on<T>(&mut self, synced: bool, f: impl FnOnce(&mut Connection) -> T) -> T {
        if synced {
            f(&mut self.synced)
        } else {
            self.visible(f)
        }
    }
}

/// A grouped write: its statements, which may run twice (a group whose every write
/// succeeds commits without savepoints; when one fails, the group is rolled back and each
/// write runs again in a savepoint of its own), and the answer to its waiter, given once
/// the group committed (or failed to).
trait Grouped: Send {
    /// Runs the statements; whether to keep them.
    fn run(&mut self, conn: &Conn<'_>) -> bool;
    /// Answers the waiter: with the write's own result, or `failed` when the group failed.
    fn answer(self: Box<Self>, failed: Option<&StoreError>);
}

type GroupedJob = Box<dyn Grouped>;

struct Pending<T, F> {
    f: F,
    result: Option<Result<T, StoreError>>,
    tx: tokio::sync::oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Grouped for Pending<T, F>
where
    T: Send,
    F: FnMut(&Conn<'_>) -> Result<T, StoreError> + Send,
{
    fn run(&mut self, conn: &Conn<'_>) -> bool {
        let result = (self.f)(conn);
        let keep = result.is_ok();
        self.result = Some(result);
        keep
    }

    fn answer(self: Box<Self>, failed: Option<&StoreError>) {
        let Pending { f, result, tx } = *self;
        // The write's statements go before the answer: data they share with the waiter (a
        // fenced write's rows) is then freed by the waiter, off the writer's thread.
        drop(f);
        let _ = tx.send(match (failed, result) {
            (Some(e), _) => Err(e.clone()),
            (None, Some(result)) => result,
            (None, None) => Err(StoreError::backend(Fault::Other, "not run")),
        });
    }
}

/// Answers a job's waiter, with the job's own result or `failed`.
type Reply = Box<dyn FnOnce(Option<&StoreError>) + Send>;

/// A waiter to answer once what the job committed is on disk, and the error it gets
/// instead of its own result (its group failed).
enum Answer {
    Grouped(GroupedJob, Option<StoreError>),
    Run(Reply),
}

impl Answer {
    fn give(self, failed: Option<&StoreError>) {
        match self {
            Answer::Grouped(job, own) => job.answer(failed.or(own.as_ref())),
            Answer::Run(reply) => reply(failed),
        }
    }
}

fn give_all(answers: Vec<Answer>, failed: Option<&StoreError>) {
    for a in answers {
        a.give(failed);
    }
}

enum Job {
    /// Runs alone, with the writer's connection(s) (reads, claims, migrations of state).
    Run(Box<dyn FnOnce(&mut Conns) -> Reply + Send>),
    /// Writes that queue up together on one connection share one transaction (and, on the
    /// synced connection, one fsync): group commit.
    Grouped { synced: bool, job: GroupedJob },
}

/// How long the thread's writes wait for another connection's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The most writes one group commit takes.
const GROUP_MAX: usize = 256;

pub struct Writer {
    jobs: mpsc::Sender<Job>,
    /// The connections: held by the thread while it runs a job or a group, or by a caller
    /// that runs its write in place (`grouped`).
    conns: Arc<Mutex<Conns>>,
    /// Jobs sent to the thread and not yet taken by it.
    queued: Arc<AtomicUsize>,
    /// Syncs of the log going on (a write's in place, or the sync thread's): writes that
    /// come meanwhile go to the thread, to share the next sync, rather than each run in
    /// place and sync on its own.
    syncing: Arc<AtomicUsize>,
    /// Checkpoints the write-ahead log in the background once commits have grown it.
    checkpointer: Checkpointer,
    /// The log, synced by the store after the synced connection's commits (`full_sync`).
    wal: Option<Arc<WalFile>>,
}

/// The connections, for the thread. A job that panicked while holding them may have left
/// a transaction open: it is rolled back, so the next write starts clean.
fn lock(conns: &Mutex<Conns>) -> MutexGuard<'_, Conns> {
    conns.lock().unwrap_or_else(|poisoned| {
        let guard = poisoned.into_inner();
        for conn in std::iter::once(&guard.synced).chain(&guard.unsynced) {
            if !conn.is_autocommit() {
                let _ = control(conn, "ROLLBACK");
            }
        }
        conns.clear_poison();
        guard
    })
}

pub(super) use crate::backend;

pub(super) fn connect(path: &Path, synchronous: &str) -> Result<Connection, StoreError> {
    let c = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(backend)?;
    c.busy_timeout(BUSY_TIMEOUT).map_err(backend)?;
    c.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON;"
    ))
    .map_err(backend)?;
    c.set_prepared_statement_cache_capacity(64);
    super::running::register(&c)?;
    Ok(c)
}

impl Writer {
    /// Opens the connections (the database exists: sqlx created and migrated it) and starts
    /// the thread; it ends when the store is dropped.
    #[expect(
        clippy::too_many_lines,
        reason = "the writer's connections, its syncer and its thread's loop are set up together: the loop captures what the setup opened"
    )]
    pub fn open(path: &Path, full_sync: bool) -> Result<Self, StoreError> {
        // `full_sync`: the synced connection commits with NORMAL and the store syncs the log
        // after it (`wal.rs`); FULL itself only when the log file cannot be opened.
        let synced = connect(path, "NORMAL")?;
        let (wal, unsynced) = match full_sync.then(|| WalFile::open(path)) {
            Some(Ok(f)) => (Some(Arc::new(f)), None),
            Some(Err(_)) => {
                control(&synced, "PRAGMA synchronous = FULL")?;
                let unsynced = connect(path, "OFF")?;
                wal::watch(&unsynced, Watched::Unsynced)?;
                (None, Some(unsynced))
            }
            None => (None, None),
        };
        wal::watch(
            &synced,
            Watched::Synced {
                to_sync: wal.is_some(),
            },
        )?;
        let conns = Conns { synced, unsynced };
        let conns = Arc::new(Mutex::new(conns));
        let checkpointer = Checkpointer::start(path, if full_sync { "FULL" } else { "NORMAL" })?;
        let thread_checkpointer = checkpointer.clone();
        // The writer thread's answers that wait for the log's sync, given by a thread of
        // their own so that the writer goes on with the next group meanwhile.
        let syncing = Arc::new(AtomicUsize::new(0));
        let syncer = match &wal {
            Some(wal) => Some(start_syncer(wal.clone(), syncing.clone())?),
            None => None,
        };
        let thread_syncing = syncing.clone();
        let queued = Arc::new(AtomicUsize::new(0));
        let (jobs, rx) = mpsc::channel::<Job>();
        let (thread_conns, thread_queued) = (conns.clone(), queued.clone());
        std::thread::Builder::new()
            .name("weir-sqlite-writer".into())
            .spawn(move || {
                let mut next: Option<Job> = None;
                loop {
                    let job = match next.take() {
                        Some(j) => j,
                        None => match rx.recv() {
                            Ok(j) => {
                                thread_queued.fetch_sub(1, Ordering::AcqRel);
                                j
                            }
                            Err(_) => break,
                        },
                    };
                    let mut conns = lock(&thread_conns);
                    let answers = match job {
                        Job::Run(f) => vec![Answer::Run(f(&mut conns))],
                        Job::Grouped { mut synced, job } => {
                            // Every grouped write already waiting joins this one's
                            // transaction, in the order they came; each waiter hears back
                            // only once the group is committed, so a step is still durable
                            // before its driver goes on. A group with one synced write in it
                            // commits on the synced connection: the unsynced writes share its
                            // fsync instead of breaking the group in two.
                            let mut group = vec![job];
                            while group.len() < GROUP_MAX {
                                match rx.try_recv() {
                                    Ok(job) => {
                                        thread_queued.fetch_sub(1, Ordering::AcqRel);
                                        match job {
                                            Job::Grouped { synced: s, job } => {
                                                synced |= s;
                                                group.push(job);
                                            }
                                            other => {
                                                next = Some(other);
                                                break;
                                            }
                                        }
                                    }
                                    Err(_) => break,
                                }
                            }
                            conns.on(synced, |conn| commit_group(conn, group))
                        }
                    };
                    let commits = wal::take_commits();
                    let deferred = syncer.as_ref().filter(|_| commits.to_sync);
                    if deferred.is_some() {
                        // Counted before the connections are free: a write that takes them
                        // next goes to this thread, to share the coming sync.
                        thread_syncing.fetch_add(1, Ordering::AcqRel);
                    }
                    drop(conns);
                    thread_checkpointer.after(commits);
                    match deferred {
                        Some(syncer) => {
                            if let Err(mpsc::SendError(answers)) = syncer.send(answers) {
                                thread_syncing.fetch_sub(1, Ordering::AcqRel);
                                let stopped = StoreError::backend(
                                    Fault::Other,
                                    "the SQLite sync thread stopped",
                                );
                                give_all(answers, Some(&stopped));
                            }
                        }
                        None => give_all(answers, None),
                    }
                }
            })
            .map_err(backend)?;
        Ok(Self {
            jobs,
            conns,
            queued,
            syncing,
            checkpointer,
            wal,
        })
    }

    /// Commits `job` here when nothing is queued and the connections are free; else hands
    /// it back, for the thread.
    fn in_place(&self, synced: bool, job: GroupedJob) -> Option<GroupedJob> {
        if self.queued.load(Ordering::Acquire) != 0 || self.syncing.load(Ordering::Acquire) != 0 {
            return Some(job);
        }
        let Ok(mut conns) = self.conns.try_lock() else {
            return Some(job);
        };
        // Without waiting: while another connection (a pool transaction) holds the write
        // lock, the write goes to the thread, which waits for it. Waiting here would block
        // this runtime thread, which may be the one that drives that transaction on.
        let began = conns.on(synced, |conn| {
            let _ = conn.busy_timeout(Duration::ZERO);
            let began = control(conn, "BEGIN IMMEDIATE");
            let _ = conn.busy_timeout(BUSY_TIMEOUT);
            began
        });
        if began.is_err() {
            return Some(job);
        }
        let answers = conns.on(synced, |conn| commit_begun(conn, vec![job]));
        let commits = wal::take_commits();
        let wal = self.wal.as_ref().filter(|_| commits.to_sync);
        if wal.is_some() {
            self.syncing.fetch_add(1, Ordering::AcqRel);
        }
        drop(conns);
        self.checkpointer.after(commits);
        let synced = wal.and_then(|wal| {
            let failed = wal.sync().err();
            self.syncing.fetch_sub(1, Ordering::AcqRel);
            failed
        });
        give_all(answers, synced.as_ref());
        None
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.queued.fetch_add(1, Ordering::AcqRel);
        self.jobs.send(job).map_err(|_| {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            StoreError::backend(Fault::Other, "the SQLite writer thread stopped")
        })
    }

    /// Gives the log of a store whose commits it syncs (`full_sync`) its working size
    /// ([`wal::preallocate`]); nothing for a store that does not sync them.
    pub async fn preallocate_log(&self, path: &Path) -> Result<(), StoreError> {
        if self.wal.is_none() {
            return Ok(());
        }
        let path = path.to_path_buf();
        self.run(move |c| wal::preallocate(&c.synced, &path)).await
    }

    /// Runs `f` on the writer thread and waits for its result.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Conns) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Job::Run(Box::new(move |c| {
            let result = f(c);
            Box::new(move |failed: Option<&StoreError>| {
                let _ = tx.send(match failed {
                    Some(e) => Err(e.clone()),
                    None => result,
                });
            })
        })))?;
        rx.await
            .map_err(|_| StoreError::backend(Fault::Other, "the SQLite writer thread stopped"))?
    }

    /// Runs `f` in a group commit of synced writes (`synced`) or of writes that only make
    /// progress visible, which are not synced: an `Err` rolls back `f`'s statements alone;
    /// the answer comes once the group's transaction committed. When nothing is queued and
    /// the connection is free, the write runs here,
    /// as a group of one: no hand-off to the writer thread and back (two thread wake-ups,
    /// the larger part of a lone durable step's cost above its fsync). Writes that arrive
    /// meanwhile queue for the thread, which commits them together.
    pub async fn grouped<T: Send + 'static>(
        &self,
        synced: bool,
        f: impl FnMut(&Conn<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: GroupedJob = Box::new(Pending {
            f,
            result: None,
            tx,
        });
        if let Some(job) = self.in_place(synced, job) {
            self.send(Job::Grouped { synced, job })?;
        }
        rx.await
            .map_err(|_| StoreError::backend(Fault::Other, "the SQLite writer thread stopped"))?
    }
}

/// Runs one transaction-control statement through the statement cache (`execute_batch`
/// would parse it again on every write).
pub(super) fn control(conn: &Connection, sql: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut st| st.execute([]))
        .map(|_| ())
        .map_err(backend)
}

/// One group commit: a `BEGIN IMMEDIATE` transaction of every write, one commit, then every
/// answer. Savepoints cost each write two statements and a copy of every page it changes, so
/// the group first runs without them; only when a write fails is the group rolled back and
/// run again with a savepoint per write, so that the failed one rolls back alone.
fn commit_group(conn: &mut Connection, group: Vec<GroupedJob>) -> Vec<Answer> {
    if let Err(e) = control(conn, "BEGIN IMMEDIATE") {
        return failed_all(group, e);
    }
    commit_begun(conn, group)
}

/// Every write of a group answered with the group's error.
fn failed_all(group: Vec<GroupedJob>, e: StoreError) -> Vec<Answer> {
    group
        .into_iter()
        .map(|job| Answer::Grouped(job, Some(e.clone())))
        .collect()
}

/// [`commit_group`] once its transaction has begun.
fn commit_begun(conn: &mut Connection, mut group: Vec<GroupedJob>) -> Vec<Answer> {
    let mut failed = false;
    {
        let held = Conn::new(conn);
        for job in &mut group {
            // An I/O error or a full disk can make SQLite roll the transaction back itself.
            if !job.run(&held) || held.is_autocommit() {
                failed = true;
                break;
            }
        }
    }
    if !failed {
        return match control(conn, "COMMIT") {
            Ok(()) => group
                .into_iter()
                .map(|job| Answer::Grouped(job, None))
                .collect(),
            Err(e) => {
                let _ = control(conn, "ROLLBACK");
                failed_all(group, e)
            }
        };
    }
    if !conn.is_autocommit() {
        let _ = control(conn, "ROLLBACK");
    }
    if group.len() == 1 {
        // The only write failed and was rolled back: its answer carries its own error.
        return group
            .into_iter()
            .map(|job| Answer::Grouped(job, None))
            .collect();
    }
    commit_each(conn, group)
}

/// A group one of whose writes failed, again: a savepoint per write, so each stands or falls
/// alone.
fn commit_each(conn: &mut Connection, mut group: Vec<GroupedJob>) -> Vec<Answer> {
    if let Err(e) = control(conn, "BEGIN IMMEDIATE") {
        return failed_all(group, e);
    }
    let mut own = Vec::with_capacity(group.len());
    let held = Conn::new(conn);
    for job in &mut group {
        // An I/O error or a full disk can make SQLite roll the whole transaction back: the
        // rest of the group then does not run (it would commit on its own, unreported).
        if conn.is_autocommit() {
            own.push(Some(StoreError::backend(
                Fault::Other,
                "the group's transaction was rolled back",
            )));
            continue;
        }
        if let Err(e) = control(conn, "SAVEPOINT w") {
            own.push(Some(e));
            continue;
        }
        let keep = job.run(&held);
        let undo = |conn: &Connection| {
            control(conn, "ROLLBACK TO w").and_then(|_| control(conn, "RELEASE w"))
        };
        let kept = if keep {
            // A write whose savepoint cannot be released is undone and reported failed.
            control(conn, "RELEASE w").inspect_err(|_| {
                let _ = undo(conn);
            })
        } else {
            undo(conn)
        };
        own.push(kept.err());
    }
    drop(held);
    let committed = match control(conn, "COMMIT") {
        Ok(()) => None,
        Err(e) => {
            let _ = control(conn, "ROLLBACK");
            Some(e)
        }
    };
    group
        .into_iter()
        .zip(own)
        .map(|(job, own)| Answer::Grouped(job, committed.clone().or(own)))
        .collect()
}

/// Starts the thread that syncs the log for the writer thread's answers: it takes every
/// batch of answers waiting, syncs once, and gives them (with the sync's error, if any).
/// `syncing` counts the batches sent and not yet answered.
fn start_syncer(
    wal: Arc<WalFile>,
    syncing: Arc<AtomicUsize>,
) -> Result<mpsc::Sender<Vec<Answer>>, StoreError> {
    let (tx, rx) = mpsc::channel::<Vec<Answer>>();
    std::thread::Builder::new()
        .name("weir-sqlite-sync".into())
        .spawn(move || {
            while let Ok(mut answers) = rx.recv() {
                let mut batches = 1;
                while let Ok(more) = rx.try_recv() {
                    answers.extend(more);
                    batches += 1;
                }
                let failed = wal.sync().err();
                give_all(answers, failed.as_ref());
                syncing.fetch_sub(batches, Ordering::AcqRel);
            }
        })
        .map_err(backend)?;
    Ok(tx)
}
