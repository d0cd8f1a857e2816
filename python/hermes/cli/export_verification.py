"""``hermes sessions export --delete-after-verified``: a Markdown export read back from disk
and checked before its session is deleted.

What hermes-agent's verification checks (the checksum line against the document, the session
id, the number of messages exported), and then that the file is, byte for byte, the document
the session as stored now renders to (same export time), so a message written to the session
since the export, or a file changed on disk, stops the deletion and says why.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from hermes.cli.failures import describe_os_error
from hermes.cli.transcripts import CHECKSUM_LINE, PENDING, checksum_line


class NotVerified(Exception):
    """The export does not hold the session; the message says why."""


def read_back(path: Path) -> str:
    """The export as it is on disk now, or ``NotVerified`` when it cannot be read."""
    try:
        written = path.read_bytes()
    except OSError as exc:
        raise NotVerified(describe_os_error(exc, "read back")) from None
    try:
        return written.decode("utf-8")
    except UnicodeDecodeError:
        raise NotVerified(f"{path} is not UTF-8 text any more") from None


def verify_export(text: str, path: Path, session_id: str, messages_now: int,
                  document_now: str) -> None:
    """Returns when ``text``, read back from ``path``, is the whole export of session
    ``session_id``, which holds ``messages_now`` messages and renders to ``document_now``;
    raises ``NotVerified`` otherwise."""
    checksums = list(CHECKSUM_LINE.finditer(text))
    if not checksums:
        raise NotVerified(f"{path} has no checksum line")
    last = checksums[-1]  # the document's own: anything a message quoted comes before it
    unsealed = text[:last.start()] + checksum_line(PENDING).rstrip("\n") + text[last.end():]
    if hashlib.sha256(unsealed.encode("utf-8")).hexdigest() != last.group(1):
        raise NotVerified(f"the checksum in {path} does not match its content (it changed "
                          "after it was written)")
    if f"- Session id: `{session_id}`" not in text:
        raise NotVerified(f"{path} is not the export of session {session_id}")
    if f"- Exported messages: `{messages_now}`" not in text:
        raise NotVerified(f"session {session_id} has {messages_now} messages now, not the "
                          f"number {path} holds (it changed since the export)")
    if text != document_now:
        raise NotVerified(f"{path} differs from session {session_id} as stored now (a message "
                          "changed since the export)")
