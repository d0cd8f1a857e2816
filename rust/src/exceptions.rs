//! The Python exception classes of `hermes._core` (re-exported by
//! `hermes.errors`), and the one mapping from [`Error`] to them.

use pyo3::exceptions::{PyException, PyLookupError};
use pyo3::{create_exception, PyErr};

use crate::error::{Error, StorageKind};

create_exception!(
    _core,
    HermesError,
    PyException,
    "Base class of every error raised by hermes."
);
create_exception!(
    _core,
    StateDbError,
    HermesError,
    "The session database (state.db) could not complete an operation."
);
create_exception!(
    _core,
    CorruptDatabaseError,
    StateDbError,
    "The database file is damaged or is not a SQLite database."
);
create_exception!(
    _core,
    NotADatabaseError,
    CorruptDatabaseError,
    "The file exists but is not a SQLite database; it was left untouched."
);
create_exception!(
    _core,
    DatabaseLockedError,
    StateDbError,
    "Another process held the write lock for longer than the retry budget."
);
create_exception!(
    _core,
    WriterBusyError,
    DatabaseLockedError,
    "A write made without waiting found another write in progress; nothing was written."
);
create_exception!(
    _core,
    ReadOnlyDatabaseError,
    StateDbError,
    "The database file or its directory cannot be written."
);
create_exception!(
    _core,
    DiskFullError,
    StateDbError,
    "The disk (or the file's size limit) is full."
);
create_exception!(
    _core,
    DatabaseClosedError,
    StateDbError,
    "The store was closed; open a new one."
);
create_exception!(
    _core,
    MessageEncodeError,
    HermesError,
    "A message could not be turned into a database row."
);
create_exception!(
    _core,
    SessionNotFoundError,
    HermesError,
    "The session id does not exist in the database."
);
create_exception!(
    _core,
    SearchQueryError,
    HermesError,
    "A search query could not be run."
);
create_exception!(
    _core,
    ConfigError,
    HermesError,
    "The configuration (config.yaml, environment or flags) is invalid."
);

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        let msg = err.to_string();
        match err {
            Error::NotADatabase { .. } => NotADatabaseError::new_err(msg),
            Error::Storage { kind, .. } => match kind {
                StorageKind::Corrupt => CorruptDatabaseError::new_err(msg),
                StorageKind::Locked => DatabaseLockedError::new_err(msg),
                StorageKind::ReadOnly => ReadOnlyDatabaseError::new_err(msg),
                StorageKind::Full => DiskFullError::new_err(msg),
                StorageKind::Other => StateDbError::new_err(msg),
            },
            Error::Io { source, .. } => match source.kind() {
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
                    ReadOnlyDatabaseError::new_err(msg)
                }
                std::io::ErrorKind::StorageFull => DiskFullError::new_err(msg),
                _ => StateDbError::new_err(msg),
            },
            Error::WriterBusy { .. } => WriterBusyError::new_err(msg),
            Error::Closed { .. } => DatabaseClosedError::new_err(msg),
            Error::SessionNotFound { .. } => SessionNotFoundError::new_err(msg),
            Error::NoMatch { .. } => PyLookupError::new_err(msg),
            Error::Encode { .. } => MessageEncodeError::new_err(msg),
            Error::BadQuery { .. } => SearchQueryError::new_err(msg),
            Error::Config(_) => ConfigError::new_err(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Location, Relation};
    use pyo3::types::PyTypeMethods;
    use pyo3::Python;
    use std::path::PathBuf;
    use std::sync::Arc;

    fn py_type_name(err: Error) -> String {
        Python::initialize();
        Python::attach(|py| {
            let pyerr: PyErr = err.into();
            pyerr.get_type(py).name().unwrap().to_string()
        })
    }

    #[test]
    fn errors_map_to_the_python_hierarchy() {
        let at = Location::File(PathBuf::from("/tmp/state.db"));
        let storage = |kind| Error::Storage {
            kind,
            at: at.clone(),
            detail: "d".into(),
        };
        let io = |kind| Error::Io {
            at: at.clone(),
            source: Arc::new(std::io::Error::from(kind)),
        };
        let cases: Vec<(Error, &str)> = vec![
            (Error::NotADatabase { at: at.clone() }, "NotADatabaseError"),
            (storage(StorageKind::Locked), "DatabaseLockedError"),
            (storage(StorageKind::ReadOnly), "ReadOnlyDatabaseError"),
            (storage(StorageKind::Full), "DiskFullError"),
            (storage(StorageKind::Corrupt), "CorruptDatabaseError"),
            (storage(StorageKind::Other), "StateDbError"),
            (
                io(std::io::ErrorKind::PermissionDenied),
                "ReadOnlyDatabaseError",
            ),
            (io(std::io::ErrorKind::StorageFull), "DiskFullError"),
            (io(std::io::ErrorKind::NotFound), "StateDbError"),
            (Error::Closed { at: at.clone() }, "DatabaseClosedError"),
            (Error::WriterBusy { at: at.clone() }, "WriterBusyError"),
            (
                Error::SessionNotFound {
                    session_id: "s".into(),
                    at: at.clone(),
                },
                "SessionNotFoundError",
            ),
            (
                Error::NoMatch {
                    relation: Relation::Sessions,
                    at: at.clone(),
                },
                "LookupError",
            ),
            (
                Error::Encode {
                    session_id: "s".into(),
                    index: 0,
                    detail: "d".into(),
                },
                "MessageEncodeError",
            ),
            (
                Error::BadQuery {
                    query: "\"".into(),
                    detail: "d".into(),
                },
                "SearchQueryError",
            ),
            (Error::Config("c".into()), "ConfigError"),
        ];
        for (err, want) in cases {
            assert_eq!(py_type_name(err), want);
        }
    }

    #[test]
    fn the_python_message_is_the_errors_own() {
        let err = Error::Closed {
            at: Location::File(PathBuf::from("/data/state.db")),
        };
        let text = err.to_string();
        Python::initialize();
        Python::attach(|py| {
            let pyerr: PyErr = err.into();
            assert_eq!(pyerr.value(py).to_string(), text);
        });
    }
}
