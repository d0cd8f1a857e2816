//! Rows copied from one store into another as the first holds them
//! (`hermes migrate`), a page at a time: read in key order after the last
//! key copied, written into the other by one [`Import`]. Whoever drives the
//! copy keeps the last key and hands it back for the next page.

use super::{Backend, Cmp, Filter, Import, Order, Query, Relation, Term, WriteOp};
use crate::error::{Error, Result};
use crate::model::{Value, ValueRef};

/// What one page did.
#[derive(Debug, Clone, PartialEq)]
pub struct Copied {
    /// Rows read from the source (fewer than the page's limit: the last page).
    pub read: usize,
    /// Rows the target did not have, now written.
    pub written: u64,
    /// The key of the last row read: the next page starts after it.
    pub last_key: Option<Vec<Value>>,
}

/// Copies up to `limit` rows of `relation` (those `filter` matches, with a
/// key after `after`) from `source` into `target`: the `columns` named, in
/// one transaction of the target.
pub fn copy_page(
    source: &dyn Backend,
    target: &dyn Backend,
    relation: Relation,
    columns: &[String],
    filter: &Filter,
    after: Option<&[Value]>,
    limit: i64,
) -> Result<Copied> {
    let key = relation.key();
    let key_at = key
        .iter()
        .map(|k| {
            columns.iter().position(|c| c == k).ok_or_else(|| {
                Error::Config(format!(
                    "a copy of {relation} names the column {k:?}: it identifies the row"
                ))
            })
        })
        .collect::<Result<Vec<usize>>>()?;
    let mut wanted = vec![filter.clone()];
    if let Some(after) = after {
        wanted.push(after_key(key, after)?);
    }
    let query = Query {
        relation,
        select: columns.iter().map(|c| Term::Column(c.clone())).collect(),
        filter: Filter::And(wanted),
        order: key
            .iter()
            .map(|k| Order {
                term: Term::Column((*k).to_owned()),
                descending: false,
            })
            .collect(),
        limit: Some(limit),
        offset: 0,
    };
    let table = source.query(&query)?;
    let mut rows = Vec::with_capacity(table.row_count());
    for row in table.rows() {
        let values = (0..columns.len())
            .map(|i| owned(row.get(i)))
            .collect::<Option<Vec<Value>>>();
        let Some(values) = values else {
            let key: Vec<String> = key_at.iter().map(|&i| shown(row.get(i))).collect();
            return Err(Error::Config(format!(
                "{}: the {relation} row with key {} holds text that is not UTF-8, which the \
                 copy cannot carry unchanged; nothing of this page was copied. Correct or \
                 delete that row in the source, then run the copy again",
                source.location(),
                key.join(", ")
            )));
        };
        rows.push(values);
    }
    let last_key = rows
        .last()
        .map(|row| key_at.iter().map(|&i| row[i].clone()).collect());
    let read = rows.len();
    if read == 0 {
        return Ok(Copied {
            read,
            written: 0,
            last_key,
        });
    }
    let import = Import {
        relation,
        columns: columns.to_vec(),
        rows,
    };
    let written = target.write(WriteOp::Import(import))?.rows();
    Ok(Copied {
        read,
        written,
        last_key,
    })
}

/// The rows whose key (`key`, compared column by column) comes after `after`.
fn after_key(key: &[&str], after: &[Value]) -> Result<Filter> {
    if after.len() != key.len() {
        return Err(Error::Config(format!(
            "a copy resumes after a key of {} values ({}), not {}",
            key.len(),
            key.join(", "),
            after.len()
        )));
    }
    let column = |k: &str| Term::Column(k.to_owned());
    Ok(Filter::Or(
        (0..key.len())
            .map(|n| {
                let mut tests: Vec<Filter> = (0..n)
                    .map(|i| Filter::Compare(column(key[i]), Cmp::Eq, after[i].clone()))
                    .collect();
                tests.push(Filter::Compare(column(key[n]), Cmp::Gt, after[n].clone()));
                Filter::And(tests)
            })
            .collect(),
    ))
}

/// A key cell as a person reads it.
fn shown(cell: ValueRef<'_>) -> String {
    match cell {
        ValueRef::Null => "NULL".to_owned(),
        ValueRef::Integer(n) => n.to_string(),
        ValueRef::Real(x) => x.to_string(),
        ValueRef::Text(t) | ValueRef::Blob(t) => format!("{:?}", String::from_utf8_lossy(t)),
    }
}

/// A read cell as a value to write; None for text that is not UTF-8.
fn owned(cell: ValueRef<'_>) -> Option<Value> {
    Some(match cell {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::Integer(n),
        ValueRef::Real(x) => Value::Real(x),
        ValueRef::Text(t) => Value::Text(String::from_utf8(t.to_vec()).ok()?),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    })
}
