"""The recovery spool: where a turn goes when the database will not take it.

After repeated flush failures (disk full, read-only file, lock held for
minutes, file deleted) the agent appends the unwritten messages to
``$HERMES_HOME/sessions/<session_id>.recovery.jsonl`` (mode 0600, fsync'd)
instead of dropping them. The spool is an ordered overflow of the
transcript: while a session has one, its later messages are spooled behind
it, and the next successful flush (or ``hermes sessions recover``) imports
the file first, in one transaction, then deletes it.

Importing is idempotent: each file's import is recorded in ``state_meta``
under the SHA-256 of its bytes in the same transaction as its rows, so a
crash between the commit and the deletion cannot import it twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from hermes.errors import HermesError
from hermes.paths import recovery_dir
from hermes.state import SessionDB

__all__ = ["RecoveryReport", "import_spool", "recover_all", "spool", "spool_path"]

logger = logging.getLogger(__name__)

_SUFFIX = ".recovery.jsonl"


def spool_path(session_id: str, directory: Path | None = None) -> Path:
    """The spool file of a session. The id is percent-encoded, so no id
    (``../x``, ``a/b``, ``\\0``) can name a file outside the directory."""
    name = quote(session_id, safe="") or "%00empty"
    if name.startswith("."):
        name = "%2E" + name[1:]
    return (directory or recovery_dir()) / f"{name}{_SUFFIX}"


def _session_of(path: Path) -> str:
    return unquote(path.name[: -len(_SUFFIX)])


def _jsonable(value: object) -> object:
    """Stand-in for values JSON cannot hold, keeping their text."""
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "backslashreplace")
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat):
        return isoformat()
    return {"__repr__": repr(value), "__type__": type(value).__qualname__}


def spool(
    session_id: str,
    source: str,
    messages: Iterable[Mapping[str, Any]],
    directory: Path | None = None,
) -> Path:
    """Appends messages to the session's spool and fsyncs it. Returns the file."""
    path = spool_path(session_id, directory)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = "".join(
        json.dumps({"session_id": session_id, "source": source, "message": dict(m)}, default=_jsonable)
        + "\n"
        for m in messages
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, lines.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def import_spool(db: SessionDB, path: Path) -> int:
    """Imports one spool file in one transaction, then deletes it.

    Returns the number of messages written: 0 when this exact file was
    imported before. Raises HermesError (the file is kept) when the
    database refuses the write.
    """
    data = path.read_bytes()
    session_id = _session_of(path)
    source = "unknown"
    messages: list[dict[str, Any]] = []
    for number, line in enumerate(data.decode().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            # A torn last line (crash mid-write) holds no complete message.
            logger.warning("%s:%d: skipped an incomplete line", path, number)
            continue
        session_id = record.get("session_id", session_id)
        source = record.get("source", source)
        messages.append(record["message"])
    db.create_session(session_id, source)
    key = "hermes.recovery:" + hashlib.sha256(data).hexdigest()
    written = len(db.append_messages(session_id, messages, once_key=key))
    path.unlink(missing_ok=True)
    return written


@dataclass
class RecoveryReport:
    """What ``recover_all`` did, file by file."""

    imported: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def written(self) -> int:
        return sum(self.imported.values())


def recover_all(db: SessionDB, directory: Path | None = None) -> RecoveryReport:
    """Imports every spool file under ``directory`` (default
    ``$HERMES_HOME/sessions``). Running it again writes nothing."""
    report = RecoveryReport()
    root = directory or recovery_dir()
    for path in sorted(root.glob(f"*{_SUFFIX}")) if root.is_dir() else []:
        try:
            report.imported[str(path)] = import_spool(db, path)
        except (HermesError, OSError, ValueError, KeyError) as exc:
            report.failed[str(path)] = f"{type(exc).__name__}: {exc}"
    return report
