//! Typed operations as SQLite SQL: the text, with `?` for each value, and
//! the values to bind, in order. The operations were checked first
//! (`Query::check`, `Columns::check`), so every name here is a real column;
//! names are quoted all the same, since a crafted file can declare a
//! column whose name is SQL.
//!
//! The same operation always makes the same text, so the connection's
//! statement cache prepares it once.

use rusqlite::types::{ToSqlOutput, ValueRef as SqliteValueRef};
use rusqlite::ToSql;

use crate::model::{Value, ValueRef};
use crate::store::{
    Assign, Cmp, Delete, Derived, Filter, Import, Insert, OnConflict, Query, Relation, Term, Update,
};

impl ToSql for ValueRef<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            ValueRef::Null => SqliteValueRef::Null,
            ValueRef::Integer(n) => SqliteValueRef::Integer(n),
            ValueRef::Real(x) => SqliteValueRef::Real(x),
            ValueRef::Text(t) => SqliteValueRef::Text(t),
            ValueRef::Blob(b) => SqliteValueRef::Blob(b),
        }))
    }
}

impl ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        match self {
            Value::Null => Ok(ToSqlOutput::Borrowed(SqliteValueRef::Null)),
            Value::Integer(n) => Ok(ToSqlOutput::Borrowed(SqliteValueRef::Integer(*n))),
            Value::Real(x) => Ok(ToSqlOutput::Borrowed(SqliteValueRef::Real(*x))),
            Value::Text(t) => Ok(ToSqlOutput::Borrowed(SqliteValueRef::Text(t.as_bytes()))),
            Value::Blob(b) => Ok(ToSqlOutput::Borrowed(SqliteValueRef::Blob(b))),
        }
    }
}

/// The characters Python's `str.strip()` takes off (`str.isspace`), as
/// SQLite's `char(...)`: a preview is stripped as hermes-agent strips it.
const PYTHON_WHITESPACE: &str = "char(9, 10, 11, 12, 13, 28, 29, 30, 31, 32, 133, 160, 5760, 8192, 8193, 8194, 8195, 8196, 8197, 8198, 8199, 8200, 8201, 8202, 8232, 8233, 8239, 8287, 12288)";

/// SQL text and the values it binds, written straight into one buffer (a
/// generic operation's statement is built on every call, so it is built
/// without temporaries).
#[derive(Debug)]
pub struct Sql<'v> {
    pub text: String,
    pub params: Vec<ValueRef<'v>>,
    /// Queries opened so far: each gets its own table alias (`t0`, `t1`...).
    aliases: usize,
}

impl<'v> Sql<'v> {
    fn new() -> Self {
        Sql {
            text: String::with_capacity(256),
            params: Vec::with_capacity(8),
            aliases: 0,
        }
    }

    /// The rows of `query`.
    pub fn select(query: &'v Query) -> Self {
        let mut sql = Sql::new();
        sql.query(query);
        sql
    }

    /// How many rows of `relation` match `filter`.
    pub fn count(relation: Relation, filter: &'v Filter) -> Self {
        let mut sql = Sql::new();
        sql.push("SELECT COUNT(*) FROM ");
        let alias = sql.from(relation);
        sql.push(" WHERE ");
        sql.filter(alias, filter);
        sql
    }

    pub fn insert(insert: &'v Insert) -> Self {
        let mut sql = Sql::new();
        let relation = insert.relation;
        sql.push("INSERT INTO ");
        sql.push(relation.name());
        sql.push(" (");
        for (n, (column, _)) in insert.values.iter().enumerate() {
            sql.comma(n);
            sql.ident(column);
        }
        sql.push(") VALUES (");
        for (n, (_, value)) in insert.values.iter().enumerate() {
            sql.comma(n);
            sql.bind(value.as_ref());
        }
        sql.push(")");
        let key = relation.key();
        let others = || {
            insert
                .values
                .iter()
                .map(|(c, _)| c.as_str())
                .filter(|c| !key.contains(c))
        };
        if insert.on_conflict == OnConflict::Fail {
            return sql;
        }
        sql.push(" ON CONFLICT (");
        for (n, column) in key.iter().enumerate() {
            sql.comma(n);
            sql.ident(column);
        }
        sql.push(")");
        if insert.on_conflict == OnConflict::Ignore || others().next().is_none() {
            sql.push(" DO NOTHING");
            return sql;
        }
        sql.push(" DO UPDATE SET ");
        for (n, column) in others().enumerate() {
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

    /// One row of `import`, its values bound by the caller in column order
    /// (one `?` each); a row whose key is there already is left as it is.
    pub fn import(import: &Import) -> Self {
        let mut sql = Sql::new();
        let relation = import.relation;
        sql.push("INSERT INTO ");
        sql.push(relation.name());
        sql.push(" (");
        for (n, column) in import.columns.iter().enumerate() {
            sql.comma(n);
            sql.ident(column);
        }
        sql.push(") VALUES (");
        for n in 0..import.columns.len() {
            sql.comma(n);
            sql.push("?");
        }
        sql.push(") ON CONFLICT (");
        for (n, column) in relation.key().iter().enumerate() {
            sql.comma(n);
            sql.ident(column);
        }
        sql.push(") DO NOTHING");
        sql
    }

    /// The update, returning `returning` of each changed row (if given).
    pub fn update(update: &'v Update, returning: Option<&str>) -> Self {
        let mut sql = Sql::new();
        sql.push("UPDATE ");
        let alias = sql.from(update.relation);
        sql.push(" SET ");
        for (n, (column, assign)) in update.set.iter().enumerate() {
            sql.comma(n);
            sql.ident(column);
            match assign {
                Assign::Value(value) => {
                    sql.push(" = ");
                    sql.bind(value.as_ref());
                }
                Assign::Add(n) => {
                    sql.push(" = COALESCE(");
                    sql.ident(column);
                    sql.push(", 0) + ");
                    sql.bind(n.as_ref());
                }
                Assign::FillNull(value) => {
                    sql.push(" = COALESCE(");
                    sql.ident(column);
                    sql.push(", ");
                    sql.bind(value.as_ref());
                    sql.push(")");
                }
            }
        }
        sql.push(" WHERE ");
        sql.filter(alias, &update.filter);
        sql.returning(returning);
        sql
    }

    /// The delete, returning `returning` of each deleted row (if given).
    pub fn delete(delete: &'v Delete, returning: Option<&str>) -> Self {
        let mut sql = Sql::new();
        sql.push("DELETE FROM ");
        let alias = sql.from(delete.relation);
        sql.push(" WHERE ");
        sql.filter(alias, &delete.filter);
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

    /// `name` as a quoted SQL identifier.
    fn ident(&mut self, name: &str) {
        self.text.push('"');
        for part in name.split_inclusive('"') {
            self.text.push_str(part);
            if part.ends_with('"') {
                self.text.push('"');
            }
        }
        self.text.push('"');
    }

    /// `relation AS tN`, returning N.
    fn from(&mut self, relation: Relation) -> usize {
        let alias = self.aliases;
        self.aliases += 1;
        self.push(relation.name());
        self.push(" AS ");
        self.alias(alias);
        alias
    }

    fn alias(&mut self, alias: usize) {
        use std::fmt::Write as _;
        let _ = write!(self.text, "t{alias}");
    }

    /// `tN."column"`.
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

    fn bind(&mut self, value: ValueRef<'v>) {
        self.text.push('?');
        self.params.push(value);
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
        self.filter(alias, &query.filter);
        for (n, order) in query.order.iter().enumerate() {
            self.push(if n == 0 { " ORDER BY " } else { ", " });
            self.term(alias, &order.term);
            self.push(if order.descending { " DESC" } else { " ASC" });
        }
        if query.limit.is_some() || query.offset > 0 {
            self.push(" LIMIT ");
            self.bind(ValueRef::Integer(query.limit.unwrap_or(-1)));
            self.push(" OFFSET ");
            self.bind(ValueRef::Integer(query.offset));
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
                     FROM (SELECT TRIM(REPLACE(REPLACE(SUBSTR(m.content, 1, 63), X'0A', ' '), X'0D', ' '), ",
                );
                self.push(PYTHON_WHITESPACE);
                self.push(") AS p FROM messages m WHERE m.session_id = ");
                self.column(alias, "id");
                self.push(
                    " AND m.role = 'user' AND m.content IS NOT NULL ORDER BY m.timestamp, m.id LIMIT 1)), '')",
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
            Term::Derived(Derived::DelegateFrom) => {
                self.marker(Some(alias), "_delegate_from");
            }
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
                self.chain_or(alias, "LOWER(group_concat(c.id, char(31)))");
                self.push("LOWER(");
                self.column(alias, "id");
                self.push(") END");
            }
            Term::Derived(Derived::ChainTitles) => {
                self.chain_or(
                    alias,
                    "LOWER(group_concat(COALESCE(c.title, ''), char(31)))",
                );
                self.push("LOWER(COALESCE(");
                self.column(alias, "title");
                self.push(", '')) END");
            }
            Term::Derived(Derived::ChainTitlesCompact) => {
                self.chain_or(
                    alias,
                    "REPLACE(REPLACE(REPLACE(REPLACE(LOWER(group_concat(COALESCE(c.title, ''), \
                     char(31))), '-', ''), '_', ''), '.', ''), ' ', '')",
                );
                self.push("REPLACE(REPLACE(REPLACE(REPLACE(LOWER(COALESCE(");
                self.column(alias, "title");
                self.push(", '')), '-', ''), '_', ''), '.', ''), ' ', '') END");
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
        }
    }

    /// `key` of a session's `model_config` JSON (NULL when it is not JSON): of the query's
    /// session `alias`, or of the chain walk's session `k` with None.
    fn marker(&mut self, alias: Option<usize>, key: &'static str) {
        self.push("CASE WHEN json_valid(");
        self.model_config(alias);
        self.push(") THEN json_extract(");
        self.model_config(alias);
        self.push(", '$.");
        self.push(key);
        self.push("') END");
    }

    fn model_config(&mut self, alias: Option<usize>) {
        match alias {
            Some(alias) => self.column(alias, "model_config"),
            None => self.push("k.\"model_config\""),
        }
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

    /// `aggregate` over the sessions (as `c`) of the compression chain that
    /// starts at the row: it and, recursively, each child of a session that
    /// ended `compression` that is no branch, delegate run or tool session.
    /// `UNION` ends a chain that loops.
    fn chain(&mut self, alias: usize, aggregate: &'static str) {
        self.push("(WITH RECURSIVE ch(id) AS (SELECT ");
        self.column(alias, "id");
        self.push(
            " UNION SELECT k.id FROM ch JOIN sessions p ON p.id = ch.id \
             JOIN sessions k ON k.parent_session_id = ch.id \
             WHERE p.end_reason = 'compression' AND ",
        );
        self.marker(None, "_branched_from");
        self.push(" IS NULL AND ");
        self.marker(None, "_delegate_from");
        self.push(" IS NULL AND COALESCE(k.source, '') != 'tool') SELECT ");
        self.push(aggregate);
        self.push(" FROM ch JOIN sessions c ON c.id = ch.id)");
    }

    fn filter(&mut self, alias: usize, filter: &'v Filter) {
        match filter {
            Filter::All => self.push("1"),
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
                self.bind(value.as_ref());
            }
            Filter::In(_, values) if values.is_empty() => self.push("0"),
            Filter::In(term, values) => {
                self.term(alias, term);
                self.push(" IN (");
                for (n, value) in values.iter().enumerate() {
                    self.comma(n);
                    self.bind(value.as_ref());
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
                self.push(" LIKE ");
                self.bind(ValueRef::Text(pattern.as_bytes()));
                self.push(" ESCAPE '\\'");
            }
            Filter::Glob(term, pattern) => {
                self.term(alias, term);
                self.push(" GLOB ");
                self.bind(ValueRef::Text(pattern.as_bytes()));
            }
            Filter::And(all) if all.is_empty() => self.push("1"),
            Filter::Or(all) if all.is_empty() => self.push("0"),
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
                    self.filter(alias, inner);
                }
                self.push(")");
            }
            Filter::Not(inner) => {
                self.push("NOT (");
                self.filter(alias, inner);
                self.push(")");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{NoMatch, Order};

    #[test]
    fn a_query_becomes_one_statement_with_its_values_in_order() {
        let query = Query {
            relation: Relation::Sessions,
            select: vec![
                Term::Column("id".into()),
                Term::Derived(Derived::LastActive),
            ],
            filter: Filter::And(vec![
                Filter::eq("source", "cli"),
                Filter::Not(Box::new(Filter::IsNull(Term::Column("ended_at".into())))),
                Filter::In(Term::Column("id".into()), vec![]),
            ]),
            order: vec![Order {
                term: Term::Column("started_at".into()),
                descending: true,
            }],
            limit: Some(10),
            offset: 20,
        };
        let sql = Sql::select(&query);
        assert!(
            sql.text.starts_with("SELECT t0.\"id\", COALESCE("),
            "{}",
            sql.text
        );
        assert!(
            sql.text.ends_with(
                "FROM sessions AS t0 WHERE (t0.\"source\" = ? AND NOT (t0.\"ended_at\" IS NULL) \
                 AND 0) ORDER BY t0.\"started_at\" DESC LIMIT ? OFFSET ?"
            ),
            "{}",
            sql.text
        );
        assert_eq!(
            sql.params,
            vec![
                ValueRef::Text(b"cli"),
                ValueRef::Integer(10),
                ValueRef::Integer(20)
            ]
        );
    }

    #[test]
    fn upserts_name_the_key_as_their_conflict_target() {
        let insert = |on_conflict| Insert {
            relation: Relation::GatewayRouting,
            values: vec![
                ("scope".into(), Value::from("")),
                ("session_key".into(), Value::from("k")),
                ("entry_json".into(), Value::from("{}")),
            ],
            on_conflict,
        };
        let text = |on_conflict| Sql::insert(&insert(on_conflict)).text;
        assert_eq!(
            text(OnConflict::Fail),
            "INSERT INTO gateway_routing (\"scope\", \"session_key\", \"entry_json\") VALUES (?, ?, ?)"
        );
        assert!(text(OnConflict::Ignore)
            .ends_with(" ON CONFLICT (\"scope\", \"session_key\") DO NOTHING"));
        assert!(text(OnConflict::Replace)
            .ends_with("DO UPDATE SET \"entry_json\" = excluded.\"entry_json\""));
        assert!(text(OnConflict::FillNulls).ends_with(
            "DO UPDATE SET \"entry_json\" = COALESCE(gateway_routing.\"entry_json\", excluded.\"entry_json\")"
        ));
    }

    #[test]
    fn updates_assign_values_and_increments_and_quote_every_name() {
        let update = Update {
            relation: Relation::Sessions,
            filter: Filter::eq("id", "s"),
            set: vec![
                ("title".into(), Assign::Value(Value::Null)),
                ("odd\"name".into(), Assign::Add(Value::Integer(2))),
            ],
            must_match: Some(NoMatch::Rows),
        };
        let sql = Sql::update(&update, Some("id"));
        assert_eq!(
            sql.text,
            "UPDATE sessions AS t0 SET \"title\" = ?, \"odd\"\"name\" = COALESCE(\"odd\"\"name\", 0) + ? \
             WHERE t0.\"id\" = ? RETURNING id"
        );
        assert_eq!(
            sql.params,
            vec![ValueRef::Null, ValueRef::Integer(2), ValueRef::Text(b"s")]
        );
    }
}
