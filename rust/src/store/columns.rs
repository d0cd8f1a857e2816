//! The columns each relation has in the open store, and the check every
//! named column of a typed operation passes before a backend writes SQL
//! with it. A file written by a newer hermes-agent may have more columns
//! than ours: they are read from the store when it opens.

use super::{Location, Relation};
use crate::error::{Error, Result};

/// What a column is named for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Read, filtered or ordered on.
    Read,
    /// Given a value by an insert: the key may be, maintained columns not.
    Insert,
    /// Set by an update: neither the key nor maintained columns.
    Set,
    /// Given by an import, which copies a row whole: any column.
    Import,
}

#[derive(Debug, Clone)]
pub struct Columns {
    at: Location,
    /// Indexed by [`Relation::index`].
    names: Vec<Vec<String>>,
}

impl Columns {
    /// `names(relation)` lists a relation's columns in the store at `at`.
    pub fn read<E>(
        at: &Location,
        mut names: impl FnMut(Relation) -> std::result::Result<Vec<String>, E>,
    ) -> std::result::Result<Self, E> {
        let names = Relation::ALL
            .iter()
            .map(|&r| names(r))
            .collect::<std::result::Result<_, E>>()?;
        Ok(Columns {
            at: at.clone(),
            names,
        })
    }

    pub fn of(&self, relation: Relation) -> &[String] {
        &self.names[relation.index()]
    }

    /// `name`, if `relation` has that column and it may be used so.
    pub fn check<'n>(&self, relation: Relation, name: &'n str, use_: Use) -> Result<&'n str> {
        let key = relation.key().contains(&name);
        if matches!(use_, Use::Insert | Use::Set) && relation.maintained().contains(&name) {
            return Err(Error::Config(format!(
                "{}: {relation}.{name} is managed by hermes (the counters move with the rows \
                 written, a message belongs to the session it was appended to) and cannot be \
                 set directly",
                self.at
            )));
        }
        if use_ == Use::Set && key {
            return Err(Error::Config(format!(
                "{}: {relation}.{name} is the key of its row and cannot be set directly; \
                 insert a new row instead",
                self.at
            )));
        }
        if self.of(relation).iter().any(|c| c == name) {
            Ok(name)
        } else {
            Err(Error::Config(format!(
                "{}: {relation} has no column {name:?}; valid columns: {}",
                self.at,
                self.of(relation).join(", ")
            )))
        }
    }

    /// Checks every name of one write's columns, each used once.
    pub fn check_all<'n>(
        &self,
        relation: Relation,
        names: impl IntoIterator<Item = &'n str>,
        use_: Use,
    ) -> Result<()> {
        let mut seen: Vec<&str> = Vec::new();
        for name in names {
            self.check(relation, name, use_)?;
            if seen.contains(&name) {
                return Err(Error::Config(format!(
                    "{}: {relation}.{name} is given twice in one write",
                    self.at
                )));
            }
            seen.push(name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::columns;
    use super::*;

    #[test]
    fn a_column_is_checked_for_what_it_is_named_for() {
        let c = columns();
        assert_eq!(
            c.check(Relation::Sessions, "title", Use::Set).unwrap(),
            "title"
        );
        assert!(c.check(Relation::Sessions, "id", Use::Insert).is_ok());
        assert!(c
            .check(Relation::Sessions, "message_count", Use::Read)
            .is_ok());
        let err = |relation, name, use_| c.check(relation, name, use_).unwrap_err().to_string();
        let managed = err(Relation::Sessions, "message_count", Use::Set);
        assert!(
            managed.starts_with("/data/state.db: sessions.message_count is managed"),
            "{managed}"
        );
        assert!(err(Relation::Sessions, "message_count", Use::Insert).contains("managed"));
        assert!(err(Relation::Messages, "session_id", Use::Set).contains("managed"));
        assert!(err(Relation::Sessions, "id", Use::Set).contains("key of its row"));
        let unknown = err(Relation::Sessions, "no_such_column", Use::Read);
        assert!(
            unknown
                .contains("sessions has no column \"no_such_column\"; valid columns: id, source"),
            "{unknown}"
        );
    }

    #[test]
    fn a_column_given_twice_is_refused() {
        let c = columns();
        assert!(c
            .check_all(Relation::StateMeta, ["key", "value"], Use::Insert)
            .is_ok());
        let err = c
            .check_all(Relation::StateMeta, ["key", "value", "key"], Use::Insert)
            .unwrap_err();
        assert!(
            err.to_string().contains("state_meta.key is given twice"),
            "{err}"
        );
    }
}
