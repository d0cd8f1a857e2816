//! The PostgreSQL backend: `tokio-postgres` on a small current-thread
//! runtime the backend owns (each call blocks on it, with the GIL released
//! by the caller), one writer connection fed by group commit, a pool of
//! reader connections. Every statement is unnamed (`query_typed`, or the
//! simple protocol), so it works behind PgBouncer in transaction mode; the
//! flush's statement is a server-side function, whose plan the server keeps.
//!
//! One file a job: `connection` (runtime, connect, TLS, reconnect),
//! `schema` (the DDL and its migrations under an advisory lock), `value`
//! (values in and out, the NUL escape), `sql` (typed operations as SQL),
//! `commit` (a batch in one transaction), `write`, `import` and `read` (the
//! SQL of each operation), `search` and `search_index` (the side table of
//! words and trigrams, filled by a background indexer), `changes` (the
//! per-database commit counter), `error` (server failures classified).

mod changes;
mod commit;
mod connection;
mod error;
mod import;
mod read;
mod schema;
mod search;
mod search_index;
mod sql;
mod value;
mod write;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use self::error::classify;
use super::batch::Patience;
use super::columns::Columns;
use super::indexer::{Indexer, INDEXER_PATIENCE, INDEXER_QUIET};
use super::{
    lock, Backend, Filter, GroupCommit, IndexUpkeep, Location, OwnAppends, Page, Query, Relation,
    Search, WriteOp, WriteOut,
};
use crate::error::{Error, Result};
use crate::model::Table;
use changes::Changes;
use connection::{Link, Server};
use value::Types;

pub use value::{escape_text, unescape_text};

pub struct PgBackend {
    server: Arc<Server>,
    at: Location,
    options: super::Options,
    writer: Mutex<Option<Link>>,
    /// Idle reader connections, shared with the indexer thread.
    readers: Arc<Mutex<Vec<Link>>>,
    commits: Arc<GroupCommit<WriteOp, WriteOut>>,
    /// Moves pending rows into the search index, on a connection of its own.
    indexer: Indexer,
    columns: Columns,
    /// Each column's type, for binding values to it.
    types: Types,
    changes: Changes,
    closed: AtomicBool,
    own_appends: OwnAppends,
}

impl PgBackend {
    /// Connects to the server at `url`, migrates its schema (once, whoever
    /// else starts at the same time) and reads its columns.
    pub fn open(url: &str, options: super::Options) -> Result<Self> {
        let at = Location::server(url);
        let server = Arc::new(Server::new(url, &at)?);
        let mut link = server.connect()?;
        schema::migrate(&server, &mut link)?;
        let (columns, types) = schema::columns(&server, &mut link)?;
        let changes = Changes::start(&server, &mut link)?;
        let commits = Arc::new(GroupCommit::default());
        let readers = Arc::new(Mutex::new(Vec::new()));
        let indexer = Indexer::spawn(true, {
            let (server, commits) = (Arc::clone(&server), Arc::clone(&commits));
            let readers = Arc::clone(&readers);
            move || {
                commits.wait_quiet(INDEXER_QUIET, INDEXER_PATIENCE);
                search_index::background_step(&server, &readers)
            }
        })
        .map_err(|e| Error::io(&at, e))?;
        Ok(PgBackend {
            server,
            at,
            options,
            writer: Mutex::new(Some(link)),
            readers,
            commits,
            indexer,
            columns,
            types,
            changes,
            closed: AtomicBool::new(false),
            own_appends: OwnAppends::default(),
        })
    }

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

impl Backend for PgBackend {
    fn location(&self) -> &Location {
        &self.at
    }

    fn columns(&self) -> &Columns {
        &self.columns
    }

    fn write(&self, op: WriteOp) -> Result<WriteOut> {
        self.ensure_open()?;
        let rebuild = matches!(op, WriteOp::SearchIndex(IndexUpkeep::Rebuild));
        let out = self
            .commits
            .submit(op, |jobs| self.commit_batch(jobs, Patience::Budget))?;
        if rebuild {
            // The side table is empty and every message pending: fill it now.
            self.index_pending(None)?;
        }
        Ok(out)
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

    fn vacuum(&self) -> Result<()> {
        self.ensure_open()?;
        self.read(|server, link| {
            server
                .block_on(link.client.batch_execute("VACUUM"))
                .map_err(|e| classify(&self.at, e))
        })
    }

    fn own_appends(&self, session_id: &str) -> u64 {
        self.own_appends.of(session_id)
    }

    fn foreign_commit_since_last_look(&self) -> Result<bool> {
        self.ensure_open()?;
        self.read(|server, link| self.changes.foreign_since_last_look(server, link))
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
        self.ensure_open()?;
        self.search_messages(search)
    }

    fn has_platform_message_id(&self, session_id: &str, platform_message_id: &str) -> Result<bool> {
        self.has_platform_message(session_id, platform_message_id)
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        // Pending rows stay pending in the database, for any host's indexer or search.
        self.indexer.stop();
        let idle: Vec<Link> = lock(&self.readers).drain(..).collect();
        let writer = lock(&self.writer).take();
        for link in idle.into_iter().chain(writer) {
            self.server.disconnect(link);
        }
    }
}

impl Drop for PgBackend {
    fn drop(&mut self) {
        self.close();
    }
}
