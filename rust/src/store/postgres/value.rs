//! Values in and out of PostgreSQL: each bound with the type of the column
//! it meets (so NULL and an integer for a `double precision` column bind
//! as the server expects), rows read into [`Table`]s by their column types,
//! and the escape that stores NUL bytes in `text`, which rejects them.
//!
//! The escape (docs/ARCHITECTURE.md, "PostgreSQL"): U+0001 is the escape
//! character; NUL is stored as U+0001 `0` and U+0001 itself as U+0001 `1`.
//! Text with neither is stored as it is, so the `\0json:` content prefix is
//! stored as U+0001 `0json:` and comes back exactly.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::sync::Arc;

use bytes::BytesMut;
use tokio_postgres::types::{IsNull, ToSql, Type};
use tokio_postgres::Row;

use crate::model::{Table, ValueRef};
use crate::store::Relation;

const ESCAPE: char = '\u{1}';

/// `text` as stored: NUL and U+0001 escaped.
pub fn escape_text(text: &str) -> Cow<'_, str> {
    if !text.contains(['\0', ESCAPE]) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\0' => out.push_str("\u{1}0"),
            ESCAPE => out.push_str("\u{1}1"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Stored text as it was written (the inverse of [`escape_text`]; an
/// escape character before anything else is kept).
pub fn unescape_text(stored: &str) -> Cow<'_, str> {
    if !stored.contains(ESCAPE) {
        return Cow::Borrowed(stored);
    }
    let mut out = String::with_capacity(stored.len());
    let mut chars = stored.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            (ESCAPE, Some('0')) => {
                chars.next();
                out.push('\0');
            }
            (ESCAPE, Some('1')) => {
                chars.next();
                out.push(ESCAPE);
            }
            (c, _) => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The type of each column of each relation in the open database.
#[derive(Debug, Clone, Default)]
pub struct Types {
    /// Indexed by [`Relation::index`].
    by_relation: Vec<Vec<(String, Type)>>,
}

impl Types {
    pub fn new(by_relation: Vec<Vec<(String, Type)>>) -> Self {
        Types { by_relation }
    }

    /// The type of `relation.column` (text for a name it does not have,
    /// which the column check refuses before any SQL runs).
    pub fn of(&self, relation: Relation, column: &str) -> Type {
        self.by_relation[relation.index()]
            .iter()
            .find(|(name, _)| name == column)
            .map_or(Type::TEXT, |(_, ty)| ty.clone())
    }
}

/// `value` as a `bigint` column holds it: an integer, a whole real, or
/// decimal text; None for anything else (NULL included).
pub fn integer(value: ValueRef<'_>) -> Option<i64> {
    match value {
        ValueRef::Integer(n) => Some(n),
        ValueRef::Real(x) if x.fract() == 0.0 && x.abs() < 9.0e18 => Some(x as i64),
        ValueRef::Text(t) => std::str::from_utf8(t).ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// `value` as a `double precision` column holds it: a number or decimal
/// text; None for anything else (NULL included).
pub fn real(value: ValueRef<'_>) -> Option<f64> {
    match value {
        ValueRef::Integer(n) => Some(n as f64),
        ValueRef::Real(x) => Some(x),
        ValueRef::Text(t) => std::str::from_utf8(t).ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// A value bound to a parameter of the type its column has.
#[derive(Debug, Clone, Copy)]
pub struct Bound<'v>(pub ValueRef<'v>);

impl ToSql for Bound<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn StdError + Sync + Send>> {
        let refused = || {
            format!(
                "a value {:?} cannot be stored in a column of type {ty}",
                self.0
            )
        };
        match (self.0, ty) {
            (ValueRef::Null, _) => Ok(IsNull::Yes),
            (value, &Type::INT8) => integer(value).ok_or_else(refused)?.to_sql(ty, out),
            (value, &Type::INT4) => {
                i32::try_from(integer(value).ok_or_else(refused)?)?.to_sql(ty, out)
            }
            (value, &Type::FLOAT8) => real(value).ok_or_else(refused)?.to_sql(ty, out),
            (ValueRef::Integer(n), &Type::BOOL) => (n != 0).to_sql(ty, out),
            (ValueRef::Text(t), &Type::TEXT | &Type::VARCHAR | &Type::NAME) => {
                escape_text(std::str::from_utf8(t)?)
                    .as_ref()
                    .to_sql(ty, out)
            }
            (ValueRef::Blob(b), &Type::BYTEA) => b.to_sql(ty, out),
            _ => Err(refused().into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// Rows of one result as a [`Table`] of `columns` (named by the caller:
/// an empty result carries no column names).
pub fn table(rows: &[Row], columns: Arc<[String]>) -> Result<Table, tokio_postgres::Error> {
    let mut table = Table::new(columns);
    for row in rows {
        push_row(&mut table, row)?;
    }
    Ok(table)
}

/// Column names of a comma-separated list.
pub fn names(list: &str) -> Arc<[String]> {
    list.split(',').map(|c| c.trim().to_owned()).collect()
}

/// Appends the cells of `row`, each read by its column's type.
pub fn push_row(table: &mut Table, row: &Row) -> Result<(), tokio_postgres::Error> {
    for (i, column) in row.columns().iter().enumerate() {
        match *column.type_() {
            Type::INT8 => push(
                table,
                row.try_get::<_, Option<i64>>(i)?.map(ValueRef::Integer),
            ),
            Type::INT4 => push(
                table,
                row.try_get::<_, Option<i32>>(i)?
                    .map(|n| ValueRef::Integer(n.into())),
            ),
            Type::INT2 => push(
                table,
                row.try_get::<_, Option<i16>>(i)?
                    .map(|n| ValueRef::Integer(n.into())),
            ),
            Type::BOOL => push(
                table,
                row.try_get::<_, Option<bool>>(i)?
                    .map(|b| ValueRef::Integer(b.into())),
            ),
            Type::FLOAT8 => push(table, row.try_get::<_, Option<f64>>(i)?.map(ValueRef::Real)),
            Type::FLOAT4 => push(
                table,
                row.try_get::<_, Option<f32>>(i)?
                    .map(|x| ValueRef::Real(x.into())),
            ),
            Type::BYTEA => push(
                table,
                row.try_get::<_, Option<&[u8]>>(i)?.map(ValueRef::Blob),
            ),
            _ => match row.try_get::<_, Option<&str>>(i)? {
                None => table.push(ValueRef::Null),
                Some(text) => table.push(ValueRef::Text(unescape_text(text).as_bytes())),
            },
        }
    }
    Ok(())
}

fn push(table: &mut Table, value: Option<ValueRef<'_>>) {
    table.push(value.unwrap_or(ValueRef::Null));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_and_the_escape_character_round_trip_and_plain_text_is_untouched() {
        for text in [
            "plain",
            "\0json:[{\"type\":\"text\"}]",
            "a\0b\u{1}c\u{1}0",
            "\u{1}",
            "",
        ] {
            let stored = escape_text(text);
            assert!(!stored.contains('\0'), "{stored:?}");
            assert_eq!(unescape_text(&stored), text);
        }
        assert!(matches!(escape_text("plain"), Cow::Borrowed(_)));
        assert_eq!(escape_text("\0json:"), "\u{1}0json:");
    }
}
