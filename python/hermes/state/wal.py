"""``apply_wal_with_fallback``: WAL journaling for a caller's own ``sqlite3`` connection.

hermes-agent's module offers this to code that opens SQLite files of its own (its kanban
board shares it); ``SessionDB`` itself never needs it, because the Rust core configures its
connections (``rust/src/store/sqlite/connection.rs``). The pragmas therefore run here, on the
connection the caller passes in.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a caller passes its own connection; importing SessionDB loads none
    import sqlite3

logger = logging.getLogger(__name__)

#: Errors setting WAL gives on a file system without the shared memory and byte-range
#: locks WAL needs (NFS, SMB, some FUSE mounts): these fall back to a rollback journal.
_WAL_UNSUPPORTED = ("locking protocol", "not authorized")

_warned_labels: set[str] = set()
_warned_lock = threading.Lock()


def apply_wal_with_fallback(conn: sqlite3.Connection, *, db_label: str = "state.db") -> str:
    """Puts ``conn``'s database in WAL mode and returns the journal mode now in force.

    A database already in WAL mode is left as it is (setting the mode again would need a
    moment of exclusive access other connections may be holding up). Where the file system
    cannot do WAL, the database falls back to ``journal_mode=DELETE`` and ``"delete"`` is
    returned, with one warning per ``db_label`` per process; unless the file is already in
    WAL mode on disk, in which case the error is raised (another process relies on WAL).
    Any other error is raised. On macOS, the full-fsync barriers SQLite's durability needs
    there are set as well.
    """
    import sqlite3

    try:
        if _journal_mode(conn) == "wal":
            _macos_durability(conn)
            return "wal"
    except sqlite3.OperationalError:
        pass  # the probe is only a shortcut; setting the mode says what is wrong
    try:
        conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.OperationalError as exc:
        if not any(marker in str(exc).lower() for marker in _WAL_UNSUPPORTED):
            raise
        try:
            on_disk = _journal_mode(conn)
        except sqlite3.OperationalError:
            on_disk = None
        if on_disk == "wal":
            raise
        _warn_once(db_label, exc)
        conn.execute("PRAGMA journal_mode=DELETE")
        return "delete"
    _macos_durability(conn)
    return "wal"


def _journal_mode(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("PRAGMA journal_mode").fetchone()
    if row is None or row[0] is None:
        return None
    mode = row[0]
    return (mode.decode("ascii", "replace") if isinstance(mode, bytes) else str(mode)).lower()


def _macos_durability(conn: sqlite3.Connection) -> None:
    """On macOS a plain fsync does not order writes to stable storage: WAL's guarantees
    need ``synchronous=FULL`` and an F_FULLFSYNC barrier at each checkpoint."""
    if sys.platform != "darwin":
        return
    import sqlite3

    for pragma in ("PRAGMA checkpoint_fullfsync=1", "PRAGMA synchronous=FULL"):
        try:
            conn.execute(pragma)
        except sqlite3.OperationalError:
            logger.debug("%s refused; continuing without it", pragma)


def _warn_once(db_label: str, exc: Exception) -> None:
    with _warned_lock:
        if db_label in _warned_labels:
            return
        _warned_labels.add(db_label)
    logger.warning(
        "%s: this file system cannot hold a WAL journal (%s); using journal_mode=DELETE "
        "instead, which works there but lets a write block readers. Move the file to a "
        "local disk for WAL (see https://www.sqlite.org/wal.html). Said once per process.",
        db_label,
        exc,
    )
