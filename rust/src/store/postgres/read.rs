//! Reads, on a pool of reader connections (one borrowed per read; a lost
//! one is replaced), and the SQL of each.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures_util::TryStreamExt;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, RowStream};

use super::connection::{Link, Server};
use super::error::classify;
use super::sql::Sql;
use super::value::{escape_text, names, push_row, table};
use super::PgBackend;
use crate::error::{Error, Result};
use crate::model::{Table, CONVERSATION_COLUMNS, MESSAGE_COLUMNS};
use crate::store::backoff::Backoff;
use crate::store::{lock, read_ahead, Filter, Page, Query, Relation, Term};

use std::pin::Pin;
use std::sync::{Arc, MutexGuard};

fn messages_sql(columns: &str, include_inactive: bool) -> String {
    let active = if include_inactive {
        ""
    } else {
        " AND active = 1"
    };
    format!("SELECT {columns} FROM messages WHERE session_id = $1{active} ORDER BY id")
}

/// Reader connections kept open between reads; a burst of more
/// concurrent reads opens more, closed again when they finish.
const IDLE_READERS: usize = 8;

impl PgBackend {
    /// Borrows a reader connection for `f`, connecting when none is idle. A
    /// read that loses its connection (the server restarted, the network
    /// dropped), fails as busy or cannot connect is tried again on a new one,
    /// with jittered backoff, within the busy budget: a read changes nothing,
    /// so a second try is always safe.
    pub(super) fn read<T>(&self, f: impl FnMut(&Server, &mut Link) -> Result<T>) -> Result<T> {
        self.read_retrying_while(|| true, f)
    }

    /// [`Self::read`], trying again only while `may_retry` holds (a read
    /// that has handed rows over would hand them again).
    fn read_retrying_while<T>(
        &self,
        may_retry: impl Fn() -> bool,
        mut f: impl FnMut(&Server, &mut Link) -> Result<T>,
    ) -> Result<T> {
        self.ensure_open()?;
        let deadline = Instant::now() + self.options.busy_budget;
        let mut backoff = Backoff::default();
        loop {
            let idle = lock(&self.readers).pop();
            let link = match idle {
                Some(link) if !link.client.is_closed() => Ok(link),
                _ => self.server.connect(),
            };
            let (out, lost) = match link {
                Ok(mut link) => {
                    let out = f(&self.server, &mut link);
                    // A link the server ended (a restart's 57P01) fails its next read
                    // with the server's last word before it knows it is closed: a busy
                    // failure, so the link is not kept and the read is tried again.
                    let busy = out.as_ref().is_err_and(Error::is_busy);
                    let lost = out.is_err() && (busy || link.client.is_closed());
                    if busy {
                        self.server.disconnect(link);
                    } else {
                        self.put_back(link);
                    }
                    (out, lost)
                }
                Err(e) => {
                    let refused = e.is_busy();
                    (Err(e), refused)
                }
            };
            if lost && may_retry() && Instant::now() < deadline {
                backoff.sleep();
                self.ensure_open()?;
                continue;
            }
            return out;
        }
    }

    /// Returns a reader link to the pool, or closes it.
    fn put_back(&self, link: Link) {
        // `closed` is read under the pool's lock, which `close` takes after
        // setting it: a link put back after the close is not kept.
        let idle = lock(&self.readers);
        if self.closed.load(Ordering::Acquire) {
            drop(idle);
            self.server.disconnect(link);
        } else {
            keep_idle(&self.server, idle, link);
        }
    }

    /// The rows of one statement as a table.
    fn rows(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
        columns: Arc<[String]>,
    ) -> Result<Table> {
        self.read(|server, link| {
            server
                .block_on(link.client.query_typed(sql, params))
                .and_then(|rows| table(&rows, columns.clone()))
                .map_err(|e| classify(&self.at, e))
        })
    }

    pub(super) fn select(&self, query: &Query) -> Result<Table> {
        query.check(&self.columns)?;
        let sql = Sql::select(&self.types, query);
        let columns: Arc<[String]> = if query.select.is_empty() {
            self.columns.of(query.relation).into()
        } else {
            query.select.iter().map(Term::to_string).collect()
        };
        self.rows(&sql.text, &sql.params(), columns)
    }

    pub(super) fn count_rows(&self, relation: Relation, filter: &Filter) -> Result<i64> {
        filter.check(relation, &self.columns)?;
        let sql = Sql::count(&self.types, relation, filter);
        self.read(|server, link| {
            server
                .block_on(link.client.query_typed(&sql.text, &sql.params()))
                .map(|rows| rows[0].get(0))
                .map_err(|e| classify(&self.at, e))
        })
    }

    pub(super) fn session_row(&self, id: &str) -> Result<Table> {
        let id = escape_text(id);
        self.rows(
            "SELECT * FROM sessions WHERE id = $1",
            &[(&id, Type::TEXT)],
            self.columns.of(Relation::Sessions).into(),
        )
    }

    pub(super) fn live_message_count(&self, id: &str) -> Result<Option<i64>> {
        let id = escape_text(id);
        self.read(|server, link| {
            server
                .block_on(link.client.query_typed(
                    "SELECT COALESCE(message_count, 0) FROM sessions WHERE id = $1",
                    &[(&id, Type::TEXT)],
                ))
                .map(|rows| rows.first().map(|r| r.get(0)))
                .map_err(|e| classify(&self.at, e))
        })
    }

    pub(super) fn message_rows(&self, session_id: &str, include_inactive: bool) -> Result<Table> {
        let id = escape_text(session_id);
        let sql = messages_sql(MESSAGE_COLUMNS, include_inactive);
        self.rows(&sql, &[(&id, Type::TEXT)], names(MESSAGE_COLUMNS))
    }

    /// The transcript handed to `sink` in tables as its rows arrive, so the
    /// caller converts one while the server sends the next (the socket's
    /// buffer holds them meanwhile). Reading stops when `sink` returns false.
    pub(super) fn conversation_tables(
        &self,
        session_id: &str,
        include_inactive: bool,
        sink: &mut dyn FnMut(Table) -> bool,
    ) -> Result<()> {
        // The indexer waits for a load, as for a flush: it would share the cores.
        let _reading = self.commits.reading();
        let id = escape_text(session_id);
        let sql = messages_sql(CONVERSATION_COLUMNS, include_inactive);
        let columns = names(CONVERSATION_COLUMNS);
        let handed_over = Cell::new(false);
        let mut sink = |table: Table| {
            handed_over.set(true);
            sink(table)
        };
        self.read_retrying_while(
            || !handed_over.get(),
            |server, link| {
                streamed_tables(server, &link.client, &sql, &id, columns.clone(), &mut sink)
                    .map_err(|e| classify(&self.at, e))
            },
        )
    }

    pub(super) fn newest_sessions(&self, page: &Page) -> Result<Table> {
        let source = page.source.as_deref().map(escape_text);
        self.rows(
            "SELECT * FROM sessions WHERE ($1::text IS NULL OR source = $1)
             ORDER BY started_at DESC, id DESC LIMIT $2 OFFSET $3",
            &[
                (&source, Type::TEXT),
                (&page.limit, Type::INT8),
                (&page.offset, Type::INT8),
            ],
            self.columns.of(Relation::Sessions).into(),
        )
    }

    pub(super) fn has_platform_message(
        &self,
        session_id: &str,
        platform_message_id: &str,
    ) -> Result<bool> {
        let (session, platform) = (escape_text(session_id), escape_text(platform_message_id));
        self.read(|server, link| {
            server
                .block_on(link.client.query_typed(
                    "SELECT 1 FROM messages WHERE session_id = $1 AND platform_message_id = $2 LIMIT 1",
                    &[(&session, Type::TEXT), (&platform, Type::TEXT)],
                ))
                .map(|rows| !rows.is_empty())
                .map_err(|e| classify(&self.at, e))
        })
    }
}

/// Rows read on the calling thread before a helper thread takes over the
/// rest: a result this short is handed over with no thread woken.
const FIRST_STREAMED_ROWS: usize = 64;

/// Rows per table the helper hands over: few, so the consumer starts on
/// each soon after the server sent it.
const STREAMED_TABLE_ROWS: usize = 128;

/// The rows of `sql` (whose one parameter is the text `id`) handed to
/// `sink` in tables of `columns`, in order, on the calling thread, until
/// they end or `sink` returns false. The first [`FIRST_STREAMED_ROWS`] are
/// read here; a helper thread reads the rest (the link's protocol and the
/// rows' parsing run on it) while `sink` takes the tables read so far.
fn streamed_tables(
    server: &Server,
    client: &Client,
    sql: &str,
    id: &str,
    columns: Arc<[String]>,
    sink: &mut dyn FnMut(Table) -> bool,
) -> std::result::Result<(), tokio_postgres::Error> {
    let (mut rows, first, more) = server.block_on(async {
        let rows = client.query_typed_raw(sql, [(id, Type::TEXT)]).await?;
        let mut rows = Box::pin(rows);
        let mut first = Table::new(columns);
        // One row past the table: if it is there, more may follow.
        let more = fill(&mut rows, &mut first, FIRST_STREAMED_ROWS + 1).await?;
        Ok::<_, tokio_postgres::Error>((rows, first, more))
    })?;
    if !more {
        sink(first);
        return Ok(());
    }
    let next_rows =
        move |table: &mut Table| server.block_on(fill(&mut rows, table, STREAMED_TABLE_ROWS));
    read_ahead::read_rest_beside(first, next_rows, sink)
}

/// Moves up to `limit` rows of `rows` into `table`; false if they ran out first.
async fn fill(
    rows: &mut Pin<Box<RowStream>>,
    table: &mut Table,
    limit: usize,
) -> std::result::Result<bool, tokio_postgres::Error> {
    for _ in 0..limit {
        match rows.try_next().await? {
            Some(row) => push_row(table, &row)?,
            None => return Ok(false),
        }
    }
    Ok(true)
}

/// Keeps `link` among the `idle` readers, or closes it when it is lost or
/// the pool already keeps [`IDLE_READERS`].
pub(super) fn keep_idle(server: &Server, mut idle: MutexGuard<'_, Vec<Link>>, link: Link) {
    if link.client.is_closed() || idle.len() >= IDLE_READERS {
        drop(idle);
        server.disconnect(link);
    } else {
        idle.push(link);
    }
}
