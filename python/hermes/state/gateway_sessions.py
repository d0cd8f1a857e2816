"""The gateway's session books: origins, peers, expiry finalisation, gateway session lists.

A gateway session is a ``sessions`` row with a ``session_key`` (the routing key of the chat
it answers); its peer is the ``source`` / ``user_id`` / ``chat_id`` / ``chat_type`` /
``thread_id`` it was opened for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermes.state.face import AsyncFace, StoreFace, all_of, any_of, offloaded

if TYPE_CHECKING:
    from hermes._core import _Filter as Filter

#: End reasons older code wrote by mistake on live conversations (the gateway's
#: ``agent_close`` cleanup, the dashboard's ``ws_orphan_reap``): such a session may be
#: recovered for its peer. Any other end is a real conversation boundary.
_RECOVERABLE_END_REASONS = ("agent_close", "ws_orphan_reap")


class GatewaySessions(StoreFace):
    def record_gateway_session_peer(
        self,
        session_id: str,
        *,
        source: str,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
        display_name: str | None = None,
        origin_json: str | None = None,
    ) -> None:
        """Stores the routing peer of a session row; raises SessionNotFoundError if absent.

        The peer columns take the given values (None included); ``display_name`` and
        ``origin_json`` only change when given. Without a ``session_id`` or ``session_key``
        there is nothing to record and nothing is written.
        """
        if not session_id or not session_key:
            return
        peer: dict[str, Any] = {
            "session_key": session_key,
            "source": source,
            "user_id": user_id,
            "chat_id": chat_id,
            "chat_type": chat_type,
            "thread_id": thread_id,
        }
        if display_name is not None:
            peer["display_name"] = display_name
        if origin_json is not None:
            peer["origin_json"] = origin_json
        self._store.update_session(session_id, peer)

    def set_expiry_finalized(self, session_id: str, finalized: bool = True) -> None:
        """Sets the session's ``expiry_finalized`` flag (the gateway finished its expiry
        work); raises SessionNotFoundError if absent. An empty id writes nothing."""
        if session_id:
            self._store.update_session(session_id, {"expiry_finalized": 1 if finalized else 0})

    def list_gateway_sessions(
        self, *, platform: str | None = None, active_only: bool = True
    ) -> list[dict[str, Any]]:
        """The newest session row of each session key, most recently active first, each
        with its ``last_active``. ``platform`` keeps one source (any letter case);
        ``active_only`` drops keys whose newest session has ended."""
        rows = self._store.query(
            "sessions",
            columns=["*", "last_active"],
            where=("is not null", "session_key"),
        )
        newest: dict[str, float] = {}
        for row in rows:
            key = row["session_key"]
            newest[key] = max(newest.get(key, row["started_at"]), row["started_at"])
        wanted = platform.lower() if platform else None
        listed = [
            row
            for row in rows
            if row["started_at"] == newest[row["session_key"]]
            and (wanted is None or str(row["source"]).lower() == wanted)
            and not (active_only and row["ended_at"] is not None)
        ]
        listed.sort(key=lambda row: row["last_active"], reverse=True)
        return listed

    def find_session_by_origin(
        self,
        *,
        platform: str,
        chat_id: str,
        thread_id: str | None = None,
        user_id: str | None = None,
    ) -> str | None:
        """The live gateway session of a chat (and thread, when given), newest first.

        With ``user_id``, that sender's session wins; when the chat has several senders and
        none of them is this one (or no ``user_id`` is given and they differ), None: a
        message is never routed into another participant's session.
        """
        if not platform or chat_id in (None, ""):
            return None
        live_in_chat = all_of(
            ("=", "chat_id", str(chat_id)), ("is not null", "session_key"), ("is null", "ended_at")
        )
        rows = self._store.query(
            "sessions",
            columns=["id", "source", "user_id", "thread_id"],
            where=live_in_chat,
            order_by=["-started_at"],
        )
        rows = [
            row
            for row in rows
            if str(row["source"]).lower() == platform.lower()
            and (thread_id is None or (row["thread_id"] or "") == str(thread_id))
        ]
        if not rows:
            return None
        if user_id:
            exact = [row for row in rows if str(row["user_id"] or "") == str(user_id)]
            if exact:
                return str(exact[0]["id"])
            if len(rows) > 1:
                return None
        else:
            senders = {str(row["user_id"] or "").strip() for row in rows} - {""}
            if len(senders) > 1:
                return None
        return str(rows[0]["id"])

    def find_latest_gateway_session_for_peer(
        self,
        *,
        source: str,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
    ) -> dict[str, Any] | None:
        """The newest session with messages that the gateway may resume for this peer:
        live, or ended only by a known mistaken reason (``agent_close``, ``ws_orphan_reap``).

        Found by ``session_key``; failing that, and given ``chat_id`` and ``chat_type``, by
        the whole peer (source, user, chat, chat type, thread), so that it never crosses
        chats, threads or users. None without a ``session_key``.
        """
        if not session_key:
            return None
        recoverable = any_of(
            ("is null", "ended_at"), ("in", "end_reason", list(_RECOVERABLE_END_REASONS))
        )
        found = self._newest_with_messages(
            all_of(("=", "session_key", session_key), ("=", "source", source), recoverable)
        )
        if found is not None or chat_id is None or chat_type is None:
            return found
        peer = [
            _same_or_both_empty("user_id", user_id),
            _same_or_both_empty("chat_id", chat_id),
            _same_or_both_empty("chat_type", chat_type),
            _same_or_both_empty("thread_id", thread_id),
        ]
        return self._newest_with_messages(all_of(("=", "source", source), *peer, recoverable))

    def _newest_with_messages(self, where: Filter) -> dict[str, Any] | None:
        # ``message_count`` counts active rows; a session whose rows were all rewound still
        # has messages, so a zero count is checked against the rows themselves.
        for row in self._store.query("sessions", where=where, order_by=["-started_at"]):
            if row["message_count"] or self._store.count(
                "messages", ("=", "session_id", row["id"])
            ):
                return row
        return None


def _same_or_both_empty(column: str, value: str | None) -> Filter:
    """``column`` equals ``value``, NULL and ``''`` counting as the same empty value."""
    if value is None or value == "":
        return any_of(("is null", column), ("=", column, ""))
    return ("=", column, value)


class AsyncGatewaySessions(AsyncFace):
    record_gateway_session_peer = offloaded(GatewaySessions.record_gateway_session_peer)
    set_expiry_finalized = offloaded(GatewaySessions.set_expiry_finalized)
    list_gateway_sessions = offloaded(GatewaySessions.list_gateway_sessions)
    find_session_by_origin = offloaded(GatewaySessions.find_session_by_origin)
    find_latest_gateway_session_for_peer = offloaded(
        GatewaySessions.find_latest_gateway_session_for_peer
    )
