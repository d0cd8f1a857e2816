//! What the Python layer asks of storage, behind one trait.
//!
//! `SqliteBackend` is the only implementation today. A second backend (for
//! example PostgreSQL, for gateways spread over several hosts) implements
//! [`Backend`] and plugs into `py_store::Store` without touching Python.

mod group_commit;
mod helper_threads;
mod indexer;
mod search_index;
mod sqlite;
mod tables;

pub use sqlite::{Options, SqliteBackend};

use std::path::Path;
use std::sync::{LockResult, Mutex, MutexGuard, PoisonError};

use crate::error::Result;
use crate::model::{NewMessage, Table, Value};

/// A lock result, taken even if another holder panicked: every lock here
/// guards state that a panic cannot leave half-changed (SQLite rolls an
/// open transaction back; flags, queues and lists change in single steps).
fn relock<G>(result: LockResult<G>) -> G {
    result.unwrap_or_else(PoisonError::into_inner)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    relock(mutex.lock())
}

/// One write, executed inside a transaction that may carry other callers'
/// writes too (group commit). Each write succeeds or fails on its own.
#[derive(Debug, Clone)]
pub enum WriteOp {
    /// Insert the session row; if it exists, fill only its NULL columns.
    CreateSession {
        id: String,
        source: String,
        started_at: f64,
        columns: Vec<(String, Value)>,
    },
    /// Insert messages in order and move the session's counters with them.
    /// With `once_key`, the write happens at most once per key (recorded in
    /// `state_meta`); a repeat returns no ids.
    Append {
        session_id: String,
        rows: Vec<NewMessage>,
        once_key: Option<String>,
    },
    UpdateSession {
        id: String,
        columns: Vec<(String, Value)>,
    },
    SaveRouting {
        scope: String,
        session_key: String,
        entry_json: String,
    },
    DeleteRouting {
        scope: String,
        session_keys: Vec<String>,
    },
    SetMeta {
        key: String,
        value: String,
    },
}

/// What a write returns.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOut {
    Done,
    Ids(Vec<i64>),
}

/// Filters for listing and searching.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub source: Option<String>,
    pub session_id: Option<String>,
    pub limit: i64,
    pub offset: i64,
}

pub trait Backend: Send + Sync {
    /// The file (or address) this backend stores into, for error messages.
    fn location(&self) -> &Path;

    /// Runs one write; group-committed with concurrent writes from other threads.
    fn write(&self, op: WriteOp) -> Result<WriteOut>;
    /// Runs one write only if it can start at once: no other write of this
    /// backend running or queued, and the file's write lock free. Otherwise
    /// nothing is written and the error is [`crate::error::Error::WriterBusy`].
    fn write_now(&self, op: WriteOp) -> Result<WriteOut>;

    /// The session's row (an empty table when it does not exist).
    fn session(&self, id: &str) -> Result<Table>;
    /// The live `message_count` of a session (`None` when it does not exist).
    fn message_count(&self, id: &str) -> Result<Option<i64>>;
    /// How many message rows this backend has committed to the session.
    fn own_appends(&self, session_id: &str) -> u64;
    /// Whether any other connection committed since the previous call.
    fn foreign_commit_since_last_look(&self) -> Result<bool>;
    /// A session's messages in insertion order (`messages.id`).
    fn messages(&self, session_id: &str, include_inactive: bool) -> Result<Table>;
    /// The same rows, in the columns of [`crate::model::CONVERSATION_COLUMNS`],
    /// handed to `sink` on the calling thread in tables, in order, while the
    /// rest is read (see [`tables::read_ahead`]). Reading stops, without
    /// error, when `sink` returns false.
    fn conversation(
        &self,
        session_id: &str,
        include_inactive: bool,
        sink: &mut dyn FnMut(Table) -> bool,
    ) -> Result<()>;
    fn list_sessions(&self, page: &Page) -> Result<Table>;
    fn search(&self, query: &str, page: &Page) -> Result<Table>;
    fn has_platform_message_id(&self, session_id: &str, platform_message_id: &str) -> Result<bool>;
    fn routing_entries(&self, scope: &str) -> Result<Vec<(String, String)>>;
    fn meta(&self, key: &str) -> Result<Option<String>>;
    /// The column names of the `sessions` table, for validating updates.
    fn session_columns(&self) -> &[String];
    fn close(&self);
}
