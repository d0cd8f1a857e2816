//! The search indexes our writer fills itself, and when.
//!
//! Left to the schema's per-row insert triggers, FTS5 flushes a new index
//! segment for every row (each trigger statement opens a savepoint), which
//! costs ~5x more than one set-based insert. So while every trigger in the
//! file is a known index trigger, the writer runs with triggers off and the
//! indexes are filled with the triggers' own text by set-based statements.
//!
//! Even set-based, indexing is most of a write's cost, so a write does not
//! index its rows: it records their id range in `hermes_fts_pending`, in the
//! same transaction, and the backend's indexer moves pending ranges into the
//! indexes right after, in small transactions of their own. The pending
//! table is shared by every process: a range left by a crashed process is
//! indexed by the next one that opens the file.
//!
//! A trigger this module does not know (someone's extension) turns triggers
//! back on, so it fires for our writes too; new rows are then indexed by the
//! triggers. Re-checked whenever the schema changes (another program may add
//! hermes-agent's trigram index while we run).

use rusqlite::config::DbConfig;
use rusqlite::Connection;

/// Index tables kept by an insert trigger, and the trigger's name.
const KNOWN_INDEXES: [(&str, &str); 2] = [
    ("messages_fts", "messages_fts_insert"),
    ("messages_fts_trigram", "messages_fts_trigram_insert"),
];

const KNOWN_TRIGGERS: [&str; 6] = [
    "messages_fts_insert",
    "messages_fts_delete",
    "messages_fts_update",
    "messages_fts_trigram_insert",
    "messages_fts_trigram_delete",
    "messages_fts_trigram_update",
];

/// The text the insert triggers index for a `messages` row.
const INDEXED_TEXT: &str =
    "COALESCE(content, '') || ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')";

/// Most rows one background indexer transaction takes, so that a write
/// arriving meanwhile waits a few milliseconds at most.
pub const BACKGROUND_CHUNK_ROWS: i64 = 512;

/// Most rows one transaction takes when a search or a close catches up: its
/// caller waits for all of it anyway, and each transaction costs FTS5 a new
/// segment (4,000 rows index ~1.6x faster in one transaction than in 512s).
pub const CATCH_UP_CHUNK_ROWS: i64 = 4096;

/// Most rows left pending: beyond it (writes outpacing the indexer for
/// longer than a 100k-message import) a write indexes its own rows, as if
/// nothing were deferred, so the debt a search or a close must pay off stays
/// bounded. The bound weighs a burst's flushes against the search after it:
/// flushes back to back leave the indexer no quiet time, and a flush that
/// indexes its own rows costs ~3x one that does not; 128k rows index in
/// ~1-2 s here, the worst a search right after such a burst waits.
pub const MAX_PENDING_ROWS: i64 = 131_072;

#[derive(Debug, Default)]
pub struct IndexPlan {
    schema_version: Option<i64>,
    /// Known index tables present with their insert trigger.
    tables: Vec<&'static str>,
    /// Every trigger is a known one: triggers are off, and our writes
    /// index `tables` themselves.
    self_fill: bool,
    /// `hermes_fts_pending` exists (another program may have dropped it).
    can_defer: bool,
}

impl IndexPlan {
    /// Re-plans if the schema changed since the last look. Call inside the
    /// write transaction, so the schema cannot change before the commit.
    pub fn refresh(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let version: i64 = conn.query_row("PRAGMA schema_version", [], |r| r.get(0))?;
        if self.schema_version == Some(version) {
            return Ok(());
        }
        let triggers: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'trigger'")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        self.self_fill = triggers
            .iter()
            .all(|t| KNOWN_TRIGGERS.contains(&t.as_str()));
        self.tables = KNOWN_INDEXES
            .iter()
            .filter(|(_, trigger)| triggers.iter().any(|t| t == trigger))
            .map(|(table, _)| *table)
            .collect();
        self.can_defer = conn
            .prepare_cached(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'hermes_fts_pending'",
            )?
            .exists([])?;
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, !self.self_fill)?;
        // Statements prepared under the other trigger setting must not be reused.
        conn.flush_prepared_statement_cache();
        self.schema_version = Some(version);
        Ok(())
    }

    /// Sees that the rows `first..=last`, just inserted in the open
    /// transaction, get indexed: by the triggers, by a pending range (true is
    /// returned: wake the indexer after the commit), or here and now when too
    /// much is pending already.
    pub fn index_new_rows(
        &self,
        conn: &Connection,
        first: i64,
        last: i64,
    ) -> rusqlite::Result<bool> {
        if !self.self_fill || self.tables.is_empty() {
            return Ok(false);
        }
        if self.can_defer {
            let pending: i64 = conn
                .prepare_cached(
                    "SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM hermes_fts_pending",
                )?
                .query_row([], |r| r.get(0))?;
            if pending + (last - first + 1) <= MAX_PENDING_ROWS {
                // Back-to-back writes extend one range, so the table (read
                // by every write) stays a few rows long.
                let extended = conn
                    .prepare_cached(
                        "UPDATE hermes_fts_pending SET last_id = ?2 WHERE last_id = ?1 - 1",
                    )?
                    .execute([first, last])?;
                if extended == 0 {
                    conn.prepare_cached(
                        "INSERT INTO hermes_fts_pending (first_id, last_id) VALUES (?1, ?2)",
                    )?
                    .execute([first, last])?;
                }
                return Ok(true);
            }
        }
        for table in &self.tables {
            conn.prepare_cached(&format!(
                "INSERT INTO {table}(rowid, content)
                 SELECT id, {INDEXED_TEXT} FROM messages WHERE id BETWEEN ?1 AND ?2"
            ))?
            .execute([first, last])?;
        }
        Ok(false)
    }

    /// Moves up to `chunk_rows` pending rows with ids up to `up_to` into
    /// every index, inside the caller's write transaction (after `refresh`).
    /// Returns whether pending rows up to `up_to` remain.
    ///
    /// Rows already in an index are skipped: a writer with triggers on (for
    /// example hermes-agent updating one of our rows) may have indexed them.
    pub fn index_pending(
        &self,
        conn: &Connection,
        up_to: i64,
        chunk_rows: i64,
    ) -> rusqlite::Result<bool> {
        if !self.can_defer {
            return Ok(false);
        }
        let ranges: Vec<(i64, i64)> = conn
            .prepare_cached(
                "SELECT first_id, last_id FROM hermes_fts_pending WHERE first_id <= ?1
                 ORDER BY first_id LIMIT ?2",
            )?
            .query_map([up_to, chunk_rows], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let Some(&(low, _)) = ranges.first() else {
            return Ok(false);
        };
        // The chunk is low..=high: whole ranges, and the head of the one
        // that does not fit. Ids between ranges are other writers' rows,
        // indexed by their triggers; the pending-range test leaves them out.
        let (mut high, mut room) = (low, chunk_rows);
        for (first, last) in ranges {
            let rows = last.min(up_to) - first + 1;
            if rows >= room {
                high = first + room - 1;
                break;
            }
            if rows > 0 {
                room -= rows;
                high = last.min(up_to);
            }
        }
        for table in &self.tables {
            conn.prepare_cached(&format!(
                "INSERT INTO {table}(rowid, content)
                 SELECT id, {INDEXED_TEXT} FROM messages
                 WHERE id BETWEEN ?1 AND ?2
                   AND EXISTS (SELECT 1 FROM hermes_fts_pending p
                               WHERE messages.id BETWEEN p.first_id AND p.last_id)
                   AND id NOT IN (SELECT rowid FROM {table} WHERE rowid BETWEEN ?1 AND ?2)"
            ))?
            .execute([low, high])?;
        }
        conn.prepare_cached("DELETE FROM hermes_fts_pending WHERE last_id <= ?1")?
            .execute([high])?;
        conn.prepare_cached(
            "UPDATE hermes_fts_pending SET first_id = ?1 + 1 WHERE first_id <= ?1",
        )?
        .execute([high])?;
        conn.prepare_cached("SELECT 1 FROM hermes_fts_pending WHERE first_id <= ?1")?
            .exists([up_to])
    }
}
