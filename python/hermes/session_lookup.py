"""Finding a session by what a person knows of it: its id, its title, or the conversation it
belongs to (a chat's conversation id or session key; an api_server conversation's
``X-Hermes-Session-Id`` is its session id).

One lookup serves ``hermes sessions show|export``, ``hermes chat --resume`` and the chat
commands ``/resume`` and ``/sessions``, so each accepts the same words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from hermes.errors import SessionNotFoundError
from hermes.state import SessionDB

__all__ = ["find_session", "recent_sessions"]

# Sessions read per query while scanning for a title or a conversation.
_PAGE = 500


def find_session(db: SessionDB, ident: str,
                 allowed: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """The session ``ident`` names: a session id, else the newest session with that title,
    conversation id (``chat_id``) or session key. ``allowed`` limits the answer to the
    sessions it accepts (a chat user may only reach their own). Raises
    ``SessionNotFoundError`` saying where to look."""
    ident = ident.strip()
    accepts = allowed or (lambda _session: True)
    session = db.get_session(ident) if ident else None
    if session is not None and accepts(session):
        return session
    if ident:
        for row in _newest_first(db):
            if ident in (row.get("title"), row.get("chat_id"), row.get("session_key")) \
                    and accepts(row):
                return row
    raise SessionNotFoundError(
        f"no session, title or conversation {ident!r}; `hermes sessions list` (or /sessions "
        "in a chat) shows what there is")


def recent_sessions(db: SessionDB, allowed: Callable[[dict[str, Any]], bool], *,
                    source: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
    """Up to ``limit`` sessions that ``allowed`` accepts, newest first."""
    found: list[dict[str, Any]] = []
    for row in _newest_first(db, source):
        if allowed(row):
            found.append(row)
            if len(found) == limit:
                break
    return found


def _newest_first(db: SessionDB, source: str | None = None) -> Iterator[dict[str, Any]]:
    offset = 0
    while rows := db.list_sessions(source=source, limit=_PAGE, offset=offset):
        yield from rows
        offset += len(rows)
