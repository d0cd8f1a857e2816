//! Search on PostgreSQL, over the side table of `search_index.rs`, after
//! indexing what is pending. The query is read by `store/search.rs` as on
//! SQLite and takes the same route:
//!
//! * words: the terms as a `tsquery` (`&`, `|`, `& !`, phrases `<->`,
//!   prefixes `:*`) over the word vectors, ranked by `ts_rank`;
//! * trigrams (CJK terms of three characters or more): the CJK terms'
//!   trigrams narrow the rows through the trigram vectors' index, then the
//!   folded text is checked for each term as a substring, shortest message
//!   first;
//! * substrings (shorter CJK terms): the folded text of every row checked,
//!   newest first.
//!
//! Terms group as FTS5 groups them ([`Terms::expr`]); a term that FTS5 would
//! find no token in (or, for trigrams, shorter than three characters)
//! matches nothing, as there. Every text of the query is a bound parameter:
//! the lexemes are quoted inside the `tsquery` literal, which is bound.

use std::time::Instant;

use tokio_postgres::types::{ToSql, Type};

use super::error::classify;
use super::search_index::{
    self, lexeme, quoted, trigrams, Held, CATCH_UP_CHUNK_ROWS, UNCUT_MARKER,
};
use super::value::{escape_text, names, table};
use super::PgBackend;
use crate::error::{Error, Result};
use crate::model::Table;
use crate::store::search::{Expr, Route, Terms};
use crate::store::sqlite::tokenizer;
use crate::store::{Search, SearchOrder};

const SEARCH_COLUMNS: &str = "id, session_id, role, content, tool_name, timestamp, source, model, \
    session_started, title, snippet, before_id, after_id, before_role, before_content, \
    after_role, after_content, hit_rank";

/// The filters every route applies on `x` (the side table), `m` (messages)
/// and `s` (sessions), with the parameters `$2` to `$6`.
const FILTERS: &str = "($2 OR m.active = 1 OR m.compacted = 1)
    AND ($3::text[] IS NULL OR s.source = ANY($3))
    AND ($4::text[] IS NULL OR NOT (s.source = ANY($4)))
    AND ($5::text[] IS NULL OR m.role = ANY($5))
    AND ($6::text IS NULL OR x.session_id = $6)";

/// The text the indexes hold, of the hit `h`.
const HIT_TEXT: &str =
    "COALESCE(h.content, '') || ' ' || COALESCE(h.tool_name, '') || ' ' || COALESCE(h.tool_calls, '')";

/// How much of a hit's text the word snippet reads (`ts_headline` parses
/// all it is given, which for a long tool output costs more than the search).
const SNIPPET_CHARS: usize = 100_000;

/// One route's statement: what matches, its rank, its snippet, and the
/// texts it binds after `$1` to `$8` (`$1`: the words or trigrams query).
struct Plan {
    query: String,
    matches: String,
    rank: &'static str,
    snippet: String,
    extra: Vec<String>,
}

impl Plan {
    fn param(&mut self, text: String) -> String {
        self.extra.push(text);
        format!("${}", self.extra.len() + 8)
    }
}

/// The words of a term as a `tsquery` phrase (None: FTS5 finds no token in it).
fn phrase(text: &str, prefix: bool) -> Option<String> {
    let words = tokenizer::words(text);
    if words.is_empty() {
        return None;
    }
    let mut out: Vec<String> = words.iter().map(|w| quoted(lexeme(w))).collect();
    if prefix {
        if let Some(last) = out.last_mut() {
            last.push_str(":*");
        }
    }
    Some(format!("({})", out.join(" <-> ")))
}

/// `expr` written with `leaf` for each term, `&`, `|` and `& !` between.
fn tsquery(expr: &Expr, leaf: &dyn Fn(usize) -> String) -> String {
    let join = |parts: &[Expr], joint: &str| {
        let parts: Vec<String> = parts.iter().map(|p| tsquery(p, leaf)).collect();
        format!("({})", parts.join(joint))
    };
    match expr {
        Expr::Term(i) => leaf(*i),
        Expr::All(parts) => join(parts, " & "),
        Expr::Any(parts) => join(parts, " | "),
        Expr::Without(kept, excluded) => {
            format!("({} & !{})", tsquery(kept, leaf), tsquery(excluded, leaf))
        }
    }
}

/// What a trigram search can ask of the index: trigrams every hit has
/// (None: it cannot narrow, as for a term without CJK characters, whose
/// trigrams are not indexed). The excluded side of a `NOT` narrows nothing
/// (a row with its trigrams may still lack the text): the check of the text
/// decides.
fn necessary(expr: &Expr, leaf: &dyn Fn(usize) -> Option<String>) -> Option<String> {
    let parts = |parts: &[Expr]| parts.iter().map(|p| necessary(p, leaf)).collect::<Vec<_>>();
    match expr {
        Expr::Term(i) => leaf(*i),
        Expr::All(all) => {
            let known: Vec<String> = parts(all).into_iter().flatten().collect();
            (!known.is_empty()).then(|| format!("({})", known.join(" & ")))
        }
        Expr::Any(any) => {
            let each: Option<Vec<String>> = parts(any).into_iter().collect();
            each.map(|each| format!("({})", each.join(" | ")))
        }
        Expr::Without(kept, _) => necessary(kept, leaf),
    }
}

/// `expr` as a condition that each term is a substring of the folded text.
fn substrings(expr: &Expr, terms: &Terms, plan: &mut Plan) -> String {
    let join = |parts: &[Expr], joint: &str, plan: &mut Plan| {
        let parts: Vec<String> = parts.iter().map(|p| substrings(p, terms, plan)).collect();
        format!("({})", parts.join(joint))
    };
    match expr {
        Expr::Term(i) => {
            let folded = tokenizer::fold(&terms.0[*i].1.text);
            let n = plan.param(Terms::like_pattern(&folded));
            format!("x.folded LIKE {n} ESCAPE '\\'")
        }
        Expr::All(parts) => join(parts, " AND ", plan),
        Expr::Any(parts) => join(parts, " OR ", plan),
        Expr::Without(kept, excluded) => {
            let kept = substrings(kept, terms, plan);
            let excluded = substrings(excluded, terms, plan);
            format!("({kept} AND NOT {excluded})")
        }
    }
}

fn words_plan(terms: &Terms) -> Option<Plan> {
    let phrases: Vec<Option<String>> = terms
        .0
        .iter()
        .map(|(_, term)| phrase(&term.text, term.prefix))
        .collect();
    let expr = terms.expr(|i| phrases[i].is_some())?;
    let query = tsquery(&expr, &|i| phrases[i].clone().unwrap_or_default());
    Some(Plan {
        query,
        matches: "x.words @@ $1::tsquery".into(),
        // Lower is better, as FTS5's bm25; scaled by the text's length
        // (ts_rank's normalization 1), as bm25 favours shorter texts.
        rank: "-ts_rank(x.words, $1::tsquery, 1)",
        snippet: format!(
            "ts_headline('simple', left({HIT_TEXT}, {SNIPPET_CHARS}), $1::tsquery,
                 'StartSel=>>>, StopSel=<<<, MaxWords=40, MinWords=20')"
        ),
        extra: Vec::new(),
    })
}

/// The indexed text around the first term's first place in it (as the
/// substring search on SQLite shows it).
fn substring_snippet(terms: &Terms, plan: &mut Plan) -> String {
    let first = plan.param(escape_text(&terms.0[0].1.text).into_owned());
    format!("substr({HIT_TEXT}, greatest(1, strpos({HIT_TEXT}, {first}) - 40), 120)")
}

fn trigrams_plan(terms: &Terms) -> Option<Plan> {
    let folded: Vec<String> = terms
        .0
        .iter()
        .map(|(_, t)| tokenizer::fold(&t.text))
        .collect();
    let expr = terms.expr(|i| folded[i].chars().count() >= 3)?;
    let leaf = |i: usize| {
        let grams: Vec<String> = trigrams(&folded[i]).iter().map(|g| quoted(g)).collect();
        (!grams.is_empty()).then(|| format!("({})", grams.join(" & ")))
    };
    let narrowed = necessary(&expr, &leaf);
    let mut plan = Plan {
        query: narrowed
            .as_ref()
            .map(|grams| format!("{grams} | {}", quoted(UNCUT_MARKER)))
            .unwrap_or_default(),
        matches: String::new(),
        rank: "length(x.folded)",
        snippet: String::new(),
        extra: Vec::new(),
    };
    let text = substrings(&expr, terms, &mut plan);
    plan.matches = match narrowed {
        Some(_) => format!("x.grams @@ $1::tsquery AND {text}"),
        None => text,
    };
    plan.snippet = substring_snippet(terms, &mut plan);
    Some(plan)
}

fn substrings_plan(terms: &Terms) -> Option<Plan> {
    let expr = terms.expr(|_| true)?;
    let mut plan = Plan {
        query: String::new(),
        matches: String::new(),
        rank: "0",
        snippet: String::new(),
        extra: Vec::new(),
    };
    plan.matches = substrings(&expr, terms, &mut plan);
    plan.snippet = substring_snippet(terms, &mut plan);
    Some(plan)
}

/// The statement of `plan`: a page of hits in `order`, each with the
/// messages before and after it in its session (by timestamp, then id).
fn statement(plan: &Plan, order: SearchOrder, route: Route) -> String {
    let (inner, outer) = match (route, order) {
        (Route::Substrings, _) => ("m.timestamp DESC, m.id DESC", "h.timestamp DESC, h.id DESC"),
        (_, SearchOrder::Rank) => ("hit_rank, m.id", "h.hit_rank, h.id"),
        (_, SearchOrder::Newest) => (
            "m.timestamp DESC, hit_rank, m.id",
            "h.timestamp DESC, h.hit_rank, h.id",
        ),
        (_, SearchOrder::Oldest) => (
            "m.timestamp ASC, hit_rank, m.id",
            "h.timestamp ASC, h.hit_rank, h.id",
        ),
    };
    // The matches are found first, by the side table's indexes (a store
    // not analyzed yet would otherwise be scanned in id order), then the
    // page; each side's neighbour is one index read of the hit's session,
    // for the page only.
    let neighbour = |cmp: &str, dir: &str| {
        format!(
            "LEFT JOIN LATERAL (SELECT n.id, n.role, n.content FROM messages n
                WHERE n.session_id = h.session_id
                  AND (n.timestamp {cmp} h.timestamp OR (n.timestamp = h.timestamp AND n.id {cmp} h.id))
                ORDER BY n.timestamp {dir}, n.id {dir} LIMIT 1)"
        )
    };
    format!(
        "WITH found AS MATERIALIZED (
            SELECT x.message_id, x.session_id, {rank} AS hit_rank FROM hermes_search x
            WHERE {matches}),
         hits AS MATERIALIZED (
            SELECT m.id, m.session_id, m.role, m.content, m.tool_name, m.tool_calls, m.timestamp,
                   s.source, s.model, s.started_at AS session_started, s.title, x.hit_rank
            FROM found x
            JOIN messages m ON m.id = x.message_id
            JOIN sessions s ON s.id = m.session_id
            WHERE {FILTERS}
            ORDER BY {inner} LIMIT $7 OFFSET $8)
         SELECT h.id, h.session_id, h.role, h.content, h.tool_name, h.timestamp, h.source,
                h.model, h.session_started, h.title, {snippet} AS snippet, b.id AS before_id,
                a.id AS after_id, b.role AS before_role, b.content AS before_content,
                a.role AS after_role, a.content AS after_content, h.hit_rank::float8 AS hit_rank
         FROM hits h
         {before} b ON TRUE
         {after} a ON TRUE
         ORDER BY {outer}",
        rank = plan.rank,
        matches = plan.matches,
        snippet = plan.snippet,
        before = neighbour("<", "DESC"),
        after = neighbour(">", "ASC"),
    )
}

impl PgBackend {
    pub(super) fn search_messages(&self, search: &Search) -> Result<Table> {
        let terms = Terms::parse(&search.query);
        // The trigram vectors are in every side row: CJK terms of three
        // characters or more always have an index.
        let route = terms.route(true);
        let plan = match route {
            Route::Words => words_plan(&terms.words()),
            Route::Trigrams => trigrams_plan(&terms),
            Route::Substrings => substrings_plan(&terms),
        };
        let Some(plan) = plan else {
            return Ok(Table::new(Vec::<String>::new().into()));
        };
        let sql = statement(&plan, search.order, route);
        let list = |l: &Option<Vec<String>>| {
            l.as_ref().map(|items| {
                items
                    .iter()
                    .map(|i| escape_text(i).into_owned())
                    .collect::<Vec<_>>()
            })
        };
        let (sources, excluded) = (list(&search.sources), list(&search.exclude_sources));
        let roles = list(&search.roles.clone().filter(|r| !r.is_empty()));
        let session = search.session_id.as_deref().map(escape_text);
        let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
            (&plan.query, Type::TEXT),
            (&search.include_inactive, Type::BOOL),
            (&sources, Type::TEXT_ARRAY),
            (&excluded, Type::TEXT_ARRAY),
            (&roles, Type::TEXT_ARRAY),
            (&session, Type::TEXT),
            (&search.limit, Type::INT8),
            (&search.offset, Type::INT8),
        ];
        params.extend(
            plan.extra
                .iter()
                .map(|t| (t as &(dyn ToSql + Sync), Type::TEXT)),
        );
        // Every row committed before the search is found: pending rows
        // (any host's) are indexed first. If that fails (a row lock held
        // past the busy budget, the server refusing writes), the search
        // answers from the index as it is.
        let _ = self.index_pending(Some(Instant::now() + self.options.busy_budget));
        self.read(|server, link| {
            server
                .block_on(link.client.query_typed(&sql, &params))
                .and_then(|rows| table(&rows, names(SEARCH_COLUMNS)))
                .map_err(|e| classify(&self.at, e))
        })
        .map_err(|e| match e {
            // The query is built to parse whatever was typed; if the server
            // still refuses it, say so as the query's fault, not storage's.
            Error::Storage { detail, .. } if detail.contains("tsquery") => Error::BadQuery {
                query: search.query.chars().take(200).collect(),
                detail,
            },
            e => e,
        })
    }

    /// Indexes every row pending when it starts, here and now, in large
    /// chunks; waits for ranges another connection is indexing. Stops at
    /// `deadline` (None: when done), leaving the rest pending.
    pub(super) fn index_pending(&self, deadline: Option<Instant>) -> Result<()> {
        self.read(|server, link| {
            let fail = |e| classify(&self.at, e);
            let Some(up_to) = server
                .block_on(search_index::pending_up_to(&link.client))
                .map_err(fail)?
            else {
                return Ok(());
            };
            loop {
                let wait = match deadline {
                    Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                    None => self.options.busy_budget,
                };
                let more = server
                    .block_on(search_index::index_chunk(
                        &link.client,
                        up_to,
                        CATCH_UP_CHUNK_ROWS,
                        Held::Wait(wait),
                    ))
                    .map_err(fail)?;
                if !more || deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(());
                }
            }
        })
    }
}
