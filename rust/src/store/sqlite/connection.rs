//! Connections to the file: the settings every one gets, and the writer.

use std::path::Path;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use super::error::At;
use super::search_index::IndexPlan;
use crate::error::Result;
use crate::store::{Durability, Location};

/// SQLite's own wait for a lock, per attempt. Short on purpose: the store
/// retries whole transactions with jitter instead of queueing inside
/// SQLite's fixed back-off (which convoys under contention).
pub const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);

/// The `synchronous` pragma for a durability level.
pub fn synchronous(level: Durability) -> &'static str {
    match level {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    }
}

/// A connection to the file, which must exist: only `open` creates it
/// (with mode 0600), so a file deleted under us is not silently recreated
/// world-readable and empty by a later reader. The SQLite error is left
/// to the caller to classify.
pub fn connect(path: &Path, level: Durability) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    configure(&conn, level)?;
    Ok(conn)
}

/// Settings every connection gets.
pub fn configure(conn: &Connection, level: Durability) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", synchronous(level))?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Keep the WAL bounded: passive auto-checkpoints every ~4 MiB and the
    // file truncated back to 64 MiB after a checkpoint.
    conn.pragma_update(None, "wal_autocheckpoint", 1000)?;
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
    // Reads of long transcripts and searches of large files: map the file
    // instead of copying pages in with pread(2), as much of it as SQLite
    // maps (it clamps the request to its build's limit, 2 GiB: a search of
    // a 3.7 GB file of 1M messages took ~1.4x as long with 256 MiB), and
    // keep a working set of 16 MiB per connection.
    conn.pragma_update(None, "mmap_size", 1_i64 << 40)?;
    conn.pragma_update(None, "cache_size", -16 * 1024)?;
    conn.set_prepared_statement_cache_capacity(64);
    // Plans that never depend on bound values: otherwise a `col = ?` term
    // marks its parameter, and the statement cache's clear_bindings then
    // expires the cached statement, re-preparing it on every use (most of
    // a short read's time).
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    super::admitted::declare(conn)?;
    super::rank::declare(conn)?;
    super::word_pairs::declare(conn)?;
    Ok(())
}

pub fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA data_version", [], |r| r.get(0))
}

/// The one connection that writes (the group commit's leader and the
/// indexer take turns with it).
pub struct Writer {
    pub conn: Connection,
    pub data_version: i64,
    pub index: IndexPlan,
    /// The connection's durability now: the indexer lowers it for its own
    /// transactions, and a write puts the configured one back.
    pub durability: Durability,
}

impl Writer {
    pub fn use_durability(&mut self, level: Durability) -> rusqlite::Result<()> {
        if self.durability != level {
            self.conn
                .pragma_update(None, "synchronous", synchronous(level))?;
            self.durability = level;
        }
        Ok(())
    }

    /// Whether another connection committed since the previous call:
    /// `data_version` moves only for commits made by *other* connections.
    pub fn foreign_commit_since_last_look(&mut self, at: &Location) -> Result<bool> {
        let now = data_version(&self.conn).at(at)?;
        let changed = now != self.data_version;
        self.data_version = now;
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_maps_as_much_of_the_file_as_sqlite_allows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        Connection::open(&path).unwrap();
        let conn = connect(&path, Durability::Normal).unwrap();
        let mapped: i64 = conn
            .query_row("PRAGMA mmap_size", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mapped, 0x7fff_0000, "SQLite's limit for mmap_size as built");
    }
}
