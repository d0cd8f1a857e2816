//! Server failures → [`Error`], classified by what can be done: a lost or
//! refused connection, a serialization failure, a deadlock, a lock not had
//! within `lock_timeout` or a statement cancelled (`statement_timeout`, an
//! operator's `pg_cancel_backend`) is retried (reconnecting) until the busy
//! budget; a full disk, a read-only server or a role without the right to
//! write, or a constraint is not.

use tokio_postgres::error::SqlState;

use crate::error::{Error, StorageKind};
use crate::store::Location;

pub fn classify(at: &Location, e: tokio_postgres::Error) -> Error {
    let Some(db) = e.as_db_error() else {
        // No answer from the server: it is down, restarting or unreachable.
        return Error::Storage {
            kind: StorageKind::Locked,
            at: at.clone(),
            detail: format!(
                "the PostgreSQL server did not answer ({e}); check that it runs and the URL \
                 names it"
            ),
        };
    };
    let code = db.code();
    let kind = if [
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::LOCK_NOT_AVAILABLE,
        SqlState::QUERY_CANCELED,
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::TOO_MANY_CONNECTIONS,
    ]
    .contains(code)
    {
        StorageKind::Locked
    } else if *code == SqlState::DISK_FULL {
        StorageKind::Full
    } else if [
        SqlState::READ_ONLY_SQL_TRANSACTION,
        SqlState::INSUFFICIENT_PRIVILEGE,
    ]
    .contains(code)
    {
        StorageKind::ReadOnly
    } else if code.code().starts_with("XX") {
        StorageKind::Corrupt
    } else {
        StorageKind::Other
    };
    let constraint = if *code == SqlState::UNIQUE_VIOLATION {
        "UNIQUE constraint failed: "
    } else {
        ""
    };
    Error::Storage {
        kind,
        at: at.clone(),
        detail: format!("{constraint}{}", db.message()),
    }
}
