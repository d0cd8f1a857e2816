//! Full-text search (FTS5), which first indexes whatever is pending, so a
//! search finds every row committed before it.

use std::time::Instant;

use rusqlite::types::Value as SqlValue;
use rusqlite::{params_from_iter, Connection};

use super::busy::with_busy_retry;
use super::error::{classify, note_short_read};
use super::search_index::{CATCH_UP_CHUNK_ROWS, INDEXED_TEXT};
use super::{tables, SqliteBackend};
use crate::error::{Error, Result};
use crate::model::Table;
use crate::store::lock;
use crate::store::search::{Expr, Route, Search, SearchOrder, Terms};

/// The last id of the pending ranges (None when nothing is pending).
pub fn pending_up_to(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT MAX(last_id) FROM hermes_fts_pending")?
        .query_row([], |r| r.get(0))
}

/// The columns of a hit, after its index's own (`id`, `snippet`, `rank`).
const HIT_COLUMNS: &str = "m.session_id, m.role, m.content, m.timestamp, m.tool_name,
    s.source, s.model, s.started_at AS session_started, s.title";

/// Lists longer than this are bound as one JSON array rather than a
/// parameter per value (SQLite takes at most 32,766 parameters).
const LISTED_VALUES: usize = 64;

/// A search's SQL, built with its parameters: `?1` is the FTS5 query (or the
/// term a substring snippet centres on), then come the filters' values.
struct Statement {
    params: Vec<SqlValue>,
}

impl Statement {
    /// A new parameter, as its `?N`.
    fn bind(&mut self, value: SqlValue) -> String {
        self.params.push(value);
        format!("?{}", self.params.len())
    }

    /// `(?a, ?b, ...)` for `IN`: a parameter per value, so SQLite weighs the
    /// test as the cheap one it is (a subquery it evaluates after the
    /// others: a substring scan then read every row's text before its
    /// role); a long list as one JSON array.
    fn list(&mut self, values: &[String]) -> String {
        if values.len() > LISTED_VALUES {
            let json = serde_json::to_string(values).unwrap_or_default();
            return format!(
                "(SELECT value FROM json_each({}))",
                self.bind(SqlValue::Text(json))
            );
        }
        let binds: Vec<String> = values
            .iter()
            .map(|v| self.bind(SqlValue::Text(v.clone())))
            .collect();
        format!("({})", binds.join(", "))
    }

    /// The filters of `search` it has, on `m` (messages) and `s` (sessions),
    /// each a term that starts with ` AND `. `index` is the FTS5 table a
    /// route reads, whose rows a session filter bounds to the session's ids.
    fn filters(&mut self, search: &Search, index: Option<&str>) -> String {
        let mut sql = String::new();
        if !search.include_inactive {
            sql.push_str(" AND (m.active = 1 OR m.compacted = 1)");
        }
        if let Some(sources) = &search.sources {
            let list = self.list(sources);
            sql.push_str(&format!(" AND s.source IN {list}"));
        }
        if let Some(excluded) = &search.exclude_sources {
            let list = self.list(excluded);
            sql.push_str(&format!(" AND s.source NOT IN {list}"));
        }
        if let Some(roles) = search.roles.as_ref().filter(|r| !r.is_empty()) {
            let list = self.list(roles);
            sql.push_str(&format!(" AND m.role IN {list}"));
        }
        if let Some(session) = &search.session_id {
            let id = self.bind(SqlValue::Text(session.clone()));
            sql.push_str(&format!(" AND m.session_id = {id}"));
            if let Some(table) = index {
                // The index is read from the session's first row to its last,
                // not whole.
                sql.push_str(&format!(
                    " AND {table}.rowid >= (SELECT MIN(id) FROM messages WHERE session_id = {id})
                      AND {table}.rowid <= (SELECT MAX(id) FROM messages WHERE session_id = {id})"
                ));
            }
        }
        sql
    }

    /// `LIMIT ?a OFFSET ?b` of the search's page.
    fn page(&mut self, search: &Search) -> String {
        let limit = self.bind(SqlValue::Integer(search.limit));
        let offset = self.bind(SqlValue::Integer(search.offset));
        format!("LIMIT {limit} OFFSET {offset}")
    }
}

/// The hits of `inner` (a page of hits with `hit_rank`), in `order`, each
/// with the role and content of the messages before and after it in its
/// session (by timestamp, then id), for context.
fn with_context(inner: &str, order: &str) -> String {
    // A row value, so that an index of the session's rows by timestamp (as
    // hermes-agent adds) finds the neighbour at once instead of reading the
    // session's rows.
    let neighbour = |cmp: &str, dir: &str| {
        format!(
            "(SELECT n.id FROM messages n WHERE n.session_id = h.session_id
                AND (n.timestamp, n.id) {cmp} (h.timestamp, h.id)
              ORDER BY n.timestamp {dir}, n.id {dir} LIMIT 1)"
        )
    };
    format!(
        "SELECT h.*, b.role AS before_role, b.content AS before_content,
                a.role AS after_role, a.content AS after_content
         FROM (SELECT h.*, {before} AS before_id, {after} AS after_id FROM ({inner}) h) h
         LEFT JOIN messages b ON b.id = h.before_id
         LEFT JOIN messages a ON a.id = h.after_id
         ORDER BY {order}",
        before = neighbour("<", "DESC"),
        after = neighbour(">", "ASC"),
    )
}

/// A page of hits from the FTS5 index `table` for the FTS5 query `fts5`.
///
/// Best match first, FTS5 ranks every match and the page is the first that
/// pass the filters (equal ranks in id order). Ranking only the rows the
/// filters admit instead joins every match with its message first, which
/// costs more than the ranking unless the matches are most of the messages.
fn index_search(table: &str, fts5: String, search: &Search) -> (String, Vec<SqlValue>) {
    let mut st = Statement { params: Vec::new() };
    let query = st.bind(SqlValue::Text(fts5));
    let filters = st.filters(search, Some(table));
    let (inner_order, outer_order) = match search.order {
        SearchOrder::Rank => ("rank", "h.hit_rank, h.id"),
        SearchOrder::Newest => (
            "m.timestamp DESC, hit_rank, m.id",
            "h.timestamp DESC, h.hit_rank, h.id",
        ),
        SearchOrder::Oldest => (
            "m.timestamp ASC, hit_rank, m.id",
            "h.timestamp ASC, h.hit_rank, h.id",
        ),
    };
    let page = st.page(search);
    let inner = format!(
        "SELECT m.id, snippet({table}, 0, '>>>', '<<<', '...', 40) AS snippet, {HIT_COLUMNS},
                {table}.rank AS hit_rank
         FROM {table}
         JOIN messages m ON m.id = {table}.rowid
         JOIN sessions s ON s.id = m.session_id
         WHERE {table} MATCH {query}{filters}
         ORDER BY {inner_order} {page}"
    );
    (with_context(&inner, outer_order), st.params)
}

/// A page of hits from a substring scan for `terms` (newest first), with
/// the indexed text around the first term as the snippet (a tool call's
/// row has no content).
fn substring_search(terms: &Terms, search: &Search) -> (String, Vec<SqlValue>) {
    let mut st = Statement { params: Vec::new() };
    let first = st.bind(SqlValue::Text(terms.0[0].1.text.clone()));
    let found = match terms.expr(|_| true) {
        Some(expr) => substring_condition(terms, &expr, &mut st),
        None => "0".to_owned(),
    };
    let filters = st.filters(search, None);
    let page = st.page(search);
    let inner = format!(
        "SELECT m.id, substr({INDEXED_TEXT}, max(1, instr({INDEXED_TEXT}, {first}) - 40), 120) AS snippet,
                {HIT_COLUMNS}, 0 AS hit_rank
         FROM messages m
         JOIN sessions s ON s.id = m.session_id
         WHERE {found}{filters}
         ORDER BY m.timestamp DESC, m.id DESC {page}"
    );
    (
        with_context(&inner, "h.timestamp DESC, h.id DESC"),
        st.params,
    )
}

/// `expr` as a condition on `m` that each term's text is found in a message,
/// its patterns bound in `st`.
fn substring_condition(terms: &Terms, expr: &Expr, st: &mut Statement) -> String {
    let mut all = |parts: &[Expr], joint: &str| {
        let parts: Vec<String> = parts
            .iter()
            .map(|part| substring_condition(terms, part, st))
            .collect();
        format!("({})", parts.join(joint))
    };
    match expr {
        Expr::Term(i) => {
            let n = st.bind(SqlValue::Text(Terms::like_pattern(&terms.0[*i].1.text)));
            // Never NULL, so that NOT of it holds for a row without the text.
            format!(
                "COALESCE(m.content LIKE {n} ESCAPE '\\' OR m.tool_name LIKE {n} ESCAPE '\\'
                  OR m.tool_calls LIKE {n} ESCAPE '\\', 0)"
            )
        }
        Expr::All(parts) => all(parts, " AND "),
        Expr::Any(parts) => all(parts, " OR "),
        Expr::Without(kept, excluded) => format!(
            "({} AND NOT {})",
            substring_condition(terms, kept, st),
            substring_condition(terms, excluded, st)
        ),
    }
}

impl SqliteBackend {
    pub(super) fn search_messages(&self, search: &Search) -> Result<Table> {
        let terms = Terms::parse(&search.query);
        let trigrams = self.read(|c| {
            c.prepare_cached(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts_trigram'",
            )?
            .exists([])
        })?;
        let (sql, params) = match terms.route(trigrams) {
            Route::Words => {
                let words = terms.words();
                if words.is_empty() {
                    return Ok(Table::new(Vec::<String>::new().into()));
                }
                index_search("messages_fts", words.fts5(), search)
            }
            Route::Trigrams => index_search("messages_fts_trigram", terms.fts5(), search),
            Route::Substrings => substring_search(&terms, search),
        };
        // Every row committed before the search is found: pending ranges
        // are indexed first. If that fails (locked past the budget, disk
        // full), the search answers from the index as it is: missing the
        // newest rows beats failing the search.
        if let Ok(Some(up_to)) = self.read(pending_up_to) {
            let _ = self.index_pending_up_to(up_to);
        }
        let out = self.read_raw(|c| tables::all(c, &sql, params_from_iter(&params)));
        // The query is always well formed (`Terms::fts5`); a failure with
        // SQLite's generic code that is not a damaged schema ("no such
        // table") is still reported as the query's, not as storage.
        out?.map_err(|e| {
            let generic = e.sqlite_error_code() == Some(rusqlite::ErrorCode::Unknown);
            let text = e.to_string();
            if generic && !text.contains("no such table") && !text.contains("no such module") {
                Error::BadQuery {
                    query: search.query.chars().take(200).collect(),
                    detail: text,
                }
            } else {
                classify(&self.at, e)
            }
        })
    }

    /// Indexes the pending rows with ids up to `up_to`, here and now, in
    /// large chunks (our writes may go between two). Stops after the busy
    /// budget, leaving the rest pending.
    pub(super) fn index_pending_up_to(&self, up_to: i64) -> Result<()> {
        let deadline = Instant::now() + self.options.busy_budget;
        loop {
            self.ensure_not_cut()?;
            let mut writer = lock(&self.writer);
            let w = writer.as_mut().ok_or_else(|| self.closed_error())?;
            let budget = deadline.saturating_duration_since(Instant::now());
            let more = with_busy_retry(&self.at, budget, || {
                w.index_pending(up_to, CATCH_UP_CHUNK_ROWS)
                    .inspect_err(|e| note_short_read(&self.cut, e))
            })?;
            if !more || Instant::now() >= deadline {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::SqliteBackend;
    use crate::model::NewMessage;
    use crate::store::{Backend, Options, WriteOp, WriteOut};
    use rusqlite::Connection;
    use std::time::Duration;

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
        append_text(&db, "s", "alpaca one");
        index_now(&db);
        append_text(&db, "s", "alpaca two");
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        assert_eq!(search_ids(&db, "alpaca").len(), 1);
        other.execute_batch("ROLLBACK").unwrap();
        assert_eq!(search_ids(&db, "alpaca").len(), 2);
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
}
