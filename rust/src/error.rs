//! The one error type of the core, free of any binding or database library.
//!
//! Every fallible operation returns [`Error`], classified by what the user
//! can do about it; each message names the file (or server) and the remedy.
//! Each source of failure has its constructor: I/O here, a database
//! library's errors in its backend (`store/sqlite/error.rs`). The single
//! mapping to Python exceptions is in `exceptions.rs`.

use std::sync::Arc;

use crate::store::{Location, Relation};

/// What went wrong in storage, classified by what the user can do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageKind {
    Corrupt,
    Locked,
    ReadOnly,
    Full,
    Other,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("{at}: not a SQLite database (the file was left unchanged). Point HERMES_HOME or --db at a state.db, or move this file away.")]
    NotADatabase { at: Location },

    #[error("{at}: {detail}")]
    Storage {
        kind: StorageKind,
        at: Location,
        detail: String,
    },

    #[error("{at}: cannot open the database file: {source}. Check that the directory exists and is writable.")]
    Io {
        at: Location,
        #[source]
        source: Arc<std::io::Error>,
    },

    #[error("{at}: another write was in progress and this one was made without waiting (hermes.state.writes_without_waiting); nothing was written. Retry it where waiting is allowed, off the event loop.")]
    WriterBusy { at: Location },

    #[error("{at}: the store is closed; open a new SessionDB")]
    Closed { at: Location },

    #[error("session {session_id:?}: not found in {at}. Create it first with create_session().")]
    SessionNotFound { session_id: String, at: Location },

    #[error(
        "{at}: no row of {relation} matched the update, which required one; nothing was written"
    )]
    NoMatch { relation: Relation, at: Location },

    #[error("message {index} of session {session_id:?}: {detail}")]
    Encode {
        session_id: String,
        index: usize,
        detail: String,
    },

    #[error("search query {query:?} could not run: {detail}. Search with plain words instead, and report the query to hermes's developers.")]
    BadQuery { query: String, detail: String },

    #[error("{0}")]
    Config(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An operating-system failure on the store's file.
    pub fn io(at: &Location, source: std::io::Error) -> Self {
        Error::Io {
            at: at.clone(),
            source: Arc::new(source),
        }
    }

    /// True for the failures a whole-transaction retry can cure.
    pub fn is_busy(&self) -> bool {
        matches!(
            self,
            Error::Storage {
                kind: StorageKind::Locked,
                ..
            }
        )
    }

    /// Failures that doom the whole transaction rather than one job in it.
    pub fn is_whole_batch_failure(&self) -> bool {
        matches!(
            self,
            Error::Storage {
                kind: StorageKind::Locked
                    | StorageKind::Full
                    | StorageKind::Corrupt
                    | StorageKind::ReadOnly,
                ..
            } | Error::Io { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn only_a_locked_store_is_worth_retrying_and_storage_failures_doom_the_batch() {
        let at = Location::File(PathBuf::from("/tmp/state.db"));
        let storage = |kind| Error::Storage {
            kind,
            at: at.clone(),
            detail: "d".into(),
        };
        assert!(storage(StorageKind::Locked).is_busy());
        assert!(!storage(StorageKind::Full).is_busy());
        for kind in [
            StorageKind::Locked,
            StorageKind::Full,
            StorageKind::Corrupt,
            StorageKind::ReadOnly,
        ] {
            assert!(storage(kind).is_whole_batch_failure(), "{kind:?}");
        }
        assert!(!storage(StorageKind::Other).is_whole_batch_failure());
        let missing = Error::SessionNotFound {
            session_id: "s".into(),
            at: at.clone(),
        };
        assert!(!missing.is_whole_batch_failure());
        let io = Error::io(&at, std::io::Error::other("gone"));
        assert!(io.is_whole_batch_failure());
        assert!(io.to_string().starts_with("/tmp/state.db: "), "{io}");
    }
}
