"""Session rows: create, read, update, end and reopen; the coherence guard's counts."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hermes.state.face import AsyncFace, StoreFace, check_page, epoch, offloaded


class Sessions(StoreFace):
    # ``self`` is positional-only in the methods taking ``**columns``: without it mypy
    # cannot give ``AsyncSessionDB``'s coroutines their signatures (a ``self=`` keyword
    # could be meant for ``**columns``).
    def create_session(
        self,
        /,
        session_id: str,
        source: str,
        user_id: str | None = None,
        model: str | None = None,
        model_config: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        parent_session_id: str | None = None,
        **columns: Any,
    ) -> str:
        """Creates the session row and returns its id.

        Creating an existing session is not an error: its columns that are
        still NULL are filled from this call, the others are kept. Extra
        keyword arguments name other ``sessions`` columns (``session_key``,
        ``chat_id``, ``title``, ...).
        """
        given: dict[str, Any] = {
            "user_id": user_id,
            "model": model,
            "model_config": dict(model_config) if model_config else None,
            "system_prompt": system_prompt,
            "parent_session_id": parent_session_id,
            **columns,
        }
        started_at = given.pop("started_at", None)
        self._store.create_session(
            session_id,
            source,
            {k: v for k, v in given.items() if v is not None},
            epoch(started_at) if started_at is not None else None,
        )
        return session_id

    def ensure_session(self, /, session_id: str, source: str = "unknown", **columns: Any) -> str:
        """Same as :meth:`create_session`: makes sure the row exists."""
        return self.create_session(session_id, source, **columns)

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """Every column of the session row, or None if there is none."""
        return self._store.get_session(session_id)

    def live_message_count(self, session_id: str) -> int | None:
        """The session's live ``message_count`` (None if it does not exist).

        A single indexed read, microseconds: the gateway's coherence guard
        calls it on every turn.
        """
        return self._store.live_message_count(session_id)

    def own_appends(self, session_id: str) -> int:
        """Message rows this ``SessionDB`` committed to the session since it was opened.

        The gateway's guard compares it with the change of ``message_count``: a session
        that grew by more than this process wrote was written by another process too.
        """
        return self._store.own_appends(session_id)

    def foreign_commit_since_last_look(self) -> bool:
        """Whether another connection (process, CLI, cron) committed to this
        file since the previous call. Commits of this ``SessionDB`` do not count.
        """
        return self._store.foreign_commit_since_last_look()

    def update_session(self, /, session_id: str, **columns: Any) -> None:
        """Sets ``sessions`` columns; raises SessionNotFoundError if absent."""
        self._store.update_session(session_id, columns)

    def end_session(self, session_id: str, end_reason: str) -> None:
        """Marks the session ended now, with a reason (``"user_exit"``, ...).

        Appending a message to an ended session reopens it: a conversation that goes on
        (a resumed chat, the next message after a gateway restart) is not ended.
        """
        self._store.update_session(
            session_id, {"ended_at": datetime.now().timestamp(), "end_reason": end_reason}
        )

    def reopen_session(self, session_id: str) -> None:
        """Clears ``ended_at`` / ``end_reason`` so the session continues."""
        self._store.update_session(session_id, {"ended_at": None, "end_reason": None})

    def list_sessions(
        self, source: str | None = None, limit: int = 50, offset: int = 0
    ) -> list[dict[str, Any]]:
        """Sessions, newest first, ``limit`` per page from ``offset``."""
        check_page(limit, offset)
        return self._store.list_sessions(source, limit, offset)


class AsyncSessions(AsyncFace):
    create_session = offloaded(Sessions.create_session)
    ensure_session = offloaded(Sessions.ensure_session)
    get_session = offloaded(Sessions.get_session)
    live_message_count = offloaded(Sessions.live_message_count)
    own_appends = offloaded(Sessions.own_appends)
    foreign_commit_since_last_look = offloaded(Sessions.foreign_commit_since_last_look)
    update_session = offloaded(Sessions.update_session)
    end_session = offloaded(Sessions.end_session)
    reopen_session = offloaded(Sessions.reopen_session)
    list_sessions = offloaded(Sessions.list_sessions)
