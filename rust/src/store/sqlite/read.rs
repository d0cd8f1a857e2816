//! Reads, on a pool of reader connections (one borrowed per read).

use rusqlite::{params, params_from_iter, Connection, OptionalExtension};

use super::connection::connect;
use super::error::{classify, note_short_read, At};
use super::sql::Sql;
use super::{tables, SqliteBackend};
use crate::error::Result;
use crate::model::{Table, CONVERSATION_COLUMNS, MESSAGE_COLUMNS};
use crate::store::{lock, Filter, Page, Query, Relation};

/// A session's messages (`columns` of them) in insertion order.
fn messages_sql(columns: &str, include_inactive: bool) -> String {
    let active = if include_inactive {
        ""
    } else {
        " AND active = 1"
    };
    format!("SELECT {columns} FROM messages WHERE session_id = ?1{active} ORDER BY id")
}

impl SqliteBackend {
    /// Borrows a reader connection for `f`, opening one when none is idle.
    pub(super) fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        self.read_raw(f)?.at(&self.at)
    }

    /// Like `read`, leaving the SQLite error to the caller to classify.
    pub(super) fn read_raw<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<rusqlite::Result<T>> {
        self.ensure_open()?;
        let idle = lock(&self.readers).pop();
        let conn = match idle {
            Some(c) => c,
            // The path no longer names the file we opened (deleted, or
            // replaced by another file a new connection would read): our
            // connections still read what it holds, as an idle reader
            // would, while writes are refused.
            None if self.ensure_same_file().is_err() => {
                let writer = lock(&self.writer);
                let w = writer.as_ref().ok_or_else(|| self.closed_error())?;
                return Ok(f(&w.conn));
            }
            None => connect(&self.path, self.options.durability).map_err(|e| {
                note_short_read(&self.cut, &e);
                classify(&self.at, e)
            })?,
        };
        let out = f(&conn);
        if let Err(e) = &out {
            note_short_read(&self.cut, e);
        }
        if !self.closed.load(std::sync::atomic::Ordering::Acquire) {
            lock(&self.readers).push(conn);
        }
        Ok(out)
    }

    pub(super) fn select(&self, query: &Query) -> Result<Table> {
        query.check(&self.columns)?;
        let sql = Sql::select(query);
        self.read(|c| tables::all(c, &sql.text, params_from_iter(&sql.params)))
    }

    pub(super) fn count_rows(&self, relation: Relation, filter: &Filter) -> Result<i64> {
        filter.check(relation, &self.columns)?;
        let sql = Sql::count(relation, filter);
        self.read(|c| {
            c.prepare_cached(&sql.text)?
                .query_row(params_from_iter(&sql.params), |r| r.get(0))
        })
    }

    pub(super) fn session_row(&self, id: &str) -> Result<Table> {
        self.read(|c| tables::all(c, "SELECT * FROM sessions WHERE id = ?1", [id]))
    }

    pub(super) fn live_message_count(&self, id: &str) -> Result<Option<i64>> {
        self.read(|c| {
            c.prepare_cached("SELECT COALESCE(message_count, 0) FROM sessions WHERE id = ?1")?
                .query_row([id], |r| r.get(0))
                .optional()
        })
    }

    pub(super) fn message_rows(&self, session_id: &str, include_inactive: bool) -> Result<Table> {
        self.read(|c| {
            let sql = messages_sql(MESSAGE_COLUMNS, include_inactive);
            tables::all(c, &sql, [session_id])
        })
    }

    /// See [`crate::store::Backend::conversation`] and [`tables::read_ahead`].
    pub(super) fn conversation_tables(
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

    pub(super) fn newest_sessions(&self, page: &Page) -> Result<Table> {
        self.read(|c| {
            tables::all(
                c,
                "SELECT * FROM sessions WHERE (?1 IS NULL OR source = ?1)
                 ORDER BY started_at DESC, id DESC LIMIT ?2 OFFSET ?3",
                params![page.source, page.limit, page.offset],
            )
        })
    }

    pub(super) fn has_platform_message(
        &self,
        session_id: &str,
        platform_message_id: &str,
    ) -> Result<bool> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT 1 FROM messages WHERE session_id = ?1 AND platform_message_id = ?2 LIMIT 1",
            )?
            .exists([session_id, platform_message_id])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::model::ValueRef;
    use crate::store::{Backend, Cmp, Derived, Filter, Order, Query, Relation, Term};

    #[test]
    fn a_typed_query_pages_filters_and_computes_derived_values() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        for (id, started) in [("a", 1.0), ("b", 2.0), ("c", 3.0)] {
            create_at(&db, id, "cli", started);
        }
        create_at(&db, "t", "telegram", 4.0);
        append(&db, "b", 2).unwrap();
        let query = Query {
            relation: Relation::Sessions,
            select: vec![
                Term::Column("id".into()),
                Term::Derived(Derived::Preview),
                Term::Derived(Derived::LastActive),
            ],
            filter: Filter::Compare(Term::Column("source".into()), Cmp::Eq, "cli".into()),
            order: vec![Order {
                term: Term::Column("started_at".into()),
                descending: true,
            }],
            limit: Some(2),
            offset: 1,
        };
        let table = db.query(&query).unwrap();
        assert_eq!(&table.columns[..], ["id", "preview", "last_active"]);
        let rows: Vec<_> = table
            .rows()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        assert_eq!(
            rows,
            [
                (
                    ValueRef::Text(b"b"),
                    ValueRef::Text(b"m0"),
                    ValueRef::Real(1.0)
                ),
                (
                    ValueRef::Text(b"a"),
                    ValueRef::Text(b""),
                    ValueRef::Real(1.0)
                ),
            ]
        );
        let cli = Filter::eq("source", "cli");
        assert_eq!(db.count(Relation::Sessions, &cli).unwrap(), 3);
        assert_eq!(db.count(Relation::Sessions, &Filter::All).unwrap(), 4);
        let bad = Filter::eq("nope", 1);
        assert!(db.count(Relation::Sessions, &bad).is_err());
    }
}
