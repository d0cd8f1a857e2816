//! The SQLite backend: one writer connection fed by group commit, a pool of
//! reader connections, whole-transaction retry with jitter on contention, and
//! a background indexer that fills the search indexes right after a commit.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Statement};

use super::group_commit::GroupCommit;
use super::indexer::{Indexer, Step};
use super::search_index::{IndexPlan, BACKGROUND_CHUNK_ROWS, CATCH_UP_CHUNK_ROWS};
use super::tables;
use super::{lock, Backend, Page, WriteOp, WriteOut};
use crate::error::{Error, Result, StorageKind};
use crate::model::{NewMessage, Table, Value, CONVERSATION_COLUMNS, MESSAGE_COLUMNS};
use crate::schema::{self, Synchronous};

/// How a store is opened.
#[derive(Debug, Clone)]
pub struct Options {
    pub synchronous: Synchronous,
    /// How long a write may keep retrying a busy database before it fails.
    pub busy_budget: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            synchronous: Synchronous::Full,
            busy_budget: Duration::from_secs(10),
        }
    }
}

/// The file's identity, to notice it being deleted or replaced underneath us
/// (SQLite would keep writing into the unlinked inode and lose every turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

pub struct SqliteBackend {
    path: PathBuf,
    options: Options,
    file_id: FileId,
    /// Shared with the indexer thread, which takes the writer between batches.
    writer: Arc<Mutex<Option<Writer>>>,
    readers: Mutex<Vec<Connection>>,
    commits: Arc<GroupCommit<WriteOp, WriteOut>>,
    indexer: Indexer,
    session_columns: Vec<String>,
    closed: AtomicBool,
    /// A read came up short: a file was cut under us (typically the WAL).
    /// A commit then would land after the hole and a checkpoint would copy
    /// the hole into the database, so writes (the indexer's too) are refused
    /// until a reopen.
    cut: Arc<AtomicBool>,
    /// The WAL has grown past `CHECKPOINT_FRAMES`: the indexer thread
    /// checkpoints it, so no caller's commit pays for a checkpoint.
    checkpoint_due: Arc<AtomicBool>,
    /// Rows this backend committed, per session: with the live count, it
    /// tells this process's writes from other processes'.
    own_appends: Mutex<HashMap<String, u64>>,
}

struct Writer {
    conn: Connection,
    data_version: i64,
    index: IndexPlan,
    /// The connection's `synchronous` level now: the indexer lowers it for
    /// its own transactions, and a write puts the configured one back.
    synchronous: Synchronous,
}

impl Writer {
    fn use_synchronous(&mut self, level: Synchronous) -> rusqlite::Result<()> {
        if self.synchronous != level {
            self.conn
                .pragma_update(None, "synchronous", level.pragma())?;
            self.synchronous = level;
        }
        Ok(())
    }

    /// One indexer transaction: up to `chunk_rows` pending rows with ids up
    /// to `up_to` go into the search indexes. Returns whether more remain.
    ///
    /// Committed without fsync (`synchronous=NORMAL`): the index is derived
    /// data, and its pending range lives in the same transaction, so a
    /// commit lost to power failure takes the range's removal with it and
    /// the range is indexed again. A later durable write's fsync covers
    /// these WAL frames too.
    fn index_pending(&mut self, up_to: i64, chunk_rows: i64) -> rusqlite::Result<bool> {
        self.use_synchronous(Synchronous::Normal)?;
        let conn = &self.conn;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let done = self
            .index
            .refresh(conn)
            .and_then(|_| self.index.index_pending(conn, up_to, chunk_rows))
            .and_then(|more| conn.execute_batch("COMMIT").map(|_| more));
        if done.is_err() && !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        done
    }
}

/// How long a batch may wait for the write lock.
#[derive(Clone, Copy)]
enum Patience {
    /// Retry a busy file for up to the store's busy budget.
    Budget,
    /// Not at all, not even in SQLite's busy handler: a write made from
    /// an event loop.
    Never,
}

/// Why an attempt at a batch failed.
enum Failure {
    /// One job's own error (at this index into the batch): retry without it.
    Job(usize, Error),
    /// Busy, I/O, disk full...: the whole attempt failed.
    Batch(Error),
}

/// `sessions` columns only the store itself writes: the key, and the
/// counters of the SPEC §3 invariant (`message_count` = active rows).
const MAINTAINED_COLUMNS: [&str; 3] = ["id", "message_count", "tool_call_count"];

/// The indexer takes the writer once no write or transcript load has run
/// for `INDEXER_QUIET` (a caller writing or loading again and again goes
/// first, rather than waiting for a chunk before each write or sharing its
/// cores with it), or after `INDEXER_PATIENCE` regardless, so a
/// steady stream of them cannot starve it.
const INDEXER_QUIET: Duration = Duration::from_millis(3);
const INDEXER_PATIENCE: Duration = Duration::from_millis(50);

/// WAL frames (pages) after which the background thread checkpoints, as
/// SQLite's own auto-checkpoint would inside the committing caller's call.
const CHECKPOINT_FRAMES: i32 = 1000;

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// A session's messages (`columns` of them) in insertion order.
fn messages_sql(columns: &str, include_inactive: bool) -> String {
    let active = if include_inactive {
        ""
    } else {
        " AND active = 1"
    };
    format!("SELECT {columns} FROM messages WHERE session_id = ?1{active} ORDER BY id")
}

/// Sets `cut` if `e` is a read that came up short (see `SqliteBackend::cut`).
fn note_short_read(cut: &AtomicBool, e: &rusqlite::Error) {
    let short = rusqlite::ffi::SQLITE_IOERR_SHORT_READ;
    if e.sqlite_error().map(|f| f.extended_code) == Some(short) {
        cut.store(true, Ordering::Release);
    }
}

trait At<T> {
    /// Attaches the database path to a SQLite error.
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> At<T> for rusqlite::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|e| Error::sqlite(path, e))
    }
}

impl SqliteBackend {
    /// Opens (creating if needed, mode 0600) the database at `path`.
    /// A file that is not a SQLite database is refused and never written.
    pub fn open(path: &Path, options: Options) -> Result<Self> {
        let path = path.to_path_buf();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| Error::Io {
                path: path.clone(),
                source: Arc::new(source),
            })?;
        }
        Self::refuse_foreign_file(&path)?;
        // Create the file ourselves so it is 0600 from its first byte; SQLite
        // gives the -wal and -shm files the same mode.
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| Error::Io {
                path: path.clone(),
                source: Arc::new(source),
            })?;
        let file_id = Self::file_id(&path)?;
        // Switching a new file to WAL needs a moment of exclusive access: two
        // processes creating the file at once wait for each other like writers.
        let mut conn = Self::with_busy_retry(&path, options.busy_budget, || {
            Self::connect(&path, options.synchronous)
        })?;
        Self::with_busy_retry(&path, options.busy_budget, || {
            conn.execute_batch("BEGIN IMMEDIATE")?;
            let done = schema::ensure(&conn).and_then(|_| conn.execute_batch("COMMIT"));
            if done.is_err() && !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            done
        })?;
        let session_columns = conn
            .prepare("SELECT name FROM pragma_table_info('sessions')")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .at(&path)?;
        let data_version = Self::data_version(&conn).at(&path)?;
        // Ranges left by a process that crashed before indexing them.
        let pending = conn
            .prepare("SELECT 1 FROM hermes_fts_pending")
            .and_then(|mut s| s.exists([]))
            .at(&path)?;
        // Checkpoints run on the indexer thread, never inside a caller's
        // commit: this hook replaces SQLite's auto-checkpoint on the writer.
        let checkpoint_due = Arc::new(AtomicBool::new(false));
        conn.wal_hook(Some({
            let due = Arc::clone(&checkpoint_due);
            move |_: &mut rusqlite::hooks::Wal, frames: std::ffi::c_int| {
                if frames >= CHECKPOINT_FRAMES {
                    due.store(true, Ordering::Release);
                }
                Ok(())
            }
        }))
        .at(&path)?;
        let writer = Arc::new(Mutex::new(Some(Writer {
            conn,
            data_version,
            index: IndexPlan::default(),
            synchronous: options.synchronous,
        })));
        let commits = Arc::new(GroupCommit::default());
        let cut = Arc::new(AtomicBool::new(false));
        let indexer = Indexer::spawn(pending, {
            let (writer, commits, cut, due) = (
                Arc::clone(&writer),
                Arc::clone(&commits),
                Arc::clone(&cut),
                Arc::clone(&checkpoint_due),
            );
            let (path, sync) = (path.clone(), options.synchronous);
            let mut checkpointer: Option<Connection> = None;
            move || {
                commits.wait_quiet(INDEXER_QUIET, INDEXER_PATIENCE);
                let step = {
                    let mut writer = lock(&writer);
                    // Past a cut the ranges stay pending (durable) for the next opener.
                    let Some(w) = writer.as_mut().filter(|_| !cut.load(Ordering::Acquire)) else {
                        return Step::Done;
                    };
                    match w.index_pending(i64::MAX, BACKGROUND_CHUNK_ROWS) {
                        Ok(true) => Step::More,
                        Ok(false) => Step::Done,
                        Err(e) => {
                            note_short_read(&cut, &e);
                            return Step::Failed;
                        }
                    }
                };
                // Between chunks too: a writer faster than the indexer keeps it
                // from ever being done, and the WAL must not wait for that.
                if due.swap(false, Ordering::AcqRel) {
                    if let Err(e) = Self::checkpoint(&mut checkpointer, &path, sync, &writer) {
                        note_short_read(&cut, &e);
                        due.store(true, Ordering::Release);
                        return Step::Failed;
                    }
                }
                step
            }
        })
        .map_err(|source| Error::Io {
            path: path.clone(),
            source: Arc::new(source),
        })?;
        Ok(SqliteBackend {
            path,
            options,
            file_id,
            writer,
            readers: Mutex::new(Vec::new()),
            commits,
            indexer,
            session_columns,
            closed: AtomicBool::new(false),
            cut,
            checkpoint_due,
            own_appends: Mutex::new(HashMap::new()),
        })
    }

    fn refuse_foreign_file(path: &Path) -> Result<()> {
        let mut header = [0u8; 16];
        let read = match std::fs::File::open(path) {
            Ok(mut f) => f.read(&mut header),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(Error::Io {
                    path: path.to_path_buf(),
                    source: Arc::new(source),
                })
            }
        };
        match read {
            Ok(0) => Ok(()),
            Ok(n) if n == 16 && &header == SQLITE_MAGIC => Ok(()),
            Ok(_) => Err(Error::NotADatabase {
                path: path.to_path_buf(),
            }),
            Err(source) => Err(Error::Io {
                path: path.to_path_buf(),
                source: Arc::new(source),
            }),
        }
    }

    fn file_id(path: &Path) -> Result<FileId> {
        let meta = std::fs::metadata(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source: Arc::new(source),
        })?;
        Ok(FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// A connection to the file, which must exist: only `open` creates it
    /// (with mode 0600), so a file deleted under us is not silently recreated
    /// world-readable and empty by a later reader. The SQLite error is left
    /// to the caller to classify.
    fn connect(path: &Path, sync: Synchronous) -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags)?;
        schema::configure(&conn, sync)?;
        Ok(conn)
    }

    fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
        conn.query_row("PRAGMA data_version", [], |r| r.get(0))
    }

    /// Runs `attempt` until it stops failing with busy/locked or the budget
    /// runs out, sleeping a jittered, growing pause between tries so that
    /// competing writers spread out instead of convoying.
    fn with_busy_retry<T>(
        path: &Path,
        budget: Duration,
        mut attempt: impl FnMut() -> rusqlite::Result<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + budget;
        let mut pause_ms = 2u64;
        loop {
            match attempt().at(path) {
                Err(e) if e.is_busy() && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(fastrand::u64(1..=pause_ms)));
                    pause_ms = (pause_ms * 2).min(100);
                }
                other => return other,
            }
        }
    }

    fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// Refuses to write when the path no longer names the file we opened.
    fn ensure_same_file(&self) -> Result<()> {
        match Self::file_id(&self.path) {
            Ok(id) if id == self.file_id => Ok(()),
            _ => Err(Error::Storage {
                kind: StorageKind::Other,
                path: self.path.clone(),
                detail: "the database file was deleted or replaced while open; nothing was written. Restore the file (or restart to start a new one) and retry".into(),
            }),
        }
    }

    /// What a write made without waiting gets when another writer is in the way.
    fn writer_busy(&self) -> Error {
        Error::WriterBusy {
            path: self.path.clone(),
        }
    }

    /// Refuses to write once a read came up short (see `cut`).
    fn ensure_not_cut(&self) -> Result<()> {
        if !self.cut.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(Error::Storage {
            kind: StorageKind::Other,
            path: self.path.clone(),
            detail: "a read came up short: the file or its write-ahead log was cut while open, and a commit now would damage the database; nothing was written. Restart to recover the intact part, then retry".into(),
        })
    }

    /// Copies the WAL into the database file on the indexer's own connection
    /// (opened on first use) without holding up writers (`PASSIVE`); then,
    /// with this store's writer held, copies the frames committed meanwhile
    /// and starts the WAL over (`RESTART`, which gives up rather than wait if
    /// another process is reading it). Passive checkpoints alone never start
    /// the WAL over under a steady writer: it grew without bound, and every
    /// read then searched a longer WAL.
    fn checkpoint(
        conn: &mut Option<Connection>,
        path: &Path,
        sync: Synchronous,
        writer: &Mutex<Option<Writer>>,
    ) -> rusqlite::Result<()> {
        let conn = match conn {
            Some(conn) => conn,
            None => {
                let fresh = Self::connect(path, sync)?;
                // RESTART runs with our writer held: never sleep on readers.
                fresh.busy_timeout(Duration::ZERO)?;
                conn.insert(fresh)
            }
        };
        conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)")?;
        let _writes_paused = lock(writer);
        conn.execute_batch("PRAGMA wal_checkpoint(RESTART)")
    }

    /// Borrows a reader connection for `f`, opening one when none is idle.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        self.read_raw(f)?.at(&self.path)
    }

    /// Like `read`, leaving the SQLite error to the caller to classify.
    fn read_raw<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<rusqlite::Result<T>> {
        self.ensure_open()?;
        let conn = match lock(&self.readers).pop() {
            Some(c) => c,
            None => Self::connect(&self.path, self.options.synchronous).map_err(|e| {
                note_short_read(&self.cut, &e);
                Error::sqlite(&self.path, e)
            })?,
        };
        let out = f(&conn);
        if let Err(e) = &out {
            note_short_read(&self.cut, e);
        }
        if !self.closed.load(Ordering::Acquire) {
            lock(&self.readers).push(conn);
        }
        Ok(out)
    }

    /// Commits one batch: every job in one `BEGIN IMMEDIATE` transaction.
    ///
    /// No savepoint per job: FTS5 writes its pending index data out as a new
    /// segment at every savepoint, so savepoints would cost a segment (and
    /// merge work) per job. Instead a job that fails for its own reasons
    /// (unknown session, constraint) rolls the attempt back and the batch is
    /// retried at once without it; that job alone gets the error.
    fn commit_batch(&self, jobs: &[WriteOp], patience: Patience) -> Vec<Result<WriteOut>> {
        // A failure before the transaction: every job gets it.
        let all_fail = |e: Error| jobs.iter().map(|_| Err(e.clone())).collect();
        if let Err(e) = self
            .ensure_open()
            .and_then(|_| self.ensure_same_file())
            .and_then(|_| self.ensure_not_cut())
        {
            return all_fail(e);
        }
        let mut writer = match patience {
            Patience::Budget => lock(&self.writer),
            Patience::Never => match self.writer.try_lock() {
                Ok(writer) => writer,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                // The indexer holds the writer connection for a chunk.
                Err(TryLockError::WouldBlock) => return all_fail(self.writer_busy()),
            },
        };
        let Some(w) = writer.as_mut() else {
            return all_fail(Error::Closed {
                path: self.path.clone(),
            });
        };
        if let Err(e) = w.use_synchronous(self.options.synchronous) {
            return all_fail(Error::sqlite(&self.path, e));
        }
        let Writer { conn, index, .. } = w;
        let never = matches!(patience, Patience::Never);
        let deadline = if never {
            // Cannot fail: it only sets the handler.
            let _ = conn.busy_timeout(Duration::ZERO);
            Instant::now()
        } else {
            Instant::now() + self.options.busy_budget
        };
        let mut results: Vec<Option<Result<WriteOut>>> = jobs.iter().map(|_| None).collect();
        let fail_rest = |results: &mut Vec<Option<Result<WriteOut>>>, e: &Error| {
            results
                .iter_mut()
                .filter(|r| r.is_none())
                .for_each(|r| *r = Some(Err(e.clone())));
        };
        let mut deferred_index = false;
        let mut pause_ms = 2u64;
        loop {
            let active: Vec<usize> = (0..jobs.len()).filter(|&i| results[i].is_none()).collect();
            if active.is_empty() {
                break;
            }
            match self.try_commit(conn, index, jobs, &active) {
                Ok((outs, deferred)) => {
                    deferred_index = deferred;
                    for (i, out) in active.into_iter().zip(outs) {
                        results[i] = Some(Ok(out));
                    }
                    break;
                }
                Err(Failure::Job(i, e)) => {
                    let _ = conn.execute_batch("ROLLBACK");
                    results[i] = Some(Err(e));
                }
                Err(Failure::Batch(e)) => {
                    if !conn.is_autocommit() {
                        let _ = conn.execute_batch("ROLLBACK");
                    }
                    if !(e.is_busy() && Instant::now() < deadline) {
                        let busy_now = e.is_busy() && never;
                        fail_rest(&mut results, &if busy_now { self.writer_busy() } else { e });
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(fastrand::u64(1..=pause_ms)));
                    pause_ms = (pause_ms * 2).min(100);
                }
            }
        }
        if never {
            let _ = conn.busy_timeout(schema::BUSY_TIMEOUT);
        }
        drop(writer);
        if deferred_index || self.checkpoint_due.load(Ordering::Acquire) {
            self.indexer.wake();
        }
        let results: Vec<Result<WriteOut>> = results.into_iter().flatten().collect();
        self.count_own_appends(jobs, &results);
        results
    }

    /// The last id of the pending ranges (None when nothing is pending).
    fn pending_up_to(conn: &Connection) -> rusqlite::Result<Option<i64>> {
        conn.prepare_cached("SELECT MAX(last_id) FROM hermes_fts_pending")?
            .query_row([], |r| r.get(0))
    }

    /// Indexes the pending rows with ids up to `up_to`, here and now, in
    /// large chunks (our writes may go between two). Stops after the busy
    /// budget, leaving the rest pending.
    fn index_pending_up_to(&self, up_to: i64) -> Result<()> {
        let deadline = Instant::now() + self.options.busy_budget;
        loop {
            self.ensure_not_cut()?;
            let mut writer = lock(&self.writer);
            let Some(w) = writer.as_mut() else {
                return Err(Error::Closed {
                    path: self.path.clone(),
                });
            };
            let budget = deadline.saturating_duration_since(Instant::now());
            let more = Self::with_busy_retry(&self.path, budget, || {
                w.index_pending(up_to, CATCH_UP_CHUNK_ROWS)
                    .inspect_err(|e| note_short_read(&self.cut, e))
            })?;
            if !more || Instant::now() >= deadline {
                return Ok(());
            }
        }
    }

    fn count_own_appends(&self, jobs: &[WriteOp], results: &[Result<WriteOut>]) {
        let mut own = lock(&self.own_appends);
        for (job, result) in jobs.iter().zip(results) {
            if let (WriteOp::Append { session_id, .. }, Ok(WriteOut::Ids(ids))) = (job, result) {
                *own.entry(session_id.clone()).or_default() += ids.len() as u64;
            }
        }
    }

    /// One attempt at the jobs `active` (indices into `jobs`). The batch's
    /// new messages are left to the indexer as one pending range (then true
    /// comes back with the results: wake it), or indexed by the triggers.
    fn try_commit(
        &self,
        conn: &Connection,
        index: &mut IndexPlan,
        jobs: &[WriteOp],
        active: &[usize],
    ) -> std::result::Result<(Vec<WriteOut>, bool), Failure> {
        let path = &self.path;
        let batch = |e: rusqlite::Error| {
            note_short_read(&self.cut, &e);
            Failure::Batch(Error::sqlite(path, e))
        };
        conn.execute_batch("BEGIN IMMEDIATE").map_err(batch)?;
        index.refresh(conn).map_err(batch)?;
        let mut outs = Vec::with_capacity(active.len());
        let mut new_ids: Option<(i64, i64)> = None;
        for &i in active {
            match self.apply(conn, &jobs[i]) {
                Ok(out) => {
                    if let WriteOut::Ids(ids) = &out {
                        if let (Some(&first), Some(&last)) = (ids.first(), ids.last()) {
                            let start = new_ids.map_or(first, |(start, _)| start);
                            new_ids = Some((start, last));
                        }
                    }
                    outs.push(out);
                }
                Err(e) if e.is_whole_batch_failure() => return Err(Failure::Batch(e)),
                Err(e) => return Err(Failure::Job(i, e)),
            }
        }
        // The ids are one contiguous run: this connection held the write
        // lock while it inserted every one of them.
        let deferred = match new_ids {
            Some((first, last)) => index.index_new_rows(conn, first, last).map_err(batch)?,
            None => false,
        };
        conn.execute_batch("COMMIT").map_err(batch)?;
        Ok((outs, deferred))
    }

    fn apply(&self, conn: &Connection, op: &WriteOp) -> Result<WriteOut> {
        let path = &self.path;
        match op {
            WriteOp::CreateSession {
                id,
                source,
                started_at,
                columns,
            } => {
                let mut names: Vec<String> =
                    vec!["id".into(), "source".into(), "started_at".into()];
                let mut values: Vec<&Value> = Vec::with_capacity(columns.len());
                let (id_v, source_v, started_v) = (
                    Value::Text(id.clone()),
                    Value::Text(source.clone()),
                    Value::Real(*started_at),
                );
                values.extend([&id_v, &source_v, &started_v]);
                for (name, value) in columns {
                    names.push(self.checked_column(name)?);
                    values.push(value);
                }
                // A repeat create fills only columns still NULL, so the
                // gateway's bare row and the agent's richer one merge.
                let fill: Vec<String> = names[3..]
                    .iter()
                    .map(|c| format!("{c} = COALESCE(sessions.{c}, excluded.{c})"))
                    .collect();
                let on_conflict = if fill.is_empty() {
                    "DO NOTHING".to_owned()
                } else {
                    format!("DO UPDATE SET {}", fill.join(", "))
                };
                let sql = format!(
                    "INSERT INTO sessions ({}) VALUES ({}) ON CONFLICT(id) {on_conflict}",
                    names.join(", "),
                    vec!["?"; names.len()].join(", ")
                );
                conn.prepare_cached(&sql)
                    .and_then(|mut s| s.execute(rusqlite::params_from_iter(values)))
                    .at(path)?;
                Ok(WriteOut::Done)
            }
            WriteOp::Append {
                session_id,
                rows,
                once_key,
            } => {
                if let Some(key) = once_key {
                    let seen = conn
                        .prepare_cached("SELECT 1 FROM state_meta WHERE key = ?1")
                        .and_then(|mut s| s.exists([key]))
                        .at(path)?;
                    if seen {
                        return Ok(WriteOut::Ids(Vec::new()));
                    }
                    conn.prepare_cached("INSERT INTO state_meta (key, value) VALUES (?1, ?2)")
                        .and_then(|mut s| s.execute(params![key, crate::model::now().to_string()]))
                        .at(path)?;
                }
                self.append_rows(conn, session_id, rows).map(WriteOut::Ids)
            }
            WriteOp::UpdateSession { id, columns } => {
                if columns.is_empty() {
                    return Ok(WriteOut::Done);
                }
                let mut sets = Vec::with_capacity(columns.len());
                for (name, _) in columns {
                    sets.push(format!("{} = ?", self.checked_column(name)?));
                }
                let sql = format!("UPDATE sessions SET {} WHERE id = ?", sets.join(", "));
                let id_v = Value::Text(id.clone());
                let values = columns.iter().map(|(_, v)| v).chain(std::iter::once(&id_v));
                let n = conn
                    .prepare_cached(&sql)
                    .and_then(|mut s| s.execute(rusqlite::params_from_iter(values)))
                    .at(path)?;
                if n == 0 {
                    return Err(self.not_found(id));
                }
                Ok(WriteOut::Done)
            }
            WriteOp::SaveRouting {
                scope,
                session_key,
                entry_json,
            } => {
                conn.prepare_cached(
                    "INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(scope, session_key) DO UPDATE
                     SET entry_json = excluded.entry_json, updated_at = excluded.updated_at",
                )
                .and_then(|mut s| {
                    s.execute(params![scope, session_key, entry_json, crate::model::now()])
                })
                .at(path)?;
                Ok(WriteOut::Done)
            }
            WriteOp::DeleteRouting {
                scope,
                session_keys,
            } => {
                let mut stmt = conn
                    .prepare_cached(
                        "DELETE FROM gateway_routing WHERE scope = ?1 AND session_key = ?2",
                    )
                    .at(path)?;
                for key in session_keys {
                    stmt.execute(params![scope, key]).at(path)?;
                }
                Ok(WriteOut::Done)
            }
            WriteOp::SetMeta { key, value } => {
                conn.prepare_cached(
                    "INSERT INTO state_meta (key, value) VALUES (?1, ?2)
                     ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                )
                .and_then(|mut s| s.execute(params![key, value]))
                .at(path)?;
                Ok(WriteOut::Done)
            }
        }
    }

    /// Inserts `rows` and moves the session's counters in the same
    /// transaction, so `message_count` always equals the active rows. A
    /// session that receives messages is open again: `ended_at` is cleared.
    fn append_rows(
        &self,
        conn: &Connection,
        session_id: &str,
        rows: &[NewMessage],
    ) -> Result<Vec<i64>> {
        let path = &self.path;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let tool_calls: i64 = rows.iter().map(|r| r.tool_call_count).sum();
        let touched = conn
            .prepare_cached(
                "UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?1,
                 tool_call_count = COALESCE(tool_call_count, 0) + ?2,
                 ended_at = NULL, end_reason = NULL WHERE id = ?3",
            )
            .and_then(|mut s| s.execute(params![rows.len() as i64, tool_calls, session_id]))
            .at(path)?;
        if touched == 0 {
            return Err(self.not_found(session_id));
        }
        let mut insert = conn
            .prepare_cached(
                "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls,
                 tool_name, effect_disposition, timestamp, token_count, finish_reason, reasoning,
                 reasoning_content, reasoning_details, codex_reasoning_items, codex_message_items,
                 platform_message_id, observed, active, api_content)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                 ?17, 1, ?18)",
            )
            .at(path)?;
        let mut ids = Vec::with_capacity(rows.len());
        for row in rows {
            ids.push(Self::insert_row(&mut insert, session_id, row).at(path)?);
        }
        Ok(ids)
    }

    fn insert_row(
        stmt: &mut Statement<'_>,
        session_id: &str,
        m: &NewMessage,
    ) -> rusqlite::Result<i64> {
        stmt.insert(params![
            session_id,
            m.role,
            m.content,
            m.tool_call_id,
            m.tool_calls,
            m.tool_name,
            m.effect_disposition,
            m.timestamp,
            m.token_count,
            m.finish_reason,
            m.reasoning,
            m.reasoning_content,
            m.reasoning_details,
            m.codex_reasoning_items,
            m.codex_message_items,
            m.platform_message_id,
            m.observed as i64,
            m.api_content,
        ])
    }

    /// `name` as a quoted SQL identifier, if it is a column one may set.
    /// Quoted even though it is a real column: a crafted file can declare
    /// a column whose name is SQL.
    fn checked_column(&self, name: &str) -> Result<String> {
        if MAINTAINED_COLUMNS.contains(&name) {
            Err(Error::Config(format!(
                "{}: sessions.{name} is managed by hermes (the id is the key, the counters \
                 move with the rows written) and cannot be set directly",
                self.path.display()
            )))
        } else if self.session_columns.iter().any(|c| c == name) {
            Ok(format!("\"{}\"", name.replace('"', "\"\"")))
        } else {
            Err(Error::Config(format!(
                "{}: sessions has no column {name:?}; valid columns: {}",
                self.path.display(),
                self.session_columns.join(", ")
            )))
        }
    }

    fn not_found(&self, id: &str) -> Error {
        Error::SessionNotFound {
            session_id: id.to_owned(),
            path: self.path.clone(),
        }
    }
}

impl Error {
    /// Failures that doom the whole transaction rather than one job in it.
    fn is_whole_batch_failure(&self) -> bool {
        matches!(
            self,
            Error::Storage {
                kind: StorageKind::Locked
                    | StorageKind::Full
                    | StorageKind::Corrupt
                    | StorageKind::ReadOnly,
                ..
            } | Error::Io { .. }
        )
    }
}

impl Drop for SqliteBackend {
    /// A store dropped without `close` still stops its indexer thread (which
    /// holds the writer) and leaves the file indexed.
    fn drop(&mut self) {
        self.close();
    }
}

impl Backend for SqliteBackend {
    fn location(&self) -> &Path {
        &self.path
    }

    fn write(&self, op: WriteOp) -> Result<WriteOut> {
        self.ensure_open()?;
        self.commits
            .submit(op, |jobs| self.commit_batch(jobs, Patience::Budget))
    }

    fn write_now(&self, op: WriteOp) -> Result<WriteOut> {
        self.ensure_open()?;
        self.commits
            .try_submit(op, |jobs| self.commit_batch(jobs, Patience::Never))
            .unwrap_or_else(|| Err(self.writer_busy()))
    }

    fn session(&self, id: &str) -> Result<Table> {
        self.read(|c| tables::all(c, "SELECT * FROM sessions WHERE id = ?1", [id]))
    }

    fn message_count(&self, id: &str) -> Result<Option<i64>> {
        self.read(|c| {
            c.prepare_cached("SELECT COALESCE(message_count, 0) FROM sessions WHERE id = ?1")?
                .query_row([id], |r| r.get(0))
                .optional()
        })
    }

    fn own_appends(&self, session_id: &str) -> u64 {
        lock(&self.own_appends)
            .get(session_id)
            .copied()
            .unwrap_or(0)
    }

    fn foreign_commit_since_last_look(&self) -> Result<bool> {
        self.ensure_open()?;
        let mut writer = lock(&self.writer);
        let Some(w) = writer.as_mut() else {
            return Err(Error::Closed {
                path: self.path.clone(),
            });
        };
        // data_version moves only for commits made by *other* connections.
        let now = Self::data_version(&w.conn).at(&self.path)?;
        let changed = now != w.data_version;
        w.data_version = now;
        Ok(changed)
    }

    fn messages(&self, session_id: &str, include_inactive: bool) -> Result<Table> {
        self.read(|c| {
            let sql = messages_sql(MESSAGE_COLUMNS, include_inactive);
            tables::all(c, &sql, [session_id])
        })
    }

    fn conversation(
        &self,
        session_id: &str,
        include_inactive: bool,
        sink: &mut dyn FnMut(Table) -> bool,
    ) -> Result<()> {
        // A load with a helper thread needs both cores: the indexer waits.
        let _reading = self.commits.reading();
        self.read(|c| {
            let sql = messages_sql(CONVERSATION_COLUMNS, include_inactive);
            tables::read_ahead(c, &sql, [session_id], sink)
        })
    }

    fn list_sessions(&self, page: &Page) -> Result<Table> {
        self.read(|c| {
            tables::all(
                c,
                "SELECT * FROM sessions WHERE (?1 IS NULL OR source = ?1)
                 ORDER BY started_at DESC, id DESC LIMIT ?2 OFFSET ?3",
                params![page.source, page.limit, page.offset],
            )
        })
    }

    fn search(&self, query: &str, page: &Page) -> Result<Table> {
        // Every row committed before the search is found: pending ranges
        // are indexed first. If that fails (locked past the budget, disk
        // full), the search answers from the index as it is: missing the
        // newest rows beats failing the search.
        if let Ok(Some(up_to)) = self.read(Self::pending_up_to) {
            let _ = self.index_pending_up_to(up_to);
        }
        let out = self.read_raw(|c| {
            tables::all(
                c,
                "SELECT m.id, m.session_id, m.role, m.content, m.tool_name, m.timestamp,
                        s.source, s.title,
                        snippet(messages_fts, 0, '>>>', '<<<', '...', 12) AS snippet
                 FROM messages_fts
                 JOIN messages m ON m.id = messages_fts.rowid
                 JOIN sessions s ON s.id = m.session_id
                 WHERE messages_fts MATCH ?1 AND m.active = 1
                   AND (?2 IS NULL OR s.source = ?2)
                   AND (?3 IS NULL OR m.session_id = ?3)
                 ORDER BY rank LIMIT ?4 OFFSET ?5",
                params![query, page.source, page.session_id, page.limit, page.offset],
            )
        });
        // A query FTS5 cannot parse fails with SQLite's generic error code;
        // storage failures have codes of their own, except a damaged schema
        // ("no such table"), which is not the query's fault either.
        out?.map_err(|e| {
            let generic = e.sqlite_error_code() == Some(rusqlite::ErrorCode::Unknown);
            let text = e.to_string();
            if generic && !text.contains("no such table") && !text.contains("no such module") {
                Error::BadQuery {
                    query: query.to_owned(),
                    detail: text,
                }
            } else {
                Error::sqlite(&self.path, e)
            }
        })
    }

    fn has_platform_message_id(&self, session_id: &str, platform_message_id: &str) -> Result<bool> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT 1 FROM messages WHERE session_id = ?1 AND platform_message_id = ?2 LIMIT 1",
            )?
            .exists([session_id, platform_message_id])
        })
    }

    fn routing_entries(&self, scope: &str) -> Result<Vec<(String, String)>> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT session_key, entry_json FROM gateway_routing WHERE scope = ?1 ORDER BY session_key",
            )?;
            let rows = stmt.query_map([scope], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
    }

    fn meta(&self, key: &str) -> Result<Option<String>> {
        self.read(|c| {
            c.prepare_cached("SELECT value FROM state_meta WHERE key = ?1")?
                .query_row([key], |r| r.get(0))
                .optional()
        })
    }

    fn session_columns(&self) -> &[String] {
        &self.session_columns
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        lock(&self.readers).clear();
        self.indexer.stop();
        // Index what is pending, so a file we closed is complete for
        // hermes-agent, which knows nothing of the pending table. Bounded by
        // the busy budget: what is left stays pending (durable) for the next
        // opener.
        let up_to = lock(&self.writer)
            .as_ref()
            .and_then(|w| Self::pending_up_to(&w.conn).ok().flatten());
        if let Some(up_to) = up_to {
            let _ = self.index_pending_up_to(up_to);
        }
        if let Some(w) = lock(&self.writer).take() {
            // A final passive checkpoint keeps the WAL small for the next opener.
            let _ = w.conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NewMessage;

    fn open(dir: &tempfile::TempDir) -> SqliteBackend {
        SqliteBackend::open(&dir.path().join("state.db"), Options::default()).unwrap()
    }

    fn create(db: &SqliteBackend, id: &str) {
        db.write(WriteOp::CreateSession {
            id: id.into(),
            source: "cli".into(),
            started_at: 1.0,
            columns: vec![],
        })
        .unwrap();
    }

    fn append(db: &SqliteBackend, id: &str, n: usize) -> Result<WriteOut> {
        db.write(WriteOp::Append {
            session_id: id.into(),
            rows: (0..n)
                .map(|i| NewMessage::text("user", &format!("m{i}"), 1.0))
                .collect(),
            once_key: None,
        })
    }

    fn append_now(db: &SqliteBackend, id: &str) -> Result<WriteOut> {
        db.write_now(WriteOp::Append {
            session_id: id.into(),
            rows: vec![NewMessage::text("user", "now", 1.0)],
            once_key: None,
        })
    }

    #[test]
    fn a_write_now_commits_when_nothing_else_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        assert!(matches!(append_now(&db, "s"), Ok(WriteOut::Ids(ids)) if ids.len() == 1));
        assert_eq!(db.message_count("s").unwrap(), Some(1));
    }

    #[test]
    fn a_write_now_fails_at_once_when_another_process_holds_the_write_lock() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        // SQLite's own busy handler would sleep its whole timeout (100 ms) on
        // every try; the fastest of a few tries is immune to a stalled host.
        let fastest = (0..3)
            .map(|_| {
                let started = Instant::now();
                let got = append_now(&db, "s");
                assert!(matches!(got, Err(Error::WriterBusy { .. })), "{got:?}");
                started.elapsed()
            })
            .min()
            .unwrap();
        assert!(fastest < Duration::from_millis(50), "it waited {fastest:?}");
        other.execute_batch("ROLLBACK").unwrap();
        assert_eq!(db.message_count("s").unwrap(), Some(0), "nothing written");
        assert!(append_now(&db, "s").is_ok(), "free again: it writes");
    }

    #[test]
    fn a_write_now_fails_while_this_store_is_writing_or_indexing() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(open(&dir));
        create(&db, "s");
        // The writer connection held (as the indexer holds it for a chunk).
        let held = lock(&db.writer);
        assert!(matches!(
            append_now(&db, "s"),
            Err(Error::WriterBusy { .. })
        ));
        drop(held);
        // A batch being committed by another thread.
        let (entered, release) = (
            Arc::new(std::sync::Barrier::new(2)),
            Arc::new(std::sync::Barrier::new(2)),
        );
        let leader = {
            let (db, entered, release) =
                (Arc::clone(&db), Arc::clone(&entered), Arc::clone(&release));
            std::thread::spawn(move || {
                let job = WriteOp::SetMeta {
                    key: "k".into(),
                    value: "v".into(),
                };
                db.commits.submit(job, |_| {
                    entered.wait();
                    release.wait();
                    vec![Ok(WriteOut::Done)]
                })
            })
        };
        entered.wait();
        assert!(matches!(
            append_now(&db, "s"),
            Err(Error::WriterBusy { .. })
        ));
        release.wait();
        leader.join().unwrap().unwrap();
        assert_eq!(db.message_count("s").unwrap(), Some(0), "nothing written");
    }

    /// Indexes everything pending now, as a search does first.
    fn index_now(db: &SqliteBackend) {
        db.index_pending_up_to(i64::MAX).unwrap();
    }

    fn count(conn: &Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    fn pending_rows(db: &SqliteBackend) -> i64 {
        db.read(|c| {
            c.query_row(
                "SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM hermes_fts_pending",
                [],
                |r| r.get(0),
            )
        })
        .unwrap()
    }

    fn wait_until(what: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !what() {
            assert!(Instant::now() < deadline, "timed out");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn search_ids(db: &SqliteBackend, query: &str) -> Vec<i64> {
        let page = Page {
            limit: 1000,
            ..Page::default()
        };
        db.search(query, &page)
            .unwrap()
            .rows()
            .map(|r| match r.get(0) {
                rusqlite::types::ValueRef::Integer(id) => id,
                other => panic!("id {other:?}"),
            })
            .collect()
    }

    /// Rows committed and a pending range for them, but no index entries:
    /// what a writer killed before its indexer ran leaves behind.
    fn crashed_writer_rows(conn: &Connection, session: &str, texts: &[&str]) {
        conn.execute(
            "INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?1, 'cli', 1)",
            [session],
        )
        .unwrap();
        let first = count(conn, "SELECT COALESCE(MAX(id), 0) + 1 FROM messages");
        for text in texts {
            conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?1, 'user', ?2, 1)",
                [session, text],
            )
            .unwrap();
        }
        let last = first + texts.len() as i64 - 1;
        conn.execute(
            "DELETE FROM messages_fts WHERE rowid BETWEEN ?1 AND ?2",
            [first, last],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO hermes_fts_pending (first_id, last_id) VALUES (?1, ?2)",
            [first, last],
        )
        .unwrap();
    }

    #[test]
    fn counts_move_with_rows() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append(&db, "s", 3).unwrap();
        append(&db, "s", 2).unwrap();
        assert_eq!(db.message_count("s").unwrap(), Some(5));
        assert_eq!(db.messages("s", false).unwrap().rows().count(), 5);
    }

    #[test]
    fn appending_reopens_an_ended_session() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        db.write(WriteOp::UpdateSession {
            id: "s".into(),
            columns: vec![
                ("ended_at".into(), Value::Real(2.0)),
                ("end_reason".into(), Value::Text("user_exit".into())),
            ],
        })
        .unwrap();
        append(&db, "s", 1).unwrap();
        let table = db.session("s").unwrap();
        let row = table.rows().next().unwrap();
        let ended = row.columns().iter().position(|c| c == "ended_at").unwrap();
        assert_eq!(row.get(ended), rusqlite::types::ValueRef::Null);
    }

    #[test]
    fn append_to_missing_session_commits_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let err = append(&db, "nope", 2).unwrap_err();
        assert!(matches!(err, Error::SessionNotFound { .. }));
        let n: i64 = db
            .read(|c| c.query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn own_rows_are_indexed_exactly_as_the_trigger_would() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let mut row = NewMessage::text("assistant", "grep the tree", 1.0);
        row.tool_name = Some("terminal".into());
        row.tool_calls = Some("[{\"name\":\"terminal\"}]".into());
        db.write(WriteOp::Append {
            session_id: "s".into(),
            rows: vec![row],
            once_key: None,
        })
        .unwrap();
        index_now(&db);
        // Another writer (triggers on) inserts the same row.
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other
            .execute_batch(
                "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp)
                 VALUES ('s', 'assistant', 'grep the tree', 'terminal', '[{\"name\":\"terminal\"}]', 1.0)",
            )
            .unwrap();
        let texts: Vec<String> = other
            .prepare("SELECT content FROM messages_fts ORDER BY rowid")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(texts.len(), 2);
        assert_eq!(texts[0], texts[1]);
    }

    #[test]
    fn a_failing_job_is_dropped_from_its_batch_alone() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "a");
        create(&db, "b");
        let job = |sid: &str| WriteOp::Append {
            session_id: sid.into(),
            rows: vec![NewMessage::text("user", "x", 1.0)],
            once_key: None,
        };
        let results = db.commit_batch(&[job("a"), job("missing"), job("b")], Patience::Budget);
        assert!(matches!(results[0], Ok(WriteOut::Ids(ref ids)) if ids.len() == 1));
        assert!(matches!(results[1], Err(Error::SessionNotFound { .. })));
        assert!(matches!(results[2], Ok(WriteOut::Ids(ref ids)) if ids.len() == 1));
        assert_eq!(db.message_count("a").unwrap(), Some(1));
        assert_eq!(db.message_count("b").unwrap(), Some(1));
        index_now(&db);
        let indexed: i64 = db
            .read(|c| c.query_row("SELECT COUNT(*) FROM messages_fts", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(indexed, 2);
        assert_eq!((db.own_appends("a"), db.own_appends("missing")), (1, 0));
    }

    #[test]
    fn a_failed_single_write_commits_none_of_its_work() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let op = || WriteOp::Append {
            session_id: "late".into(),
            rows: vec![NewMessage::text("user", "x", 1.0)],
            once_key: Some("k".into()),
        };
        assert!(matches!(db.write(op()), Err(Error::SessionNotFound { .. })));
        create(&db, "late");
        assert!(matches!(db.write(op()).unwrap(), WriteOut::Ids(ids) if ids.len() == 1));
    }

    #[test]
    fn triggers_added_by_others_keep_working_for_our_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append(&db, "s", 1).unwrap();
        index_now(&db);
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other
            .execute_batch(
                "CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, tokenize='trigram');
                 CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages BEGIN
                   INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id, new.content);
                 END;
                 CREATE TABLE audit (n INTEGER);
                 CREATE TRIGGER audit_sessions AFTER UPDATE ON sessions BEGIN
                   INSERT INTO audit VALUES (1);
                 END;",
            )
            .unwrap();
        append(&db, "s", 2).unwrap();
        let count = |sql: &str| -> i64 { other.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(count("SELECT COUNT(*) FROM messages_fts_trigram"), 2);
        assert_eq!(count("SELECT COUNT(*) FROM messages_fts"), 3);
        assert_eq!(count("SELECT COUNT(*) FROM audit"), 1);
        other.execute_batch("DROP TRIGGER audit_sessions").unwrap();
        append(&db, "s", 1).unwrap();
        index_now(&db);
        assert_eq!(count("SELECT COUNT(*) FROM messages_fts_trigram"), 3);
        assert_eq!(count("SELECT COUNT(*) FROM messages_fts"), 4);
    }

    #[test]
    fn once_key_writes_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let op = || WriteOp::Append {
            session_id: "s".into(),
            rows: vec![NewMessage::text("user", "x", 1.0)],
            once_key: Some("k".into()),
        };
        assert!(matches!(db.write(op()).unwrap(), WriteOut::Ids(ids) if ids.len() == 1));
        assert_eq!(db.write(op()).unwrap(), WriteOut::Ids(vec![]));
        assert_eq!(db.message_count("s").unwrap(), Some(1));
    }

    #[test]
    fn foreign_file_is_refused_and_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        std::fs::write(&path, b"not a database at all, just text").unwrap();
        let before = std::fs::read(&path).unwrap();
        let err = SqliteBackend::open(&path, Options::default())
            .err()
            .unwrap();
        assert!(matches!(err, Error::NotADatabase { .. }));
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert!(!dir.path().join("state.db-wal").exists());
    }

    #[test]
    fn files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        for name in ["state.db", "state.db-wal", "state.db-shm"] {
            let mode = std::fs::metadata(dir.path().join(name)).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o600, "{name}");
        }
    }

    #[test]
    fn deleted_file_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        std::fs::remove_file(dir.path().join("state.db")).unwrap();
        let err = append(&db, "s", 1).unwrap_err();
        assert!(err.to_string().contains("deleted or replaced"), "{err}");
    }

    /// Appends ~5 MB (well past `CHECKPOINT_FRAMES` pages) and returns the
    /// size of the database file (not its WAL) right after.
    fn append_megabytes(db: &SqliteBackend, dir: &tempfile::TempDir) -> u64 {
        create(db, "big");
        for _ in 0..10 {
            let rows = (0..500)
                .map(|_| NewMessage::text("user", &"x".repeat(1000), 1.0))
                .collect();
            db.write(WriteOp::Append {
                session_id: "big".into(),
                rows,
                once_key: None,
            })
            .unwrap();
        }
        std::fs::metadata(dir.path().join("state.db"))
            .unwrap()
            .len()
    }

    #[test]
    fn checkpoints_run_beside_commits_not_inside_them() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop();
        let size = append_megabytes(&db, &dir);
        assert!(
            size < 1 << 20,
            "a commit checkpointed: the file is {size} bytes"
        );
        assert!(db.checkpoint_due.load(Ordering::Acquire));

        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        append_megabytes(&db, &dir);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::metadata(dir.path().join("state.db"))
            .unwrap()
            .len()
            < 4 << 20
        {
            assert!(
                Instant::now() < deadline,
                "the background checkpoint never ran"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_steady_writer_does_not_grow_the_wal_without_bound() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        // One-row commits back to back: faster than the indexer, which used
        // to checkpoint only once it had caught up, so never.
        for _ in 0..6000 {
            append(&db, "s", 1).unwrap();
        }
        let wal = std::fs::metadata(dir.path().join("state.db-wal"))
            .unwrap()
            .len();
        let limit = 8 * CHECKPOINT_FRAMES as u64 * 4096;
        assert!(wal < limit, "the WAL grew to {wal} bytes (limit {limit})");
    }

    #[test]
    fn opening_waits_for_another_process_holding_the_new_file() {
        // Another opener of a brand-new file holds it exclusively for longer
        // than one busy wait (it is switching it to WAL and creating tables).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let other = Connection::open(&path).unwrap();
        other
            .execute_batch("CREATE TABLE t(x); BEGIN EXCLUSIVE; INSERT INTO t VALUES (1);")
            .unwrap();
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            other.execute_batch("COMMIT").unwrap();
        });
        let db = open(&dir);
        holder.join().unwrap();
        create(&db, "s");
        assert_eq!(db.message_count("s").unwrap(), Some(0));
    }

    #[test]
    fn a_cut_wal_refuses_commits_and_the_database_stays_sound() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append(&db, "s", 3).unwrap();
        // Cut while idle: a commit between the cut and a read noticing it
        // (the indexer's, a few ms after the append) is not caught.
        index_now(&db);
        let wal = dir.path().join("state.db-wal");
        std::fs::File::options()
            .write(true)
            .open(&wal)
            .unwrap()
            .set_len(1000)
            .unwrap();
        // A new reader connection finds the hole...
        lock(&db.readers).clear();
        assert!(db.messages("s", false).is_err());
        // ...and from then on nothing is committed after it.
        let err = append(&db, "s", 1).unwrap_err();
        assert!(err.to_string().contains("was cut while open"), "{err}");
        db.close();
        // What was only in the WAL is lost (the fault), but the file is sound.
        let again = open(&dir);
        let check: String = again
            .read(|c| c.query_row("PRAGMA integrity_check", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(check, "ok");
        create(&again, "t");
        append(&again, "t", 2).unwrap();
        assert_eq!(again.message_count("t").unwrap(), Some(2));
    }

    #[test]
    fn foreign_commits_are_seen_own_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let a = open(&dir);
        let b = open(&dir);
        create(&a, "s");
        assert!(!a.foreign_commit_since_last_look().unwrap());
        let _ = b.foreign_commit_since_last_look().unwrap();
        append(&b, "s", 1).unwrap();
        assert!(a.foreign_commit_since_last_look().unwrap());
        assert!(!a.foreign_commit_since_last_look().unwrap());
        append(&a, "s", 2).unwrap();
        assert!(append(&a, "missing", 1).is_err());
        assert_eq!((a.own_appends("s"), b.own_appends("s")), (2, 1));
        assert_eq!(a.own_appends("missing"), 0);
        assert_eq!(a.message_count("s").unwrap(), Some(3));
    }

    // -- deferred indexing ------------------------------------------------------------

    #[test]
    fn a_write_leaves_a_pending_range_that_the_indexer_fills_right_after() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append(&db, "s", 3).unwrap();
        append(&db, "s", 2).unwrap();
        let indexed = || {
            db.read(|c| Ok(count(c, "SELECT COUNT(*) FROM messages_fts")))
                .unwrap()
        };
        wait_until(|| indexed() == 5 && pending_rows(&db) == 0);
    }

    #[test]
    fn a_search_right_after_a_write_finds_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop(); // nothing indexes behind the test's back
        create(&db, "s");
        let ids = match db
            .write(WriteOp::Append {
                session_id: "s".into(),
                rows: vec![NewMessage::text("user", "the quetzal landed", 1.0)],
                once_key: None,
            })
            .unwrap()
        {
            WriteOut::Ids(ids) => ids,
            other => panic!("{other:?}"),
        };
        assert_eq!(pending_rows(&db), 1);
        assert_eq!(search_ids(&db, "quetzal"), ids);
        assert_eq!(pending_rows(&db), 0);
    }

    #[test]
    fn a_search_answers_from_the_index_as_it_is_when_catching_up_fails() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            busy_budget: Duration::from_millis(200),
            ..Options::default()
        };
        let db = SqliteBackend::open(&dir.path().join("state.db"), options).unwrap();
        db.indexer.stop();
        create(&db, "s");
        db.write(WriteOp::Append {
            session_id: "s".into(),
            rows: vec![NewMessage::text("user", "alpaca one", 1.0)],
            once_key: None,
        })
        .unwrap();
        index_now(&db);
        db.write(WriteOp::Append {
            session_id: "s".into(),
            rows: vec![NewMessage::text("user", "alpaca two", 1.0)],
            once_key: None,
        })
        .unwrap();
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        assert_eq!(search_ids(&db, "alpaca").len(), 1);
        other.execute_batch("ROLLBACK").unwrap();
        assert_eq!(search_ids(&db, "alpaca").len(), 2);
    }

    #[test]
    fn ranges_left_by_a_crashed_writer_are_indexed_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        open(&dir).close();
        let other = Connection::open(&path).unwrap();
        crashed_writer_rows(&other, "s", &["left behind", "also left"]);
        assert_eq!(count(&other, "SELECT COUNT(*) FROM messages_fts"), 0);
        let db = open(&dir);
        wait_until(|| pending_rows(&db) == 0);
        assert_eq!(count(&other, "SELECT COUNT(*) FROM messages_fts"), 2);
        assert_eq!(search_ids(&db, "left").len(), 2);
    }

    #[test]
    fn rows_an_other_writer_indexed_meanwhile_are_not_indexed_twice() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop();
        create(&db, "s");
        append(&db, "s", 3).unwrap();
        // Triggers on: an update re-indexes row 2, and a new row 4 is
        // indexed, between our pending range 1..=3 and the next, 5..=6.
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other
            .execute_batch(
                "UPDATE messages SET content = 'edited' WHERE id = 2;
                 INSERT INTO messages (session_id, role, content, timestamp)
                 VALUES ('s', 'user', 'theirs', 1);",
            )
            .unwrap();
        append(&db, "s", 2).unwrap();
        index_now(&db);
        assert_eq!(pending_rows(&db), 0);
        assert_eq!(count(&other, "SELECT COUNT(*) FROM messages_fts"), 6);
        assert_eq!(search_ids(&db, "edited"), vec![2]);
        assert_eq!(
            search_ids(&db, "m1").len(),
            1,
            "the old text of row 2 is gone"
        );
    }

    #[test]
    fn close_indexes_every_pending_row() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop();
        create(&db, "s");
        for _ in 0..5 {
            append(&db, "s", 300).unwrap();
        }
        assert_eq!(pending_rows(&db), 1500);
        db.close();
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        assert_eq!(count(&other, "SELECT COUNT(*) FROM hermes_fts_pending"), 0);
        assert_eq!(count(&other, "SELECT COUNT(*) FROM messages_fts"), 1500);
    }

    #[test]
    fn the_indexer_works_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop();
        create(&db, "s");
        append(&db, "s", 1300).unwrap();
        let indexed = || {
            db.read(|c| Ok(count(c, "SELECT COUNT(*) FROM messages_fts")))
                .unwrap()
        };
        let mut steps = Vec::new();
        loop {
            let more = lock(&db.writer)
                .as_mut()
                .unwrap()
                .index_pending(i64::MAX, BACKGROUND_CHUNK_ROWS)
                .unwrap();
            steps.push(indexed());
            if !more {
                break;
            }
        }
        assert_eq!(steps, vec![512, 1024, 1300]);
    }

    #[test]
    fn past_the_pending_limit_a_write_indexes_its_own_rows() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop();
        create(&db, "s");
        let limit = crate::store::search_index::MAX_PENDING_ROWS;
        append(&db, "s", limit as usize - 100).unwrap();
        append(&db, "s", 100).unwrap(); // just fits, in the same range
        append(&db, "s", 200).unwrap();
        assert_eq!(pending_rows(&db), limit);
        let ranges = db.read(|c| Ok(count(c, "SELECT COUNT(*) FROM hermes_fts_pending")));
        assert_eq!(ranges.unwrap(), 1);
        let indexed = |sql: &str| db.read(|c| Ok(count(c, sql))).unwrap();
        assert_eq!(indexed("SELECT COUNT(*) FROM messages_fts"), 200);
        assert_eq!(indexed("SELECT MIN(rowid) FROM messages_fts"), limit + 1);
        index_now(&db);
        assert_eq!(indexed("SELECT COUNT(*) FROM messages_fts"), limit + 200);
    }

    #[test]
    fn writes_are_durable_again_after_the_indexer_relaxed_synchronous() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop();
        create(&db, "s");
        append(&db, "s", 1).unwrap();
        index_now(&db);
        let level = || {
            count(
                &lock(&db.writer).as_ref().unwrap().conn,
                "PRAGMA synchronous",
            )
        };
        assert_eq!(level(), 1, "the indexer commits at NORMAL");
        append(&db, "s", 1).unwrap();
        assert_eq!(level(), 2, "a write runs at FULL");
    }

    #[test]
    fn indexer_failures_are_retried_and_never_reach_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        crashed_writer_rows(&other, "s", &["waiting"]);
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        db.indexer.wake();
        std::thread::sleep(Duration::from_millis(300)); // its tries fail: busy
        assert_eq!(pending_rows(&db), 1, "a failed try lost the range");
        other.execute_batch("ROLLBACK").unwrap();
        // No write, no wake: the indexer tries again by itself.
        wait_until(|| pending_rows(&db) == 0);
        assert_eq!(count(&other, "SELECT COUNT(*) FROM messages_fts"), 1);
        append(&db, "s", 1).unwrap();
    }

    #[test]
    fn the_indexer_waits_while_a_transcript_loads() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append(&db, "s", 100).unwrap();
        wait_until(|| pending_rows(&db) == 0);
        // A row committed while a load (long enough for a helper thread) is
        // in progress stays pending until the load ends, unless the load
        // outlasts the indexer's patience; a late check proves nothing, so
        // it is tried again.
        let mut checked = 0;
        for _ in 0..5 {
            let mut pending_during_load = None;
            db.conversation("s", false, &mut |_first_table| {
                append(&db, "s", 1).unwrap();
                let committed = Instant::now();
                std::thread::sleep(INDEXER_QUIET * 5);
                let pending = pending_rows(&db);
                if committed.elapsed() < INDEXER_PATIENCE {
                    pending_during_load = Some(pending);
                }
                false
            })
            .unwrap();
            if let Some(pending) = pending_during_load {
                assert_eq!(pending, 1, "the indexer ran during the load");
                checked += 1;
            }
            wait_until(|| pending_rows(&db) == 0);
        }
        assert!(checked > 0, "no check within the indexer's patience");
    }

    #[test]
    fn the_indexers_commits_are_not_foreign() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let _ = db.foreign_commit_since_last_look().unwrap();
        append(&db, "s", 20).unwrap();
        wait_until(|| pending_rows(&db) == 0);
        assert!(!db.foreign_commit_since_last_look().unwrap());
        assert_eq!(db.own_appends("s"), 20);
        assert_eq!(db.message_count("s").unwrap(), Some(20));
    }

    #[test]
    fn past_a_cut_wal_the_indexer_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        // Pending rows whose pages the writer has cached: it could index
        // them without reading the cut WAL.
        append(&db, "s", 3).unwrap();
        let wal = dir.path().join("state.db-wal");
        {
            let _writer = lock(&db.writer); // the woken indexer waits behind the cut
            std::fs::File::options()
                .write(true)
                .open(&wal)
                .unwrap()
                .set_len(1000)
                .unwrap();
            lock(&db.readers).clear();
            assert!(db.messages("s", false).is_err(), "the hole went unnoticed");
        }
        assert!(db.index_pending_up_to(i64::MAX).is_err());
        std::thread::sleep(Duration::from_millis(50)); // the indexer's turn
        assert_eq!(
            std::fs::metadata(&wal).unwrap().len(),
            1000,
            "written past the cut"
        );
        db.close();
        let again = open(&dir);
        let check: String = again
            .read(|c| c.query_row("PRAGMA integrity_check", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(check, "ok");
    }
}
