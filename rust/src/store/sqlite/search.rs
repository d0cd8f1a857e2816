//! Full-text search (FTS5), which first indexes whatever is pending, so a
//! search finds every row committed before it.

use std::time::Instant;

use rusqlite::{params, Connection};

use super::busy::with_busy_retry;
use super::error::{classify, note_short_read};
use super::search_index::CATCH_UP_CHUNK_ROWS;
use super::{tables, SqliteBackend};
use crate::error::{Error, Result};
use crate::model::Table;
use crate::store::{lock, Page};

/// The last id of the pending ranges (None when nothing is pending).
pub fn pending_up_to(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT MAX(last_id) FROM hermes_fts_pending")?
        .query_row([], |r| r.get(0))
}

impl SqliteBackend {
    pub(super) fn search_messages(&self, query: &str, page: &Page) -> Result<Table> {
        // Every row committed before the search is found: pending ranges
        // are indexed first. If that fails (locked past the budget, disk
        // full), the search answers from the index as it is: missing the
        // newest rows beats failing the search.
        if let Ok(Some(up_to)) = self.read(pending_up_to) {
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
