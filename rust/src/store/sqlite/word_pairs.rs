//! The word-pair index, ours alone: each message's consecutive words as
//! pairs (`user model` is the term `user_model`), so a two-word phrase is
//! one term's doclist, not the position lists of two words that are each in
//! most messages (a phrase search of 1M messages took ~45 ms through the
//! word index, under 1 ms here).
//!
//! Its terms are ours (SQLite's `unicode61` words, [`super::tokenizer`],
//! joined by `_`, which that tokenizer never keeps in a word), so another
//! program cannot fill it. It is never asked to: its rows are written by our
//! indexer alone, and another program's changes to `messages` are seen by
//! our plain triggers, which note the row's id in `hermes_fts_stale` for
//! the indexer to index again. A search takes the index only when nothing
//! is stale (after catching up a few rows itself), so it never answers from
//! text another program changed. The index lives in a contentless table
//! (its text is not kept twice) that SQLite 3.43+ can delete from by rowid;
//! only our bundled SQLite opens it.
//!
//! A row's text here has as many terms as the word index has words for it
//! (its pairs and one `_`, none for a row without words), so FTS5 sees the
//! same row lengths and totals in both tables and [`super::rank`] ranks a
//! phrase's matches here exactly as in the word index.

use rusqlite::functions::FunctionFlags;
use rusqlite::{Connection, OptionalExtension};

use super::tokenizer;
use crate::store::search::Terms;

/// The index table.
pub const TABLE: &str = "hermes_fts_pairs";

/// The SQL function that makes a row's text for the index from its indexed
/// text.
pub const FUNCTION: &str = "hermes_word_pairs";

/// The ids of rows another program inserted, updated or deleted since the
/// indexer last saw them (filled by the triggers of [`OBJECTS`]).
pub const STALE: &str = "hermes_fts_stale";

/// The index's objects in the file, each by name with its statement (as
/// `schema::SEARCH_INDEXES` lists them). Our writer runs with triggers off,
/// so the triggers note only other programs' changes; an update that leaves
/// the indexed columns alone (a rewind, an archive) notes nothing.
pub const OBJECTS: [(&str, &str); 5] = [
    (
        TABLE,
        "CREATE VIRTUAL TABLE IF NOT EXISTS hermes_fts_pairs USING fts5(content, content='',
    contentless_delete=1, tokenize='unicode61 remove_diacritics 0 tokenchars ''_''')",
    ),
    (
        STALE,
        "CREATE TABLE IF NOT EXISTS hermes_fts_stale (id INTEGER PRIMARY KEY)",
    ),
    (
        "hermes_fts_pairs_insert",
        "CREATE TRIGGER IF NOT EXISTS hermes_fts_pairs_insert AFTER INSERT ON messages BEGIN
    INSERT OR IGNORE INTO hermes_fts_stale (id) VALUES (new.id);
END",
    ),
    (
        "hermes_fts_pairs_delete",
        "CREATE TRIGGER IF NOT EXISTS hermes_fts_pairs_delete AFTER DELETE ON messages BEGIN
    INSERT OR IGNORE INTO hermes_fts_stale (id) VALUES (old.id);
END",
    ),
    (
        "hermes_fts_pairs_update",
        "CREATE TRIGGER IF NOT EXISTS hermes_fts_pairs_update
    AFTER UPDATE OF id, content, tool_name, tool_calls ON messages BEGIN
    INSERT OR IGNORE INTO hermes_fts_stale (id) VALUES (old.id);
    INSERT OR IGNORE INTO hermes_fts_stale (id) VALUES (new.id);
END",
    ),
];

/// A row's text for the index, from the text the word index holds for it.
pub fn row_text(text: &str) -> String {
    let words = tokenizer::words(text);
    let mut out = String::with_capacity(text.len() * 2);
    for pair in words.windows(2) {
        out.push_str(&pair[0]);
        out.push('_');
        out.push_str(&pair[1]);
        out.push(' ');
    }
    if !words.is_empty() {
        out.push('_');
    }
    out
}

/// The index's FTS5 query for `terms`, when they are one phrase of exactly
/// two words (a quoted pair, or a word such as `chat-send` that the word
/// index splits in two); other queries are the word index's.
pub fn query(terms: &Terms) -> Option<String> {
    let [(_, term)] = terms.0.as_slice() else {
        return None;
    };
    if term.prefix {
        return None;
    }
    match tokenizer::words(&term.text).as_slice() {
        [first, second] => Some(format!("\"{first}_{second}\"")),
        _ => None,
    }
}

/// Declares [`FUNCTION`] on `conn`, for the indexing statements.
pub fn declare(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        FUNCTION,
        1,
        FunctionFlags::SQLITE_UTF8
            | FunctionFlags::SQLITE_DETERMINISTIC
            | FunctionFlags::SQLITE_DIRECTONLY,
        |ctx| {
            let text = ctx.get::<Option<String>>(0)?.unwrap_or_default();
            Ok(row_text(&text))
        },
    )
}

/// Whether the file has every object of the index, each as our schema
/// makes it.
pub fn intact(conn: &Connection) -> rusqlite::Result<bool> {
    let mut found = 0;
    for (name, _) in OBJECTS {
        let sql: Option<String> = conn
            .prepare_cached("SELECT sql FROM sqlite_master WHERE name = ?1")?
            .query_row([name], |r| r.get(0))
            .optional()?;
        if sql.is_some_and(|sql| super::search_index::is_ours(name, &sql)) {
            found += 1;
        }
    }
    Ok(found == OBJECTS.len())
}

/// Drops whatever the file has of the index, in the caller's write
/// transaction.
pub fn drop_all(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "DROP TRIGGER IF EXISTS hermes_fts_pairs_insert;
         DROP TRIGGER IF EXISTS hermes_fts_pairs_delete;
         DROP TRIGGER IF EXISTS hermes_fts_pairs_update;
         DROP TABLE IF EXISTS hermes_fts_pairs;
         DROP TABLE IF EXISTS hermes_fts_stale;",
    )
}

/// Empties the index and notes every message as stale, in the caller's
/// write transaction.
pub fn mark_all_stale(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "INSERT INTO hermes_fts_pairs (hermes_fts_pairs) VALUES ('delete-all');
         DELETE FROM hermes_fts_stale;
         INSERT INTO hermes_fts_stale (id) SELECT id FROM messages;",
    )
}

/// Indexes every message afresh, in the caller's write transaction (FTS5's
/// own rebuild needs the text a contentless table does not keep).
pub fn rebuild(conn: &Connection) -> rusqlite::Result<()> {
    let text = super::search_index::row_text(TABLE);
    conn.execute_batch(&format!(
        "INSERT INTO hermes_fts_pairs (hermes_fts_pairs) VALUES ('delete-all');
         INSERT INTO hermes_fts_pairs (rowid, content) SELECT id, {text} FROM messages;
         DELETE FROM hermes_fts_stale;"
    ))
}

/// How many rows are stale, counted up to `bound` (no further).
pub fn stale_rows(conn: &Connection, bound: i64) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT count(*) FROM (SELECT 1 FROM hermes_fts_stale LIMIT ?1)")?
        .query_row([bound], |r| r.get(0))
}

/// Indexes up to `chunk_rows` stale rows again, in the caller's write
/// transaction: their old terms out, the text of those that still exist
/// in. Returns whether stale rows remain.
pub fn index_stale(conn: &Connection, chunk_rows: i64) -> rusqlite::Result<bool> {
    let ids: Vec<i64> = conn
        .prepare_cached("SELECT id FROM hermes_fts_stale ORDER BY id LIMIT ?1")?
        .query_map([chunk_rows], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let (Some(&low), Some(&high)) = (ids.first(), ids.last()) else {
        return Ok(false);
    };
    let text = super::search_index::row_text(TABLE);
    conn.prepare_cached(
        "DELETE FROM hermes_fts_pairs WHERE rowid IN
           (SELECT id FROM hermes_fts_stale WHERE id BETWEEN ?1 AND ?2)",
    )?
    .execute([low, high])?;
    conn.prepare_cached(&format!(
        "INSERT INTO hermes_fts_pairs (rowid, content)
         SELECT id, {text} FROM messages
         WHERE id IN (SELECT id FROM hermes_fts_stale WHERE id BETWEEN ?1 AND ?2)"
    ))?
    .execute([low, high])?;
    conn.prepare_cached("DELETE FROM hermes_fts_stale WHERE id BETWEEN ?1 AND ?2")?
        .execute([low, high])?;
    conn.prepare_cached("SELECT 1 FROM hermes_fts_stale")?
        .exists([])
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use crate::model::NewMessage;
    use crate::store::search::Search;
    use crate::store::Backend;

    /// The ids of the hits of `query`, in id order.
    fn phrase_hits(db: &super::super::SqliteBackend, query: &str) -> Vec<i64> {
        let search = Search {
            query: query.into(),
            limit: 1000,
            ..Search::default()
        };
        let mut ids = hit_ids(&db.search(&search).unwrap());
        ids.sort_unstable();
        ids
    }

    fn stale(db: &super::super::SqliteBackend) -> i64 {
        rows_of(db, "SELECT COUNT(*) FROM hermes_fts_stale")
    }

    #[test]
    fn a_rows_text_has_its_pairs_and_as_many_terms_as_words() {
        assert_eq!(
            row_text("User model, the Café model!"),
            "user_model model_the the_cafe cafe_model _"
        );
        assert_eq!(row_text("alone"), "_");
        assert_eq!(row_text(" -- "), "");
    }

    #[test]
    fn only_a_phrase_of_two_words_is_the_indexs() {
        let q = |text: &str| query(&Terms::parse(text).words());
        assert_eq!(q("\"User Model\""), Some("\"user_model\"".into()));
        assert_eq!(q("chat-send"), Some("\"chat_send\"".into()));
        assert_eq!(q("user model"), None, "two phrases");
        assert_eq!(q("\"user model agent\""), None);
        assert_eq!(q("\"user model\"*"), None);
        assert_eq!(q("user"), None);
    }

    #[test]
    fn another_programs_changes_are_found_and_indexed_again() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        for text in ["a user model here", "no pair here", "the user model again"] {
            append_text(&db, "s", text);
        }
        assert_eq!(phrase_hits(&db, "\"user model\""), vec![1, 3]);
        // Triggers on: what hermes-agent does to the file.
        let other = rusqlite::Connection::open(dir.path().join("state.db")).unwrap();
        other
            .execute_batch(
                "UPDATE messages SET content = 'now a user model too' WHERE id = 2;
                 UPDATE messages SET content = 'model user' WHERE id = 3;
                 INSERT INTO messages (session_id, role, content, timestamp)
                     VALUES ('s', 'user', 'user model, new', 9);
                 UPDATE messages SET active = 0 WHERE id = 1;
                 UPDATE messages SET active = 1 WHERE id = 1;",
            )
            .unwrap();
        // Three rows noted (the flag changes note nothing), indexed again by
        // the search.
        assert_eq!(stale(&db), 3);
        assert_eq!(phrase_hits(&db, "\"user model\""), vec![1, 2, 4]);
        assert_eq!(stale(&db), 0);
        other
            .execute("DELETE FROM messages WHERE id = 2", [])
            .unwrap();
        assert_eq!(phrase_hits(&db, "\"user model\""), vec![1, 4]);
        assert_eq!(
            rows_of(&db, "SELECT COUNT(*) FROM hermes_fts_pairs"),
            rows_of(&db, "SELECT COUNT(*) FROM messages")
        );
    }

    #[test]
    fn a_file_without_the_index_is_indexed_by_the_indexer_and_answered_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        let rows: Vec<NewMessage> = (0..5000)
            .map(|i| NewMessage::text("user", &format!("row {i} user model {i}"), 1.0))
            .collect();
        append_rows(&db, "s", rows);
        index_now(&db);
        db.close();
        let other = rusqlite::Connection::open(dir.path().join("state.db")).unwrap();
        drop_all(&other).unwrap();
        let db = open(&dir);
        db.indexer.stop();
        assert_eq!(stale(&db), 5000, "every row");
        // More than a search indexes itself: the word index answers.
        assert_eq!(phrase_hits(&db, "\"user model\"").len(), 1000);
        assert_eq!(stale(&db), 5000);
        db.close();
        let db = open(&dir);
        wait_until(|| stale(&db) == 0);
        assert_eq!(rows_of(&db, "SELECT COUNT(*) FROM hermes_fts_pairs"), 5000);
        assert_eq!(phrase_hits(&db, "\"user model\"").len(), 1000);
        db.close();
        // Intact: a later open notes nothing.
        let db = open(&dir);
        assert_eq!(stale(&db), 0);
    }
}
