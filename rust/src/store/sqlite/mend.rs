//! A `state.db` whose schema SQLite cannot read, or whose pages fail
//! `PRAGMA integrity_check`, found and mended on the file itself
//! (`hermes sessions repair`), before any store can open it.
//!
//! The damage hermes-agent's own repair knows, and that our files can have
//! too (it writes them, and it runs migrations beside us): a schema table
//! holding a definition twice (`table messages_fts already exists`: every
//! statement then fails while SQLite reads the schema), and a search index
//! damaged past reading. The messages and sessions themselves are never
//! touched: the search index is derived from them, so the last resort drops
//! its definitions and lets the next open build it again from the messages.

use std::path::Path;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use super::connection::BUSY_TIMEOUT;
use super::error::At;
use crate::error::{Error, Result, StorageKind};
use crate::store::Location;

/// The check, listing 20 findings at most.
const INTEGRITY_CHECK: &str = "PRAGMA integrity_check(20)";

/// How a file was mended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mended {
    /// Nothing was wrong.
    Healthy,
    /// Definitions the schema table held twice, the later copies removed.
    DuplicatesRemoved(usize),
    /// The search index's tables and triggers dropped (and the file
    /// vacuumed); the next open creates them again, empty, to be rebuilt.
    SearchIndexDropped,
}

/// What is wrong with the file, each as SQLite says it: empty when its
/// schema reads and `PRAGMA integrity_check` (which also checks the search
/// index's own structure) finds nothing. A file that cannot be opened at all
/// (missing, not a database, no permission) is an error instead.
pub fn problems(path: &Path) -> Result<Vec<String>> {
    let at = Location::File(path.to_path_buf());
    let conn = open_existing(path, &at)?;
    Ok(match findings(&conn) {
        Ok(found) => found,
        Err(err) => vec![err.to_string()],
    })
}

fn findings(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    // The first statement reads the whole schema: a malformed one fails here.
    conn.query_row("PRAGMA schema_version", [], |r| r.get::<_, i64>(0))?;
    let mut check = conn.prepare(INTEGRITY_CHECK)?;
    let rows = check.query_map([], |r| r.get::<_, String>(0))?;
    rows.filter(|row| !matches!(row, Ok(line) if line == "ok"))
        .collect()
}

/// Mends what [`problems`] finds, least destructive first: the duplicate
/// definitions removed (which keeps the search index), else the search
/// index dropped. Fails, changing nothing more, when neither makes the file
/// healthy (the damage is in the sessions or messages: restore a backup).
pub fn mend_schema(path: &Path) -> Result<Mended> {
    let at = Location::File(path.to_path_buf());
    if problems(path)?.is_empty() {
        return Ok(Mended::Healthy);
    }
    let removed = edit_schema(
        path,
        &at,
        "DELETE FROM sqlite_master WHERE rowid NOT IN \
         (SELECT MIN(rowid) FROM sqlite_master GROUP BY type, name)",
    )?;
    if removed > 0 && problems(path)?.is_empty() {
        return Ok(Mended::DuplicatesRemoved(removed));
    }
    edit_schema(
        path,
        &at,
        "DELETE FROM sqlite_master WHERE name LIKE 'messages\\_fts%' ESCAPE '\\'",
    )?;
    // The dropped index's pages are nobody's now: VACUUM writes the file
    // again without them.
    open_existing(path, &at)?.execute_batch("VACUUM").at(&at)?;
    let left = problems(path)?;
    if left.is_empty() {
        return Ok(Mended::SearchIndexDropped);
    }
    Err(Error::Storage {
        kind: StorageKind::Corrupt,
        at,
        detail: format!(
            "{} (the damage is beyond the schema and the search index; restore the file from a backup)",
            left.join("; ")
        ),
    })
}

/// Runs one `DELETE` on the schema table in a write transaction, with the
/// schema cookie moved on so that every other connection reads the schema
/// again; returns the rows it removed.
fn edit_schema(path: &Path, at: &Location, delete: &str) -> Result<usize> {
    let conn = open_existing(path, at)?;
    // Defensive mode forbids writing the schema table; this connection
    // exists to do exactly that, and nothing else.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, false)
        .at(at)?;
    conn.pragma_update(None, "writable_schema", "ON").at(at)?;
    conn.execute_batch("BEGIN IMMEDIATE").at(at)?;
    let edited = (|| -> rusqlite::Result<usize> {
        let removed = conn.execute(delete, [])?;
        if removed > 0 {
            let cookie: i64 = conn.query_row("PRAGMA schema_version", [], |r| r.get(0))?;
            conn.pragma_update(None, "schema_version", cookie + 1)?;
        }
        conn.execute_batch("COMMIT")?;
        Ok(removed)
    })();
    if edited.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    edited.at(at)
}

/// A plain connection to a file that must exist (nothing is created), with
/// SQLite's own lock wait and none of the store's settings: they are
/// statements, and on a damaged schema every statement fails.
fn open_existing(path: &Path, at: &Location) -> Result<Connection> {
    if !path.exists() {
        return Err(Error::io(
            at,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        ));
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).at(at)?;
    conn.busy_timeout(BUSY_TIMEOUT * 100).at(at)?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::ensure_schema;

    fn store(dir: &tempfile::TempDir) -> std::path::PathBuf {
        let path = dir.path().join("state.db");
        let conn = Connection::open(&path).unwrap();
        ensure_schema(&conn).unwrap();
        conn.execute_batch(
            "INSERT INTO sessions (id, source, started_at) VALUES ('s1', 'cli', 1.0);
             INSERT INTO messages (session_id, role, content, timestamp)
                 VALUES ('s1', 'user', 'hello world', 1.0);",
        )
        .unwrap();
        path
    }

    fn sql(path: &Path, script: &str) {
        let conn = Connection::open(path).unwrap();
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, false)
            .unwrap();
        conn.execute_batch(script).unwrap();
    }

    fn messages(path: &Path) -> Vec<String> {
        let conn = Connection::open(path).unwrap();
        let mut stmt = conn.prepare("SELECT content FROM messages").unwrap();
        let rows = stmt.query_map([], |r| r.get(0)).unwrap();
        rows.collect::<rusqlite::Result<_>>().unwrap()
    }

    #[test]
    fn a_healthy_file_has_no_problems_and_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = store(&dir);
        assert!(problems(&path).unwrap().is_empty());
        assert_eq!(mend_schema(&path).unwrap(), Mended::Healthy);
    }

    #[test]
    fn a_definition_held_twice_is_removed_and_the_index_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = store(&dir);
        sql(
            &path,
            "PRAGMA writable_schema=ON;
             INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql)
                 SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master
                 WHERE name = 'messages_fts';",
        );
        let found = problems(&path).unwrap();
        assert!(found[0].contains("already exists"), "{found:?}");
        assert_eq!(mend_schema(&path).unwrap(), Mended::DuplicatesRemoved(1));
        assert!(problems(&path).unwrap().is_empty());
        assert_eq!(messages(&path), ["hello world"]);
        let conn = Connection::open(&path).unwrap();
        let hits: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'hello'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(hits, 1);
    }

    #[test]
    fn a_search_index_past_reading_is_dropped_and_the_messages_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = store(&dir);
        // A definition that no SQLite can read, and no copy of it to keep.
        sql(
            &path,
            "PRAGMA writable_schema=ON;
             UPDATE sqlite_master SET sql = 'CREATE VIRTUAL TABLE messages_fts USING fts5(('
                 WHERE name = 'messages_fts';",
        );
        assert!(!problems(&path).unwrap().is_empty());
        assert_eq!(mend_schema(&path).unwrap(), Mended::SearchIndexDropped);
        assert!(problems(&path).unwrap().is_empty());
        assert_eq!(messages(&path), ["hello world"]);
        let conn = Connection::open(&path).unwrap();
        let left: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'messages_fts%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0);
    }

    #[test]
    fn a_file_that_is_no_database_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        std::fs::write(&path, b"this is not a database".repeat(100)).unwrap();
        assert!(problems(&path).is_err() || !problems(&path).unwrap().is_empty());
        assert!(mend_schema(&path).is_err());
        assert!(problems(&dir.path().join("missing.db")).is_err());
    }
}
