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
    Assign, Cmp, Delete, Derived, Filter, Insert, OnConflict, Query, Relation, Term, Update,
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

/// `name` as a quoted SQL identifier.
pub fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// SQL text and the values it binds.
#[derive(Debug, Default)]
pub struct Sql<'v> {
    pub text: String,
    pub params: Vec<ValueRef<'v>>,
    /// Queries opened so far: each gets its own table alias (`t0`, `t1`...).
    aliases: usize,
}

impl<'v> Sql<'v> {
    /// The rows of `query`.
    pub fn select(query: &'v Query) -> Self {
        let mut sql = Sql::default();
        sql.query(query);
        sql
    }

    /// How many rows of `relation` match `filter`.
    pub fn count(relation: Relation, filter: &'v Filter) -> Self {
        let mut sql = Sql::default();
        let alias = sql.alias();
        sql.text = format!("SELECT COUNT(*) FROM {} AS {alias} WHERE ", relation.name());
        sql.filter(&alias, filter);
        sql
    }

    pub fn insert(insert: &'v Insert) -> Self {
        let table = insert.relation.name();
        let names: Vec<String> = insert.values.iter().map(|(c, _)| quote(c)).collect();
        let mut sql = Sql {
            text: format!(
                "INSERT INTO {table} ({}) VALUES ({})",
                names.join(", "),
                vec!["?"; names.len()].join(", ")
            ),
            params: insert.values.iter().map(|(_, v)| v.as_ref()).collect(),
            aliases: 0,
        };
        let key = insert.relation.key();
        let others: Vec<&String> = insert
            .values
            .iter()
            .map(|(c, _)| c)
            .filter(|c| !key.contains(&c.as_str()))
            .collect();
        let target: Vec<String> = key.iter().map(|c| quote(c)).collect();
        let target = target.join(", ");
        let set = |each: &dyn Fn(&str) -> String| -> String {
            others
                .iter()
                .map(|c| each(&quote(c)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match insert.on_conflict {
            OnConflict::Fail => {}
            OnConflict::Ignore => {
                sql.text += &format!(" ON CONFLICT ({target}) DO NOTHING");
            }
            _ if others.is_empty() => {
                sql.text += &format!(" ON CONFLICT ({target}) DO NOTHING");
            }
            OnConflict::Replace => {
                let set = set(&|c| format!("{c} = excluded.{c}"));
                sql.text += &format!(" ON CONFLICT ({target}) DO UPDATE SET {set}");
            }
            OnConflict::FillNulls => {
                let set = set(&|c| format!("{c} = COALESCE({table}.{c}, excluded.{c})"));
                sql.text += &format!(" ON CONFLICT ({target}) DO UPDATE SET {set}");
            }
        }
        sql
    }

    /// The update, returning `returning` of each changed row (if given).
    pub fn update(update: &'v Update, returning: Option<&str>) -> Self {
        let mut sql = Sql::default();
        let alias = sql.alias();
        sql.text = format!("UPDATE {} AS {alias} SET ", update.relation.name());
        for (n, (column, assign)) in update.set.iter().enumerate() {
            if n > 0 {
                sql.text.push_str(", ");
            }
            let column = quote(column);
            match assign {
                Assign::Value(value) => {
                    sql.text += &format!("{column} = ");
                    sql.bind(value.as_ref());
                }
                Assign::Add(n) => {
                    sql.text += &format!("{column} = COALESCE({column}, 0) + ");
                    sql.bind(ValueRef::Integer(*n));
                }
            }
        }
        sql.text.push_str(" WHERE ");
        sql.filter(&alias, &update.filter);
        sql.returning(returning);
        sql
    }

    /// The delete, returning `returning` of each deleted row (if given).
    pub fn delete(delete: &'v Delete, returning: Option<&str>) -> Self {
        let mut sql = Sql::default();
        let alias = sql.alias();
        sql.text = format!("DELETE FROM {} AS {alias} WHERE ", delete.relation.name());
        sql.filter(&alias, &delete.filter);
        sql.returning(returning);
        sql
    }

    fn returning(&mut self, returning: Option<&str>) {
        if let Some(columns) = returning {
            self.text += &format!(" RETURNING {columns}");
        }
    }

    fn alias(&mut self) -> String {
        self.aliases += 1;
        format!("t{}", self.aliases - 1)
    }

    fn bind(&mut self, value: ValueRef<'v>) {
        self.text.push('?');
        self.params.push(value);
    }

    fn query(&mut self, query: &'v Query) {
        let alias = self.alias();
        self.text.push_str("SELECT ");
        if query.select.is_empty() {
            self.text += &format!("{alias}.*");
        }
        for (n, term) in query.select.iter().enumerate() {
            if n > 0 {
                self.text.push_str(", ");
            }
            self.term(&alias, term);
            if let Term::Derived(d) = term {
                self.text += &format!(" AS {}", quote(d.name()));
            }
        }
        self.text += &format!(" FROM {} AS {alias} WHERE ", query.relation.name());
        self.filter(&alias, &query.filter);
        for (n, order) in query.order.iter().enumerate() {
            self.text.push_str(if n == 0 { " ORDER BY " } else { ", " });
            self.term(&alias, &order.term);
            self.text
                .push_str(if order.descending { " DESC" } else { " ASC" });
        }
        if query.limit.is_some() || query.offset > 0 {
            self.text.push_str(" LIMIT ");
            self.bind(ValueRef::Integer(query.limit.unwrap_or(-1)));
            self.text.push_str(" OFFSET ");
            self.bind(ValueRef::Integer(query.offset));
        }
    }

    fn term(&mut self, alias: &str, term: &Term) {
        match term {
            Term::Column(name) => self.text += &format!("{alias}.{}", quote(name)),
            Term::Derived(Derived::Preview) => {
                self.text += &format!(
                    "COALESCE((SELECT SUBSTR(REPLACE(REPLACE(m.content, X'0A', ' '), X'0D', ' '), 1, 63)
                     FROM messages m WHERE m.session_id = {alias}.id AND m.role = 'user'
                     AND m.content IS NOT NULL ORDER BY m.id LIMIT 1), '')"
                )
            }
            Term::Derived(Derived::LastActive) => {
                self.text += &format!(
                    "COALESCE((SELECT MAX(m.timestamp) FROM messages m
                     WHERE m.session_id = {alias}.id), {alias}.started_at)"
                )
            }
        }
    }

    fn filter(&mut self, alias: &str, filter: &'v Filter) {
        match filter {
            Filter::All => self.text.push('1'),
            Filter::Compare(term, cmp, value) => {
                self.term(alias, term);
                self.text.push_str(match cmp {
                    Cmp::Eq => " = ",
                    Cmp::Ne => " != ",
                    Cmp::Lt => " < ",
                    Cmp::Le => " <= ",
                    Cmp::Gt => " > ",
                    Cmp::Ge => " >= ",
                });
                self.bind(value.as_ref());
            }
            Filter::In(_, values) if values.is_empty() => self.text.push('0'),
            Filter::In(term, values) => {
                self.term(alias, term);
                self.text.push_str(" IN (");
                for (n, value) in values.iter().enumerate() {
                    if n > 0 {
                        self.text.push_str(", ");
                    }
                    self.bind(value.as_ref());
                }
                self.text.push(')');
            }
            Filter::InQuery(term, query) => {
                self.term(alias, term);
                self.text.push_str(" IN (");
                self.query(query);
                self.text.push(')');
            }
            Filter::IsNull(term) => {
                self.term(alias, term);
                self.text.push_str(" IS NULL");
            }
            Filter::Like(term, pattern) => {
                self.term(alias, term);
                self.text.push_str(" LIKE ");
                self.bind(ValueRef::Text(pattern.as_bytes()));
                self.text.push_str(" ESCAPE '\\'");
            }
            Filter::Glob(term, pattern) => {
                self.term(alias, term);
                self.text.push_str(" GLOB ");
                self.bind(ValueRef::Text(pattern.as_bytes()));
            }
            Filter::And(all) | Filter::Or(all) if all.is_empty() => {
                self.text.push(if matches!(filter, Filter::And(_)) {
                    '1'
                } else {
                    '0'
                })
            }
            Filter::And(all) | Filter::Or(all) => {
                let joint = if matches!(filter, Filter::And(_)) {
                    " AND "
                } else {
                    " OR "
                };
                self.text.push('(');
                for (n, inner) in all.iter().enumerate() {
                    if n > 0 {
                        self.text.push_str(joint);
                    }
                    self.filter(alias, inner);
                }
                self.text.push(')');
            }
            Filter::Not(inner) => {
                self.text.push_str("NOT (");
                self.filter(alias, inner);
                self.text.push(')');
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
                ("odd\"name".into(), Assign::Add(2)),
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
