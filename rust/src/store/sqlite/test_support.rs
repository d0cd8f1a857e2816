//! Shared setup for the SQLite backend's tests: a store in a temporary
//! directory, sessions and messages to fill it, and looks at the file.

use rusqlite::Connection;

use super::SqliteBackend;
use crate::error::Result;
use crate::model::{NewMessage, Table, Value, ValueRef};
use crate::store::{Backend, Insert, OnConflict, Options, Relation, Search, WriteOp, WriteOut};

pub fn open(dir: &tempfile::TempDir) -> SqliteBackend {
    SqliteBackend::open(&dir.path().join("state.db"), Options::default()).unwrap()
}

/// A session from source `cli`.
pub fn create(db: &SqliteBackend, id: &str) {
    create_at(db, id, "cli", 1.0);
}

pub fn create_at(db: &SqliteBackend, id: &str, source: &str, started_at: f64) {
    db.write(WriteOp::Insert(Insert {
        relation: Relation::Sessions,
        values: vec![
            ("id".into(), Value::from(id)),
            ("source".into(), Value::from(source)),
            ("started_at".into(), Value::from(started_at)),
        ],
        on_conflict: OnConflict::FillNulls,
    }))
    .unwrap();
}

/// `n` user messages, `m0`, `m1`...
pub fn append(db: &SqliteBackend, id: &str, n: usize) -> Result<WriteOut> {
    db.write(WriteOp::Append {
        session_id: id.into(),
        rows: (0..n)
            .map(|i| NewMessage::text("user", &format!("m{i}"), 1.0))
            .collect(),
        once_key: None,
    })
}

/// `rows` appended to session `id` (no once-key), the write's outcome.
pub fn append_rows(db: &SqliteBackend, id: &str, rows: Vec<NewMessage>) -> WriteOut {
    db.write(WriteOp::Append {
        session_id: id.into(),
        rows,
        once_key: None,
    })
    .unwrap()
}

pub fn append_text(db: &SqliteBackend, id: &str, text: &str) {
    append_rows(db, id, vec![NewMessage::text("user", text, 1.0)]);
}

/// One message, written without waiting.
pub fn append_now(db: &SqliteBackend, id: &str) -> Result<WriteOut> {
    db.write_now(WriteOp::Append {
        session_id: id.into(),
        rows: vec![NewMessage::text("user", "now", 1.0)],
        once_key: None,
    })
}

pub fn set_meta(key: &str, value: &str) -> WriteOp {
    WriteOp::Insert(Insert {
        relation: Relation::StateMeta,
        values: vec![("key".into(), key.into()), ("value".into(), value.into())],
        on_conflict: OnConflict::Replace,
    })
}

/// Indexes everything pending now, as a search does first.
pub fn index_now(db: &SqliteBackend) {
    db.index_pending_up_to(i64::MAX).unwrap();
}

/// The one integer `sql` selects.
pub fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// The same, on one of the store's own reader connections.
pub fn rows_of(db: &SqliteBackend, sql: &str) -> i64 {
    db.read(|c| Ok(count(c, sql))).unwrap()
}

pub fn pending_rows(db: &SqliteBackend) -> i64 {
    rows_of(
        db,
        "SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM hermes_fts_pending",
    )
}

pub fn indexed_rows(db: &SqliteBackend) -> i64 {
    rows_of(db, "SELECT COUNT(*) FROM messages_fts")
}

pub fn integrity(db: &SqliteBackend) -> String {
    db.read(|c| c.query_row("PRAGMA integrity_check", [], |r| r.get(0)))
        .unwrap()
}

pub use crate::store::test_support::wait_until;

pub fn search_ids(db: &SqliteBackend, query: &str) -> Vec<i64> {
    let search = Search {
        query: query.into(),
        limit: 1000,
        ..Search::default()
    };
    hit_ids(&db.search(&search).unwrap())
}

/// The ids of a search's hits (its first column), in order.
pub fn hit_ids(table: &Table) -> Vec<i64> {
    table
        .rows()
        .map(|r| match r.get(0) {
            ValueRef::Integer(id) => id,
            other => panic!("id {other:?}"),
        })
        .collect()
}

/// Rows committed and a pending range for them, but no index entries:
/// what a writer killed before its indexer ran leaves behind.
pub fn crashed_writer_rows(conn: &Connection, session: &str, texts: &[&str]) {
    conn.execute(
        "INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?1, 'cli', 1)",
        [session],
    )
    .unwrap();
    let first = count(conn, "SELECT COALESCE(MAX(id), 0) + 1 FROM messages");
    for text in texts {
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?1, 'user', ?2, 1)",
            [session, text],
        )
        .unwrap();
    }
    let last = first + texts.len() as i64 - 1;
    conn.execute(
        "DELETE FROM messages_fts WHERE rowid BETWEEN ?1 AND ?2",
        [first, last],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO hermes_fts_pending (first_id, last_id) VALUES (?1, ?2)",
        [first, last],
    )
    .unwrap();
}
