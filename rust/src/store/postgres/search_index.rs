//! The search index on PostgreSQL: a side table `hermes_search` with, per
//! message, its words (`tsvector` with positions, GIN-indexed), its
//! trigrams (`tsvector`, GIN-indexed) and its text folded for substring
//! matching, read from the text `state.db`'s indexes hold by SQLite's own
//! tokenizers (`store/sqlite/tokenizer.rs`), so both backends find the same
//! hits.
//!
//! A flush does not index: a statement trigger on `messages` records the
//! inserted id range in `hermes_search_pending`, in the flush's own
//! transaction (so nothing is lost to a crash, whoever wrote the rows), and
//! the backend's indexer thread moves pending ranges into the side table
//! right after, in transactions of its own. A search first indexes what is
//! pending (every host's). Updates that change a message's text or session
//! take its side row out and mark it pending again; deletes take it out;
//! both in the writing transaction, by triggers, so the side table stays
//! exact. The indexer reads the messages it indexes `FOR SHARE`, so an
//! update or delete running meanwhile waits for it or is seen by it.
//!
//! PostgreSQL's own pieces are not used to read the text: its parser makes
//! `ada@example.com` one word and `chat-send` three, and `pg_trgm` ignores
//! every non-ASCII character in a database whose `LC_CTYPE` is C, so it
//! would index no CJK text there.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use tokio_postgres::types::Type;
use tokio_postgres::Client;

use super::connection::{Link, Server};
use super::value::unescape_text;
use crate::store::indexer::Step;
use crate::store::search::is_cjk;
use crate::store::sqlite::tokenizer;
use crate::store::{lock, IndexUpkeep, Relation, WriteOp};

/// The migration that adds the index (`schema.rs` runs it once, in order).
pub const SCHEMA: &str = "
CREATE TABLE hermes_search (
    message_id bigint PRIMARY KEY,
    session_id text NOT NULL,
    words tsvector NOT NULL,
    grams tsvector NOT NULL,
    folded text NOT NULL
);
CREATE INDEX hermes_search_words ON hermes_search USING gin (words);
CREATE INDEX hermes_search_grams ON hermes_search USING gin (grams);
CREATE TABLE hermes_search_pending (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    first_id bigint NOT NULL,
    last_id bigint NOT NULL
);
CREATE INDEX hermes_search_pending_first ON hermes_search_pending (first_id);

CREATE FUNCTION hermes_search_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO hermes_search_pending (first_id, last_id)
    SELECT MIN(id), MAX(id) FROM inserted HAVING COUNT(*) > 0;
    RETURN NULL;
END $$;
CREATE TRIGGER hermes_search_inserted AFTER INSERT ON messages
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION hermes_search_inserted();

CREATE FUNCTION hermes_search_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH changed AS (
        SELECT n.id FROM after_update n LEFT JOIN before_update o USING (id)
        WHERE (n.session_id, n.content, n.tool_name, n.tool_calls)
            IS DISTINCT FROM (o.session_id, o.content, o.tool_name, o.tool_calls)
    ), stale AS (
        DELETE FROM hermes_search x
        USING (SELECT id FROM changed
               UNION (SELECT id FROM before_update EXCEPT SELECT id FROM after_update)) g
        WHERE x.message_id = g.id
    )
    INSERT INTO hermes_search_pending (first_id, last_id) SELECT id, id FROM changed;
    RETURN NULL;
END $$;
CREATE TRIGGER hermes_search_updated AFTER UPDATE ON messages
    REFERENCING OLD TABLE AS before_update NEW TABLE AS after_update
    FOR EACH STATEMENT EXECUTE FUNCTION hermes_search_updated();

CREATE FUNCTION hermes_search_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM hermes_search x USING deleted d WHERE x.message_id = d.id;
    RETURN NULL;
END $$;
CREATE TRIGGER hermes_search_deleted AFTER DELETE ON messages
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION hermes_search_deleted();

INSERT INTO hermes_search_pending (first_id, last_id)
SELECT MIN(id), MAX(id) FROM messages HAVING COUNT(*) > 0;
";

/// The side table's two GIN indexes, which upkeep works on.
const INDEXES: [&str; 2] = ["hermes_search_words", "hermes_search_grams"];

/// Most rows one background indexer transaction takes. Its transaction
/// blocks no write (another connection; only a rewrite of a row it holds
/// waits), and larger chunks cost the server less per row (~2x from 512 to
/// 4,096 rows here).
pub const BACKGROUND_CHUNK_ROWS: i64 = 2048;

/// Most rows one transaction takes when a search or a rebuild catches up.
pub const CATCH_UP_CHUNK_ROWS: i64 = 4096;

/// How long the background indexer waits for a message row another
/// transaction is changing before it gives the chunk up (and retries later).
const BACKGROUND_LOCK_WAIT: Duration = Duration::from_secs(1);

/// PostgreSQL's limits on a `tsvector`: a lexeme's bytes, a position, the
/// positions kept per lexeme, and the bytes of the whole (lexemes and
/// positions; 1 MiB, less room for alignment).
const MAX_LEXEME_BYTES: usize = 2047;
const MAX_POSITION: usize = 16383;
const MAX_POSITIONS: usize = 256;
const MAX_VECTOR_BYTES: usize = 1_000_000;

/// A lexeme of the trigram vector of a message whose trigrams did not all
/// fit: its row is a candidate for every trigram search (which then checks
/// the folded text). Four characters, so no trigram is ever this.
pub const UNCUT_MARKER: &str = "+all";

/// How the pending ranges other connections hold are treated.
#[derive(Debug, Clone, Copy)]
pub enum Held {
    /// Skipped: the background indexer leaves them to their holder.
    Skip,
    /// Waited for, up to this long: a search must see every committed row.
    Wait(Duration),
}

/// `text` cut to a lexeme PostgreSQL accepts (at a character boundary).
pub fn lexeme(text: &str) -> &str {
    if text.len() <= MAX_LEXEME_BYTES {
        return text;
    }
    let mut end = MAX_LEXEME_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `lexeme` quoted for a `tsvector` or `tsquery` literal.
pub fn quoted(lexeme: &str) -> String {
    let mut out = String::with_capacity(lexeme.len() + 2);
    push_quoted(&mut out, lexeme);
    out
}

fn push_quoted(out: &mut String, lexeme: &str) {
    out.push('\'');
    for c in lexeme.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("''"),
            c => out.push(c),
        }
    }
    out.push('\'');
}

/// The trigrams of a folded text (its windows of three characters) that
/// hold a CJK character, once each. Only those are indexed: a search narrows
/// by trigrams for CJK terms of three characters or more, whose windows all
/// hold one; the other terms of such a search are checked on the text. So
/// text without CJK characters costs the trigram index nothing.
pub fn trigrams(folded: &str) -> BTreeSet<String> {
    let chars: Vec<char> = folded.chars().collect();
    chars
        .windows(3)
        .filter(|w| w.iter().any(|&c| is_cjk(c)))
        .map(|w| w.iter().collect())
        .collect()
}

/// What the side table holds for one message.
#[derive(Debug, PartialEq)]
pub struct Indexed {
    /// `tsvector` literals.
    pub words: String,
    pub grams: String,
    pub folded: String,
}

/// The side row of a message with these (unescaped) columns: their text
/// joined as `state.db`'s indexes join it (`store/sqlite/search_index.rs`,
/// `INDEXED_TEXT`).
pub fn indexed(
    content: Option<&str>,
    tool_name: Option<&str>,
    tool_calls: Option<&str>,
) -> Indexed {
    let text = [content, tool_name, tool_calls]
        .map(|column| column.unwrap_or(""))
        .join(" ");
    let mut positions: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let words = tokenizer::words(&text);
    let mut bytes = 0;
    for (position, word) in words.iter().enumerate() {
        let word = lexeme(word);
        if !positions.contains_key(word) {
            // Past the vector's size, further words are left out.
            if bytes + word.len() + 4 > MAX_VECTOR_BYTES {
                continue;
            }
            bytes += word.len() + 4;
            positions.insert(word, Vec::new());
        }
        let position = (position + 1).min(MAX_POSITION);
        if let Some(kept) = positions.get_mut(word) {
            if kept.len() < MAX_POSITIONS && kept.last() != Some(&position) {
                bytes += 2;
                kept.push(position);
            }
        }
    }
    let mut words = String::with_capacity(text.len() * 2);
    for (word, at) in positions {
        if !words.is_empty() {
            words.push(' ');
        }
        push_quoted(&mut words, word);
        for (n, position) in at.iter().enumerate() {
            words.push(if n == 0 { ':' } else { ',' });
            let _ = write!(words, "{position}");
        }
    }
    let folded = tokenizer::fold(&text);
    let mut grams = Vec::new();
    let mut bytes = 0;
    for gram in trigrams(&folded) {
        if bytes + gram.len() + 4 > MAX_VECTOR_BYTES {
            grams.push(quoted(UNCUT_MARKER));
            break;
        }
        bytes += gram.len() + 4;
        grams.push(quoted(&gram));
    }
    Indexed {
        words,
        grams: grams.join(" "),
        folded,
    }
}

/// One transaction on `client`: up to `chunk_rows` pending rows with ids up
/// to `up_to` into the side table. Returns whether it found pending rows
/// (so another call may find more); none left means done.
pub async fn index_chunk(
    client: &Client,
    up_to: i64,
    chunk_rows: i64,
    held: Held,
) -> Result<bool, tokio_postgres::Error> {
    let out = try_index_chunk(client, up_to, chunk_rows, held).await;
    if out.is_err() && !client.is_closed() {
        let _ = client.batch_execute("ROLLBACK").await;
    }
    out
}

async fn try_index_chunk(
    client: &Client,
    up_to: i64,
    chunk_rows: i64,
    held: Held,
) -> Result<bool, tokio_postgres::Error> {
    let (wait, lock_clause) = match held {
        Held::Skip => (BACKGROUND_LOCK_WAIT, "SKIP LOCKED"),
        Held::Wait(wait) => (wait, ""),
    };
    // Derived data: a commit lost to a crash loses its pending-row removal with it.
    client
        .batch_execute(&format!(
            "BEGIN; SET LOCAL synchronous_commit TO off; SET LOCAL lock_timeout TO {}",
            wait.as_millis().max(1)
        ))
        .await?;
    let ranges: Vec<(i64, i64, i64)> = client
        .query_typed(
            &format!(
                "SELECT id, first_id, last_id FROM hermes_search_pending WHERE first_id <= $1
                 ORDER BY first_id LIMIT $2 FOR UPDATE {lock_clause}"
            ),
            &[(&up_to, Type::INT8), (&chunk_rows, Type::INT8)],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    if ranges.is_empty() {
        client.batch_execute("COMMIT").await?;
        return Ok(false);
    }
    // Whole ranges while they fit, and the head of the first if it alone does not.
    let (mut done, mut firsts, mut lasts, mut room) =
        (Vec::new(), Vec::new(), Vec::new(), chunk_rows);
    let mut cut: Option<(i64, i64)> = None;
    for &(id, first, last) in &ranges {
        let rows = last - first + 1;
        if rows > room {
            if done.is_empty() {
                let head_last = first + room - 1;
                firsts.push(first);
                lasts.push(head_last);
                cut = Some((id, head_last + 1));
            }
            break;
        }
        room -= rows;
        done.push(id);
        firsts.push(first);
        lasts.push(last);
    }
    let rows = client
        .query_typed(
            "SELECT m.id, m.session_id, m.content, m.tool_name, m.tool_calls FROM messages m
             WHERE m.id BETWEEN $1 AND $2
               AND EXISTS (SELECT 1 FROM unnest($3::int8[], $4::int8[]) r(f, l)
                           WHERE m.id BETWEEN r.f AND r.l)
               AND NOT EXISTS (SELECT 1 FROM hermes_search x WHERE x.message_id = m.id)
             ORDER BY m.id FOR SHARE OF m",
            &[
                (&firsts[0], Type::INT8),
                (&lasts.iter().max(), Type::INT8),
                (&firsts, Type::INT8_ARRAY),
                (&lasts, Type::INT8_ARRAY),
            ],
        )
        .await?;
    if !rows.is_empty() {
        let mut ids = Vec::with_capacity(rows.len());
        let mut sessions = Vec::with_capacity(rows.len());
        let (mut words, mut grams, mut folded) = (Vec::new(), Vec::new(), Vec::new());
        for row in &rows {
            let text = |i: usize| row.get::<_, Option<&str>>(i).map(unescape_text);
            let (content, name, calls) = (text(2), text(3), text(4));
            let side = indexed(content.as_deref(), name.as_deref(), calls.as_deref());
            ids.push(row.get::<_, i64>(0));
            sessions.push(row.get::<_, &str>(1));
            words.push(side.words);
            grams.push(side.grams);
            folded.push(side.folded);
        }
        client
            .query_typed(
                "INSERT INTO hermes_search (message_id, session_id, words, grams, folded)
                 SELECT u.id, u.session, u.words::tsvector, u.grams::tsvector, u.folded
                 FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $5::text[])
                     AS u(id, session, words, grams, folded)
                 ON CONFLICT (message_id) DO NOTHING",
                &[
                    (&ids, Type::INT8_ARRAY),
                    (&sessions, Type::TEXT_ARRAY),
                    (&words, Type::TEXT_ARRAY),
                    (&grams, Type::TEXT_ARRAY),
                    (&folded, Type::TEXT_ARRAY),
                ],
            )
            .await?;
    }
    client
        .query_typed(
            "DELETE FROM hermes_search_pending WHERE id = ANY($1)",
            &[(&done, Type::INT8_ARRAY)],
        )
        .await?;
    if let Some((id, first)) = cut {
        client
            .query_typed(
                "UPDATE hermes_search_pending SET first_id = $2 WHERE id = $1",
                &[(&id, Type::INT8), (&first, Type::INT8)],
            )
            .await?;
    }
    client.batch_execute("COMMIT").await?;
    Ok(true)
}

/// One step of the background indexer: one chunk, on an idle reader
/// connection (or a new one, which joins them), leaving ranges other
/// connections hold to them.
pub fn background_step(server: &Server, readers: &Mutex<Vec<Link>>) -> Step {
    let idle = lock(readers).pop();
    let link = match idle {
        Some(link) if !link.client.is_closed() => link,
        _ => match server.connect() {
            Ok(link) => link,
            Err(_) => return Step::Failed,
        },
    };
    let out = server.block_on(index_chunk(
        &link.client,
        i64::MAX,
        BACKGROUND_CHUNK_ROWS,
        Held::Skip,
    ));
    super::read::keep_idle(server, lock(readers), link);
    match out {
        Ok(true) => Step::More,
        Ok(false) => Step::Done,
        Err(_) => Step::Failed,
    }
}

/// Whether `op` may leave rows pending (an append, an import or an update of messages).
pub fn leaves_pending(op: &WriteOp) -> bool {
    match op {
        WriteOp::Append { .. } => true,
        WriteOp::Update(update) => update.relation == Relation::Messages,
        WriteOp::Import(import) => import.relation == Relation::Messages,
        WriteOp::Transaction(ops) => ops.iter().any(leaves_pending),
        WriteOp::Insert(_) | WriteOp::Delete(_) | WriteOp::SearchIndex(_) => false,
    }
}

/// The last id of the pending ranges (None when nothing is pending).
pub async fn pending_up_to(client: &Client) -> Result<Option<i64>, tokio_postgres::Error> {
    let rows = client
        .query_typed("SELECT MAX(last_id) FROM hermes_search_pending", &[])
        .await?;
    Ok(rows[0].get(0))
}

/// `upkeep` inside the caller's write transaction; returns how many indexes
/// it ran on. Optimizing merges each GIN index's pending list into the
/// index (FTS5's merge of segments, in PostgreSQL's terms); rebuilding
/// empties the side table (`TRUNCATE` makes its indexes anew, so a damaged
/// one is replaced) and marks every message pending, for the catch-up the
/// backend runs once this commits.
pub async fn upkeep(client: &Client, upkeep: IndexUpkeep) -> Result<u64, tokio_postgres::Error> {
    match upkeep {
        IndexUpkeep::Optimize => {
            for index in INDEXES {
                client
                    .query_typed(
                        "SELECT gin_clean_pending_list($1::regclass)",
                        &[(&index, Type::TEXT)],
                    )
                    .await?;
            }
        }
        IndexUpkeep::Rebuild => {
            client
                .simple_query(
                    "TRUNCATE hermes_search; DELETE FROM hermes_search_pending;
                     INSERT INTO hermes_search_pending (first_id, last_id)
                     SELECT MIN(id), MAX(id) FROM messages HAVING COUNT(*) > 0",
                )
                .await?;
        }
    }
    Ok(INDEXES.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_row_holds_the_words_at_their_positions_and_the_cjk_trigrams() {
        let side = indexed(Some("It's the TODO: it"), Some("web_search"), None);
        assert_eq!(
            side.words,
            "'it':1,5 's':2 'search':7 'the':3 'todo':4 'web':6"
        );
        assert_eq!(side.folded, "it's the todo: it web_search ");
        assert_eq!(side.grams, "");
        let side = indexed(Some("Agent的聊天'"), None, Some("x"));
        assert_eq!(side.folded, "agent的聊天'  x");
        assert_eq!(side.grams, "'nt的' 't的聊' '天'' ' '的聊天' '聊天'''");
        let empty = indexed(None, None, None);
        assert_eq!((empty.words.as_str(), empty.grams.as_str()), ("", ""));
    }

    #[test]
    fn quotes_and_backslashes_are_escaped_and_long_words_cut() {
        assert_eq!(quoted("a'b\\c"), "'a''b\\\\c'");
        let long = "é".repeat(2000);
        let cut = lexeme(&long);
        assert!(cut.len() <= MAX_LEXEME_BYTES && long.starts_with(cut) && cut.len() > 2040);
    }

    #[test]
    fn a_huge_text_keeps_its_vectors_within_postgresqls_limits() {
        let text: String = (0..300_000).map(|n| format!("w{n} ")).collect();
        let side = indexed(Some(&text), None, None);
        assert!(side.words.len() < 2 * MAX_VECTOR_BYTES);
        assert!(side.words.len() > MAX_VECTOR_BYTES / 2);
        // CJK characters in a pseudo-random order: ~150,000 distinct trigrams.
        let mut state = 1u64;
        let text: String = (0..150_000)
            .filter_map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                char::from_u32(0x4E00 + (state >> 33) as u32 % 20_000)
            })
            .collect();
        let side = indexed(Some(&text), None, None);
        assert!(side.grams.ends_with(&quoted(UNCUT_MARKER)));
        let repeated = "again ".repeat(20_000);
        let side = indexed(Some(&repeated), None, None);
        let positions = side.words.split(',').count();
        assert_eq!(positions, MAX_POSITIONS);
    }
}
