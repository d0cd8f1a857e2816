//! What the Python layer asks of storage, behind one trait, and everything
//! about it that is the same for every backend: the typed operations and
//! their checks, group commit, the batch policy, own-append counts.
//!
//! Nothing in this layer names a database library: `sqlite/` is the SQLite
//! backend, `postgres/` (the `postgres` feature) the PostgreSQL one, picked
//! by [`open`] from a `postgresql://` location.

mod backoff;
pub mod batch;
pub mod columns;
pub mod copy;
mod group_commit;
mod helper_threads;
pub mod indexer;
mod location;
mod own_appends;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod query;
mod read_ahead;
mod relation;
pub mod search;
pub mod sqlite;
#[cfg(test)]
mod test_support;
mod write;

pub use group_commit::GroupCommit;
pub use location::{Location, Target};
pub use own_appends::OwnAppends;
pub use query::{Cmp, Derived, Filter, Order, Query, Term};
pub use relation::Relation;
pub use search::{Search, SearchOrder};
pub use write::{
    Assign, Delete, Import, IndexUpkeep, Insert, NoMatch, OnConflict, Update, WriteOp, WriteOut,
};

use std::ffi::OsStr;
use std::sync::{LockResult, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::model::Table;

/// A lock result, taken even if another holder panicked: every lock here
/// guards state that a panic cannot leave half-changed (SQLite rolls an
/// open transaction back; flags, queues and lists change in single steps).
fn relock<G>(result: LockResult<G>) -> G {
    result.unwrap_or_else(PoisonError::into_inner)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    relock(mutex.lock())
}

/// How hard a commit pushes to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// A commit that returned survives power loss.
    Full,
    /// A commit survives a process crash; the last ones may roll back on power loss.
    Normal,
}

impl Durability {
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_uppercase().as_str() {
            "FULL" => Some(Self::Full),
            "NORMAL" => Some(Self::Normal),
            _ => None,
        }
    }
}

/// How a store is opened.
#[derive(Debug, Clone)]
pub struct Options {
    pub durability: Durability,
    /// How long a write may keep retrying a busy store before it fails.
    pub busy_budget: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Full,
            busy_budget: Duration::from_secs(10),
        }
    }
}

/// Opens the store at `location`: a file path (SQLite), or a server URL.
pub fn open(location: &OsStr, options: Options) -> Result<Box<dyn Backend>> {
    match Target::of(location) {
        Target::File(path) => Ok(Box::new(sqlite::SqliteBackend::open(path, options)?)),
        #[cfg(feature = "postgres")]
        Target::Postgres(url) => Ok(Box::new(postgres::PgBackend::open(url, options)?)),
        #[cfg(not(feature = "postgres"))]
        Target::Postgres(url) => Err(Error::Config(format!(
            "{}: this build has no PostgreSQL support (the `postgres` feature); point the \
             store at a state.db file path",
            Location::server(url)
        ))),
        Target::UnknownScheme(url) => Err(Error::Config(format!(
            "{}: not a file path, and no backend serves this kind of URL; use a state.db path",
            Location::server(url)
        ))),
    }
}

/// Filters and page of a search or a session list.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub source: Option<String>,
    pub session_id: Option<String>,
    pub limit: i64,
    pub offset: i64,
}

/// A store. Beside the typed operations ([`Backend::query`],
/// [`Backend::write`]) it keeps dedicated methods only for the hot paths
/// (the flush, the coherence guard's count, the transcript load), for the
/// session list and for search; everything else is a typed operation (docs/ARCHITECTURE.md, "How
/// a store method is added").
pub trait Backend: Send + Sync {
    /// Where this backend stores, for messages.
    fn location(&self) -> &Location;
    /// The columns of each relation in the open store, for the typed operations.
    fn columns(&self) -> &columns::Columns;

    /// Runs one write; group-committed with concurrent writes from other threads.
    fn write(&self, op: WriteOp) -> Result<WriteOut>;
    /// Runs one write only if it can start at once: no other write of this
    /// backend running or queued, and the store's write lock free. Otherwise
    /// nothing is written and the error is [`Error::WriterBusy`].
    fn write_now(&self, op: WriteOp) -> Result<WriteOut>;

    /// The rows of a typed query.
    fn query(&self, query: &Query) -> Result<Table>;
    /// How many rows of `relation` match `filter`.
    fn count(&self, relation: Relation, filter: &Filter) -> Result<i64>;

    /// The session's row (an empty table when it does not exist).
    fn session(&self, id: &str) -> Result<Table>;
    /// The live `message_count` of a session (`None` when it does not exist).
    fn live_message_count(&self, id: &str) -> Result<Option<i64>>;
    /// How many message rows this backend has committed to the session.
    fn own_appends(&self, session_id: &str) -> u64;
    /// Whether any other connection committed since the previous call.
    fn foreign_commit_since_last_look(&self) -> Result<bool>;
    /// A session's messages in insertion order (`messages.id`).
    fn messages(&self, session_id: &str, include_inactive: bool) -> Result<Table>;
    /// The same rows, in the columns of [`crate::model::CONVERSATION_COLUMNS`],
    /// handed to `sink` on the calling thread in tables, in order, while the
    /// rest is read. Reading stops, without error, when `sink` returns false.
    fn conversation(
        &self,
        session_id: &str,
        include_inactive: bool,
        sink: &mut dyn FnMut(Table) -> bool,
    ) -> Result<()>;
    /// Sessions, newest first (`started_at`, then `id`, descending), of one
    /// source or all. Dedicated rather than a typed query: without
    /// statistics, SQLite would search a source's sessions by its index and
    /// sort them all; this walks the start-time index and stops at the page.
    fn list_sessions(&self, page: &Page) -> Result<Table>;
    /// Messages matching a search as a person types it (`store::search`),
    /// best match first unless ordered by time.
    fn search(&self, search: &Search) -> Result<Table>;
    fn has_platform_message_id(&self, session_id: &str, platform_message_id: &str) -> Result<bool>;
    /// Gives the space of deleted rows back to the file system (SQLite: a
    /// truncating WAL checkpoint, `VACUUM`, another checkpoint), between writes.
    fn vacuum(&self) -> Result<()>;
    fn close(&self);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_url_that_cannot_be_served_is_refused_clearly_without_its_password() {
        let refused = |url: &str| {
            let err = open(OsStr::new(url), Options::default()).err().unwrap();
            let text = err.to_string();
            assert!(!text.contains("secret"), "{text}");
            (err, text)
        };
        let (err, text) = refused("mysql://u:secret@h/db");
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        assert!(text.starts_with("mysql://u@h/db"), "{text}");
        // Nothing listens on port 1: the server's absence is said, not the password.
        let (_, text) = refused("postgresql://u:secret@127.0.0.1:1/db");
        assert!(text.starts_with("postgresql://u@127.0.0.1:1/db"), "{text}");
        if cfg!(feature = "postgres") {
            assert!(text.contains("did not answer"), "{text}");
        } else {
            assert!(text.contains("no PostgreSQL support"), "{text}");
        }
    }

    #[test]
    fn a_path_opens_a_sqlite_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = open(path.as_os_str(), Options::default()).unwrap();
        assert_eq!(store.location(), &Location::File(path.clone()));
        store.close();
        assert!(path.exists());
    }
}
