//! The search indexes our writer fills itself, and when.
//!
//! Left to the schema's per-row insert triggers, FTS5 flushes a new index
//! segment for every row (each trigger statement opens a savepoint), which
//! costs ~5x more than one set-based insert. So while every trigger in the
//! file is a known index trigger, on a known index table, the writer runs
//! with triggers off and the indexes are filled with the triggers' own text
//! by set-based statements.
//!
//! Even set-based, indexing is most of a write's cost, so a write does not
//! index its rows: it records their id range in `hermes_fts_pending`, in the
//! same transaction, and the backend's indexer moves pending ranges into the
//! indexes right after, in small transactions of their own. The pending
//! table is shared by every process: a range left by a crashed process is
//! indexed by the next one that opens the file.
//!
//! This works because those indexes keep their own copy of each row's text:
//! another program's update or delete trigger takes a row out by its rowid,
//! which removes nothing for a row still pending (the indexer then skips a
//! row that trigger put back). An index made otherwise, say with external
//! content, whose triggers remove a row's old text with FTS5's 'delete'
//! command, must be told exactly the text it holds: for a row we had not
//! indexed yet (or indexed with other text) that damages it. So a trigger or
//! index table is known only when its definition is the one our schema
//! creates (hermes-agent 0.19.0's, laid out otherwise), not merely its name.
//!
//! A trigger this module does not know (someone's extension, an index of
//! another layout) turns triggers back on, so it fires for our writes too;
//! new rows are then indexed by the triggers. Re-checked whenever the schema
//! changes (another program may add hermes-agent's trigram index while we
//! run).

use std::collections::HashMap;
use std::sync::OnceLock;

use rusqlite::config::DbConfig;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension};

use super::{schema, word_pairs};
use crate::store::IndexUpkeep;

/// Index tables kept by an insert trigger, and the trigger's name (for the
/// word-pair index, the trigger that notes other programs' rows).
const KNOWN_INDEXES: [(&str, &str); 3] = [
    ("messages_fts", "messages_fts_insert"),
    ("messages_fts_trigram", "messages_fts_trigram_insert"),
    (word_pairs::TABLE, "hermes_fts_pairs_insert"),
];

/// The text index `table` holds for a `messages` row, as SQL over its columns.
pub(super) fn row_text(table: &str) -> String {
    if table == word_pairs::TABLE {
        format!("{}({INDEXED_TEXT})", word_pairs::FUNCTION)
    } else {
        INDEXED_TEXT.to_owned()
    }
}

/// The `messages` columns whose text the indexes hold.
pub const INDEXED_COLUMNS: [&str; 3] = ["content", "tool_name", "tool_calls"];

/// The text the insert triggers index for a `messages` row.
pub const INDEXED_TEXT: &str =
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
    /// Index tables of ours present with an insert trigger of ours.
    tables: Vec<&'static str>,
    /// Every trigger and index table in the file is ours: triggers are off,
    /// and our writes index `tables` themselves.
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
        // Every trigger and index table of the file, and whether it is ours.
        let known: HashMap<String, bool> = index_objects(conn)?
            .into_iter()
            .map(|(name, sql)| {
                let ours = is_ours(&name, &sql);
                (name, ours)
            })
            .collect();
        let ours = |name: &str| known.get(name) == Some(&true);
        self.self_fill = known.values().all(|&ours| ours);
        self.tables = KNOWN_INDEXES
            .iter()
            .filter(|(table, trigger)| ours(table) && ours(trigger))
            .map(|(table, _)| *table)
            .collect();
        self.can_defer = schema::has_table(conn, "hermes_fts_pending")?;
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
                 SELECT id, {text} FROM messages WHERE id BETWEEN ?1 AND ?2",
                text = row_text(table)
            ))?
            .execute([first, last])?;
        }
        Ok(false)
    }

    /// Brings the index rows of the messages `ids` (a JSON array), just
    /// updated or deleted in the open transaction, in line with them, as
    /// the update and delete triggers would: the old text out, the text of
    /// the rows that still exist in. With triggers on, they did it already.
    pub fn reindex_rows(&self, conn: &Connection, ids: &str, rows: usize) -> rusqlite::Result<()> {
        if !self.self_fill {
            return Ok(());
        }
        for table in &self.tables {
            let reindex = || -> rusqlite::Result<()> {
                conn.prepare_cached(&format!(
                    "DELETE FROM {table} WHERE rowid IN (SELECT value FROM json_each(?1))"
                ))?
                .execute([ids])?;
                conn.prepare_cached(&format!(
                    "INSERT INTO {table}(rowid, content)
                     SELECT id, {text} FROM messages
                     WHERE id IN (SELECT value FROM json_each(?1))",
                    text = row_text(table)
                ))?
                .execute([ids])
                .map(drop)
            };
            if rows >= ONE_SEGMENT_ROWS {
                in_one_segment(conn, table, reindex)?;
            } else {
                reindex()?;
            }
        }
        Ok(())
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
                 SELECT id, {text} FROM messages
                 WHERE id BETWEEN ?1 AND ?2
                   AND EXISTS (SELECT 1 FROM hermes_fts_pending p
                               WHERE messages.id BETWEEN p.first_id AND p.last_id)
                   AND id NOT IN (SELECT rowid FROM {table} WHERE rowid BETWEEN ?1 AND ?2)",
                text = row_text(table)
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

impl IndexPlan {
    /// Indexes up to `chunk_rows` rows of the word-pair index's stale ones
    /// again (`word_pairs.rs`), inside the caller's write transaction (after
    /// `refresh`). Returns whether stale rows remain.
    pub fn index_stale(&self, conn: &Connection, chunk_rows: i64) -> rusqlite::Result<bool> {
        if !self.tables.contains(&word_pairs::TABLE) {
            return Ok(false);
        }
        word_pairs::index_stale(conn, chunk_rows)
    }
}

/// Re-indexing this many rows or more is written [`in_one_segment`].
pub const ONE_SEGMENT_ROWS: usize = 1000;

/// The FTS5 settings [`in_one_segment`] changes for its work, and their
/// defaults (`FTS5_DEFAULT_AUTOMERGE`, `FTS5_DEFAULT_HASHSIZE`).
const ONE_SEGMENT_SETTINGS: [(&str, i64, i64); 2] =
    [("automerge", 0, 4), ("hashsize", 64 << 20, 1 << 20)];

/// Runs `work` (many rows into or out of the FTS5 index `table`, in the open
/// transaction) so that its changes go into one new segment, left for the
/// merging FTS5 does on later writes. With the index's defaults FTS5 writes
/// a segment per megabyte of changes and merges segments after each one: for
/// the 10,000 messages of a long session that merging rewrote the index again
/// and again, three quarters of deleting it. The index stays exact (deleted
/// rows are marked deleted in the new segment). The settings are FTS5's own,
/// kept in `{table}_config`: each is put back as the file had it (a default
/// left implicit is set, so this connection has it, and its row removed), so
/// other programs see the file's settings, before or after the commit.
fn in_one_segment(
    conn: &Connection,
    table: &str,
    work: impl FnOnce() -> rusqlite::Result<()>,
) -> rusqlite::Result<()> {
    let set = |key: &str, value: &SqlValue| {
        conn.prepare_cached(&format!(
            "INSERT INTO {table}({table}, rank) VALUES (?1, ?2)"
        ))?
        .execute(rusqlite::params![key, value])
        .map(drop)
    };
    let mut saved = Vec::new();
    for (key, value, _) in ONE_SEGMENT_SETTINGS {
        let had: Option<SqlValue> = conn
            .prepare_cached(&format!("SELECT v FROM {table}_config WHERE k = ?1"))?
            .query_row([key], |r| r.get(0))
            .optional()?;
        set(key, &SqlValue::Integer(value))?;
        saved.push((key, had));
    }
    work()?;
    // Setting a value flushes the pending changes first (FTS5 writes them out
    // at the start of each statement), still under the settings above.
    for ((key, had), (_, _, default)) in saved.into_iter().zip(ONE_SEGMENT_SETTINGS) {
        set(key, had.as_ref().unwrap_or(&SqlValue::Integer(default)))?;
        if had.is_none() {
            conn.prepare_cached(&format!("DELETE FROM {table}_config WHERE k = ?1"))?
                .execute([key])?;
        }
    }
    Ok(())
}

/// Every trigger in the file and each index table of [`KNOWN_INDEXES`] there,
/// with its definition (the SQL SQLite keeps).
fn index_objects(conn: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let objects: Vec<(String, String, Option<String>)> = conn
        .prepare_cached(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('trigger', 'table')",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(objects
        .into_iter()
        .filter(|(kind, name, _)| {
            kind == "trigger" || KNOWN_INDEXES.iter().any(|(table, _)| table == name)
        })
        .map(|(_, name, sql)| (name, sql.unwrap_or_default()))
        .collect())
}

/// Whether the file's `name`, defined by `sql`, is the search-index table or
/// trigger our schema creates under that name.
pub(super) fn is_ours(name: &str, sql: &str) -> bool {
    static OURS: OnceLock<HashMap<&str, String>> = OnceLock::new();
    let ours = OURS.get_or_init(|| {
        schema::search_index_objects()
            .map(|(name, statement)| {
                (
                    *name,
                    canonical(&statement.replacen(" IF NOT EXISTS", "", 1)),
                )
            })
            .collect()
    });
    ours.get(name).is_some_and(|own| *own == canonical(sql))
}

/// `sql` without what does not change its meaning: letter case and white
/// space outside quotes (a space stays only between two word characters), so
/// hermes-agent's DDL, laid out otherwise, compares equal to ours.
fn canonical(sql: &str) -> String {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars();
    let mut after_space = false;
    while let Some(c) = chars.next() {
        if c.is_whitespace() {
            after_space = true;
            continue;
        }
        if after_space && word(c) && out.chars().next_back().is_some_and(word) {
            out.push(' ');
        }
        after_space = false;
        match c {
            // Quoted text is kept as written, up to its closing quote (a
            // doubled quote inside is copied as two quoted stretches).
            '\'' | '"' | '`' | '[' => {
                let close = if c == '[' { ']' } else { c };
                out.push(c);
                for quoted in chars.by_ref() {
                    out.push(quoted);
                    if quoted == close {
                        break;
                    }
                }
            }
            _ => out.extend(c.to_lowercase()),
        }
    }
    out
}

/// Runs `upkeep` on every search index in the file, inside the caller's write
/// transaction; returns how many of hermes-agent's indexes it ran on (the
/// word-pair index, ours, is kept alongside and not counted).
pub fn upkeep(conn: &Connection, upkeep: IndexUpkeep) -> rusqlite::Result<u64> {
    let mut done = 0;
    for (table, _) in KNOWN_INDEXES {
        let Some(sql) = conn
            .prepare_cached("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1")?
            .query_row([table], |r| r.get::<_, Option<String>>(0))
            .optional()?
        else {
            continue;
        };
        match upkeep {
            IndexUpkeep::Rebuild if table == word_pairs::TABLE => {
                word_pairs::rebuild(conn)?;
            }
            IndexUpkeep::Optimize => {
                conn.execute(
                    &format!("INSERT INTO {table}({table}) VALUES ('optimize')"),
                    [],
                )?;
            }
            IndexUpkeep::Rebuild => {
                // FTS5's own rebuild first: it discards the index's b-tree, so a damaged
                // one is replaced (the row-by-row delete below would read the damage);
                // then, for an index of ours, the rows are taken from `messages`, the
                // canonical text. An index laid out otherwise is rebuilt from its own
                // content, which is what its own triggers put there.
                conn.execute(
                    &format!("INSERT INTO {table}({table}) VALUES ('rebuild')"),
                    [],
                )?;
                if !is_ours(table, sql.as_deref().unwrap_or_default()) {
                    done += 1;
                    continue;
                }
                conn.execute(&format!("DELETE FROM {table}"), [])?;
                conn.execute(
                    &format!("INSERT INTO {table}(rowid, content) SELECT id, {INDEXED_TEXT} FROM messages"),
                    [],
                )?;
            }
        }
        // Counted as hermes-agent counts them: the word-pair index is ours.
        if table != word_pairs::TABLE {
            done += 1;
        }
    }
    if upkeep == IndexUpkeep::Rebuild && schema::has_table(conn, "hermes_fts_pending")? {
        // Every message is indexed now.
        conn.execute("DELETE FROM hermes_fts_pending", [])?;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::super::schema;
    use super::super::test_support::*;
    use super::*;
    use crate::model::NewMessage;
    use crate::store::{Assign, Backend, Delete, Filter, Relation, Update, WriteOp, WriteOut};

    #[test]
    fn own_rows_are_indexed_exactly_as_the_trigger_would() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let mut row = NewMessage::text("assistant", "grep the tree", 1.0);
        row.tool_name = Some("terminal".into());
        row.tool_calls = Some("[{\"name\":\"terminal\"}]".into());
        append_rows(&db, "s", vec![row]);
        index_now(&db);
        // Another writer (triggers on) inserts the same row.
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other
            .execute_batch(
                "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp)
                 VALUES ('s', 'assistant', 'grep the tree', 'terminal', '[{\"name\":\"terminal\"}]', 1.0)",
            )
            .unwrap();
        let texts: Vec<String> = other
            .prepare("SELECT content FROM messages_fts ORDER BY rowid")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(texts.len(), 2);
        assert_eq!(texts[0], texts[1]);
    }

    #[test]
    fn triggers_added_by_others_keep_working_for_our_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append(&db, "s", 1).unwrap();
        index_now(&db);
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other
            .execute_batch(
                "CREATE TABLE audit (n INTEGER);
                 CREATE TRIGGER audit_sessions AFTER UPDATE ON sessions BEGIN
                   INSERT INTO audit VALUES (1);
                 END;",
            )
            .unwrap();
        append(&db, "s", 2).unwrap();
        let count = |sql: &str| -> i64 { other.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(count("SELECT COUNT(*) FROM messages_fts_trigram"), 3);
        assert_eq!(count("SELECT COUNT(*) FROM messages_fts"), 3);
        assert_eq!(count("SELECT COUNT(*) FROM audit"), 1);
        other.execute_batch("DROP TRIGGER audit_sessions").unwrap();
        append(&db, "s", 1).unwrap();
        index_now(&db);
        assert_eq!(count("SELECT COUNT(*) FROM messages_fts_trigram"), 4);
        assert_eq!(count("SELECT COUNT(*) FROM messages_fts"), 4);
    }

    /// Another program's connection to a new `state.db` in `dir` that it made
    /// with our schema and then changed with `script`.
    fn made_by_another_program(dir: &tempfile::TempDir, script: &str) -> Connection {
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other.execute_batch(&schema::schema_sql()).unwrap();
        other.execute_batch(script).unwrap();
        other
    }

    /// A word index laid out as hermes-agent laid it out before its schema 11 (and as other
    /// programs still do): external content, kept by triggers that take a row's old text out
    /// with FTS5's 'delete' command, which must name exactly the text the index holds.
    const EXTERNAL_CONTENT_INDEX: &str = "
        DROP TRIGGER messages_fts_insert;
        DROP TRIGGER messages_fts_delete;
        DROP TRIGGER messages_fts_update;
        DROP TABLE messages_fts;
        CREATE VIRTUAL TABLE messages_fts USING fts5(content, content=messages, content_rowid=id);
        CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
        END;
        CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, content)
            VALUES ('delete', old.id, old.content);
        END;
        CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, content)
            VALUES ('delete', old.id, old.content);
            INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
        END;";

    #[test]
    fn an_index_laid_out_otherwise_is_kept_for_our_rows_by_its_own_triggers() {
        let dir = tempfile::tempdir().unwrap();
        let other = made_by_another_program(&dir, EXTERNAL_CONTENT_INDEX);
        let db = open(&dir);
        db.indexer.stop(); // anything deferred stays deferred
        create(&db, "s");
        append(&db, "s", 4).unwrap(); // m0..m3, ids 1..=4

        // The other program rewrites two of our rows right after our commit ...
        other
            .execute_batch(
                "UPDATE messages SET content = 'edited' WHERE id = 2;
                 DELETE FROM messages WHERE id = 3;",
            )
            .unwrap();
        // ... and we rewrite one.
        db.write(WriteOp::Update(Update {
            relation: Relation::Messages,
            filter: Filter::eq("id", 4),
            set: vec![("content".into(), Assign::Value("retold".into()))],
            must_match: None,
        }))
        .unwrap();
        assert_eq!(pending_rows(&db), 0, "nothing waits for our indexer");
        for check in [
            "INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)",
            "INSERT INTO messages_fts_trigram(messages_fts_trigram, rank) VALUES ('integrity-check', 1)",
        ] {
            other.execute_batch(check).unwrap();
        }
        assert_eq!(search_ids(&db, "m0"), vec![1]);
        assert_eq!(search_ids(&db, "edited"), vec![2]);
        assert!(search_ids(&db, "m2").is_empty());
        assert_eq!(search_ids(&db, "retold"), vec![4]);
        assert!(search_ids(&db, "m3").is_empty());
    }

    #[test]
    fn a_rebuild_of_an_index_laid_out_otherwise_keeps_to_its_own_text() {
        let dir = tempfile::tempdir().unwrap();
        let other = made_by_another_program(&dir, EXTERNAL_CONTENT_INDEX);
        let db = open(&dir);
        create(&db, "s");
        let mut row = NewMessage::text("assistant", "grep the tree", 1.0);
        row.tool_name = Some("terminal".into());
        append_rows(&db, "s", vec![row]);
        let rebuilt = db
            .write(WriteOp::SearchIndex(IndexUpkeep::Rebuild))
            .unwrap();
        assert_eq!(rebuilt, crate::store::WriteOut::Rows(2));
        // Its own triggers took content only; its delete trigger then matches.
        other
            .execute_batch(
                "UPDATE messages SET content = 'prune the tree' WHERE id = 1;
                 INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1);",
            )
            .unwrap();
        assert_eq!(search_ids(&db, "prune"), vec![1]);
        assert!(search_ids(&db, "grep").is_empty());
    }

    #[test]
    fn our_index_triggers_are_known_however_they_are_laid_out() {
        let dir = tempfile::tempdir().unwrap();
        // The same definition in other case and line breaks, as another
        // program's DDL may have it.
        let other = made_by_another_program(
            &dir,
            "DROP TRIGGER messages_fts_update;
                 create trigger messages_fts_update after update on messages
                 begin
                   delete from messages_fts where rowid = old.id;
                   insert into messages_fts(rowid, content)
                   values (
                     new.id,
                     coalesce(new.content, '') || ' ' ||
                     coalesce(new.tool_name, '') || ' ' ||
                     coalesce(new.tool_calls, '')
                   );
                 end;",
        );
        let db = open(&dir);
        db.indexer.stop();
        create(&db, "s");
        append(&db, "s", 2).unwrap();
        assert_eq!(pending_rows(&db), 2, "our writer defers its indexing");
        // One character of text changed is another definition.
        other
            .execute_batch(
                "DROP TRIGGER messages_fts_update;
                 CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
                   DELETE FROM messages_fts WHERE rowid = old.id;
                   INSERT INTO messages_fts(rowid, content) VALUES (new.id,
                     COALESCE(new.content, '') || '' || COALESCE(new.tool_name, ''));
                 END;",
            )
            .unwrap();
        append(&db, "s", 1).unwrap();
        assert_eq!(
            pending_rows(&db),
            2,
            "the new row is indexed by the triggers"
        );
        assert_eq!(indexed_rows(&db), 1);
    }

    #[test]
    fn rows_an_other_writer_indexed_meanwhile_are_not_indexed_twice() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop();
        create(&db, "s");
        append(&db, "s", 3).unwrap();
        // Triggers on: an update re-indexes row 2, a delete of row 3 takes
        // out what the index holds for it (nothing yet), and a new row 4 is
        // indexed, between our pending range 1..=3 and the next, 5..=6.
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other
            .execute_batch(
                "UPDATE messages SET content = 'edited' WHERE id = 2;
                 DELETE FROM messages WHERE id = 3;
                 INSERT INTO messages (session_id, role, content, timestamp)
                 VALUES ('s', 'user', 'theirs', 1);",
            )
            .unwrap();
        append(&db, "s", 2).unwrap();
        index_now(&db);
        assert_eq!(pending_rows(&db), 0);
        assert_eq!(count(&other, "SELECT COUNT(*) FROM messages_fts"), 5);
        other
            .execute_batch(
                "INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)",
            )
            .unwrap();
        assert_eq!(search_ids(&db, "edited"), vec![2]);
        assert_eq!(
            search_ids(&db, "m1").len(),
            1,
            "the old text of row 2 is gone"
        );
    }

    #[test]
    fn past_the_pending_limit_a_write_indexes_its_own_rows() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop();
        create(&db, "s");
        let limit = MAX_PENDING_ROWS;
        append(&db, "s", limit as usize - 100).unwrap();
        append(&db, "s", 100).unwrap(); // just fits, in the same range
        append(&db, "s", 200).unwrap();
        assert_eq!(pending_rows(&db), limit);
        assert_eq!(rows_of(&db, "SELECT COUNT(*) FROM hermes_fts_pending"), 1);
        assert_eq!(indexed_rows(&db), 200);
        assert_eq!(
            rows_of(&db, "SELECT MIN(rowid) FROM messages_fts"),
            limit + 1
        );
        index_now(&db);
        assert_eq!(indexed_rows(&db), limit + 200);
    }

    #[test]
    fn deleting_a_long_session_keeps_both_indexes_exact_and_the_settings_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "long");
        create(&db, "short");
        let long = ONE_SEGMENT_ROWS + 500;
        append(&db, "long", long).unwrap();
        append_text(&db, "short", "the kept heron");
        index_now(&db);
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        // Another program's own setting of the word index stays as it was.
        other
            .execute_batch("INSERT INTO messages_fts(messages_fts, rank) VALUES ('automerge', 8)")
            .unwrap();
        let gone = Delete {
            relation: Relation::Messages,
            filter: Filter::eq("session_id", "long"),
        };
        assert_eq!(
            db.write(WriteOp::Delete(gone)).unwrap(),
            WriteOut::Rows(long as u64)
        );
        let settings = |table: &str| -> Vec<(String, i64)> {
            other
                .prepare(&format!(
                    "SELECT k, v FROM {table}_config WHERE k != 'version' ORDER BY k"
                ))
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        for table in ["messages_fts", "messages_fts_trigram"] {
            // FTS5's own check that the index holds exactly the rows' text.
            other
                .execute_batch(&format!(
                    "INSERT INTO {table}({table}) VALUES ('integrity-check')"
                ))
                .unwrap();
            assert_eq!(count(&other, &format!("SELECT COUNT(*) FROM {table}")), 1);
        }
        assert_eq!(settings("messages_fts"), vec![("automerge".into(), 8)]);
        assert_eq!(settings("messages_fts_trigram"), vec![]);
        assert!(search_ids(&db, "m7").is_empty());
        assert_eq!(search_ids(&db, "heron").len(), 1);
    }
}
