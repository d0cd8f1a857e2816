"""Messages: append, the agent's identity-deduplicated flush, and reading a transcript back."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hermes._core import FlushTracker
from hermes.state.face import AsyncFace, StoreFace, all_of, check_page, offloaded

if TYPE_CHECKING:
    from hermes._core import _Filter as Filter

_OPTIONAL_MESSAGE_FIELDS = (
    "tool_name",
    "tool_calls",
    "tool_call_id",
    "token_count",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
    "platform_message_id",
    "effect_disposition",
    "timestamp",
    "api_content",
)



class Messages(StoreFace):
    def append_message(
        self,
        session_id: str,
        role: str,
        content: Any = None,
        tool_name: str | None = None,
        tool_calls: Any = None,
        tool_call_id: str | None = None,
        token_count: int | None = None,
        finish_reason: str | None = None,
        reasoning: str | None = None,
        reasoning_content: str | None = None,
        reasoning_details: Any = None,
        codex_reasoning_items: Any = None,
        codex_message_items: Any = None,
        platform_message_id: str | None = None,
        observed: bool = False,
        effect_disposition: str | None = None,
        timestamp: float | datetime | None = None,
        api_content: str | None = None,
    ) -> int:
        """Appends one message and returns its row id.

        ``message_count`` (and ``tool_call_count`` by the number of tool
        calls) moves in the same transaction. ``content`` may be a string,
        None, or a list of parts (stored as JSON and returned as a list).
        """
        fields = locals()
        message: dict[str, Any] = {"role": role, "content": content, "observed": observed}
        message.update({k: fields[k] for k in _OPTIONAL_MESSAGE_FIELDS if fields[k] is not None})
        return self._store.append(session_id, [message])[0]

    def append_messages(
        self, session_id: str, messages: Iterable[Mapping[str, Any]], *, once_key: str | None = None
    ) -> list[int]:
        """Appends message dicts in order, in one transaction; returns row ids.

        With ``once_key``, the batch is written at most once per key, however
        often it is retried (the recovery spool uses this).
        """
        return self._store.append(session_id, messages, once_key)

    def flush(
        self,
        tracker: FlushTracker,
        session_id: str,
        messages: Sequence[Any],
        history: Sequence[Any] | None = None,
        seed: Iterable[int] | None = None,
    ) -> int:
        """Writes the dicts of ``messages`` that ``tracker`` does not know as persisted, in
        list order, in one transaction with the session's counters; returns how many.

        Deduplication is by object identity (see :class:`hermes._core.FlushTracker`): dicts
        of ``history`` count as persisted, and so do those whose ``id()`` is in the one-shot
        ``seed``. On failure nothing is committed and ``tracker`` is unchanged, so the same
        call can simply be retried. The agent's transcript flush is built on this.
        """
        return self._store.flush(tracker, session_id, messages, history, seed)

    def get_messages(
        self,
        session_id: str,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Message rows with every column, ``content`` and JSON columns decoded, in
        insertion order; with ``limit`` and/or ``offset``, one page of them."""
        if limit is None and not offset:
            return self._store.get_messages(session_id, include_inactive)
        check_page(0 if limit is None else limit, offset)
        where: Filter = ("=", "session_id", session_id)
        if not include_inactive:
            where = all_of(where, ("=", "active", 1))
        return self._store.query("messages", where=where, order_by=["id"], limit=limit,
                                 offset=offset)

    def get_messages_as_conversation(
        self, session_id: str, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """The transcript as OpenAI-style dicts, in insertion order.

        Each has ``role`` and ``content``, plus ``tool_calls`` (decoded),
        ``tool_call_id``, ``tool_name``, ``timestamp`` and the reasoning
        fields where present.
        """
        return self._store.get_conversation(session_id, include_inactive)

    def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        """Whether the platform's own message id is already in the session."""
        return self._store.has_platform_message_id(session_id, str(platform_message_id))


class AsyncMessages(AsyncFace):
    append_message = offloaded(Messages.append_message)
    append_messages = offloaded(Messages.append_messages)
    flush = offloaded(Messages.flush)
    get_messages = offloaded(Messages.get_messages)
    get_messages_as_conversation = offloaded(Messages.get_messages_as_conversation)
    has_platform_message_id = offloaded(Messages.has_platform_message_id)
