//! SQLite failures as the core's [`Error`]: each result code classified by
//! what the user can do about it, with a message that says so.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::ErrorCode;

use crate::error::{Error, StorageKind};
use crate::store::Location;

/// Classifies a SQLite failure on the file at `at`, with advice on what to do.
pub fn classify(at: &Location, err: rusqlite::Error) -> Error {
    let refuses = || at.path().is_some_and(refuses_writes);
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
        Some(ErrorCode::SystemIoFailure) if refuses() => (
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
        at: at.clone(),
        detail: format!("{err} ({advice})"),
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

pub trait At<T> {
    /// Classifies a SQLite error on the store at `at`.
    fn at(self, at: &Location) -> crate::error::Result<T>;
}

impl<T> At<T> for rusqlite::Result<T> {
    fn at(self, at: &Location) -> crate::error::Result<T> {
        self.map_err(|e| classify(at, e))
    }
}

/// Sets `cut` if `e` is a read that came up short (see `SqliteBackend::cut`).
pub fn note_short_read(cut: &AtomicBool, e: &rusqlite::Error) {
    let short = rusqlite::ffi::SQLITE_IOERR_SHORT_READ;
    if e.sqlite_error().map(|f| f.extended_code) == Some(short) {
        cut.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn sqlite_err(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn sqlite_codes_are_classified() {
        let at = Location::File(PathBuf::from("/tmp/x.db"));
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
            match classify(&at, sqlite_err(code)) {
                Error::Storage { kind, at: got, .. } => {
                    assert_eq!(kind, want, "code {code}");
                    assert_eq!(got, at);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(classify(&at, sqlite_err(rusqlite::ffi::SQLITE_BUSY)).is_busy());
        assert!(!classify(&at, sqlite_err(rusqlite::ffi::SQLITE_FULL)).is_busy());
    }

    #[test]
    fn messages_name_the_file_and_the_remedy() {
        let at = Location::File(PathBuf::from("/data/state.db"));
        let msg = classify(&at, sqlite_err(rusqlite::ffi::SQLITE_FULL)).to_string();
        assert!(msg.starts_with("/data/state.db: "), "{msg}");
        assert!(msg.contains("free space"), "{msg}");
        let msg = Error::NotADatabase { at }.to_string();
        assert!(msg.contains("left unchanged"), "{msg}");
    }
}
