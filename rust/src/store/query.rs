//! Typed reads: which rows of a relation (a [`Filter`] tree on named
//! columns), which columns and derived values, in what order, which page.
//! Each backend translates them into its own SQL; the checks here run first,
//! once for every backend.

use super::columns::{Columns, Use};
use super::Relation;
use crate::error::{Error, Result};
use crate::model::Value;

/// A value computed from other rows, where a plain column is not enough.
/// A closed set: each backend implements each one once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derived {
    /// A session's first user message (by timestamp, then id) with content, as a
    /// listing shows it: its first 63 characters, line breaks as spaces, without
    /// the white space around it (Python's `str.strip()`), cut to 60 characters
    /// and `...` when longer; `''` when there is none.
    Preview,
    /// A session's latest message timestamp, or its `started_at` without one.
    LastActive,
    /// 1 for a session a picker lists, else 0: a root or a branch (its
    /// `model_config` has `_branched_from`, or its parent ended `branched`
    /// before it started), never a delegate run (`_delegate_from`).
    Listed,
    /// The parent id in `model_config._delegate_from` (NULL when none, or
    /// when `model_config` is not JSON).
    DelegateFrom,
    /// The latest `last_active` along the session's compression chain (it
    /// and its continuations: children of a parent that ended `compression`,
    /// not branches, delegate runs or tool sessions).
    ChainLastActive,
    /// The ids along the compression chain, lower-cased, separated by U+001F.
    ChainIds,
    /// The titles along the compression chain, lower-cased, separated by U+001F.
    ChainTitles,
    /// The same titles without `-`, `_`, `.` and spaces (`an94` finds `AN-94`).
    ChainTitlesCompact,
    /// `input_tokens + output_tokens`, NULL as 0.
    TotalTokens,
    /// `actual_cost_usd`, else `estimated_cost_usd`, else 0.
    CostUsd,
}

impl Derived {
    pub const ALL: [Derived; 10] = [
        Derived::Preview,
        Derived::LastActive,
        Derived::Listed,
        Derived::DelegateFrom,
        Derived::ChainLastActive,
        Derived::ChainIds,
        Derived::ChainTitles,
        Derived::ChainTitlesCompact,
        Derived::TotalTokens,
        Derived::CostUsd,
    ];

    /// Its name in a query (and the column name of its result).
    pub fn name(self) -> &'static str {
        match self {
            Derived::Preview => "preview",
            Derived::LastActive => "last_active",
            Derived::Listed => "listed",
            Derived::DelegateFrom => "delegate_from",
            Derived::ChainLastActive => "chain_last_active",
            Derived::ChainIds => "chain_ids",
            Derived::ChainTitles => "chain_titles",
            Derived::ChainTitlesCompact => "chain_titles_compact",
            Derived::TotalTokens => "total_tokens",
            Derived::CostUsd => "cost_usd",
        }
    }

    /// The relation whose rows it is computed for.
    pub fn relation(self) -> Relation {
        Relation::Sessions
    }
}

/// What a filter, an ordering or a selection names.
#[derive(Debug, Clone, PartialEq)]
pub enum Term {
    Column(String),
    Derived(Derived),
}

impl Term {
    /// `name` in `relation`: one of its derived values if one has that name,
    /// its column otherwise (checked later, against the open store).
    pub fn named(relation: Relation, name: &str) -> Term {
        Derived::ALL
            .into_iter()
            .find(|d| d.relation() == relation && d.name() == name)
            .map_or_else(|| Term::Column(name.to_owned()), Term::Derived)
    }

    fn check(&self, relation: Relation, columns: &Columns) -> Result<()> {
        match self {
            Term::Column(name) => columns.check(relation, name, Use::Read).map(drop),
            Term::Derived(d) if d.relation() == relation => Ok(()),
            Term::Derived(d) => Err(Error::Config(format!(
                "{} is a derived value of {}, not of {relation}",
                d.name(),
                d.relation()
            ))),
        }
    }
}

impl std::fmt::Display for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Term::Column(name) => f.write_str(name),
            Term::Derived(d) => f.write_str(d.name()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Which rows: a tree of tests on named columns.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// Every row.
    All,
    /// Compares with a value that is not NULL (test NULL with `IsNull`).
    Compare(Term, Cmp, Value),
    /// Equal to one of the values (none: no row).
    In(Term, Vec<Value>),
    /// Equal to a value of the one selected column of another query.
    InQuery(Term, Box<Query>),
    IsNull(Term),
    /// SQL `LIKE`: `%` any run, `_` one character, `\` escapes; ASCII
    /// letters match either case.
    Like(Term, String),
    /// `*` any run, `?` one character, `[...]` a class; case-sensitive.
    Glob(Term, String),
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
}

impl Filter {
    /// `column = value`.
    pub fn eq(column: &str, value: impl Into<Value>) -> Filter {
        Filter::Compare(Term::Column(column.to_owned()), Cmp::Eq, value.into())
    }

    /// Checks every name against `relation`'s columns in the open store.
    pub fn check(&self, relation: Relation, columns: &Columns) -> Result<()> {
        match self {
            Filter::All => Ok(()),
            Filter::Compare(term, _, value) => {
                term.check(relation, columns)?;
                if *value == Value::Null {
                    return Err(Error::Config(format!(
                        "a comparison of {term} with NULL matches no row; test it with IsNull instead"
                    )));
                }
                Ok(())
            }
            Filter::In(term, _)
            | Filter::IsNull(term)
            | Filter::Like(term, _)
            | Filter::Glob(term, _) => term.check(relation, columns),
            Filter::InQuery(term, query) => {
                term.check(relation, columns)?;
                if query.select.len() != 1 {
                    return Err(Error::Config(format!(
                        "a query inside a filter selects exactly one column (of {}), not {}",
                        query.relation,
                        query.select.len()
                    )));
                }
                query.check(columns)
            }
            Filter::And(all) | Filter::Or(all) => {
                all.iter().try_for_each(|f| f.check(relation, columns))
            }
            Filter::Not(inner) => inner.check(relation, columns),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Order {
    pub term: Term,
    pub descending: bool,
}

/// Rows of one relation.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub relation: Relation,
    /// What each row holds, in this order; empty: every column.
    pub select: Vec<Term>,
    pub filter: Filter,
    /// Ties keep no particular order: name a unique column last to page.
    pub order: Vec<Order>,
    pub limit: Option<i64>,
    pub offset: i64,
}

impl Query {
    /// Every column of every row of `relation`, in no particular order.
    pub fn all(relation: Relation) -> Self {
        Query {
            relation,
            select: Vec::new(),
            filter: Filter::All,
            order: Vec::new(),
            limit: None,
            offset: 0,
        }
    }

    pub fn check(&self, columns: &Columns) -> Result<()> {
        for term in self.select.iter().chain(self.order.iter().map(|o| &o.term)) {
            term.check(self.relation, columns)?;
        }
        self.filter.check(self.relation, columns)?;
        if self.limit.is_some_and(|n| n < 0) || self.offset < 0 {
            return Err(Error::Config(format!(
                "limit ({:?}) and offset ({}) must not be negative",
                self.limit, self.offset
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::columns;
    use super::*;

    #[test]
    fn derived_values_are_found_by_name_for_their_relation_only() {
        assert_eq!(
            Term::named(Relation::Sessions, "preview"),
            Term::Derived(Derived::Preview)
        );
        assert_eq!(
            Term::named(Relation::Messages, "preview"),
            Term::Column("preview".into())
        );
        let c = columns();
        let wrong = Term::Derived(Derived::LastActive).check(Relation::Messages, &c);
        assert!(wrong.unwrap_err().to_string().contains("not of messages"));
    }

    #[test]
    fn every_name_of_a_query_is_checked_down_the_filter_tree() {
        let c = columns();
        let mut q = Query::all(Relation::Sessions);
        q.filter = Filter::And(vec![
            Filter::eq("source", "cli"),
            Filter::Not(Box::new(Filter::IsNull(Term::Column("nope".into())))),
        ]);
        assert!(q
            .check(&c)
            .unwrap_err()
            .to_string()
            .contains("no column \"nope\""));
        q.filter = Filter::eq("source", Value::Null);
        assert!(q.check(&c).unwrap_err().to_string().contains("IsNull"));
        let mut inner = Query::all(Relation::Messages);
        q.filter = Filter::InQuery(Term::Column("id".into()), Box::new(inner.clone()));
        assert!(q
            .check(&c)
            .unwrap_err()
            .to_string()
            .contains("exactly one column"));
        inner.select = vec![Term::Column("session_id".into())];
        q.filter = Filter::InQuery(Term::Column("id".into()), Box::new(inner));
        assert!(q.check(&c).is_ok());
        q.offset = -1;
        assert!(q.check(&c).is_err());
    }
}
