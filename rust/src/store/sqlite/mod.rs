//! The SQLite backend: one writer connection fed by group commit, a pool of
//! reader connections, and a background thread that fills the search index
//! and checkpoints the WAL right after the commits, off their path.
//!
//! One file a job: `open` (file guards, first connection, schema),
//! `connection` (pragmas, the writer), `commit` (a batch in one transaction)
//! and `busy` (retry), `write` and `read` (the SQL of each operation, built
//! by `sql`), `search` (and `admitted`, the ids a source filter admits;
//! `rank`, the rank of a match of one phrase),
//! `search_index` / `upkeep` / `checkpoint` (deferred
//! indexing, on `store/indexer.rs`'s thread, and checkpoints), `tokenizer`
//! (FTS5's tokenizers called directly), `tables` (rows copied out through
//! the C API), `error` (SQLite failures classified); `mend` (a damaged
//! schema found and mended on the file, before any store opens it).

mod admitted;
mod busy;
mod checkpoint;
mod commit;
mod connection;
mod error;
mod import;
pub mod mend;
mod open;
mod rank;
mod read;
mod schema;
mod search;
mod search_index;
mod sql;
mod substrings;
mod tables;
#[cfg(test)]
mod test_support;
pub mod tokenizer;
mod upkeep;
mod word_pairs;
mod write;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::batch::Patience;
use super::columns::Columns;
use super::indexer::Indexer;
use super::{
    lock, Backend, Filter, GroupCommit, Location, OwnAppends, Page, Query, Relation, Search,
    WriteOp, WriteOut,
};
use crate::error::{Error, Result};
use crate::model::Table;
use connection::Writer;
use error::At as _;
use open::FileId;

pub use schema::{ensure as ensure_schema, schema_sql};
/// The v22 tables and indexes in SQLite's dialect, which the PostgreSQL backend translates.
#[cfg(feature = "postgres")]
pub(crate) use schema::{INDEXES as SCHEMA_INDEXES, TABLES as SCHEMA_TABLES};

/// The SQLite library's version (bundled with the core).
pub fn version() -> &'static str {
    rusqlite::version()
}

pub struct SqliteBackend {
    path: PathBuf,
    /// `path`, for messages and errors.
    at: Location,
    options: super::Options,
    file_id: FileId,
    /// Shared with the indexer thread, which takes the writer between batches.
    writer: Arc<Mutex<Option<Writer>>>,
    readers: Mutex<Vec<Connection>>,
    commits: Arc<GroupCommit<WriteOp, WriteOut>>,
    indexer: Indexer,
    columns: Columns,
    closed: AtomicBool,
    /// A read came up short: a file was cut under us (typically the WAL).
    /// A commit then would land after the hole and a checkpoint would copy
    /// the hole into the database, so writes (the indexer's too) are refused
    /// until a reopen.
    cut: Arc<AtomicBool>,
    /// The WAL has grown past `checkpoint::CHECKPOINT_FRAMES`: the indexer
    /// thread checkpoints it, so no caller's commit pays for a checkpoint.
    checkpoint_due: Arc<AtomicBool>,
    own_appends: OwnAppends,
}

impl SqliteBackend {
    fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(self.closed_error());
        }
        Ok(())
    }

    fn closed_error(&self) -> Error {
        Error::Closed {
            at: self.at.clone(),
        }
    }

    /// What a write made without waiting gets when another writer is in the way.
    fn writer_busy(&self) -> Error {
        Error::WriterBusy {
            at: self.at.clone(),
        }
    }

    fn not_found(&self, id: &str) -> Error {
        Error::SessionNotFound {
            session_id: id.to_owned(),
            at: self.at.clone(),
        }
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
    fn location(&self) -> &Location {
        &self.at
    }

    fn columns(&self) -> &Columns {
        &self.columns
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

    fn query(&self, query: &Query) -> Result<Table> {
        self.select(query)
    }

    fn count(&self, relation: Relation, filter: &Filter) -> Result<i64> {
        self.count_rows(relation, filter)
    }

    fn session(&self, id: &str) -> Result<Table> {
        self.session_row(id)
    }

    fn live_message_count(&self, id: &str) -> Result<Option<i64>> {
        self.live_message_count(id)
    }

    fn own_appends(&self, session_id: &str) -> u64 {
        self.own_appends.of(session_id)
    }

    fn foreign_commit_since_last_look(&self) -> Result<bool> {
        self.ensure_open()?;
        let mut writer = lock(&self.writer);
        let w = writer.as_mut().ok_or_else(|| self.closed_error())?;
        w.foreign_commit_since_last_look(&self.at)
    }

    fn messages(&self, session_id: &str, include_inactive: bool) -> Result<Table> {
        self.message_rows(session_id, include_inactive)
    }

    fn conversation(
        &self,
        session_id: &str,
        include_inactive: bool,
        sink: &mut dyn FnMut(Table) -> bool,
    ) -> Result<()> {
        self.conversation_tables(session_id, include_inactive, sink)
    }

    fn list_sessions(&self, page: &Page) -> Result<Table> {
        self.newest_sessions(page)
    }

    fn search(&self, search: &Search) -> Result<Table> {
        self.search_messages(search)
    }

    fn has_platform_message_id(&self, session_id: &str, platform_message_id: &str) -> Result<bool> {
        self.has_platform_message(session_id, platform_message_id)
    }

    fn vacuum(&self) -> Result<()> {
        self.ensure_open()?;
        let writer = lock(&self.writer);
        let w = writer.as_ref().ok_or_else(|| self.closed_error())?;
        w.conn
            // VACUUM writes the new file through the WAL: the second checkpoint moves it in.
            .execute_batch(
                "PRAGMA wal_checkpoint(TRUNCATE); VACUUM; PRAGMA wal_checkpoint(TRUNCATE)",
            )
            .at(&self.at)
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
            .and_then(|w| search::pending_up_to(&w.conn).ok().flatten());
        if let Some(up_to) = up_to {
            let _ = self.index_pending_up_to(up_to);
        }
        if let Some(w) = lock(&self.writer).take() {
            // A final passive checkpoint keeps the WAL small for the next opener.
            let _ = w.conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)");
        }
    }
}
