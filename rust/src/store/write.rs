//! Typed writes: what a caller asks to change, which each backend
//! translates into its own SQL inside a group-committed transaction.
//!
//! `Append` is the hot path (a flush); `Insert`, `Update` and `Delete` name
//! a relation and its columns, checked against the open store; a
//! `Transaction` runs several writes all or none. Two rules hold for every
//! backend: messages are inserted only by `Append`, which moves the
//! session's counters in the same transaction, and an update or delete of
//! messages recounts the `message_count` of every session it touched (so it
//! stays the number of active rows) and keeps the search index in step.
//! `Import` is the one way rows enter as another store holds them
//! (`hermes migrate`): every column given, and the same two rules kept.

use super::columns::{Columns, Use};
use super::query::Filter;
use super::Relation;
use crate::error::{Error, Result};
use crate::model::{NewMessage, Value};

/// One write, executed inside a transaction that may carry other callers'
/// writes too (group commit). Each write succeeds or fails on its own.
#[derive(Debug, Clone)]
pub enum WriteOp {
    /// Insert messages in order and move the session's counters with them.
    /// With `once_key`, the write happens at most once per key (recorded in
    /// `state_meta`); a repeat returns no ids.
    Append {
        session_id: String,
        rows: Vec<NewMessage>,
        once_key: Option<String>,
    },
    Insert(Insert),
    Update(Update),
    Delete(Delete),
    /// Several writes in order, all or none: one failing fails them all.
    Transaction(Vec<WriteOp>),
    /// Upkeep of every search index the store has; returns how many
    /// (`WriteOut::Rows`).
    SearchIndex(IndexUpkeep),
    /// Rows copied from another store as that store holds them.
    Import(Import),
}

/// What is done to the search indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexUpkeep {
    /// Merges each index into one segment: smaller and faster, same results.
    Optimize,
    /// Indexes every message afresh, from the messages themselves (the
    /// recovery for a damaged index).
    Rebuild,
}

/// One row of named columns. Its key columns decide what it conflicts with.
#[derive(Debug, Clone)]
pub struct Insert {
    pub relation: Relation,
    pub values: Vec<(String, Value)>,
    pub on_conflict: OnConflict,
}

/// What an insert does to a row with the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// Fails the write.
    Fail,
    /// Leaves the row as it is; nothing is inserted.
    Ignore,
    /// Sets the row's given columns to the new values.
    Replace,
    /// Sets only the given columns that are still NULL in the row, so a
    /// bare row and a richer one for the same key merge.
    FillNulls,
}

#[derive(Debug, Clone)]
pub struct Update {
    pub relation: Relation,
    pub filter: Filter,
    pub set: Vec<(String, Assign)>,
    /// When no row matches: fail with this error instead of changing nothing.
    pub must_match: Option<NoMatch>,
}

/// A column's new value.
#[derive(Debug, Clone, PartialEq)]
pub enum Assign {
    Value(Value),
    /// Its current value (NULL counts as 0) plus this number (an integer or a real).
    Add(Value),
    /// Its current value, or this one where it is NULL (the first writer wins).
    FillNull(Value),
}

/// The error of an update that required a row and matched none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoMatch {
    /// [`crate::error::Error::SessionNotFound`] for this id.
    Session(String),
    /// [`crate::error::Error::NoMatch`].
    Rows,
}

#[derive(Debug, Clone)]
pub struct Delete {
    pub relation: Relation,
    pub filter: Filter,
}

/// Rows of one relation copied from another store as they are there: every
/// column named, the key and the columns the store maintains included.
///
/// A row whose key the store has already is left as it is, so importing the
/// same rows again writes nothing. What every backend keeps besides:
/// * messages keep their ids; each must belong to a session the store has,
///   and a message id the store has already must be the same message (the
///   same session), or the whole write fails, naming both;
/// * a session's `message_count` is recounted from its active rows after
///   the rows of either relation arrive (`tool_call_count` is taken as it
///   is, a running total no row holds);
/// * a session's `parent_session_id` is written once the parent is in the
///   store (NULL until then): an import of the same sessions after their
///   parents arrived links them;
/// * imported messages are searchable, as appended ones are.
///
/// Returns the imported message ids (`WriteOut::Ids`) or how many rows of
/// another relation were imported (`WriteOut::Rows`).
#[derive(Debug, Clone)]
pub struct Import {
    pub relation: Relation,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
}

impl Import {
    /// Every column named once and present in the store, the key among
    /// them (and a message's session), each row as wide as the columns.
    pub fn check(&self, columns: &Columns) -> Result<()> {
        let names = self.columns.iter().map(String::as_str);
        columns.check_all(self.relation, names, Use::Import)?;
        let needed = self
            .relation
            .key()
            .iter()
            .copied()
            .chain((self.relation == Relation::Messages).then_some("session_id"));
        for column in needed {
            if self.position(column).is_none() {
                return Err(Error::Config(format!(
                    "an import into {} names the column {column:?}: it identifies the row",
                    self.relation
                )));
            }
        }
        if let Some(row) = self.rows.iter().find(|r| r.len() != self.columns.len()) {
            return Err(Error::Config(format!(
                "an import into {} has a row of {} values for {} columns",
                self.relation,
                row.len(),
                self.columns.len()
            )));
        }
        if self.relation == Relation::Messages {
            let at = self.position("id").expect("checked above");
            if let Some(row) = self
                .rows
                .iter()
                .find(|r| !matches!(r[at], Value::Integer(_)))
            {
                return Err(Error::Config(format!(
                    "an imported message id is a whole number, not {:?}",
                    row[at]
                )));
            }
        }
        Ok(())
    }

    /// Each imported message's id (after [`Import::check`]).
    pub fn message_ids(&self) -> Vec<i64> {
        let Some(at) = self.position("id") else {
            return Vec::new();
        };
        self.rows
            .iter()
            .map(|row| match row[at] {
                Value::Integer(id) => id,
                _ => unreachable!("checked: message ids are integers"),
            })
            .collect()
    }

    /// Where `column` is in each row.
    pub fn position(&self, column: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == column)
    }

    /// The text of `column` in each row (None where it is not text).
    pub fn texts<'a>(&'a self, column: &str) -> Vec<Option<&'a str>> {
        let Some(at) = self.position(column) else {
            return Vec::new();
        };
        self.rows
            .iter()
            .map(|row| match &row[at] {
                Value::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The sessions imported messages belong to, each once, in order.
    pub fn message_sessions(&self) -> Vec<&str> {
        if self.relation != Relation::Messages {
            return Vec::new();
        }
        let mut sessions: Vec<&str> = self.texts("session_id").into_iter().flatten().collect();
        sessions.sort_unstable();
        sessions.dedup();
        sessions
    }

    /// The error of a message id the store has for another session.
    pub fn collision(&self, at: &super::Location, id: i64, ours: &str, theirs: &str) -> Error {
        Error::Storage {
            kind: crate::error::StorageKind::Other,
            at: at.clone(),
            detail: format!(
                "message {id} is there already as a message of session {theirs:?}, and the \
                 rows being imported have it as a message of session {ours:?}: the two stores' \
                 message ids overlap; none of these rows was written. Copy them into a store \
                 that has none of these ids (a new one)"
            ),
        }
    }

    /// The error of messages whose session the store does not have.
    pub fn orphans(&self, at: &super::Location, missing: &[String]) -> Error {
        Error::Storage {
            kind: crate::error::StorageKind::Other,
            at: at.clone(),
            detail: format!(
                "messages of session(s) {} cannot be imported: no such session here; none of \
                 these rows was written. Import the sessions first",
                missing
                    .iter()
                    .map(|s| format!("{s:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// What a write returns.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOut {
    Done,
    /// The new messages' ids, in order.
    Ids(Vec<i64>),
    /// How many rows were inserted, changed or deleted.
    Rows(u64),
    /// One result per write of a transaction.
    Many(Vec<WriteOut>),
}

impl WriteOut {
    /// Rows written: messages appended, or rows inserted, changed, deleted.
    pub fn rows(&self) -> u64 {
        match self {
            WriteOut::Done => 0,
            WriteOut::Ids(ids) => ids.len() as u64,
            WriteOut::Rows(n) => *n,
            WriteOut::Many(all) => all.iter().map(WriteOut::rows).sum(),
        }
    }

    /// The ids of the messages this write added, as runs of consecutive
    /// ids (`first..=last`), in order: one run for an append, as many as
    /// the gaps in an import's ids.
    pub fn new_message_runs(&self, runs: &mut Vec<(i64, i64)>) {
        match self {
            WriteOut::Ids(ids) => {
                for &id in ids {
                    match runs.last_mut() {
                        Some((_, last)) if *last + 1 == id => *last = id,
                        _ => runs.push((id, id)),
                    }
                }
            }
            WriteOut::Many(all) => all.iter().for_each(|out| out.new_message_runs(runs)),
            WriteOut::Done | WriteOut::Rows(_) => {}
        }
    }
}

impl WriteOp {
    /// Calls `f` with each append this write makes and its result.
    pub fn for_each_append<'a>(&'a self, out: &'a WriteOut, f: &mut impl FnMut(&'a str, usize)) {
        match (self, out) {
            (WriteOp::Append { session_id, .. }, WriteOut::Ids(ids)) => f(session_id, ids.len()),
            (WriteOp::Transaction(ops), WriteOut::Many(outs)) => {
                for (op, out) in ops.iter().zip(outs) {
                    op.for_each_append(out, f);
                }
            }
            _ => {}
        }
    }
}
