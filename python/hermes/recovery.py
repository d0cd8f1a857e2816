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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from hermes.errors import HermesError
from hermes.paths import recovery_dir
from hermes.state import SessionDB

__all__ = [
    "RecoveryReport",
    "claimed_path",
    "has_spool",
    "import_spool",
    "recover_all",
    "spool",
    "spool_path",
]

logger = logging.getLogger(__name__)

_SUFFIX = ".recovery.jsonl"
#: Longest encoded id used as it is; file names stop at 255 bytes, and suffixes follow.
_MAX_NAME = 160
_CLAIMED = ".importing"


def spool_path(session_id: str, directory: Path | None = None) -> Path:
    """The spool file of a session. The id is percent-encoded, so no id
    (``../x``, ``a/b``, ``\\0``) can name a file outside the directory. An id too long for a
    file name is shortened and made unique with its hash (the records inside carry the
    whole id)."""
    # "%%" never occurs in quote()'s output, so these names cannot collide with an id's.
    name = quote(session_id.encode("utf-8", "surrogatepass"), safe="") or "%%empty"
    if name.startswith("."):
        name = "%2E" + name[1:]
    if len(name) > _MAX_NAME:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        name = f"{name[:96]}%%{digest}"
    return (directory or recovery_dir()) / f"{name}{_SUFFIX}"


def claimed_path(path: Path) -> Path:
    """Where an import moves a spool before reading it."""
    return path.with_name(path.name + _CLAIMED)


def has_spool(session_id: str, directory: Path | None = None) -> bool:
    """Whether the session has spooled messages waiting for import."""
    path = spool_path(session_id, directory)
    return path.exists() or claimed_path(path).exists()


def _session_of(path: Path) -> str:
    name = path.name.removesuffix(_CLAIMED)
    return unquote(name[: -len(_SUFFIX)])


def _jsonable(value: object) -> object:
    """Stand-in for values JSON cannot hold, keeping their text."""
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "backslashreplace")
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat):
        return isoformat()
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not cost the message
        text = f"<unprintable {type(value).__qualname__} object>"
    return {"__repr__": text, "__type__": type(value).__qualname__}


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
    """Imports a session's spool (``path`` is its ``spool_path``), then deletes it.

    The file is first claimed by an atomic rename, so messages spooled while
    the import runs start a new spool instead of being deleted unread. A
    file an interrupted import left claimed is imported first (it is older).
    Each file goes in one transaction, at most once (keyed by its SHA-256).
    Lines that are not a spooled message are kept in ``<file>.rejected``.
    Returns the number of messages written; raises HermesError, keeping the
    claimed file, when the database refuses the write.
    """
    claimed = claimed_path(path)
    written = _import_file(db, claimed)
    try:
        os.rename(path, claimed)
    except FileNotFoundError:
        return written
    return written + _import_file(db, claimed)


def _import_file(db: SessionDB, claimed: Path) -> int:
    try:
        data = claimed.read_bytes()
    except FileNotFoundError:
        return 0  # nothing claimed, or another process finished it
    session_id, source, messages, rejected = _parse_spool(data)
    session_id = session_id or _session_of(claimed)
    if rejected:
        _keep_rejected(claimed, rejected)
    written = 0
    if messages:
        db.create_session(session_id, source)
        key = "hermes.recovery:" + hashlib.sha256(data).hexdigest()
        written = len(db.append_messages(session_id, messages, once_key=key))
    claimed.unlink(missing_ok=True)
    return written


def _parse_spool(data: bytes) -> tuple[str | None, str, list[dict[str, Any]], list[bytes]]:
    """The session id and source the records name, the messages, and the raw lines that
    hold no message (a line torn by a crash mid-write, or a file edited by hand)."""
    session_id: str | None = None
    source = "unknown"
    messages: list[dict[str, Any]] = []
    rejected: list[bytes] = []
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("message"), dict):
            rejected.append(raw)
            continue
        if isinstance(record.get("source"), str):
            source = record["source"]
        if session_id is None and isinstance(record.get("session_id"), str):
            session_id = record["session_id"]
        messages.append(record["message"])
    return session_id, source, messages, rejected


def _keep_rejected(claimed: Path, lines: list[bytes]) -> None:
    target = claimed.with_name(claimed.name.removesuffix(_CLAIMED) + ".rejected")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, b"".join(line + b"\n" for line in lines))
        os.fsync(fd)
    finally:
        os.close(fd)
    logger.error("%s: %d lines held no message; kept in %s", claimed, len(lines), target)


@dataclass
class RecoveryReport:
    """What ``recover_all`` did, file by file."""

    imported: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def written(self) -> int:
        return sum(self.imported.values())


def recover_all(db: SessionDB, directory: Path | None = None,
                progress: Callable[[int, int], None] | None = None) -> RecoveryReport:
    """Imports every session's spool under ``directory`` (default
    ``$HERMES_HOME/sessions``), calling ``progress(files done, files)`` after each file.
    Running it again writes nothing."""
    report = RecoveryReport()
    root = directory or recovery_dir()
    if not root.is_dir():
        return report
    spools = sorted({root / path.name.removesuffix(_CLAIMED)
                     for path in root.iterdir()
                     if path.name.endswith((_SUFFIX, _SUFFIX + _CLAIMED))})
    for done, path in enumerate(spools, 1):
        try:
            report.imported[str(path)] = import_spool(db, path)
        except (HermesError, OSError) as exc:
            report.failed[str(path)] = f"{type(exc).__name__}: {exc}"
        if progress is not None:
            progress(done, len(spools))
    return report
