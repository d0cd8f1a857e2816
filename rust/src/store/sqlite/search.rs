//! Full-text search (FTS5), which first indexes whatever is pending, so a
//! search finds every row committed before it.

use std::time::Instant;

use rusqlite::types::Value as SqlValue;
use rusqlite::{params, params_from_iter, Connection};

use super::admitted::{self, IdSet};
use super::busy::with_busy_retry;
use super::error::{classify, note_short_read};
use super::search_index::CATCH_UP_CHUNK_ROWS;
use super::substrings::{self, Snippet};
use super::{rank, tables, word_pairs, SqliteBackend};
use crate::error::{Error, Result};
use crate::model::Table;
use crate::store::lock;
use crate::store::search::{Route, Search, SearchOrder, Terms};

/// The last id of the pending ranges (None when nothing is pending).
pub fn pending_up_to(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT MAX(last_id) FROM hermes_fts_pending")?
        .query_row([], |r| r.get(0))
}

/// The columns of a hit, after its index's own (`id`, `snippet`, `rank`).
pub(super) const HIT_COLUMNS: &str = "m.session_id, m.role, m.content, m.timestamp, m.tool_name,
    s.source, s.model, s.started_at AS session_started, s.title";

/// Lists longer than this are bound as one JSON array rather than a
/// parameter per value (SQLite takes at most 32,766 parameters).
const LISTED_VALUES: usize = 64;

/// A search's SQL, built with its parameters: `?1` is the FTS5 query (or the
/// term a substring snippet centres on), then come the filters' values.
pub(super) struct Statement {
    pub params: Vec<SqlValue>,
}

impl Statement {
    /// A new parameter, as its `?N`.
    pub fn bind(&mut self, value: SqlValue) -> String {
        self.params.push(value);
        format!("?{}", self.params.len())
    }

    /// `(?a, ?b, ...)` for `IN`: a parameter per value, so SQLite weighs the
    /// test as the cheap one it is (a subquery it evaluates after the
    /// others: a substring scan then read every row's text before its
    /// role); a long list as one JSON array.
    fn list(&mut self, values: &[String]) -> String {
        if values.len() > LISTED_VALUES {
            let json = serde_json::to_string(values).unwrap_or_default();
            return format!(
                "(SELECT value FROM json_each({}))",
                self.bind(SqlValue::Text(json))
            );
        }
        let binds: Vec<String> = values
            .iter()
            .map(|v| self.bind(SqlValue::Text(v.clone())))
            .collect();
        format!("({})", binds.join(", "))
    }

    /// The filters of `search` it has, on `m` (messages) and `s` (sessions),
    /// each a term that starts with ` AND `. `index` is the FTS5 table a
    /// route reads, whose rows a session filter bounds to the session's ids.
    pub fn filters(&mut self, search: &Search, index: Option<&str>) -> String {
        let mut sql = String::new();
        if !search.include_inactive {
            sql.push_str(" AND (m.active = 1 OR m.compacted = 1)");
        }
        sql.push_str(&self.source_filters(search));
        sql.push_str(&self.role_filter(search));
        if let Some(session) = &search.session_id {
            let id = self.bind(SqlValue::Text(session.clone()));
            sql.push_str(&format!(" AND m.session_id = {id}"));
            if let Some(table) = index {
                // The index is read from the session's first row to its last,
                // not whole.
                sql.push_str(&format!(
                    " AND {table}.rowid >= (SELECT MIN(id) FROM messages WHERE session_id = {id})
                      AND {table}.rowid <= (SELECT MAX(id) FROM messages WHERE session_id = {id})"
                ));
            }
        }
        sql
    }

    /// The source filters of `search`, on `s` (sessions), each a term that
    /// starts with ` AND ` (empty without one).
    fn source_filters(&mut self, search: &Search) -> String {
        let mut sql = String::new();
        if let Some(sources) = &search.sources {
            let list = self.list(sources);
            sql.push_str(&format!(" AND s.source IN {list}"));
        }
        if let Some(excluded) = &search.exclude_sources {
            let list = self.list(excluded);
            sql.push_str(&format!(" AND s.source NOT IN {list}"));
        }
        sql
    }

    /// The role filter of `search`, on `m` (messages), as a term that starts
    /// with ` AND ` (empty without one).
    fn role_filter(&mut self, search: &Search) -> String {
        match search.roles.as_ref().filter(|r| !r.is_empty()) {
            Some(roles) => format!(" AND m.role IN {}", self.list(roles)),
            None => String::new(),
        }
    }

    /// `LIMIT ?a OFFSET ?b` of the search's page.
    pub fn page(&mut self, search: &Search) -> String {
        let limit = self.bind(SqlValue::Integer(search.limit));
        let offset = self.bind(SqlValue::Integer(search.offset));
        format!("LIMIT {limit} OFFSET {offset}")
    }
}

/// The hits of `inner` (a page of hits with `hit_rank`), in `order`, each
/// with the role and content of the messages before and after it in its
/// session (by timestamp, then id), for context.
pub(super) fn with_context(inner: &str, order: &str) -> String {
    // A row value, so that an index of the session's rows by timestamp (as
    // hermes-agent adds) finds the neighbour at once instead of reading the
    // session's rows.
    let neighbour = |cmp: &str, dir: &str| {
        format!(
            "(SELECT n.id FROM messages n WHERE n.session_id = h.session_id
                AND (n.timestamp, n.id) {cmp} (h.timestamp, h.id)
              ORDER BY n.timestamp {dir}, n.id {dir} LIMIT 1)"
        )
    };
    format!(
        "SELECT h.*, b.role AS before_role, b.content AS before_content,
                a.role AS after_role, a.content AS after_content
         FROM (SELECT h.*, {before} AS before_id, {after} AS after_id FROM ({inner}) h) h
         LEFT JOIN messages b ON b.id = h.before_id
         LEFT JOIN messages a ON a.id = h.after_id
         ORDER BY {order}",
        before = neighbour("<", "DESC"),
        after = neighbour(">", "ASC"),
    )
}

/// A page of hits from the FTS5 index `table` for the FTS5 query `fts5`.
///
/// Best match first, FTS5 ranks every match and the page is the first that
/// pass the filters (equal ranks in id order). Ranking only the rows the
/// filters admit instead joins every match with its message first, which
/// costs more than the ranking unless the matches are most of the messages.
fn index_search(index: &IndexQuery, search: &Search) -> (String, Vec<SqlValue>) {
    let table = index.table;
    let columns = format!(
        "m.id, snippet({table}, 0, '>>>', '<<<', '...', 40) AS snippet, {HIT_COLUMNS},
         {table}.rank AS hit_rank"
    );
    let (inner, params) = index_page(index, search, &columns);
    let outer_order = match search.order {
        SearchOrder::Rank => "h.hit_rank, h.id",
        SearchOrder::Newest => "h.timestamp DESC, h.hit_rank, h.id",
        SearchOrder::Oldest => "h.timestamp ASC, h.hit_rank, h.id",
    };
    (with_context(&inner, outer_order), params)
}

/// The ids of a page of hits, as [`index_search`] finds them, in its order.
fn index_page_ids(
    conn: &Connection,
    index: &IndexQuery,
    search: &Search,
) -> rusqlite::Result<Vec<i64>> {
    let (sql, params) = index_page(index, search, "m.id");
    conn.prepare_cached(&sql)?
        .query_map(params_from_iter(&params), |r| r.get(0))?
        .collect()
}

/// The SQL of [`index_search`]'s page, selecting `columns` (of `m`, `s`
/// and the index table), with its parameters.
fn index_page(index: &IndexQuery, search: &Search, columns: &str) -> (String, Vec<SqlValue>) {
    let mut st = Statement { params: Vec::new() };
    let ranking = index.ranking();
    let table = index.table;
    let query = st.bind(SqlValue::Text(index.fts5.clone()));
    let filters = st.filters(search, Some(table));
    let order = match search.order {
        // Rank alone, so FTS5 hands the matches over best first and the
        // join stops once the page is full.
        SearchOrder::Rank => format!("{table}.rank"),
        SearchOrder::Newest => format!("m.timestamp DESC, {table}.rank, m.id"),
        SearchOrder::Oldest => format!("m.timestamp ASC, {table}.rank, m.id"),
    };
    let page = st.page(search);
    let sql = format!(
        "SELECT {columns}
         FROM {table}
         JOIN messages m ON m.id = {table}.rowid
         JOIN sessions s ON s.id = m.session_id
         WHERE {table} MATCH {query}{ranking}{filters}
         ORDER BY {order} {page}"
    );
    (sql, st.params)
}

/// The hits of the messages `ids`, in that order, with their snippets from
/// the index `index` names for them.
fn hits_of_index(conn: &Connection, index: &IndexQuery, ids: &[i64]) -> rusqlite::Result<Table> {
    let (table, query) = index.snippet_source();
    let ids = serde_json::to_string(ids).unwrap_or_default();
    tables::all(
        conn,
        &hits_of_ids(Snippet::Index(table)),
        params![query, ids],
    )
}

/// A search of one FTS5 index: the table, the FTS5 query, and how many
/// phrases it has (the terms, each quoted by [`Terms::fts5`]).
struct IndexQuery {
    table: &'static str,
    fts5: String,
    phrases: usize,
    /// For the word-pair index, which keeps no text: the word index's query
    /// of the same phrase, for the hits' snippets.
    words: Option<String>,
}

impl IndexQuery {
    fn new(table: &'static str, terms: &Terms) -> Self {
        IndexQuery {
            table,
            fts5: terms.fts5(),
            phrases: terms.0.len(),
            words: None,
        }
    }

    /// The word-pair index's search for `pair` (its FTS5 query of a
    /// two-word phrase), which the word index's query `words` also is.
    fn pairs(pair: String, words: String) -> Self {
        IndexQuery {
            table: word_pairs::TABLE,
            fts5: pair,
            phrases: 1,
            words: Some(words),
        }
    }

    /// The index table and query a hit's snippet comes from.
    fn snippet_source(&self) -> (&'static str, &str) {
        match &self.words {
            Some(words) => ("messages_fts", words),
            None => (self.table, &self.fts5),
        }
    }

    /// The constraint that chooses how FTS5's `rank` ranks the matches:
    /// none (bm25), or for one phrase the same order without the full read
    /// of the index that bm25's IDF costs (`rank.rs`).
    fn ranking(&self) -> String {
        if self.phrases == 1 {
            format!(" AND {}.rank MATCH {}", self.table, rank::RANK_MATCH)
        } else {
            String::new()
        }
    }
}

/// Matches counted before choosing how to rank (a bound: the count stops
/// there). Fewer are ranked at once by [`index_search`]; more, under a source
/// filter, by [`admitted_page`] if they are dense ([`ranks_admitted`]).
pub(super) const FEW_MATCHES: i64 = 1000;

/// Whether `search` is one [`admitted_page`] answers: best match first,
/// with a source filter (a session filter already bounds the index read).
fn by_admitted_ids(search: &Search) -> bool {
    search.order == SearchOrder::Rank
        && search.session_id.is_none()
        && (search.sources.is_some() || search.exclude_sources.is_some())
}

/// The density of matches (1 message in this many) from which ranking only
/// the admitted matches pays for building the admitted set where its ids
/// are read one by one (sessions written amid others, [`admitted_set`]): an
/// admitted id costs ~0.1 µs to read, a match ~1.4 µs to rank (position
/// lists and its row's length), so for a filter admitting a quarter of the
/// messages it pays from ~1 match in 40 messages.
const ADMITTED_PAYS_FROM: i64 = 32;

/// Whether a ranked search of `fts5` in `table` under a source filter ranks
/// only the admitted matches ([`admitted_page`]) rather than all of them
/// ([`index_search`]): when it has at least [`FEW_MATCHES`] matches, and
/// these first ones lie within the first [`ADMITTED_PAYS_FROM`] ×
/// [`FEW_MATCHES`] message ids (so about one message in that many or more
/// matches). A phrase of two common words matches few of the messages that
/// hold both, which FTS5 reads either way: ranking its matches costs less
/// than the admitted ids. The estimate takes the oldest messages for all;
/// when it is wrong, the search takes longer, with the same hits.
fn ranks_admitted(conn: &Connection, table: &str, fts5: &str) -> rusqlite::Result<bool> {
    let (found, reach) = first_matches(conn, table, fts5)?;
    Ok(found >= FEW_MATCHES && reach.is_some_and(|r| r < FEW_MATCHES * ADMITTED_PAYS_FROM))
}

/// Whether the FTS5 query `fts5` has at least [`FEW_MATCHES`] matches in
/// `table` (counted no further).
pub(super) fn many_matches(conn: &Connection, table: &str, fts5: &str) -> rusqlite::Result<bool> {
    Ok(first_matches(conn, table, fts5)?.0 >= FEW_MATCHES)
}

/// The first [`FEW_MATCHES`] matches of `fts5` in `table` (in id order):
/// how many there are, and how far the last lies past the first message id.
fn first_matches(
    conn: &Connection,
    table: &str,
    fts5: &str,
) -> rusqlite::Result<(i64, Option<i64>)> {
    let sql = format!(
        "SELECT count(*), max(rowid) - (SELECT min(id) FROM messages)
         FROM (SELECT rowid FROM {table} WHERE {table} MATCH ?1 LIMIT {FEW_MATCHES})"
    );
    conn.prepare_cached(&sql)?
        .query_row([fts5], |r| Ok((r.get(0)?, r.get(1)?)))
}

/// A set that holds at least the ids of the messages the source filters of
/// `search` admit (live and compaction-archived ones unless it includes
/// inactive rows): a match outside it is not admitted, one inside must still
/// pass the search's filters.
///
/// A session's live rows are taken as the run of ids from its first to its
/// last (two lookups in the index of messages by session and `active`),
/// unless the run holds more than [`LOOSE_RUN`] ids more than the session's
/// `message_count` (a session written amid others): then its live ids are
/// read one by one from that index (no message row is read). The inactive
/// rows are read one by one either way (`active IS NOT 1` as its three
/// ranges of that index, `< 1`, `> 1` and NULL from the partial index of
/// NULLs: as one test it read every row of the sessions again).
pub(super) fn admitted_set(conn: &Connection, search: &Search) -> rusqlite::Result<IdSet> {
    let mut st = Statement { params: Vec::new() };
    let sources = st.source_filters(search);
    let live = |end: &str| {
        format!("(SELECT {end}(m.id) FROM messages m WHERE m.session_id = s.id AND m.active = 1)")
    };
    let runs_sql = format!(
        "SELECT s.id, {first}, {last}, COALESCE(s.message_count, 0) FROM sessions s WHERE 1{sources}",
        first = live("min"),
        last = live("max"),
    );
    let mut ranges: Vec<(i64, i64)> = Vec::new();
    let mut loose: Vec<String> = Vec::new();
    let mut runs = conn.prepare_cached(&runs_sql)?;
    let mut rows = runs.query(params_from_iter(&st.params))?;
    while let Some(row) = rows.next()? {
        let (Some(first), Some(last)) = (row.get::<_, Option<i64>>(1)?, row.get(2)?) else {
            continue;
        };
        let counted: i64 = row.get::<_, i64>(3)?.max(0);
        if last - first < counted.saturating_add(counted / LOOSE_RUN) {
            ranges.push((first, last));
        } else {
            loose.push(row.get(0)?);
        }
    }
    for session in loose {
        let live = "SELECT m.id FROM messages m WHERE m.session_id = ?1 AND m.active = 1";
        ranges.extend(id_runs(conn, live, &[SqlValue::Text(session)])?);
    }
    let from = "FROM sessions s JOIN messages m ON m.session_id = s.id WHERE 1";
    let compacted = if search.include_inactive {
        ""
    } else {
        " AND m.compacted = 1"
    };
    let inactive = format!(
        "SELECT m.id {from}{sources} AND m.active < 1{compacted}
         UNION ALL
         SELECT m.id {from}{sources} AND m.active > 1{compacted}
         UNION ALL
         SELECT m.id FROM messages m WHERE m.active IS NULL{compacted}
           AND m.session_id IN (SELECT s.id FROM sessions s WHERE 1{sources})"
    );
    ranges.extend(id_runs(conn, &inactive, &st.params)?);
    Ok(IdSet::from_ranges(&ranges))
}

/// How loosely a session's run of ids may hold its live rows (1 id in this
/// many more than its `message_count`) before [`admitted_set`] reads its ids
/// instead: an id read costs ~0.07 µs, a match of an id of another session
/// up to ~1.4 µs to rank.
const LOOSE_RUN: i64 = 16;

/// The ids `sql` returns (its first column, with `params`), consecutive
/// ones as one run.
fn id_runs(conn: &Connection, sql: &str, params: &[SqlValue]) -> rusqlite::Result<Vec<(i64, i64)>> {
    let mut runs: Vec<(i64, i64)> = Vec::new();
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params_from_iter(params))?;
    while let Some(row) = rows.next()? {
        let id: i64 = row.get(0)?;
        match runs.last_mut() {
            Some(run) if run.1.checked_add(1) == Some(id) => run.1 = id,
            _ => runs.push((id, id)),
        }
    }
    Ok(runs)
}

/// The ids of a page of hits, best match first (equal ranks in id order),
/// ranking only the matches in the set of [`admitted_set`] (`admitted.rs`,
/// set by the caller). The ranked matches are then tested against the
/// search's filters in rank order, a chunk of ids per statement, until the
/// page is full: the set holds ids the filters reject (a role, a session's
/// inactive rows, other sessions' ids amid its run), and reading the row of
/// each admitted match before ranking would cost a message row read each
/// (most of the time for a common word).
fn admitted_page(
    conn: &Connection,
    index: &IndexQuery,
    search: &Search,
) -> rusqlite::Result<Vec<i64>> {
    let IndexQuery { table, fts5, .. } = index;
    let admitted = format!(
        "SELECT {table}.rowid, {table}.rank FROM {table}
         WHERE {table} MATCH ?1{ranking} AND {function}({table}.rowid)",
        function = admitted::FUNCTION,
        ranking = index.ranking(),
    );
    let mut ranked: Vec<(f64, i64)> = conn
        .prepare_cached(&admitted)?
        .query_map([fts5], |r| Ok((r.get(1)?, r.get(0)?)))?
        .collect::<rusqlite::Result<_>>()?;
    ranked.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    // ?1: a chunk of ranked ids, as a JSON array.
    let mut st = Statement {
        params: vec![SqlValue::Null],
    };
    let filters = st.filters(search, None);
    // CROSS JOIN: the ids drive (SQLite would rather read every message of
    // the admitted sessions).
    let mut passing = conn.prepare_cached(&format!(
        "SELECT m.id FROM json_each(?1) p CROSS JOIN messages m ON m.id = p.value
         CROSS JOIN sessions s ON s.id = m.session_id WHERE 1{filters}"
    ))?;
    let (offset, limit) = (search.offset.max(0), search.limit.max(0));
    let wanted = usize::try_from(offset.saturating_add(limit)).unwrap_or(usize::MAX);
    // A chunk: a few pages' worth of the ids kept.
    let chunk = wanted.saturating_mul(4).clamp(256, 4096);
    let mut kept = Vec::new();
    for ids in ranked.chunks(chunk) {
        let ids: Vec<i64> = ids.iter().map(|(_, id)| *id).collect();
        st.params[0] = SqlValue::Text(serde_json::to_string(&ids).unwrap_or_default());
        let passed: std::collections::HashSet<i64> = passing
            .query_map(params_from_iter(&st.params), |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        kept.extend(ids.into_iter().filter(|id| passed.contains(id)));
        if kept.len() >= wanted {
            break;
        }
    }
    Ok(kept
        .into_iter()
        .skip(offset as usize)
        .take(limit as usize)
        .collect())
}

/// The hits of the messages `ids` (`?2`, a JSON array), in its order, each
/// with its `snippet` and the columns of a hit.
pub(super) fn hits_of_ids(snippet: Snippet<'_>) -> String {
    let inner = format!(
        "SELECT m.id, {snippet} AS snippet, {HIT_COLUMNS}, p.key AS hit_rank
         FROM json_each(?2) p
         JOIN messages m ON m.id = p.value
         JOIN sessions s ON s.id = m.session_id",
        snippet = snippet.sql()
    );
    with_context(&inner, "h.hit_rank, h.id")
}

/// The hits of `index` for `search`. Under a source filter the word-pair
/// index ranks only the admitted matches whatever their density: a pair's
/// matches are spread thin, so joining each with its row before testing its
/// source cost ~3x more (17 vs 5 ms over 1M messages).
fn search_index(c: &Connection, index: IndexQuery, search: &Search) -> rusqlite::Result<Table> {
    if by_admitted_ids(search)
        && (index.words.is_some() || ranks_admitted(c, index.table, &index.fts5)?)
    {
        // One snapshot for the admitted ids and the matches.
        return in_snapshot(c, || {
            let set = admitted_set(c, search)?;
            let ids = admitted::with_set(set, || admitted_page(c, &index, search))?;
            hits_of_index(c, &index, &ids)
        });
    }
    if index.words.is_some() {
        let ids = index_page_ids(c, &index, search)?;
        return hits_of_index(c, &index, &ids);
    }
    let (sql, params) = index_search(&index, search);
    tables::all(c, &sql, params_from_iter(&params))
}

/// Runs `f` in one read snapshot: a transaction of its own, unless one is
/// open already.
fn in_snapshot<T>(c: &Connection, f: impl FnOnce() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    if !c.is_autocommit() {
        return f();
    }
    let tx = c.unchecked_transaction()?;
    let out = f()?;
    tx.finish()?;
    Ok(out)
}

impl SqliteBackend {
    pub(super) fn search_messages(&self, search: &Search) -> Result<Table> {
        let terms = Terms::parse(&search.query);
        // One look at the file: what is pending (a failure to tell is
        // handled as nothing pending, below), then whether it has the
        // trigram index, from the connection's copy of the schema, which
        // that first read brought up to date.
        let (pending, trigrams) = self.read(|c| {
            let pending = pending_up_to(c);
            Ok((
                pending,
                c.table_exists(Some(c"main"), c"messages_fts_trigram")?,
            ))
        })?;
        let (index, pairs) = match terms.route(trigrams) {
            Route::Words => {
                let words = terms.words();
                if words.is_empty() {
                    return Ok(Table::new(Vec::<String>::new().into()));
                }
                let pairs = word_pairs::query(&words).filter(|_| self.pairs_ready());
                (Some(IndexQuery::new("messages_fts", &words)), pairs)
            }
            Route::Trigrams => (Some(IndexQuery::new("messages_fts_trigram", &terms)), None),
            Route::Substrings => (None, None),
        };
        // Every row committed before the search is found: pending ranges
        // are indexed first. If that fails (locked past the budget, disk
        // full), the search answers from the index as it is: missing the
        // newest rows beats failing the search.
        if let Ok(Some(up_to)) = pending {
            let _ = self.index_pending_up_to(up_to);
        }
        let out = self.read_raw(|c| match (index, pairs) {
            (None, _) => substrings::search(c, &terms, search, trigrams),
            (Some(words), Some(pair)) => in_snapshot(c, || {
                // Nothing stale in the search's own snapshot, or the word
                // index answers.
                if word_pairs::stale_rows(c, 1)? == 0 {
                    search_index(c, IndexQuery::pairs(pair, words.fts5), search)
                } else {
                    search_index(c, words, search)
                }
            }),
            (Some(index), None) => search_index(c, index, search),
        });
        // The query is always well formed (`Terms::fts5`); a failure with
        // SQLite's generic code that is not a damaged schema ("no such
        // table") is still reported as the query's, not as storage.
        out?.map_err(|e| {
            let generic = e.sqlite_error_code() == Some(rusqlite::ErrorCode::Unknown);
            let text = e.to_string();
            if generic && !text.contains("no such table") && !text.contains("no such module") {
                Error::BadQuery {
                    query: search.query.chars().take(200).collect(),
                    detail: text,
                }
            } else {
                classify(&self.at, e)
            }
        })
    }

    /// Indexes the pending rows with ids up to `up_to`, here and now, in
    /// large chunks (our writes may go between two). Stops after the busy
    /// budget, leaving the rest pending.
    pub(super) fn index_pending_up_to(&self, up_to: i64) -> Result<()> {
        self.catch_up(|w| w.index_pending(up_to, CATCH_UP_CHUNK_ROWS))
    }

    /// Whether a search may take the word-pair index: the file has it as
    /// our schema makes it and nothing in it is stale, once the few stale
    /// rows there may be are indexed again here and now. More are left to
    /// the indexer, woken for them; the word index answers meanwhile.
    fn pairs_ready(&self) -> bool {
        let stale = self.read(|c| {
            if !word_pairs::intact(c)? {
                return Ok(None);
            }
            word_pairs::stale_rows(c, CATCH_UP_CHUNK_ROWS + 1).map(Some)
        });
        match stale {
            Ok(Some(0)) => true,
            Ok(Some(rows)) if rows <= CATCH_UP_CHUNK_ROWS => self
                .catch_up(|w| w.index_stale(CATCH_UP_CHUNK_ROWS))
                .is_ok(),
            Ok(Some(_)) => {
                self.indexer.wake();
                false
            }
            _ => false,
        }
    }

    /// Runs `step` (an indexer transaction that says whether work remains)
    /// until none does, or the busy budget has passed.
    fn catch_up(
        &self,
        mut step: impl FnMut(&mut super::connection::Writer) -> rusqlite::Result<bool>,
    ) -> Result<()> {
        let deadline = Instant::now() + self.options.busy_budget;
        loop {
            self.ensure_not_cut()?;
            let mut writer = lock(&self.writer);
            let w = writer.as_mut().ok_or_else(|| self.closed_error())?;
            let budget = deadline.saturating_duration_since(Instant::now());
            let more = with_busy_retry(&self.at, budget, || {
                step(w).inspect_err(|e| note_short_read(&self.cut, e))
            })?;
            if !more || Instant::now() >= deadline {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{tables, SqliteBackend};
    use super::*;
    use crate::model::NewMessage;
    use crate::store::{Backend, Options, WriteOut};
    use rusqlite::Connection;
    use std::time::Duration;

    #[test]
    fn a_search_right_after_a_write_finds_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop(); // nothing indexes behind the test's back
        create(&db, "s");
        let ids = match append_rows(
            &db,
            "s",
            vec![NewMessage::text("user", "the quetzal landed", 1.0)],
        ) {
            WriteOut::Ids(ids) => ids,
            other => panic!("{other:?}"),
        };
        assert_eq!(pending_rows(&db), 1);
        assert_eq!(search_ids(&db, "quetzal"), ids);
        assert_eq!(pending_rows(&db), 0);
    }

    #[test]
    fn a_search_sees_the_trigram_index_another_program_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create(&db, "s");
        append_text(&db, "s", "连接数据库失败");
        // The reader has the schema with the trigram index in hand.
        assert_eq!(search_ids(&db, "数据库").len(), 1);
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other
            .execute_batch(
                "DROP TRIGGER messages_fts_trigram_insert;
                 DROP TRIGGER messages_fts_trigram_delete;
                 DROP TRIGGER messages_fts_trigram_update;
                 DROP TABLE messages_fts_trigram;",
            )
            .unwrap();
        // Found by substring now, not an error from the table gone.
        assert_eq!(search_ids(&db, "数据库").len(), 1);
    }

    #[test]
    fn a_search_answers_from_the_index_as_it_is_when_catching_up_fails() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            busy_budget: Duration::from_millis(200),
            ..Options::default()
        };
        let db = SqliteBackend::open(&dir.path().join("state.db"), options).unwrap();
        db.indexer.stop();
        create(&db, "s");
        append_text(&db, "s", "alpaca one");
        index_now(&db);
        append_text(&db, "s", "alpaca two");
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        assert_eq!(search_ids(&db, "alpaca").len(), 1);
        other.execute_batch("ROLLBACK").unwrap();
        assert_eq!(search_ids(&db, "alpaca").len(), 2);
    }

    #[test]
    fn a_filtered_search_of_many_matches_finds_what_the_plain_query_finds() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        // Three sources, three roles in turn, content whose length varies
        // (so ranks differ) and more matches than are counted before
        // choosing. The last telegram session's run of ids holds a few rows
        // of a cli one, written amid it, that rank first.
        let rows = |from: usize| -> Vec<NewMessage> {
            (from..from + 400)
                .map(|i| {
                    let role = ["user", "assistant", "tool"][i % 3];
                    let filler = "pad ".repeat(i % 7);
                    NewMessage::text(role, &format!("common {filler}word {i}"), i as f64)
                })
                .collect()
        };
        for (n, source) in ["cli", "telegram", "discord", "cli", "telegram", "cli"]
            .iter()
            .enumerate()
        {
            create_at(&db, &format!("s{n}"), source, n as f64);
        }
        for n in 0..5 {
            append_rows(&db, &format!("s{n}"), rows(0));
        }
        let amid = (0..10).map(|i| NewMessage::text(["user", "tool"][i % 2], "common", 0.0));
        append_rows(&db, "s5", amid.collect());
        append_rows(&db, "s4", rows(400));
        index_now(&db);
        // Some rows rewound, some archived by a compaction.
        let file = Connection::open(dir.path().join("state.db")).unwrap();
        file.execute_batch(
            "UPDATE messages SET active = 0 WHERE id % 11 = 0;
             UPDATE messages SET active = 0, compacted = 1 WHERE id % 13 = 0;",
        )
        .unwrap();
        assert!(rows_of(&db, "SELECT COUNT(*) FROM messages") > FEW_MATCHES);
        assert!(db
            .read(|c| ranks_admitted(c, "messages_fts", "\"common\""))
            .unwrap());
        let some = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let cases = [
            (some(&["telegram"]), None, None, 0, false),
            (some(&["cli"]), None, some(&["user"]), 0, false),
            (
                some(&["cli", "discord"]),
                None,
                some(&["tool", "assistant"]),
                7,
                false,
            ),
            (None, some(&["cli"]), some(&["assistant"]), 0, true),
            (some(&["telegram"]), some(&["telegram"]), None, 0, false),
            (some(&["nowhere"]), None, None, 0, false),
        ];
        for (sources, exclude_sources, roles, offset, include_inactive) in cases {
            let search = Search {
                query: "common".into(),
                sources,
                exclude_sources,
                roles,
                include_inactive,
                limit: 25,
                offset,
                ..Search::default()
            };
            assert!(by_admitted_ids(&search));
            // The referee: the plain query, ranked by bm25 itself (as a
            // query of more than one phrase is).
            let bm25 = IndexQuery {
                phrases: 2,
                ..IndexQuery::new("messages_fts", &Terms::parse("common").words())
            };
            let (sql, params) = index_search(&bm25, &search);
            let plain = db
                .read(|c| tables::all(c, &sql, params_from_iter(&params)))
                .unwrap();
            let found = db.search(&search).unwrap();
            assert_eq!(hit_ids(&found), hit_ids(&plain), "{search:?}");
        }
    }

    #[test]
    fn the_word_pair_index_finds_and_ranks_a_phrase_as_the_word_index_does() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let words = ["user", "model", "agent", "config", "latency", "prompt"];
        for (n, source) in ["cli", "telegram", "discord", "telegram"]
            .iter()
            .enumerate()
        {
            let session = format!("s{n}");
            create_at(&db, &session, source, n as f64);
            // Varied lengths and counts of each pair, three roles in turn.
            let rows = (0..1500usize).map(|i| {
                let text: Vec<&str> = (0..3 + (i * 7 + n) % 23)
                    .map(|k| words[(i * 31 + k * k * 5 + n) % words.len()])
                    .collect();
                let role = ["user", "assistant", "tool"][i % 3];
                NewMessage::text(role, &text.join(" "), (i % 97) as f64)
            });
            append_rows(&db, &session, rows.collect());
        }
        index_now(&db);
        // Every row in the word-pair index, none stale: searches take it.
        assert_eq!(rows_of(&db, "SELECT COUNT(*) FROM hermes_fts_stale"), 0);
        assert_eq!(rows_of(&db, "SELECT COUNT(*) FROM hermes_fts_pairs"), 6000);
        let some = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        for query in ["\"user model\"", "config-latency", "\"prompt agent\""] {
            let cases = [
                (None, None, SearchOrder::Rank, 0),
                (some(&["telegram"]), some(&["user"]), SearchOrder::Rank, 0),
                (some(&["discord", "cli"]), None, SearchOrder::Rank, 30),
                (None, some(&["tool"]), SearchOrder::Newest, 0),
                (some(&["telegram"]), None, SearchOrder::Oldest, 5),
            ];
            for (sources, roles, order, offset) in cases {
                let search = Search {
                    query: query.into(),
                    sources,
                    roles,
                    order,
                    offset,
                    limit: 40,
                    ..Search::default()
                };
                let terms = Terms::parse(query).words();
                assert!(word_pairs::query(&terms).is_some());
                let by_words = db
                    .read(|c| search_index(c, IndexQuery::new("messages_fts", &terms), &search))
                    .unwrap();
                let found = db.search(&search).unwrap();
                assert!(!hit_ids(&found).is_empty(), "{search:?}");
                assert_eq!(hit_ids(&found), hit_ids(&by_words), "{search:?}");
                let snippets = |t: &Table| -> Vec<String> {
                    t.rows().map(|r| format!("{:?}", r.get(1))).collect()
                };
                assert_eq!(snippets(&found), snippets(&by_words), "{search:?}");
            }
        }
    }

    #[test]
    fn the_admitted_set_holds_every_admitted_id_and_reads_them_when_sessions_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        create_at(&db, "a", "telegram", 1.0);
        create_at(&db, "b", "cli", 2.0);
        create_at(&db, "c", "telegram", 3.0);
        let row = |i: i64| vec![NewMessage::text("user", &format!("row {i}"), i as f64)];
        for i in 0..200 {
            append_rows(&db, "a", row(i));
            append_rows(&db, "b", row(i));
        }
        append_rows(&db, "c", (0..300).flat_map(row).collect());
        let file = Connection::open(dir.path().join("state.db")).unwrap();
        file.execute_batch(
            "UPDATE messages SET active = 0 WHERE id % 7 = 0;
             UPDATE messages SET active = 2 WHERE id % 9 = 0;
             UPDATE messages SET compacted = 1 WHERE id % 14 = 0 OR id % 18 = 0;",
        )
        .unwrap();
        let rows: Vec<(i64, String, i64, i64)> = {
            let mut stmt = file
                .prepare("SELECT id, session_id, active, compacted FROM messages")
                .unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        for include_inactive in [false, true] {
            let search = Search {
                sources: Some(vec!["telegram".into()]),
                include_inactive,
                ..Search::default()
            };
            let set = db.read(|c| admitted_set(c, &search)).unwrap();
            for (id, session, active, compacted) in &rows {
                let admitted =
                    session != "b" && (include_inactive || *active == 1 || *compacted == 1);
                // "a" and "b" interleave, so the ids are read: the set is
                // exact but for "c"'s run, which holds its inactive rows.
                if session == "c" && !admitted {
                    assert!(set.contains(*id), "{id} of c's run");
                } else {
                    assert_eq!(set.contains(*id), admitted, "{id} {session} {active}");
                }
            }
        }
    }

    #[test]
    fn close_indexes_every_pending_row() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        db.indexer.stop();
        create(&db, "s");
        for _ in 0..5 {
            append(&db, "s", 300).unwrap();
        }
        assert_eq!(pending_rows(&db), 1500);
        db.close();
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        assert_eq!(count(&other, "SELECT COUNT(*) FROM hermes_fts_pending"), 0);
        assert_eq!(count(&other, "SELECT COUNT(*) FROM messages_fts"), 1500);
    }
}
