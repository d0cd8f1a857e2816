//! The one error type of the core, and its single mapping to Python exceptions.
//!
//! Every fallible operation returns [`Error`]. Each source of failure gets a
//! `From` conversion here, and the mapping to Python happens in one
//! `From<Error> for PyErr`, so the Python hierarchy in `hermes.errors` stays
//! consistent with what Rust can report.

use std::path::{Path, PathBuf};

use pyo3::exceptions::PyException;
use pyo3::{create_exception, PyErr};
use rusqlite::ErrorCode;

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
    ConfigError,
    HermesError,
    "The configuration (config.yaml, environment or flags) is invalid."
);

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
    #[error("{path}: not a SQLite database (the file was left unchanged). Point HERMES_HOME or --db at a state.db, or move this file away.")]
    NotADatabase { path: PathBuf },

    #[error("{path}: {detail}")]
    Storage {
        kind: StorageKind,
        path: PathBuf,
        detail: String,
    },

    #[error("{path}: cannot open the database file: {source}. Check that the directory exists and is writable.")]
    Io {
        path: PathBuf,
        #[source]
        source: std::sync::Arc<std::io::Error>,
    },

    #[error("{path}: another write was in progress and this one was made without waiting (hermes.state.writes_without_waiting); nothing was written. Retry it where waiting is allowed, off the event loop.")]
    WriterBusy { path: PathBuf },

    #[error("{path}: the store is closed; open a new SessionDB")]
    Closed { path: PathBuf },

    #[error("session {session_id:?}: not found in {path}. Create it first with create_session().")]
    SessionNotFound { session_id: String, path: PathBuf },

    #[error("message {index} of session {session_id:?}: {detail}")]
    Encode {
        session_id: String,
        index: usize,
        detail: String,
    },

    #[error("invalid search query {query:?}: {detail}. Quote phrases with \"...\" or remove unbalanced quotes and operators.")]
    BadQuery { query: String, detail: String },

    #[error("{0}")]
    Config(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Classifies a SQLite failure on `path`, with advice on what to do.
    pub fn sqlite(path: &Path, err: rusqlite::Error) -> Self {
        let (kind, advice) = match err.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => (
                StorageKind::Locked,
                "another process held the write lock past the retry budget; the data was kept, retry later or raise busy_budget",
            ),
            Some(ErrorCode::ReadOnly) | Some(ErrorCode::CannotOpen) | Some(ErrorCode::PermissionDenied) => (
                StorageKind::ReadOnly,
                "the database or its directory is not writable; fix the permissions or the mount",
            ),
            Some(ErrorCode::DiskFull) | Some(ErrorCode::TooBig) => (
                StorageKind::Full,
                "the disk is full; free space, then retry (nothing was committed)",
            ),
            Some(ErrorCode::DatabaseCorrupt) | Some(ErrorCode::NotADatabase) => (
                StorageKind::Corrupt,
                "the database file is damaged; restore it from a backup or move it away",
            ),
            Some(ErrorCode::SystemIoFailure) if refuses_writes(path) => (
                StorageKind::ReadOnly,
                "the database file (or its -wal) refuses writes (permissions, an immutable flag or a read-only mount); make it writable, then retry",
            ),
            Some(ErrorCode::SystemIoFailure) => (
                StorageKind::Other,
                "an I/O error occurred; check that the file still exists and the disk is healthy",
            ),
            _ => (StorageKind::Other, "the operation was rolled back"),
        };
        Error::Storage {
            kind,
            path: path.to_path_buf(),
            detail: format!("{err} ({advice})"),
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
}

/// Whether the database or its WAL cannot be opened for writing: an I/O
/// error is then a read-only file, not a failing disk.
fn refuses_writes(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    [path, Path::new(&wal)].iter().any(|p| {
        std::fs::OpenOptions::new()
            .append(true)
            .open(p)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
    })
}

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
            Error::Encode { .. } => MessageEncodeError::new_err(msg),
            Error::BadQuery { .. } => pyo3::exceptions::PyValueError::new_err(msg),
            Error::Config(_) => ConfigError::new_err(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pyo3::types::PyTypeMethods;
    use pyo3::Python;

    fn sqlite_err(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    fn py_type_name(err: Error) -> String {
        Python::initialize();
        Python::attach(|py| {
            let pyerr: PyErr = err.into();
            pyerr.get_type(py).name().unwrap().to_string()
        })
    }

    #[test]
    fn sqlite_codes_are_classified() {
        let p = Path::new("/tmp/x.db");
        let cases = [
            (rusqlite::ffi::SQLITE_BUSY, StorageKind::Locked),
            (rusqlite::ffi::SQLITE_LOCKED, StorageKind::Locked),
            (rusqlite::ffi::SQLITE_READONLY, StorageKind::ReadOnly),
            (rusqlite::ffi::SQLITE_FULL, StorageKind::Full),
            (rusqlite::ffi::SQLITE_CORRUPT, StorageKind::Corrupt),
            (rusqlite::ffi::SQLITE_NOTADB, StorageKind::Corrupt),
            (rusqlite::ffi::SQLITE_CONSTRAINT, StorageKind::Other),
        ];
        for (code, want) in cases {
            match Error::sqlite(p, sqlite_err(code)) {
                Error::Storage { kind, path, .. } => {
                    assert_eq!(kind, want, "code {code}");
                    assert_eq!(path, p);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(Error::sqlite(p, sqlite_err(rusqlite::ffi::SQLITE_BUSY)).is_busy());
        assert!(!Error::sqlite(p, sqlite_err(rusqlite::ffi::SQLITE_FULL)).is_busy());
    }

    #[test]
    fn errors_map_to_the_python_hierarchy() {
        let p = PathBuf::from("/tmp/state.db");
        let cases: Vec<(Error, &str)> = vec![
            (Error::NotADatabase { path: p.clone() }, "NotADatabaseError"),
            (
                Error::sqlite(&p, sqlite_err(rusqlite::ffi::SQLITE_BUSY)),
                "DatabaseLockedError",
            ),
            (
                Error::sqlite(&p, sqlite_err(rusqlite::ffi::SQLITE_READONLY)),
                "ReadOnlyDatabaseError",
            ),
            (
                Error::sqlite(&p, sqlite_err(rusqlite::ffi::SQLITE_FULL)),
                "DiskFullError",
            ),
            (
                Error::sqlite(&p, sqlite_err(rusqlite::ffi::SQLITE_CORRUPT)),
                "CorruptDatabaseError",
            ),
            (Error::Closed { path: p.clone() }, "DatabaseClosedError"),
            (Error::WriterBusy { path: p.clone() }, "WriterBusyError"),
            (
                Error::SessionNotFound {
                    session_id: "s".into(),
                    path: p.clone(),
                },
                "SessionNotFoundError",
            ),
            (
                Error::Encode {
                    session_id: "s".into(),
                    index: 0,
                    detail: "d".into(),
                },
                "MessageEncodeError",
            ),
            (Error::Config("c".into()), "ConfigError"),
        ];
        for (err, want) in cases {
            assert_eq!(py_type_name(err), want);
        }
    }

    #[test]
    fn messages_name_the_file_and_the_remedy() {
        let p = PathBuf::from("/data/state.db");
        let msg = Error::sqlite(&p, sqlite_err(rusqlite::ffi::SQLITE_FULL)).to_string();
        assert!(msg.starts_with("/data/state.db: "), "{msg}");
        assert!(msg.contains("free space"), "{msg}");
        let msg = Error::NotADatabase { path: p }.to_string();
        assert!(msg.contains("left unchanged"), "{msg}");
    }
}
