"""Telegram forum-topic bindings: which topic of a chat belongs to which session.

A private Telegram chat in topic mode (``telegram_dm_topic_mode``, one row per chat) gives
each conversation a topic (thread) of its own; ``telegram_dm_topic_bindings`` maps a
(chat, thread) to the session it carries, and a session to at most one topic.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final, Literal

from hermes._core import Delete, Insert, Select, Update
from hermes.errors import SessionNotFoundError, TopicAlreadyLinkedError
from hermes.state.face import AsyncFace, StoreFace, all_of, offloaded

if TYPE_CHECKING:
    from hermes._core import _Filter as Filter

#: The ``state_meta`` key hermes-agent versions its topic tables under, and the version our
#: DDL creates (the bindings' session reference cascades on delete).
_SCHEMA_KEY = "telegram_dm_topic_schema_version"
_SCHEMA_VERSION = "2"
_MODES: Final[Literal["telegram_dm_topic_mode"]] = "telegram_dm_topic_mode"
_BINDINGS: Final[Literal["telegram_dm_topic_bindings"]] = "telegram_dm_topic_bindings"


class TopicBindings(StoreFace):
    def apply_telegram_topic_migration(self) -> None:
        """Records the topic tables' version in ``state_meta``, as hermes-agent's opt-in
        migration does. Our files have the tables from the start (the DDL creates them), so
        nothing else is needed; a version an older hermes-agent recorded is left for its own
        migration to upgrade."""
        if self._store.get_meta(_SCHEMA_KEY) is None:
            self._store.write([Insert("state_meta", {"key": _SCHEMA_KEY, "value": _SCHEMA_VERSION},
                                      on_conflict="ignore")])

    def enable_telegram_topic_mode(
        self,
        *,
        chat_id: str,
        user_id: str,
        has_topics_enabled: bool | None = None,
        allows_users_to_create_topics: bool | None = None,
    ) -> None:
        """Turns topic mode on for one private chat (and its user), recording what Telegram
        said the chat can do; a chat enabled before keeps its ``activated_at``."""
        self.apply_telegram_topic_migration()
        now = time.time()
        state = {
            "user_id": str(user_id),
            "enabled": 1,
            "updated_at": now,
            "has_topics_enabled": _flag(has_topics_enabled),
            "allows_users_to_create_topics": _flag(allows_users_to_create_topics),
            "capability_checked_at": now,
        }
        self._store.write(
            [
                Update(_MODES, ("=", "chat_id", str(chat_id)), state),
                Insert(_MODES, {"chat_id": str(chat_id), "activated_at": now, **state},
                       on_conflict="ignore"),
            ]
        )

    def disable_telegram_topic_mode(self, *, chat_id: str, clear_bindings: bool = True) -> None:
        """Turns topic mode off for a chat; with ``clear_bindings`` its topics' bindings go
        too (in the same transaction), so enabling it again starts afresh. A chat never
        enabled is no error."""
        ops: list[Update | Delete] = [
            Update(_MODES, ("=", "chat_id", str(chat_id)), {"enabled": 0, "updated_at": time.time()})
        ]
        if clear_bindings:
            ops.append(Delete(_BINDINGS, ("=", "chat_id", str(chat_id))))
        self._store.write(ops)

    def is_telegram_topic_mode_enabled(self, *, chat_id: str, user_id: str) -> bool:
        """Whether topic mode is on for this chat and user."""
        where = all_of(("=", "chat_id", str(chat_id)), ("=", "user_id", str(user_id)))
        rows = self._store.query(_MODES, columns=["enabled"], where=where, limit=1)
        return bool(rows and rows[0]["enabled"])

    def get_telegram_topic_binding(self, *, chat_id: str, thread_id: str) -> dict[str, Any] | None:
        """The binding of one topic (every column), None when it has none."""
        return self._binding(_topic(chat_id, thread_id))

    def list_telegram_topic_bindings_for_chat(self, *, chat_id: str) -> list[dict[str, Any]]:
        """Every topic binding of a chat, most recently updated first."""
        return self._store.query(
            _BINDINGS, where=("=", "chat_id", str(chat_id)), order_by=["-updated_at"]
        )

    def get_telegram_topic_binding_by_session(self, *, session_id: str) -> dict[str, Any] | None:
        """The binding of the topic a session is in, None when it is in none."""
        return self._binding(("=", "session_id", str(session_id)))

    def delete_telegram_topic_binding(self, *, chat_id: str, thread_id: str) -> int:
        """Removes one topic's binding (Telegram says the topic is gone) and returns how
        many rows went (0 or 1). When it was the chat's last binding, topic mode is turned
        off for the chat in the same transaction, so nothing steers its messages into
        topics that no longer exist."""
        topic = _topic(chat_id, thread_id)
        if self._binding(topic) is None:
            return 0
        chat = str(chat_id)
        no_bindings_left = all_of(
            ("=", "chat_id", chat),
            ("not", ("in", "chat_id", Select(_BINDINGS, "chat_id", ("=", "chat_id", chat)))),
        )
        deleted, _ = self._store.write(
            [
                Delete(_BINDINGS, topic),
                Update(_MODES, no_bindings_left, {"enabled": 0, "updated_at": time.time()}),
            ]
        )
        return deleted

    def bind_telegram_topic(
        self,
        *,
        chat_id: str,
        thread_id: str,
        user_id: str,
        session_key: str,
        session_id: str,
        managed_mode: str = "auto",
    ) -> None:
        """Binds a topic to a session (binding it again is no change but the time).

        Raises :class:`~hermes.errors.TopicAlreadyLinkedError` (a ``ValueError``) when the
        session is bound to another topic, and SessionNotFoundError when there is no such
        session; either way nothing is written.
        """
        chat, thread, session = str(chat_id), str(thread_id), str(session_id)
        linked = self._binding(("=", "session_id", session))
        if linked is not None and (linked["chat_id"], linked["thread_id"]) != (chat, thread):
            raise TopicAlreadyLinkedError(session, linked["chat_id"], linked["thread_id"])
        if self._store.count("sessions", ("=", "id", session)) == 0:
            raise SessionNotFoundError(
                f"session {session!r}: not found in {self.db_path}; create it before binding "
                f"Telegram topic {thread} of chat {chat} to it"
            )
        self.apply_telegram_topic_migration()
        now = time.time()
        binding = {
            "user_id": str(user_id),
            "session_key": str(session_key),
            "session_id": session,
            "managed_mode": managed_mode,
            "updated_at": now,
        }
        self._store.write(
            [
                Update(_BINDINGS, _topic(chat, thread), binding),
                Insert(_BINDINGS, {"chat_id": chat, "thread_id": thread, "linked_at": now,
                                   **binding}, on_conflict="ignore"),
            ]
        )

    def is_telegram_session_linked_to_topic(self, *, session_id: str) -> bool:
        """Whether the session is bound to any topic."""
        return self._store.count(_BINDINGS, ("=", "session_id", str(session_id))) > 0

    def list_unlinked_telegram_sessions_for_user(
        self, *, chat_id: str, user_id: str, limit: int = 10
    ) -> list[dict[str, Any]]:
        """The user's Telegram sessions that are in no topic, most recently active first
        (``limit`` of them), each with ``last_active`` and a ``preview`` of its first
        message (60 characters, ``...`` when cut), to offer for linking to a new topic.
        ``chat_id`` is accepted for hermes-agent's signature; sessions are the user's."""
        unbound = all_of(
            ("=", "source", "telegram"),
            ("=", "user_id", str(user_id)),
            ("not", ("in", "id", Select(_BINDINGS, "session_id"))),
        )
        return self._store.query(
            "sessions",
            columns=["*", "preview", "last_active"],
            where=unbound,
            order_by=["-last_active", "-started_at"],
            limit=max(int(limit), 0),
        )

    def _binding(self, where: Filter) -> dict[str, Any] | None:
        rows = self._store.query(_BINDINGS, where=where, limit=1)
        return rows[0] if rows else None


def _topic(chat_id: str, thread_id: str) -> Filter:
    return all_of(("=", "chat_id", str(chat_id)), ("=", "thread_id", str(thread_id)))


def _flag(value: bool | None) -> int | None:
    return None if value is None else int(value)


class AsyncTopicBindings(AsyncFace):
    apply_telegram_topic_migration = offloaded(TopicBindings.apply_telegram_topic_migration)
    enable_telegram_topic_mode = offloaded(TopicBindings.enable_telegram_topic_mode)
    disable_telegram_topic_mode = offloaded(TopicBindings.disable_telegram_topic_mode)
    is_telegram_topic_mode_enabled = offloaded(TopicBindings.is_telegram_topic_mode_enabled)
    get_telegram_topic_binding = offloaded(TopicBindings.get_telegram_topic_binding)
    list_telegram_topic_bindings_for_chat = offloaded(
        TopicBindings.list_telegram_topic_bindings_for_chat
    )
    get_telegram_topic_binding_by_session = offloaded(
        TopicBindings.get_telegram_topic_binding_by_session
    )
    delete_telegram_topic_binding = offloaded(TopicBindings.delete_telegram_topic_binding)
    bind_telegram_topic = offloaded(TopicBindings.bind_telegram_topic)
    is_telegram_session_linked_to_topic = offloaded(
        TopicBindings.is_telegram_session_linked_to_topic
    )
    list_unlinked_telegram_sessions_for_user = offloaded(
        TopicBindings.list_unlinked_telegram_sessions_for_user
    )
