//! Reads, on a pool of reader connections (one borrowed per read; a lost
//! one is replaced), and the SQL of each.

use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio_postgres::types::{ToSql, Type};

use super::connection::{Link, Server};
use super::error::classify;
use super::sql::Sql;
use super::value::{escape_text, names, table};
use super::PgBackend;
use crate::error::{Error, Result};
use crate::model::{Table, CONVERSATION_COLUMNS, MESSAGE_COLUMNS};
use crate::store::backoff::Backoff;
use crate::store::search::{Op, Terms};
use crate::store::{lock, Filter, Page, Query, Relation, Search, SearchOrder, Term};

use std::sync::Arc;

const SEARCH_COLUMNS: &str = "id, session_id, role, content, tool_name, timestamp, source, model, \
    session_started, title, snippet, before_id, after_id, before_role, before_content, \
    after_role, after_content, hit_rank";

/// Terms in `websearch_to_tsquery`'s syntax: each quoted, `or` between
/// alternatives, `-` before an excluded one (no prefix search there).
fn websearch(terms: &Terms) -> String {
    let mut out = String::new();
    for (op, term) in &terms.0 {
        match op {
            Some(Op::Or) => out.push_str(" or "),
            Some(Op::Not) => out.push_str(" -"),
            _ => out.push(' '),
        }
        out.push('"');
        out.push_str(&term.text.replace('"', " "));
        out.push('"');
    }
    out
}

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
    /// dropped) or cannot connect is tried again on a new one, with jittered
    /// backoff, within the busy budget: a read changes nothing, so a second
    /// try is always safe.
    pub(super) fn read<T>(&self, mut f: impl FnMut(&Server, &mut Link) -> Result<T>) -> Result<T> {
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
                    let lost = out.is_err() && link.client.is_closed();
                    self.put_back(link);
                    (out, lost)
                }
                Err(e) => {
                    let refused = e.is_busy();
                    (Err(e), refused)
                }
            };
            if lost && Instant::now() < deadline {
                backoff.sleep();
                self.ensure_open()?;
                continue;
            }
            return out;
        }
    }

    /// Returns a reader link to the pool, or closes it.
    fn put_back(&self, link: Link) {
        let mut idle = lock(&self.readers);
        // Checked under the pool's lock, which `close` takes after setting
        // `closed`: a link put back after the close is not kept.
        if self.closed.load(Ordering::Acquire)
            || link.client.is_closed()
            || idle.len() >= IDLE_READERS
        {
            drop(idle);
            self.server.disconnect(link);
        } else {
            idle.push(link);
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

    /// The whole transcript in one table (no read-ahead yet).
    pub(super) fn conversation_table(
        &self,
        session_id: &str,
        include_inactive: bool,
        sink: &mut dyn FnMut(Table) -> bool,
    ) -> Result<()> {
        let id = escape_text(session_id);
        let sql = messages_sql(CONVERSATION_COLUMNS, include_inactive);
        let table = self.rows(&sql, &[(&id, Type::TEXT)], names(CONVERSATION_COLUMNS))?;
        if table.row_count() > 0 {
            sink(table);
        }
        Ok(())
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

    /// Word search over content, tool names and tool calls, as `websearch_to_tsquery`
    /// reads the query (words, "phrases", OR, -word); scanned, not indexed yet.
    /// A search over the messages' text as `to_tsvector` reads it (no index of
    /// ours; CJK text is not split into words here). The terms of
    /// `store::search` are written in `websearch_to_tsquery`'s syntax, which
    /// accepts any text.
    pub(super) fn search_messages(&self, search: &Search) -> Result<Table> {
        let terms = Terms::parse(&search.query).words();
        if terms.is_empty() {
            return Ok(Table::new(Vec::<String>::new().into()));
        }
        let words = escape_text(&websearch(&terms)).into_owned();
        let list = |l: &Option<Vec<String>>| {
            l.as_ref().map(|items| {
                items
                    .iter()
                    .map(|i| escape_text(i).into_owned())
                    .collect::<Vec<_>>()
            })
        };
        let (sources, excluded) = (list(&search.sources), list(&search.exclude_sources));
        let roles = list(&search.roles.clone().filter(|r| !r.is_empty()));
        let session = search.session_id.as_deref().map(escape_text);
        let order = match search.order {
            SearchOrder::Rank => "rank DESC, m.id",
            SearchOrder::Newest => "m.timestamp DESC, rank DESC",
            SearchOrder::Oldest => "m.timestamp ASC, rank DESC",
        };
        let neighbour = |cmp: &str, dir: &str| {
            format!(
                "(SELECT n.id FROM messages n WHERE n.session_id = h.session_id
                    AND (n.timestamp {cmp} h.timestamp OR (n.timestamp = h.timestamp AND n.id {cmp} h.id))
                  ORDER BY n.timestamp {dir}, n.id {dir} LIMIT 1)"
            )
        };
        let sql = format!(
            "WITH q AS (SELECT websearch_to_tsquery('simple', $1) AS q),
             hits AS (
                SELECT m.id, m.session_id, m.role, m.content, m.tool_name, m.timestamp,
                       s.source, s.model, s.started_at AS session_started, s.title,
                       ts_headline('simple', COALESCE(m.content, ''), q.q,
                           'StartSel=>>>, StopSel=<<<, MaxWords=40, MinWords=3') AS snippet,
                       ts_rank(to_tsvector('simple', {text}), q.q) AS rank
                FROM q, messages m JOIN sessions s ON s.id = m.session_id
                WHERE to_tsvector('simple', {text}) @@ q.q
                  AND ($2 OR m.active = 1 OR m.compacted = 1)
                  AND ($3::text[] IS NULL OR s.source = ANY($3))
                  AND ($4::text[] IS NULL OR NOT (s.source = ANY($4)))
                  AND ($5::text[] IS NULL OR m.role = ANY($5))
                  AND ($6::text IS NULL OR m.session_id = $6)
                ORDER BY {order} LIMIT $7 OFFSET $8),
             near AS (SELECT h.*, {before} AS before_id, {after} AS after_id FROM hits h)
             SELECT h.id, h.session_id, h.role, h.content, h.tool_name, h.timestamp, h.source,
                    h.model, h.session_started, h.title, h.snippet, h.before_id, h.after_id,
                    b.role AS before_role, b.content AS before_content,
                    a.role AS after_role, a.content AS after_content, h.rank AS hit_rank
             FROM near h
             LEFT JOIN messages b ON b.id = h.before_id
             LEFT JOIN messages a ON a.id = h.after_id
             ORDER BY {outer}",
            text = "COALESCE(m.content, '') || ' ' || COALESCE(m.tool_name, '') || ' ' || COALESCE(m.tool_calls, '')",
            before = neighbour("<", "DESC"),
            after = neighbour(">", "ASC"),
            outer = order.replace("m.", "h.").replace("rank", "h.rank"),
        );
        self.rows(
            &sql,
            &[
                (&words, Type::TEXT),
                (&search.include_inactive, Type::BOOL),
                (&sources, Type::TEXT_ARRAY),
                (&excluded, Type::TEXT_ARRAY),
                (&roles, Type::TEXT_ARRAY),
                (&session, Type::TEXT),
                (&search.limit, Type::INT8),
                (&search.offset, Type::INT8),
            ],
            names(SEARCH_COLUMNS),
        )
        .map_err(|e| match e {
            Error::Storage { detail, .. } if detail.contains("tsquery") => Error::BadQuery {
                query: search.query.chars().take(200).collect(),
                detail,
            },
            e => e,
        })
    }
}
