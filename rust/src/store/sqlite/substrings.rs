//! Substring search: the route of a query with a CJK term too short for the
//! trigram index to match as a word (two characters, the length of most
//! Chinese words), newest match first, as hermes-agent's `LIKE` fallback.
//!
//! A scan reads every message row (or every row of the filtered sessions).
//! When each term can be found through the trigram index instead, the index
//! gives the candidates and only they are read: a term of three characters
//! or more is its trigrams side by side; a term of two CJK characters is any
//! trigram that begins with them, read from the index's vocabulary. That
//! finds every row a scan finds, because each occurrence of two characters
//! in a row's indexed text has a character after it (the text of `content`
//! and of `tool_name` is followed by a space, and a JSON `tool_calls` text
//! ends in a bracket, a brace, a quote or a letter, never in a CJK character).
//! Only ASCII and CJK characters are taken this way: for them the index's
//! case folding and `LIKE`'s are the same (ASCII letters only).

use rusqlite::types::Value as SqlValue;
use rusqlite::{params, params_from_iter, Connection};

use super::admitted;
use super::search::{
    admitted_set, hits_of_ids, many_matches, with_context, Statement, HIT_COLUMNS,
};
use super::search_index::INDEXED_TEXT;
use super::tables;
use super::tokenizer;
use crate::model::Table;
use crate::store::search::{is_cjk, Expr, Search, Terms};

/// The trigram index's vocabulary, one row per term, on each connection
/// that asks (a table of the connection's own temporary schema).
const VOCABULARY: &str = "temp.hermes_trigram_terms";

const TRIGRAMS: &str = "messages_fts_trigram";

/// Most trigrams a two-character term is read as; a term that begins more
/// of them (a very common pair of characters in a large, varied file) is
/// left to the scan.
const MOST_TRIGRAMS: usize = 4096;

/// How the trigram index finds one term's text.
#[derive(Debug, PartialEq)]
enum Found {
    /// Its trigrams side by side: the term as an FTS5 phrase.
    Phrase,
    /// Two CJK characters: any of these trigrams (none: it is nowhere).
    Trigrams(Vec<String>),
}

/// Whether the trigram index can find `text` as `LIKE '%text%'` does, and
/// how long it is (in characters).
fn findable(text: &str) -> Option<usize> {
    let all = text.chars().all(|c| c.is_ascii() || is_cjk(c));
    let length = text.chars().count();
    let pair = length == 2 && text.chars().all(is_cjk);
    (all && (length >= 3 || pair)).then_some(length)
}

/// How the trigram index finds each of `terms` (None if one of them it
/// cannot, or a two-character one begins too many trigrams).
fn found(conn: &Connection, terms: &Terms) -> rusqlite::Result<Option<Vec<Found>>> {
    let mut all = Vec::with_capacity(terms.0.len());
    for (_, term) in &terms.0 {
        match findable(&term.text) {
            None => return Ok(None),
            Some(length) if length >= 3 => all.push(Found::Phrase),
            Some(_) => {
                let trigrams = trigrams_beginning(conn, &tokenizer::fold(&term.text))?;
                if trigrams.len() > MOST_TRIGRAMS {
                    return Ok(None);
                }
                all.push(Found::Trigrams(trigrams));
            }
        }
    }
    Ok(Some(all))
}

/// The trigrams of the index that begin with `pair`.
fn trigrams_beginning(conn: &Connection, pair: &str) -> rusqlite::Result<Vec<String>> {
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE IF NOT EXISTS {VOCABULARY}
         USING fts5vocab(main, {TRIGRAMS}, row)"
    ))?;
    // Terms compare as bytes: UTF-8 keeps code point order, so every
    // trigram `pair` + one character lies in this range.
    let last = format!("{pair}{}", char::MAX);
    conn.prepare_cached(&format!(
        "SELECT term FROM {VOCABULARY} WHERE term >= ?1 AND term <= ?2"
    ))?
    .query_map([pair, last.as_str()], |r| r.get(0))?
    .collect()
}

/// An FTS5 phrase of `text`, quoted.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('"', "\"\""))
}

/// `expr` as an FTS5 query of the trigram index.
fn fts5(terms: &Terms, found: &[Found], expr: &Expr) -> String {
    expr.render("NOT", &mut |i| match &found[i] {
        Found::Phrase => quoted(&terms.0[i].1.text),
        Found::Trigrams(trigrams) => {
            let any: Vec<String> = trigrams.iter().map(|t| quoted(t)).collect();
            format!("({})", any.join(" OR "))
        }
    })
}

/// A page of hits for `terms`, newest first: through the trigram index when
/// `trigrams` (the file has one) and it can find every term, else by a scan.
pub fn search(
    conn: &Connection,
    terms: &Terms,
    search: &Search,
    trigrams: bool,
) -> rusqlite::Result<Table> {
    let found = if trigrams { found(conn, terms)? } else { None };
    let Some(found) = found else {
        let (sql, params) = scan(terms, search);
        return tables::all(conn, &sql, params_from_iter(&params));
    };
    let can_match = |i: usize| match &found[i] {
        Found::Phrase => true,
        Found::Trigrams(t) => !t.is_empty(),
    };
    let Some(expr) = terms.expr(can_match) else {
        return tables::all(conn, &hits_of_ids(Snippet::Substring), params!["", "[]"]);
    };
    let query = fts5(terms, &found, &expr);
    // One snapshot for the admitted ids, the matches and their rows.
    let tx = conn.unchecked_transaction()?;
    // Under a source filter with many matches to test, a match is first
    // tested against a set of ids (as for a ranked search) before its row
    // and session are read; a few are read at once.
    let filtered = search.sources.is_some() || search.exclude_sources.is_some();
    let ids = if filtered && search.session_id.is_none() && many_matches(conn, TRIGRAMS, &query)? {
        let set = admitted_set(conn, search)?;
        admitted::with_set(set, || newest_matches(conn, &query, search, true))?
    } else {
        newest_matches(conn, &query, search, false)?
    };
    let ids = serde_json::to_string(&ids).unwrap_or_default();
    let first = terms.0[0].1.text.as_str();
    let out = tables::all(conn, &hits_of_ids(Snippet::Substring), params![first, ids]);
    tx.finish()?;
    out
}

/// How [`hits_of_ids`] makes a hit's snippet from `?1`.
pub enum Snippet<'a> {
    /// FTS5's snippet of the match of the query `?1` in this index table.
    Index(&'a str),
    /// The indexed text around the first place the term `?1` is found (a
    /// tool call's row has no content).
    Substring,
}

impl Snippet<'_> {
    pub fn sql(&self) -> String {
        match self {
            Snippet::Index(table) => format!(
                "(SELECT snippet({table}, 0, '>>>', '<<<', '...', 40) FROM {table}
                  WHERE {table} MATCH ?1 AND {table}.rowid = m.id)"
            ),
            Snippet::Substring => {
                format!("substr({INDEXED_TEXT}, max(1, instr({INDEXED_TEXT}, ?1) - 40), 120)")
            }
        }
    }
}

/// The ids of a page of the trigram index's matches of `query` that pass
/// the filters of `search`, newest first. With `admitted`, a match is first
/// tested against the set `admitted.rs` holds, before its row is read.
fn newest_matches(
    conn: &Connection,
    query: &str,
    search: &Search,
    admitted: bool,
) -> rusqlite::Result<Vec<i64>> {
    const TABLE: &str = TRIGRAMS;
    let mut st = Statement {
        params: vec![SqlValue::Text(query.to_owned())],
    };
    let in_set = if admitted {
        format!(" AND {}({TABLE}.rowid)", admitted::FUNCTION)
    } else {
        String::new()
    };
    let filters = st.filters(search, Some(TABLE));
    let page = st.page(search);
    // CROSS JOIN: the index's matches drive, each row read once.
    let sql = format!(
        "SELECT m.id FROM {TABLE} CROSS JOIN messages m ON m.id = {TABLE}.rowid
         CROSS JOIN sessions s ON s.id = m.session_id
         WHERE {TABLE} MATCH ?1{in_set}{filters}
         ORDER BY m.timestamp DESC, m.id DESC {page}"
    );
    conn.prepare_cached(&sql)?
        .query_map(params_from_iter(&st.params), |r| r.get(0))?
        .collect()
}

/// A page of hits from a scan of the messages for `terms` (newest first).
fn scan(terms: &Terms, search: &Search) -> (String, Vec<SqlValue>) {
    // ?1: the first term, which the snippet centres on.
    let mut st = Statement {
        params: vec![SqlValue::Text(terms.0[0].1.text.clone())],
    };
    let found = match terms.expr(|_| true) {
        Some(expr) => condition(terms, &expr, &mut st),
        None => "0".to_owned(),
    };
    let filters = st.filters(search, None);
    let page = st.page(search);
    let snippet = Snippet::Substring.sql();
    let inner = format!(
        "SELECT m.id, {snippet} AS snippet, {HIT_COLUMNS}, 0 AS hit_rank
         FROM messages m
         JOIN sessions s ON s.id = m.session_id
         WHERE {found}{filters}
         ORDER BY m.timestamp DESC, m.id DESC {page}"
    );
    (
        with_context(&inner, "h.timestamp DESC, h.id DESC"),
        st.params,
    )
}

/// `expr` as a condition on `m` that each term's text is found in a message,
/// its patterns bound in `st`.
fn condition(terms: &Terms, expr: &Expr, st: &mut Statement) -> String {
    expr.render("AND NOT", &mut |i| {
        let n = st.bind(SqlValue::Text(Terms::like_pattern(&terms.0[i].1.text)));
        // Never NULL, so that NOT of it holds for a row without the text.
        format!(
            "COALESCE(m.content LIKE {n} ESCAPE '\\' OR m.tool_name LIKE {n} ESCAPE '\\'
                  OR m.tool_calls LIKE {n} ESCAPE '\\', 0)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use crate::model::NewMessage;

    /// A small deterministic generator (xorshift), so a failure repeats.
    struct Draw(u64);

    impl Draw {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        fn text(&mut self, alphabet: &[&str], most: usize) -> String {
            (0..1 + self.below(most))
                .map(|_| alphabet[self.below(alphabet.len())])
                .collect()
        }
    }

    /// CJK characters a few pairs of which recur, ASCII of both cases,
    /// `LIKE`'s wildcards and a space.
    const ALPHABET: [&str; 14] = [
        "北", "京", "数", "据", "库", "서", "울", "。", "a", "B", "b", "%", "_", " ",
    ];

    #[test]
    fn the_trigram_index_finds_what_a_scan_finds_in_the_same_order() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let mut draw = Draw(0x9E37_79B9_7F4A_7C15);
        // More rows hold 北京 than a search counts before it reads the
        // source filter's ids (`FEW_MATCHES`), so both ways are taken. The
        // last telegram session's run of ids holds a few rows of a cli one.
        let sources = ["cli", "telegram", "cli", "discord", "telegram", "cli"];
        for (n, source) in sources.iter().enumerate() {
            create_at(&db, &format!("s{n}"), source, n as f64);
        }
        for (n, count) in [
            (0, 400),
            (1, 400),
            (2, 400),
            (3, 400),
            (4, 200),
            (5, 10),
            (4, 200),
        ] {
            let rows = (0..count)
                .map(|i| {
                    let role = ["user", "assistant", "tool"][i % 3];
                    let mut text = draw.text(&ALPHABET, 12);
                    if draw.below(4) > 0 {
                        text = format!("{text}北京{}", draw.text(&ALPHABET, 3));
                    }
                    // Few distinct times, so that ties are ordered by id;
                    // the cli rows amid the telegram run are the newest.
                    let at = if n == 5 { 99.0 } else { draw.below(40) as f64 };
                    let mut row = NewMessage::text(role, &text, at);
                    if i % 7 == 0 {
                        row.tool_name = Some(draw.text(&ALPHABET, 4));
                        let argument = draw.text(&ALPHABET, 6);
                        row.tool_calls = Some(serde_json::json!([{ "q": argument }]).to_string());
                    }
                    row
                })
                .collect();
            append_rows(&db, &format!("s{n}"), rows);
        }
        index_now(&db);
        let with_pair = rows_of(
            &db,
            "SELECT count(*) FROM messages WHERE content LIKE '%北京%'",
        );
        assert!(with_pair >= super::super::search::FEW_MATCHES);
        let some = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let filters = [
            (None, None, None),
            (some(&["telegram"]), None, None),
            (None, some(&["telegram"]), some(&["user", "tool"])),
            (some(&["cli"]), None, some(&["assistant"])),
        ];
        let terms = [
            "北京",
            "数据",
            "据库",
            "서울",
            "。北",
            "京京",
            "数据库",
            "ab ",
            "a%b",
            "b_b",
        ];
        let mut by_index = 0;
        for n in 0..120 {
            let mut query = terms[draw.below(terms.len())].to_owned();
            for _ in 0..draw.below(3) {
                let op = ["", " AND", " OR", " NOT"][draw.below(4)];
                query = format!("{query}{op} {}", terms[draw.below(terms.len())]);
            }
            let (sources, exclude_sources, roles) = filters[n % filters.len()].clone();
            let search = Search {
                query: query.clone(),
                sources,
                exclude_sources,
                roles,
                limit: 15 + (n % 3) as i64 * 200,
                offset: (n % 5) as i64,
                ..Search::default()
            };
            let parsed = Terms::parse(&query);
            let (indexed, scanned, took_index) = db
                .read(|c| {
                    let took = found(c, &parsed)?.is_some();
                    Ok((
                        super::search(c, &parsed, &search, true)?,
                        super::search(c, &parsed, &search, false)?,
                        took,
                    ))
                })
                .unwrap();
            by_index += usize::from(took_index);
            assert_eq!(hit_ids(&indexed), hit_ids(&scanned), "{query:?} {search:?}");
            assert_eq!(indexed.rows().count(), scanned.rows().count());
        }
        assert!(
            by_index >= 80,
            "only {by_index} of 120 queries took the index"
        );
    }

    #[test]
    fn only_terms_the_index_can_find_as_like_does_take_it() {
        assert_eq!(findable("北京"), Some(2));
        assert_eq!(findable("数据库"), Some(3));
        assert_eq!(findable("abc"), Some(3));
        assert_eq!(findable("100%完成"), Some(6));
        assert_eq!(
            findable("京"),
            None,
            "one character begins no trigram of its own"
        );
        assert_eq!(
            findable("ab"),
            None,
            "two ASCII letters: not every one is followed"
        );
        assert_eq!(findable("A的"), None);
        assert_eq!(findable("Über北京"), None, "LIKE folds ASCII letters only");
    }
}
