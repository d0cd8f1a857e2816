//! The `state.db` schema: whatever is missing is created (an older file gets
//! the columns our statements need); existing tables and rows are left alone.
//!
//! Column names and types match hermes-agent 0.19.0 (schema_version 22) so
//! either program can open a file the other wrote. The DDL is ours.
//! Deliberate differences, each something hermes-agent adds itself (and
//! fills) the first time it opens one of our files:
//! * we create neither of its session-by-timestamp indexes on `messages`
//!   (`idx_messages_session`, `idx_messages_session_active`): nothing of ours
//!   reads through them, and each costs every flush one to five more pages
//!   to write and fsync. Where they exist, SQLite maintains them as usual.
//!
//! One difference the other way: we create the Telegram topic-mode tables
//! (`telegram_dm_topic_mode`, `telegram_dm_topic_bindings`) with the file, where
//! hermes-agent creates them at a chat's first `/topic`. They are its version-2
//! tables, which its opt-in migration then finds and keeps.

use rusqlite::Connection;

use super::search_index::INDEXED_TEXT;
use super::word_pairs;
use crate::model::SCHEMA_VERSION;

pub(crate) const TABLES: &str = r#"
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);

CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    user_id TEXT,
    session_key TEXT,
    chat_id TEXT,
    chat_type TEXT,
    thread_id TEXT,
    display_name TEXT,
    origin_json TEXT,
    expiry_finalized INTEGER DEFAULT 0,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    parent_session_id TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0,
    cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0,
    cwd TEXT,
    git_branch TEXT,
    git_repo_root TEXT,
    billing_provider TEXT,
    billing_base_url TEXT,
    billing_mode TEXT,
    estimated_cost_usd REAL,
    actual_cost_usd REAL,
    cost_status TEXT,
    cost_source TEXT,
    pricing_version TEXT,
    title TEXT,
    api_call_count INTEGER DEFAULT 0,
    handoff_state TEXT,
    handoff_platform TEXT,
    handoff_error TEXT,
    compression_failure_cooldown_until REAL,
    compression_failure_error TEXT,
    compression_fallback_streak INTEGER NOT NULL DEFAULT 0,
    profile_name TEXT,
    rewind_count INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
);

CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    effect_disposition TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER,
    finish_reason TEXT,
    reasoning TEXT,
    reasoning_content TEXT,
    reasoning_details TEXT,
    codex_reasoning_items TEXT,
    codex_message_items TEXT,
    platform_message_id TEXT,
    observed INTEGER DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0,
    api_content TEXT
);

CREATE TABLE IF NOT EXISTS session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '',
    billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '',
    task TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0,
    actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT,
    cost_source TEXT,
    first_seen REAL,
    last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task)
);

CREATE TABLE IF NOT EXISTS state_meta (key TEXT PRIMARY KEY, value TEXT);

CREATE TABLE IF NOT EXISTS gateway_routing (
    scope TEXT NOT NULL DEFAULT '',
    session_key TEXT NOT NULL,
    entry_json TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (scope, session_key)
);

-- Telegram DM topic mode, as hermes-agent's opt-in migration (its version 2) creates it.
CREATE TABLE IF NOT EXISTS telegram_dm_topic_mode (
    chat_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    activated_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    has_topics_enabled INTEGER,
    allows_users_to_create_topics INTEGER,
    capability_checked_at REAL,
    intro_message_id TEXT,
    pinned_message_id TEXT
);

CREATE TABLE IF NOT EXISTS telegram_dm_topic_bindings (
    chat_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    managed_mode TEXT NOT NULL DEFAULT 'auto',
    linked_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (chat_id, thread_id)
);

-- Ours (hermes-agent neither reads nor writes it): the api_server's stored
-- /v1/responses answers, each with the conversation a response chained from
-- it continues (conversation_json), owned by the caller that created it.
CREATE TABLE IF NOT EXISTS hermes_responses (
    id TEXT PRIMARY KEY,
    caller TEXT NOT NULL,
    session_id TEXT,
    previous_response_id TEXT,
    created_at REAL NOT NULL,
    response_json TEXT NOT NULL,
    conversation_json TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS compression_locks (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS async_delegations (
    delegation_id TEXT PRIMARY KEY,
    origin_session TEXT NOT NULL,
    origin_ui_session_id TEXT NOT NULL DEFAULT '',
    parent_session_id TEXT,
    state TEXT NOT NULL,
    dispatched_at REAL NOT NULL,
    completed_at REAL,
    updated_at REAL NOT NULL,
    event_json TEXT,
    result_json TEXT,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    delivered_at REAL,
    owner_pid INTEGER,
    owner_started_at INTEGER,
    task_json TEXT,
    delivery_claim TEXT,
    delivery_claimed_at REAL
);
"#;

pub(crate) const INDEXES: &str = r#"
CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source);
CREATE INDEX IF NOT EXISTS idx_sessions_source_id ON sessions(source, id);
CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC);
CREATE INDEX IF NOT EXISTS idx_compression_locks_expires ON compression_locks(expires_at);
CREATE INDEX IF NOT EXISTS idx_session_model_usage_session ON session_model_usage(session_id);
CREATE INDEX IF NOT EXISTS idx_session_model_usage_model ON session_model_usage(model);
CREATE INDEX IF NOT EXISTS idx_async_delegations_delivery
    ON async_delegations(delivery_state, completed_at);
CREATE INDEX IF NOT EXISTS idx_messages_platform_msg_id
    ON messages(session_id, platform_message_id) WHERE platform_message_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_messages_active_null ON messages(active) WHERE active IS NULL;
CREATE INDEX IF NOT EXISTS idx_sessions_session_key ON sessions(session_key, started_at DESC);
CREATE INDEX IF NOT EXISTS idx_sessions_gateway_peer
    ON sessions(source, user_id, chat_id, chat_type, thread_id, started_at DESC);
CREATE INDEX IF NOT EXISTS idx_sessions_handoff_state ON sessions(handoff_state, started_at);
CREATE UNIQUE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_session
    ON telegram_dm_topic_bindings(session_id);
CREATE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_user
    ON telegram_dm_topic_bindings(user_id, chat_id);
CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL;
-- Ours, in place of hermes-agent's two (session_id, [active,] timestamp)
-- indexes (see the module doc): entries end with the rowid, so a session's
-- active messages come out of this index already in id order (no sort).
CREATE INDEX IF NOT EXISTS idx_messages_session_order ON messages(session_id, active);
"#;

/// The word index over content, tool name and tool calls, and hermes-agent's
/// trigram index over the same text (for CJK search), kept in sync by
/// triggers for every writer. Our own writer connection runs with triggers
/// disabled and indexes its rows itself with the insert trigger's text,
/// set-based, right after the commit, and re-indexes the rows its updates
/// and deletes touch, in their transaction (`search_index.rs`: only while
/// the file's index triggers and tables are exactly these).
///
/// Ours: `hermes_fts_pending` holds the id ranges of message rows committed
/// but not indexed yet, written in the same transaction as the rows; the
/// indexer removes a range in the transaction that indexes it.
///
/// Each object by name, with its statement: SQLite keeps the statement's
/// text, `IF NOT EXISTS` left out, as the object's definition, which is how
/// `search_index.rs` tells these from others under the same names.
pub(super) const SEARCH_INDEXES: [(&str, &str); 9] = [
    (
        "messages_fts",
        "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(content)",
    ),
    (
        "messages_fts_insert",
        "CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id,
        COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || COALESCE(new.tool_calls, ''));
END",
    ),
    (
        "messages_fts_delete",
        "CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.id;
END",
    ),
    (
        "messages_fts_update",
        "CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.id;
    INSERT INTO messages_fts(rowid, content) VALUES (new.id,
        COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || COALESCE(new.tool_calls, ''));
END",
    ),
    (
        "messages_fts_trigram",
        "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(content, tokenize='trigram')",
    ),
    (
        "messages_fts_trigram_insert",
        "CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id,
        COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || COALESCE(new.tool_calls, ''));
END",
    ),
    (
        "messages_fts_trigram_delete",
        "CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages BEGIN
    DELETE FROM messages_fts_trigram WHERE rowid = old.id;
END",
    ),
    (
        "messages_fts_trigram_update",
        "CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_update AFTER UPDATE ON messages BEGIN
    DELETE FROM messages_fts_trigram WHERE rowid = old.id;
    INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id,
        COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || COALESCE(new.tool_calls, ''));
END",
    ),
    (
        "hermes_fts_pending",
        "CREATE TABLE IF NOT EXISTS hermes_fts_pending (
    first_id INTEGER NOT NULL,
    last_id INTEGER NOT NULL
)",
    ),
];

/// Every search-index object our schema creates, by name with its
/// statement: [`SEARCH_INDEXES`], then the word-pair index's (`word_pairs.rs`).
pub(super) fn search_index_objects() -> impl Iterator<Item = &'static (&'static str, &'static str)>
{
    SEARCH_INDEXES.iter().chain(word_pairs::OBJECTS.iter())
}

/// `objects` (names with statements) as one script.
fn script<'a>(objects: impl Iterator<Item = &'a (&'a str, &'a str)>) -> String {
    objects
        .map(|(_, statement)| format!("\n{statement};\n"))
        .collect()
}

/// Our DDL as one script, exposed as `hermes.state.SCHEMA_SQL` (hermes-agent exports its own
/// DDL under that name). Run on an empty database it creates what [`ensure`] does but the
/// word-pair index, which needs SQLite 3.43 (Python's `sqlite3` may have an older one): the
/// store adds it when it opens the file.
pub fn schema_sql() -> String {
    [TABLES, INDEXES, &script(SEARCH_INDEXES.iter())].concat()
}

/// Whether the file has a table (or virtual table) `name`.
pub(super) fn has_table(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")?
        .exists([name])
}

/// Creates whatever is missing; leaves existing tables and data alone.
pub fn ensure(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(TABLES)?;
    add_missing_columns(conn)?;
    conn.execute_batch(INDEXES)?;
    let had_trigrams = has_table(conn, "messages_fts_trigram")?;
    let had_pairs = word_pairs::intact(conn)?;
    if !had_pairs {
        word_pairs::drop_all(conn)?;
    }
    conn.execute_batch(&script(search_index_objects()))?;
    if !had_trigrams {
        // A file from before the trigram index: index its messages now.
        conn.execute_batch(&format!(
            "INSERT INTO messages_fts_trigram(rowid, content) SELECT id, {INDEXED_TEXT} FROM messages"
        ))?;
    }
    if !had_pairs {
        // New, or a part was missing or changed (changes went unseen):
        // every row is indexed again, by the indexer.
        word_pairs::mark_all_stale(conn)?;
    }
    let version: Option<i64> = conn
        .query_row("SELECT version FROM schema_version LIMIT 1", [], |r| {
            r.get(0)
        })
        .ok();
    if version.is_none() {
        conn.execute(
            "INSERT INTO schema_version (version) VALUES (?1)",
            [SCHEMA_VERSION],
        )?;
    }
    Ok(())
}

/// Columns an older hermes-agent file may lack; added so our statements run.
const LATE_COLUMNS: &[(&str, &str, &str)] = &[
    ("messages", "active", "INTEGER NOT NULL DEFAULT 1"),
    ("messages", "compacted", "INTEGER NOT NULL DEFAULT 0"),
    ("messages", "api_content", "TEXT"),
    ("messages", "observed", "INTEGER DEFAULT 0"),
    ("messages", "platform_message_id", "TEXT"),
    ("messages", "effect_disposition", "TEXT"),
    ("messages", "codex_message_items", "TEXT"),
    ("sessions", "archived", "INTEGER NOT NULL DEFAULT 0"),
    ("sessions", "session_key", "TEXT"),
    ("sessions", "title", "TEXT"),
];

fn add_missing_columns(conn: &Connection) -> rusqlite::Result<()> {
    for (table, column, decl) in LATE_COLUMNS {
        let present: bool = conn.query_row(
            "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
            [table, column],
            |r| r.get::<_, i64>(0).map(|n| n > 0),
        )?;
        if !present {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::count;
    use super::*;
    use crate::store::sqlite::connection::configure;
    use crate::store::Durability;

    #[test]
    fn ensure_is_idempotent_and_versioned() {
        let conn = Connection::open_in_memory().unwrap();
        ensure(&conn).unwrap();
        ensure(&conn).unwrap();
        let v: i64 = conn
            .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        let rows: i64 = conn
            .query_row("SELECT COUNT(*) FROM schema_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
    }

    #[test]
    fn schema_sql_creates_what_ensure_creates() {
        let objects = |conn: &Connection| -> Vec<(String, String)> {
            conn.prepare("SELECT name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY name")
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        let ensured = Connection::open_in_memory().unwrap();
        ensure(&ensured).unwrap();
        let scripted = Connection::open_in_memory().unwrap();
        scripted.execute_batch(&schema_sql()).unwrap();
        let pairs = |(name, _): &(String, String)| {
            name.starts_with(word_pairs::TABLE) || name == word_pairs::STALE
        };
        let (extra, shared): (Vec<_>, Vec<_>) = objects(&ensured).into_iter().partition(pairs);
        assert_eq!(objects(&scripted), shared);
        assert_eq!(
            extra.len(),
            5 + 4,
            "the word-pair index's, with FTS5's own tables"
        );
    }

    #[test]
    fn cached_statements_are_not_re_prepared_on_reuse() {
        let conn = Connection::open_in_memory().unwrap();
        configure(&conn, Durability::Normal).unwrap();
        ensure(&conn).unwrap();
        let sql = "SELECT role FROM messages WHERE session_id = ?1 AND active = 1 ORDER BY id";
        for id in ["a", "b", "c"] {
            let mut stmt = conn.prepare_cached(sql).unwrap();
            stmt.query([id]).unwrap().next().unwrap();
            let reprepared = stmt.get_status(rusqlite::StatementStatus::RePrepare);
            assert_eq!(reprepared, 0, "{id}");
        }
    }

    #[test]
    fn a_transcript_is_read_in_id_order_through_our_index_alone() {
        let conn = Connection::open_in_memory().unwrap();
        ensure(&conn).unwrap();
        let indexes: Vec<String> = conn
            .prepare(
                "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'messages'",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(indexes.contains(&"idx_messages_session_order".to_string()));
        assert!(
            !indexes
                .iter()
                .any(|i| ["idx_messages_session", "idx_messages_session_active"]
                    .contains(&i.as_str()))
        );
        let sql = "EXPLAIN QUERY PLAN SELECT role FROM messages WHERE session_id = ?1 AND active = 1 ORDER BY id";
        let plan: Vec<String> = conn
            .prepare(sql)
            .unwrap()
            .query_map(["s"], |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            plan,
            ["SEARCH messages USING INDEX idx_messages_session_order (session_id=? AND active=?)"]
        );
    }

    #[test]
    fn fts_trigger_indexes_content_and_tool_calls() {
        let conn = Connection::open_in_memory().unwrap();
        ensure(&conn).unwrap();
        conn.execute_batch(
            "INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 0);
             INSERT INTO messages (session_id, role, content, tool_calls, timestamp)
                 VALUES ('s', 'assistant', 'hello', '[{\"name\":\"grep\"}]', 0);",
        )
        .unwrap();
        let hits = count(
            &conn,
            "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'grep'",
        );
        assert_eq!(hits, 1);
    }
}
