//! Full-text search (FTS5), which first indexes whatever is pending, so a
//! search finds every row committed before it.

use std::time::Instant;

use rusqlite::types::Value as SqlValue;
use rusqlite::{params_from_iter, Connection};

use super::busy::with_busy_retry;
use super::error::{classify, note_short_read};
use super::search_index::CATCH_UP_CHUNK_ROWS;
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

/// The filters every route applies, on `m` (messages) and `s` (sessions),
/// with the parameters `?2` to `?6` ([`filter_params`]).
const FILTERS: &str = "(?2 OR m.active = 1 OR m.compacted = 1)
    AND (?3 IS NULL OR s.source IN (SELECT value FROM json_each(?3)))
    AND (?4 IS NULL OR s.source NOT IN (SELECT value FROM json_each(?4)))
    AND (?5 IS NULL OR m.role IN (SELECT value FROM json_each(?5)))
    AND (?6 IS NULL OR m.session_id = ?6)";

/// The hits of `inner` (a page of hits with `hit_rank`), in `order`, each
/// with the role and content of the messages before and after it in its
/// session (by timestamp, then id), for context.
fn with_context(inner: &str, order: &str) -> String {
    let neighbour = |cmp: &str, dir: &str| {
        format!(
            "(SELECT n.id FROM messages n WHERE n.session_id = h.session_id
                AND (n.timestamp {cmp} h.timestamp OR (n.timestamp = h.timestamp AND n.id {cmp} h.id))
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

fn json_list(list: &Option<Vec<String>>) -> SqlValue {
    match list {
        Some(items) => SqlValue::Text(serde_json::to_string(items).unwrap_or_default()),
        None => SqlValue::Null,
    }
}

/// `?2` to `?6` of [`FILTERS`].
fn filter_params(search: &Search) -> Vec<SqlValue> {
    let roles = search.roles.as_ref().filter(|r| !r.is_empty()).cloned();
    vec![
        SqlValue::Integer(search.include_inactive.into()),
        json_list(&search.sources),
        json_list(&search.exclude_sources),
        json_list(&roles),
        search
            .session_id
            .clone()
            .map_or(SqlValue::Null, SqlValue::Text),
    ]
}

/// A page of hits from the FTS5 index `table`.
fn index_search(table: &str, order: SearchOrder) -> String {
    let (inner_order, outer_order) = match order {
        SearchOrder::Rank => ("rank", "h.hit_rank"),
        SearchOrder::Newest => ("m.timestamp DESC, rank", "h.timestamp DESC, h.hit_rank"),
        SearchOrder::Oldest => ("m.timestamp ASC, rank", "h.timestamp ASC, h.hit_rank"),
    };
    let inner = format!(
        "SELECT m.id, snippet({table}, 0, '>>>', '<<<', '...', 40) AS snippet, {HIT_COLUMNS},
                {table}.rank AS hit_rank
         FROM {table}
         JOIN messages m ON m.id = {table}.rowid
         JOIN sessions s ON s.id = m.session_id
         WHERE {table} MATCH ?1 AND {FILTERS}
         ORDER BY {inner_order} LIMIT ?7 OFFSET ?8"
    );
    with_context(&inner, outer_order)
}

/// A page of hits from a substring scan for `terms` (newest first), with
/// the text around the first term as the snippet; and its parameters after
/// `?1` to `?8`.
fn substring_search(terms: &Terms) -> (String, Vec<SqlValue>) {
    let mut params = Vec::new();
    let found = match terms.expr(|_| true) {
        Some(expr) => substring_condition(terms, &expr, &mut params),
        None => "0".to_owned(),
    };
    let inner = format!(
        "SELECT m.id, substr(m.content, max(1, instr(m.content, ?1) - 40), 120) AS snippet,
                {HIT_COLUMNS}, 0 AS hit_rank
         FROM messages m
         JOIN sessions s ON s.id = m.session_id
         WHERE {found} AND {FILTERS}
         ORDER BY m.timestamp DESC, m.id DESC LIMIT ?7 OFFSET ?8"
    );
    (with_context(&inner, "h.timestamp DESC, h.id DESC"), params)
}

/// `expr` as a condition on `m` that each term's text is found in a message,
/// its patterns appended to `params` (numbered after `?8`).
fn substring_condition(terms: &Terms, expr: &Expr, params: &mut Vec<SqlValue>) -> String {
    let mut all = |parts: &[Expr], joint: &str| {
        let parts: Vec<String> = parts
            .iter()
            .map(|part| substring_condition(terms, part, params))
            .collect();
        format!("({})", parts.join(joint))
    };
    match expr {
        Expr::Term(i) => {
            params.push(SqlValue::Text(Terms::like_pattern(&terms.0[*i].1.text)));
            let n = params.len() + 8;
            // Never NULL, so that NOT of it holds for a row without the text.
            format!(
                "COALESCE(m.content LIKE ?{n} ESCAPE '\\' OR m.tool_name LIKE ?{n} ESCAPE '\\'
                  OR m.tool_calls LIKE ?{n} ESCAPE '\\', 0)"
            )
        }
        Expr::All(parts) => all(parts, " AND "),
        Expr::Any(parts) => all(parts, " OR "),
        Expr::Without(kept, excluded) => format!(
            "({} AND NOT {})",
            substring_condition(terms, kept, params),
            substring_condition(terms, excluded, params)
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
        let (sql, first, extra) = match terms.route(trigrams) {
            Route::Words => {
                let words = terms.words();
                if words.is_empty() {
                    return Ok(Table::new(Vec::<String>::new().into()));
                }
                (
                    index_search("messages_fts", search.order),
                    words.fts5(),
                    Vec::new(),
                )
            }
            Route::Trigrams => (
                index_search("messages_fts_trigram", search.order),
                terms.fts5(),
                Vec::new(),
            ),
            Route::Substrings => {
                let (sql, extra) = substring_search(&terms);
                (sql, terms.0[0].1.text.clone(), extra)
            }
        };
        let mut params = vec![SqlValue::Text(first)];
        params.extend(filter_params(search));
        params.extend([
            SqlValue::Integer(search.limit),
            SqlValue::Integer(search.offset),
        ]);
        params.extend(extra);
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
