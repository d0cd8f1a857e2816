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

use super::query::Filter;
use super::Relation;
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

    /// The first and last id of the messages this write appended.
    pub fn appended_range(&self) -> Option<(i64, i64)> {
        match self {
            WriteOut::Ids(ids) => Some((*ids.first()?, *ids.last()?)),
            WriteOut::Many(all) => all
                .iter()
                .filter_map(WriteOut::appended_range)
                .reduce(|(first, _), (_, last)| (first, last)),
            WriteOut::Done | WriteOut::Rows(_) => None,
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
