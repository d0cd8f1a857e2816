//! Typed operations as PostgreSQL SQL: the text, with `$n` for each value,
//! and the values with the type each is bound as (its column's, so the
//! server needs no inference). The operations were checked first; names
//! are quoted all the same.
//!
//! Where SQLite and PostgreSQL differ, the SQLite meaning is kept: `like`
//! ignores case (`ILIKE`; for every letter, not only ASCII), a glob becomes
//! an anchored regular expression.

use std::fmt::Write as _;

use tokio_postgres::types::{ToSql, Type};

use super::value::{Bound, Types};
use crate::model::ValueRef;
use crate::store::{
    Assign, Cmp, Delete, Derived, Filter, Import, Insert, OnConflict, Query, Relation, Term, Update,
};

pub struct Sql<'v> {
    pub text: String,
    params: Vec<(Bound<'v>, Type)>,
    types: &'v Types,
    aliases: usize,
}

impl<'v> Sql<'v> {
    fn new(types: &'v Types) -> Self {
        Sql {
            text: String::with_capacity(256),
            params: Vec::with_capacity(8),
            types,
            aliases: 0,
        }
    }

    /// The parameters, as `query_typed` takes them.
    pub fn params(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        self.params
            .iter()
            .map(|(value, ty)| (value as &(dyn ToSql + Sync), ty.clone()))
            .collect()
    }

    pub fn select(types: &'v Types, query: &'v Query) -> Self {
        let mut sql = Sql::new(types);
        sql.query(query);
        sql
    }

    pub fn count(types: &'v Types, relation: Relation, filter: &'v Filter) -> Self {
        let mut sql = Sql::new(types);
        sql.push("SELECT COUNT(*) FROM ");
        let alias = sql.from(relation);
        sql.push(" WHERE ");
        sql.filter(alias, relation, filter);
        sql
    }

    pub fn insert(types: &'v Types, insert: &'v Insert) -> Self {
        let mut sql = Sql::new(types);
        let relation = insert.relation;
        sql.push("INSERT INTO ");
        sql.push(relation.name());
        sql.push(" (");
        for (n, (column, _)) in insert.values.iter().enumerate() {
            sql.comma(n);
            sql.ident(column);
        }
        sql.push(") VALUES (");
        for (n, (column, value)) in insert.values.iter().enumerate() {
            sql.comma(n);
            let ty = types.of(relation, column);
            sql.bind(value.as_ref(), ty);
        }
        sql.push(")");
        if insert.on_conflict == OnConflict::Fail {
            return sql;
        }
        let key = relation.key();
        let others: Vec<&str> = insert
            .values
            .iter()
            .map(|(c, _)| c.as_str())
            .filter(|c| !key.contains(c))
            .collect();
        sql.push(" ON CONFLICT (");
        for (n, column) in key.iter().enumerate() {
            sql.comma(n);
            sql.ident(column);
        }
        sql.push(")");
        if insert.on_conflict == OnConflict::Ignore || others.is_empty() {
            sql.push(" DO NOTHING");
            return sql;
        }
        sql.push(" DO UPDATE SET ");
        for (n, column) in others.into_iter().enumerate() {
            sql.comma(n);
            sql.ident(column);
            if insert.on_conflict == OnConflict::FillNulls {
                sql.push(" = COALESCE(");
                sql.push(relation.name());
                sql.push(".");
                sql.ident(column);
                sql.push(", excluded.");
                sql.ident(column);
                sql.push(")");
            } else {
                sql.push(" = excluded.");
                sql.ident(column);
            }
        }
        sql
    }

    /// Every row of `import` from one array per column (`$1`... in column
    /// order, bound by the caller), the column at `nulled` written NULL; a
    /// row whose key is there already is left as it is. Returns the key of
    /// each row inserted.
    pub fn import(types: &'v Types, import: &Import, nulled: Option<usize>) -> Self {
        let mut sql = Sql::new(types);
        let columns = |sql: &mut Self| {
            for (n, column) in import.columns.iter().enumerate() {
                sql.comma(n);
                sql.ident(column);
            }
        };
        sql.push("INSERT INTO ");
        sql.push(import.relation.name());
        sql.push(" (");
        columns(&mut sql);
        sql.push(") SELECT ");
        for (n, column) in import.columns.iter().enumerate() {
            sql.comma(n);
            if Some(n) == nulled {
                sql.push("NULL");
            } else {
                sql.push("v.");
                sql.ident(column);
            }
        }
        sql.push(" FROM unnest(");
        for n in 0..import.columns.len() {
            sql.comma(n);
            let _ = write!(sql.text, "${}", n + 1);
        }
        sql.push(") AS v(");
        columns(&mut sql);
        sql.push(") ON CONFLICT (");
        let key = import.relation.key();
        for (n, column) in key.iter().enumerate() {
            sql.comma(n);
            sql.ident(column);
        }
        sql.push(") DO NOTHING RETURNING ");
        for (n, column) in key.iter().enumerate() {
            sql.comma(n);
            sql.ident(column);
        }
        sql
    }

    pub fn update(types: &'v Types, update: &'v Update, returning: Option<&str>) -> Self {
        let mut sql = Sql::new(types);
        let relation = update.relation;
        sql.push("UPDATE ");
        let alias = sql.from(relation);
        sql.push(" SET ");
        for (n, (column, assign)) in update.set.iter().enumerate() {
            sql.comma(n);
            sql.ident(column);
            match assign {
                Assign::Value(value) => {
                    sql.push(" = ");
                    sql.bind(value.as_ref(), types.of(relation, column));
                }
                Assign::Add(n) => {
                    sql.push(" = COALESCE(");
                    sql.column(alias, column);
                    sql.push(", 0) + ");
                    sql.bind(n.as_ref(), types.of(relation, column));
                }
                Assign::FillNull(value) => {
                    sql.push(" = COALESCE(");
                    sql.column(alias, column);
                    sql.push(", ");
                    sql.bind(value.as_ref(), types.of(relation, column));
                    sql.push(")");
                }
            }
        }
        sql.push(" WHERE ");
        sql.filter(alias, relation, &update.filter);
        sql.returning(returning);
        sql
    }

    pub fn delete(types: &'v Types, delete: &'v Delete, returning: Option<&str>) -> Self {
        let mut sql = Sql::new(types);
        sql.push("DELETE FROM ");
        let alias = sql.from(delete.relation);
        sql.push(" WHERE ");
        sql.filter(alias, delete.relation, &delete.filter);
        sql.returning(returning);
        sql
    }

    fn push(&mut self, text: &str) {
        self.text.push_str(text);
    }

    fn comma(&mut self, n: usize) {
        if n > 0 {
            self.push(", ");
        }
    }

    fn ident(&mut self, name: &str) {
        self.text.push('"');
        self.text.push_str(&name.replace('"', "\"\""));
        self.text.push('"');
    }

    fn from(&mut self, relation: Relation) -> usize {
        let alias = self.aliases;
        self.aliases += 1;
        self.push(relation.name());
        self.push(" AS ");
        self.alias(alias);
        alias
    }

    fn alias(&mut self, alias: usize) {
        let _ = write!(self.text, "t{alias}");
    }

    fn column(&mut self, alias: usize, name: &str) {
        self.alias(alias);
        self.text.push('.');
        self.ident(name);
    }

    fn returning(&mut self, returning: Option<&str>) {
        if let Some(columns) = returning {
            self.push(" RETURNING ");
            self.push(columns);
        }
    }

    fn bind(&mut self, value: ValueRef<'v>, ty: Type) {
        self.params.push((Bound(value), ty));
        let _ = write!(self.text, "${}", self.params.len());
    }

    /// The type a value compared with `term` binds as.
    fn type_of(&self, relation: Relation, term: &Term) -> Type {
        match term {
            Term::Column(name) => self.types.of(relation, name),
            Term::Derived(Derived::Preview) => Type::TEXT,
            Term::Derived(Derived::LastActive) => Type::FLOAT8,
            Term::Derived(Derived::TotalTokens | Derived::Listed) => Type::INT8,
            Term::Derived(Derived::CostUsd | Derived::ChainLastActive) => Type::FLOAT8,
            Term::Derived(_) => Type::TEXT,
        }
    }

    fn query(&mut self, query: &'v Query) {
        self.push("SELECT ");
        let alias = self.aliases;
        if query.select.is_empty() {
            self.alias(alias);
            self.push(".*");
        }
        for (n, term) in query.select.iter().enumerate() {
            self.comma(n);
            self.term(alias, term);
            if let Term::Derived(d) = term {
                self.push(" AS ");
                self.ident(d.name());
            }
        }
        self.push(" FROM ");
        self.from(query.relation);
        self.push(" WHERE ");
        self.filter(alias, query.relation, &query.filter);
        for (n, order) in query.order.iter().enumerate() {
            self.push(if n == 0 { " ORDER BY " } else { ", " });
            self.term(alias, &order.term);
            // SQLite sorts NULL first ascending and last descending. A key column holds no
            // NULL (a primary key is NOT NULL here), so its plain order is the same, and
            // one its index serves: a page by key reads only its rows, not a sort of all.
            let key = matches!(&order.term,
                Term::Column(c) if query.relation.key().contains(&c.as_str()));
            self.push(match (order.descending, key) {
                (true, true) => " DESC",
                (false, true) => " ASC",
                (true, false) => " DESC NULLS LAST",
                (false, false) => " ASC NULLS FIRST",
            });
        }
        if query.limit.is_some() || query.offset > 0 {
            self.push(" LIMIT ");
            let limit = query.limit.map_or(ValueRef::Null, ValueRef::Integer);
            self.bind(limit, Type::INT8);
            self.push(" OFFSET ");
            self.bind(ValueRef::Integer(query.offset), Type::INT8);
        }
    }

    fn term(&mut self, alias: usize, term: &Term) {
        match term {
            Term::Column(name) => self.column(alias, name),
            Term::Derived(Derived::Preview) => {
                // Cut first: a line break becomes one space, so the same 63
                // characters, without rewriting the whole message.
                self.push(
                    "COALESCE((SELECT CASE WHEN LENGTH(p) > 60 THEN SUBSTR(p, 1, 60) || '...' ELSE p END \
                     FROM (SELECT BTRIM(REPLACE(REPLACE(SUBSTR(m.content, 1, 63), E'\\n', ' '), E'\\r', ' '), ",
                );
                self.push(PYTHON_WHITESPACE);
                self.push(") AS p FROM messages m WHERE m.session_id = ");
                self.column(alias, "id");
                self.push(
                    " AND m.role = 'user' AND m.content IS NOT NULL ORDER BY m.timestamp, m.id LIMIT 1) x), '')",
                );
            }
            Term::Derived(Derived::LastActive) => {
                self.push(
                    "COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = ",
                );
                self.column(alias, "id");
                self.push("), ");
                self.column(alias, "started_at");
                self.push(")");
            }
            Term::Derived(Derived::TotalTokens) => {
                self.push("(COALESCE(");
                self.column(alias, "input_tokens");
                self.push(", 0) + COALESCE(");
                self.column(alias, "output_tokens");
                self.push(", 0))");
            }
            Term::Derived(Derived::CostUsd) => {
                self.push("COALESCE(");
                self.column(alias, "actual_cost_usd");
                self.push(", ");
                self.column(alias, "estimated_cost_usd");
                self.push(", 0)");
            }
            Term::Derived(Derived::Listed) => {
                self.push("CASE WHEN (");
                self.column(alias, "parent_session_id");
                self.push(" IS NULL OR ");
                self.marker(Some(alias), "_branched_from");
                self.push(" IS NOT NULL OR EXISTS (SELECT 1 FROM sessions p WHERE p.id = ");
                self.column(alias, "parent_session_id");
                self.push(" AND p.end_reason = 'branched' AND ");
                self.column(alias, "started_at");
                self.push(" >= p.ended_at)) AND ");
                self.marker(Some(alias), "_delegate_from");
                self.push(" IS NULL THEN 1 ELSE 0 END");
            }
            Term::Derived(Derived::DelegateFrom) => self.marker(Some(alias), "_delegate_from"),
            Term::Derived(Derived::ChainLastActive) => {
                self.chain_or(
                    alias,
                    "MAX(COALESCE((SELECT MAX(m.timestamp) FROM messages m \
                     WHERE m.session_id = c.id), c.started_at))",
                );
                self.term(alias, &Term::Derived(Derived::LastActive));
                self.push(" END");
            }
            Term::Derived(Derived::ChainIds) => {
                self.chain_or(
                    alias,
                    "LOWER(string_agg(c.id, chr(31) ORDER BY w.depth, c.id))",
                );
                self.push("LOWER(");
                self.column(alias, "id");
                self.push(") END");
            }
            Term::Derived(Derived::ChainTitles) => {
                self.chain_or(
                    alias,
                    "LOWER(string_agg(COALESCE(c.title, ''), chr(31) ORDER BY w.depth, c.id))",
                );
                self.push("LOWER(COALESCE(");
                self.column(alias, "title");
                self.push(", '')) END");
            }
            Term::Derived(Derived::ChainTitlesCompact) => {
                self.chain_or(
                    alias,
                    "TRANSLATE(LOWER(string_agg(COALESCE(c.title, ''), chr(31) ORDER BY w.depth, c.id)), \
                     '-_. ', '')",
                );
                self.push("TRANSLATE(LOWER(COALESCE(");
                self.column(alias, "title");
                self.push(", '')), '-_. ', '') END");
            }
        }
    }

    /// `key` of a session's `model_config` JSON, NULL when it is not JSON (the schema's
    /// `hermes_json_key`: PostgreSQL 15 has no JSON validity test to guard a cast with): of
    /// the query's session `alias`, or of the chain walk's session `k` with None.
    fn marker(&mut self, alias: Option<usize>, key: &'static str) {
        self.push("hermes_json_key(");
        match alias {
            Some(alias) => self.column(alias, "model_config"),
            None => self.push("k.\"model_config\""),
        }
        self.push(", '");
        self.push(key);
        self.push("')");
    }

    /// `CASE WHEN` the row ended `compression` `THEN` `aggregate` over its
    /// chain `ELSE` (the caller writes the value for a chain of the row alone,
    /// then `END`): most rows start no chain, and skip the recursive query.
    fn chain_or(&mut self, alias: usize, aggregate: &'static str) {
        self.push("CASE WHEN ");
        self.column(alias, "end_reason");
        self.push(" = 'compression' THEN ");
        self.chain(alias, aggregate);
        self.push(" ELSE ");
    }

    /// `aggregate` over the sessions (as `c`, each at its `w.depth` from the
    /// row) of the compression chain that starts at the row: it and,
    /// recursively, each child of a session that ended `compression` that is
    /// no branch, delegate run or tool session. The walk SQLite's is
    /// (`sqlite/sql.rs`), with the depth kept so that the lists come in chain
    /// order, as SQLite's breadth-first walk gives them: `CYCLE` ends a chain
    /// that loops, and a session reached twice counts once, at its least depth.
    fn chain(&mut self, alias: usize, aggregate: &'static str) {
        self.push("(WITH RECURSIVE ch(id, depth) AS (SELECT ");
        self.column(alias, "id");
        self.push(
            ", 0 UNION ALL SELECT k.id, ch.depth + 1 FROM ch JOIN sessions p ON p.id = ch.id \
             JOIN sessions k ON k.parent_session_id = ch.id \
             WHERE p.end_reason = 'compression' AND ",
        );
        self.marker(None, "_branched_from");
        self.push(" IS NULL AND ");
        self.marker(None, "_delegate_from");
        self.push(
            " IS NULL AND COALESCE(k.source, '') != 'tool') CYCLE id SET looped USING path SELECT ",
        );
        self.push(aggregate);
        self.push(
            " FROM (SELECT id, MIN(depth) AS depth FROM ch GROUP BY id) w \
             JOIN sessions c ON c.id = w.id)",
        );
    }

    fn filter(&mut self, alias: usize, relation: Relation, filter: &'v Filter) {
        match filter {
            Filter::All => self.push("TRUE"),
            Filter::Compare(term, cmp, value) => {
                self.term(alias, term);
                self.push(match cmp {
                    Cmp::Eq => " = ",
                    Cmp::Ne => " != ",
                    Cmp::Lt => " < ",
                    Cmp::Le => " <= ",
                    Cmp::Gt => " > ",
                    Cmp::Ge => " >= ",
                });
                let ty = self.type_of(relation, term);
                self.bind(value.as_ref(), ty);
            }
            Filter::In(_, values) if values.is_empty() => self.push("FALSE"),
            Filter::In(term, values) => {
                self.term(alias, term);
                self.push(" IN (");
                let ty = self.type_of(relation, term);
                for (n, value) in values.iter().enumerate() {
                    self.comma(n);
                    self.bind(value.as_ref(), ty.clone());
                }
                self.push(")");
            }
            Filter::InQuery(term, query) => {
                self.term(alias, term);
                self.push(" IN (");
                self.query(query);
                self.push(")");
            }
            Filter::IsNull(term) => {
                self.term(alias, term);
                self.push(" IS NULL");
            }
            Filter::Like(term, pattern) => {
                self.term(alias, term);
                self.push(" ILIKE ");
                self.bind(ValueRef::Text(pattern.as_bytes()), Type::TEXT);
                self.push(" ESCAPE '\\'");
            }
            Filter::Glob(term, pattern) => {
                self.term(alias, term);
                self.push(" ~ ");
                self.text_param(glob_regex(pattern));
            }
            Filter::And(all) if all.is_empty() => self.push("TRUE"),
            Filter::Or(all) if all.is_empty() => self.push("FALSE"),
            Filter::And(all) | Filter::Or(all) => {
                let joint = if matches!(filter, Filter::And(_)) {
                    " AND "
                } else {
                    " OR "
                };
                self.push("(");
                for (n, inner) in all.iter().enumerate() {
                    if n > 0 {
                        self.push(joint);
                    }
                    self.filter(alias, relation, inner);
                }
                self.push(")");
            }
            Filter::Not(inner) => {
                self.push("NOT (");
                self.filter(alias, relation, inner);
                self.push(")");
            }
        }
    }

    /// A text made here (not borrowed from the operation), as a literal:
    /// escaped by doubling quotes, in a standard-conforming string.
    fn text_param(&mut self, text: String) {
        self.push("'");
        self.push(&text.replace('\'', "''"));
        self.push("'");
    }
}

/// The characters Python's `str.strip()` takes off (`str.isspace`), as a
/// PostgreSQL string: a preview is stripped as hermes-agent strips it.
const PYTHON_WHITESPACE: &str = "E'\\u0009\\u000a\\u000b\\u000c\\u000d\\u001c\\u001d\\u001e\\u001f\\u0020\\u0085\\u00a0\\u1680\\u2000\\u2001\\u2002\\u2003\\u2004\\u2005\\u2006\\u2007\\u2008\\u2009\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000'";

/// A SQLite glob (`*`, `?`, `[...]`, case-sensitive, whole text) as an
/// anchored POSIX regular expression.
fn glob_regex(glob: &str) -> String {
    let mut out = String::from("^");
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            '[' => {
                out.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    out.push('^');
                }
                if chars.peek() == Some(&']') {
                    chars.next();
                    out.push_str("\\]");
                }
                for c in chars.by_ref() {
                    if c == ']' {
                        break;
                    }
                    if c == '\\' {
                        out.push('\\');
                    }
                    out.push(c);
                }
                out.push(']');
            }
            c if "\\.^$|()+{}".contains(c) => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push('$');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glob_becomes_an_anchored_regular_expression() {
        assert_eq!(glob_regex("a*b?.c"), "^a.*b.\\.c$");
        assert_eq!(glob_regex("[^x]y[ab]"), "^[^x]y[ab]$");
    }
}
