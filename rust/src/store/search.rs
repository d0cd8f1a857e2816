//! A search as a person types it, made into a query every backend can run.
//!
//! Whatever the text, [`Terms::parse`] reads it as terms joined by the
//! operators `AND`, `OR`, `NOT` (upper case, between two terms), where a term
//! is a word, a `"quoted phrase"` or either with a trailing `*` (prefix).
//! Everything else that FTS5 would read as syntax (unbalanced quotes,
//! parentheses, braces, `+`, `:`, `^`, a `*` with nothing before it, an
//! operator with no term on one side) separates words or is dropped. Each
//! term is then written quoted ([`Terms::fts5`]), so the query always parses:
//! `chat-send` is the phrase "chat send", `C++` the word "c", `TODO: fix`
//! the two words.
//!
//! Text in Chinese, Japanese or Korean has no spaces for the word index to
//! split on, so such a search goes to the trigram index when each of its CJK
//! terms is three characters or longer (the shortest the trigram index can
//! match), and otherwise to a substring search ([`Route`]; SQLite answers it
//! through the trigram index when it can, `sqlite/substrings.rs`).

/// The longest query read, in characters; the rest is ignored. Searches need
/// no more, and it bounds the work on adversarial input.
pub const MAX_QUERY_CHARS: usize = 2048;

/// Characters FTS5 reads as syntax outside quotes; here they separate words.
const SEPARATORS: [char; 8] = ['+', '{', '}', '(', ')', ':', '^', ','];

/// A search of messages: the query as typed, its filters and one page.
#[derive(Debug, Clone, Default)]
pub struct Search {
    pub query: String,
    /// Only sessions of these sources (None: every source).
    pub sources: Option<Vec<String>>,
    /// No sessions of these sources.
    pub exclude_sources: Option<Vec<String>>,
    /// Only messages of these roles (None or empty: every role).
    pub roles: Option<Vec<String>>,
    pub session_id: Option<String>,
    pub order: SearchOrder,
    /// Rewound rows too (by default only live and compaction-archived rows).
    pub include_inactive: bool,
    pub limit: i64,
    pub offset: i64,
}

/// The order of a search's hits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SearchOrder {
    /// Best match first.
    #[default]
    Rank,
    /// Newest message first, best match among equals.
    Newest,
    /// Oldest message first.
    Oldest,
}

impl SearchOrder {
    /// `"newest"` or `"oldest"` (any case, spaces around); anything else ranks.
    pub fn parse(text: Option<&str>) -> Self {
        match text.map(|t| t.trim().to_ascii_lowercase()).as_deref() {
            Some("newest") => Self::Newest,
            Some("oldest") => Self::Oldest,
            _ => Self::Rank,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    And,
    Or,
    Not,
}

impl Op {
    fn of(word: &str) -> Option<Op> {
        match word {
            "AND" => Some(Op::And),
            "OR" => Some(Op::Or),
            "NOT" => Some(Op::Not),
            _ => None,
        }
    }

    fn keyword(self) -> &'static str {
        match self {
            Op::And => "AND",
            Op::Or => "OR",
            Op::Not => "NOT",
        }
    }
}

/// One word or phrase of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub text: String,
    pub prefix: bool,
}

/// Which index answers a search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The word index (`messages_fts`).
    Words,
    /// The trigram index (`messages_fts_trigram`), for CJK terms of three
    /// characters or more.
    Trigrams,
    /// Substrings of the messages, newest first, for shorter CJK terms or
    /// when there is no trigram index.
    Substrings,
}

/// A query as terms, each but the first with the operator before it
/// (`None`: side by side, which FTS5 reads as AND).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Terms(pub Vec<(Option<Op>, Term)>);

impl Terms {
    /// Reads `query` (its first [`MAX_QUERY_CHARS`] characters), in one pass.
    pub fn parse(query: &str) -> Terms {
        let chars: Vec<char> = query.chars().take(MAX_QUERY_CHARS).collect();
        let mut parser = Parser::default();
        let mut word = String::new();
        let mut quotes_ahead = true;
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '"' && quotes_ahead {
                let close = chars[i + 1..].iter().position(|&d| d == '"');
                if let Some(len) = close {
                    parser.word(&std::mem::take(&mut word));
                    let end = i + 1 + len;
                    let prefix = chars.get(end + 1) == Some(&'*');
                    parser.term(chars[i + 1..end].iter().collect(), prefix);
                    i = end + 1;
                    while chars.get(i) == Some(&'*') {
                        i += 1;
                    }
                    continue;
                }
                // No closing quote: none further on has one either.
                quotes_ahead = false;
            }
            // A control character (NUL ends FTS5's reading of the query) separates too.
            if c == '"' || c.is_whitespace() || c.is_control() || SEPARATORS.contains(&c) {
                parser.word(&std::mem::take(&mut word));
            } else {
                word.push(c);
            }
            i += 1;
        }
        parser.word(&word);
        Terms(parser.terms)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The terms that can match a word index: those with a letter or digit.
    pub fn words(&self) -> Terms {
        let mut kept = Terms::default();
        for (op, term) in &self.0 {
            if term.text.chars().any(char::is_alphanumeric) {
                let op = if kept.is_empty() { None } else { *op };
                kept.0.push((op, term.clone()));
            }
        }
        kept
    }

    /// The FTS5 query: each term quoted, so it always parses.
    pub fn fts5(&self) -> String {
        let mut out = String::new();
        for (op, term) in &self.0 {
            if !out.is_empty() {
                out.push(' ');
            }
            if let Some(op) = op {
                out.push_str(op.keyword());
                out.push(' ');
            }
            out.push('"');
            out.push_str(&term.text.replace('"', "\"\""));
            out.push('"');
            if term.prefix {
                out.push('*');
            }
        }
        out
    }

    /// Which index answers these terms, given whether the trigram index exists.
    pub fn route(&self, trigrams: bool) -> Route {
        let cjk: Vec<usize> = self
            .0
            .iter()
            .map(|(_, t)| t.text.chars().filter(|&c| is_cjk(c)).count())
            .filter(|&n| n > 0)
            .collect();
        if cjk.is_empty() {
            Route::Words
        } else if trigrams && cjk.iter().all(|&n| n >= 3) {
            Route::Trigrams
        } else {
            Route::Substrings
        }
    }

    /// The terms grouped as FTS5 groups them, leaving out those `can_match`
    /// says can match nothing (as FTS5 treats a phrase its tokenizer finds
    /// no tokens in); None when nothing can match at all.
    ///
    /// Terms side by side bind tightest (all must match, and one that can
    /// match nothing is left out), then `NOT` (the left side without the
    /// right, from left to right), then `AND`, then `OR`. So `a NOT b c` is
    /// `a` without `b c`, `a OR b c` is `a` or `b c`. A term that can match
    /// nothing makes an `AND` match nothing, drops out of an `OR`, and
    /// excludes nothing after a `NOT`.
    pub fn expr(&self, can_match: impl Fn(usize) -> bool) -> Option<Expr> {
        let items: Vec<(usize, Option<Op>)> = self
            .0
            .iter()
            .enumerate()
            .map(|(i, (op, _))| (i, *op))
            .collect();
        any_of(&items, &can_match)
    }

    /// A `LIKE` pattern (escape `\`) finding `text` anywhere.
    pub fn like_pattern(text: &str) -> String {
        let escaped = text
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        format!("%{escaped}%")
    }
}

/// Chinese, Japanese or Korean (the ranges hermes-agent treats as such).
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF      // CJK unified ideographs
        | 0x3400..=0x4DBF    // extension A
        | 0x20000..=0x2A6DF  // extension B
        | 0x3000..=0x303F    // CJK symbols and punctuation
        | 0x3040..=0x309F    // hiragana
        | 0x30A0..=0x30FF    // katakana
        | 0xAC00..=0xD7AF) // hangul syllables
}

/// Terms combined: [`Terms::expr`]. A term is named by its place in [`Terms`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Term(usize),
    /// Every one matches.
    All(Vec<Expr>),
    /// At least one matches.
    Any(Vec<Expr>),
    /// The first matches and the second does not.
    Without(Box<Expr>, Box<Expr>),
}

impl Expr {
    /// The expression as text: each term as `term` writes it (called in
    /// order, left to right), groups in parentheses joined by `AND` / `OR`,
    /// and `Without` as `(kept <not> excluded)`.
    pub fn render(&self, not: &str, term: &mut dyn FnMut(usize) -> String) -> String {
        let group = |parts: &[Expr], joint: &str, term: &mut dyn FnMut(usize) -> String| {
            let parts: Vec<String> = parts.iter().map(|p| p.render(not, term)).collect();
            format!("({})", parts.join(joint))
        };
        match self {
            Expr::Term(i) => term(*i),
            Expr::All(parts) => group(parts, " AND ", term),
            Expr::Any(parts) => group(parts, " OR ", term),
            Expr::Without(kept, excluded) => {
                let kept = kept.render(not, term);
                format!("({kept} {not} {})", excluded.render(not, term))
            }
        }
    }
}

type Items<'a> = &'a [(usize, Option<Op>)];

/// `items` split before each `op` (the first item's operator is the one
/// before the run, not a separator).
fn split(items: Items<'_>, op: Op) -> impl Iterator<Item = Items<'_>> {
    let mut rest = items;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = rest[1..]
            .iter()
            .position(|(_, o)| *o == Some(op))
            .map_or(rest.len(), |p| p + 1);
        let (run, tail) = rest.split_at(end);
        rest = tail;
        Some(run)
    })
}

fn one_or(mut all: Vec<Expr>, many: fn(Vec<Expr>) -> Expr) -> Expr {
    if all.len() == 1 {
        all.remove(0)
    } else {
        many(all)
    }
}

fn any_of(items: Items<'_>, can_match: &dyn Fn(usize) -> bool) -> Option<Expr> {
    let alternatives: Vec<Expr> = split(items, Op::Or)
        .filter_map(|run| all_of(run, can_match))
        .collect();
    (!alternatives.is_empty()).then(|| one_or(alternatives, Expr::Any))
}

fn all_of(items: Items<'_>, can_match: &dyn Fn(usize) -> bool) -> Option<Expr> {
    let parts: Option<Vec<Expr>> = split(items, Op::And)
        .map(|run| without(run, can_match))
        .collect();
    parts.map(|parts| one_or(parts, Expr::All))
}

fn without(items: Items<'_>, can_match: &dyn Fn(usize) -> bool) -> Option<Expr> {
    let mut runs = split(items, Op::Not).map(|run| side_by_side(run, can_match));
    let first = runs.next()??;
    Some(runs.fold(first, |kept, excluded| match excluded {
        Some(excluded) => Expr::Without(Box::new(kept), Box::new(excluded)),
        None => kept,
    }))
}

fn side_by_side(items: Items<'_>, can_match: &dyn Fn(usize) -> bool) -> Option<Expr> {
    let terms: Vec<Expr> = items
        .iter()
        .map(|(i, _)| *i)
        .filter(|&i| can_match(i))
        .map(Expr::Term)
        .collect();
    (!terms.is_empty()).then(|| one_or(terms, Expr::All))
}

/// Collects terms, keeping an operator only between two terms (the first of
/// a run of operators wins).
#[derive(Default)]
struct Parser {
    terms: Vec<(Option<Op>, Term)>,
    op: Option<Op>,
}

impl Parser {
    fn word(&mut self, word: &str) {
        if word.is_empty() {
            return;
        }
        if let Some(op) = Op::of(word) {
            if !self.terms.is_empty() && self.op.is_none() {
                self.op = Some(op);
            }
            return;
        }
        // `deploy*` is a prefix; a `*` inside a word ends a prefix there.
        let mut pieces = word.split('*').peekable();
        while let Some(piece) = pieces.next() {
            let prefix = pieces.peek().is_some();
            if !piece.is_empty() {
                self.term(piece.to_owned(), prefix);
            }
        }
    }

    fn term(&mut self, text: String, prefix: bool) {
        let text: String = text
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if text.trim().is_empty() {
            return;
        }
        let op = self.op.take();
        self.terms.push((op, Term { text, prefix }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fts(q: &str) -> String {
        Terms::parse(q).fts5()
    }

    #[test]
    fn words_phrases_operators_and_prefixes_keep_their_meaning() {
        assert_eq!(fts("hello world"), r#""hello" "world""#);
        assert_eq!(fts(r#""exact phrase" setup"#), r#""exact phrase" "setup""#);
        assert_eq!(fts("docker OR kubernetes"), r#""docker" OR "kubernetes""#);
        assert_eq!(fts("python NOT java"), r#""python" NOT "java""#);
        assert_eq!(fts("deploy*"), r#""deploy"*"#);
        assert_eq!(fts(r#""my chat-send thing""#), r#""my chat-send thing""#);
        assert_eq!(fts(r#""foo bar"*"#), r#""foo bar"*"#);
    }

    #[test]
    fn syntax_a_person_did_not_mean_is_dropped_or_separates_words() {
        assert_eq!(fts("C++"), r#""C""#);
        assert_eq!(fts("TODO: fix"), r#""TODO" "fix""#);
        assert_eq!(fts("error:timeout"), r#""error" "timeout""#);
        assert_eq!(fts(r#""unterminated"#), r#""unterminated""#);
        assert_eq!(fts("(problem"), r#""problem""#);
        assert_eq!(fts("{test}"), r#""test""#);
        assert_eq!(fts("***"), "");
        assert_eq!(fts("hello AND"), r#""hello""#);
        assert_eq!(fts("OR hello"), r#""hello""#);
        assert_eq!(fts("NOT docker"), r#""docker""#);
        assert_eq!(fts("a AND OR b"), r#""a" AND "b""#);
        assert_eq!(fts("AND OR NOT"), "");
        assert_eq!(fts("chat-send"), r#""chat-send""#);
        assert_eq!(fts("P2.2"), r#""P2.2""#);
        assert_eq!(fts("it's"), r#""it's""#);
        assert_eq!(fts(r#"a"b"c"#), r#""a" "b" "c""#);
        assert_eq!(fts("0\0x\u{7}y \"a\0b\""), r#""0" "x" "y" "a b""#);
    }

    #[test]
    fn a_long_query_is_read_up_to_the_limit() {
        let query = "\"".repeat(100_000) + &"a.".repeat(100_000);
        let terms = Terms::parse(&query);
        assert!(terms.fts5().chars().count() <= MAX_QUERY_CHARS * 2);
    }

    #[test]
    fn terms_without_letters_or_digits_are_left_out_of_a_word_search() {
        assert_eq!(
            Terms::parse("hello % world").words().fts5(),
            r#""hello" "world""#
        );
        assert_eq!(Terms::parse("% OR world").words().fts5(), r#""world""#);
    }

    #[test]
    fn cjk_terms_go_to_trigrams_when_long_enough_else_to_substrings() {
        let route = |q: &str, tri: bool| Terms::parse(q).route(tri);
        assert_eq!(route("docker", true), Route::Words);
        assert_eq!(route("记忆断裂", true), Route::Trigrams);
        assert_eq!(route("记忆断裂", false), Route::Substrings);
        assert_eq!(route("通信", true), Route::Substrings);
        assert_eq!(route("广西 OR 桂林 OR 漓江", true), Route::Substrings);
        assert_eq!(route("记忆系统 OR 断裂连接", true), Route::Trigrams);
        assert_eq!(route("안녕", true), Route::Substrings);
    }

    #[test]
    fn terms_combine_with_fts5s_precedence() {
        use Expr::*;
        let expr = |q: &str| Terms::parse(q).expr(|_| true);
        let t = |i| Box::new(Term(i));
        assert_eq!(expr("a"), Some(Term(0)));
        assert_eq!(
            expr("a b OR c NOT d"),
            Some(Any(vec![All(vec![Term(0), Term(1)]), Without(t(2), t(3))]))
        );
        // Side by side binds tighter than NOT, NOT tighter than AND.
        assert_eq!(
            expr("a NOT b c"),
            Some(Without(t(0), Box::new(All(vec![Term(1), Term(2)]))))
        );
        assert_eq!(
            expr("a NOT b AND c"),
            Some(All(vec![Without(t(0), t(1)), Term(2)]))
        );
        assert_eq!(
            expr("a NOT b NOT c"),
            Some(Without(Box::new(Without(t(0), t(1))), t(2)))
        );
        assert_eq!(expr(""), None);
    }

    #[test]
    fn a_term_that_can_match_nothing_drops_out_as_in_fts5() {
        use Expr::*;
        // Term 1 (`b`) can match nothing.
        let expr = |q: &str| Terms::parse(q).expr(|i| i != 1);
        assert_eq!(expr("a b"), Some(Term(0)));
        assert_eq!(expr("a AND b"), None);
        assert_eq!(expr("a OR b"), Some(Term(0)));
        assert_eq!(expr("a NOT b"), Some(Term(0)));
        assert_eq!(
            expr("x b NOT a"),
            Some(Without(Box::new(Term(0)), Box::new(Term(2))))
        );
        assert_eq!(Terms::parse("b NOT a").expr(|i| i != 0), None);
    }

    #[test]
    fn like_patterns_match_wildcards_literally() {
        assert_eq!(Terms::like_pattern("100%_a\\"), "%100\\%\\_a\\\\%");
    }
}
