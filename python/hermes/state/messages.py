"""Messages: append, the agent's identity-deduplicated flush, and reading a transcript back."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hermes._core import Append, Delete, FlushTracker, SessionNotFoundError, Update
from hermes.errors import MessageNotFoundError
from hermes.state.alternation import repaired_alternation
from hermes.state.face import AsyncFace, StoreFace, all_of, check_page, offloaded
from hermes.text import valid_text

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


#: The longest preview ``list_recent_user_messages`` gives, in characters.
_PREVIEW_CHARS = 80


def message_text(content: Any) -> str:
    """A message's content as plain text: a string as it is, the text parts of a
    multimodal list joined by spaces (``"[multimodal content]"`` when it has none)."""
    if isinstance(content, list):
        text = " ".join(part["text"] for part in content
                        if isinstance(part, dict) and part.get("type") == "text"
                        and isinstance(part.get("text"), str) and part["text"]).strip()
        return text or "[multimodal content]"
    return content if isinstance(content, str) else ""

#: A recalled-memory block, the note that introduces one, and a stray fence tag
#: (hermes-agent's memory fencing); any of them in stored text is a leak.
_MEMORY_CONTEXT = re.compile(
    r"<\s*memory-context\s*>[\s\S]*?</\s*memory-context\s*>"
    r"|\[System note:\s*The following is recalled memory context,\s*NOT new user input\.\s*"
    r"Treat as (?:informational background data|authoritative reference data[^\]]*)\.\]\s*"
    r"|</?\s*memory-context\s*>",
    re.IGNORECASE)


def _without_leaked_memory(content: str) -> str:
    """``content`` (a user or assistant message's text, which the core found naming the
    fence) with leaked recalled-memory text taken out."""
    return _MEMORY_CONTEXT.sub("", content).strip()


def _replays_a_user_prompt(messages: list[dict[str, Any]], message: dict[str, Any]) -> bool:
    """Whether ``message`` is a user prompt already sent since the last answer (a resumed
    session starts by replaying it)."""
    content = message.get("content")
    if message["role"] != "user" or not isinstance(content, str) or not content:
        return False
    for earlier in reversed(messages):
        if earlier["role"] == "user" and earlier.get("content") == content:
            return True
        if earlier["role"] == "assistant" and (earlier.get("content") or earlier.get("tool_calls")):
            return False
    return False


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
        self,
        session_id: str,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair_alternation: bool = False,
    ) -> list[dict[str, Any]]:
        """The transcript as OpenAI-style dicts, in insertion order.

        Each has ``role`` and ``content``, plus ``tool_calls`` (decoded),
        ``tool_call_id``, ``tool_name``, ``timestamp`` and the reasoning
        fields where present. A recalled-memory block (``<memory-context>``) that leaked
        into a user or assistant message is left out of its content. With
        ``include_ancestors``, the sessions it continues (its ``parent_session_id`` chain)
        come first, root first, without a user prompt replayed since the last answer.
        ``repair_alternation`` makes the list fit to replay to a model
        (:mod:`hermes.state.alternation`); the stored rows stay as they are.
        """
        if include_ancestors:
            messages = self._lineage_conversation(self._parent_chain(session_id),
                                                  include_inactive)
        else:
            messages = self._store.get_conversation(
                session_id, include_inactive, mend_leaked_memory=_without_leaked_memory)
        return repaired_alternation(messages) if repair_alternation else messages

    def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """What resuming a session needs: the history to replay to the model (its own live
        messages, alternation repaired) and the history to show (its lineage's, root first,
        as stored)."""
        return (self.get_messages_as_conversation(session_id, repair_alternation=True),
                self.get_messages_as_conversation(session_id, include_ancestors=True))

    def get_ancestor_display_prefix(self, session_id: str) -> list[dict[str, Any]]:
        """The live messages of the sessions ``session_id`` continues (not its own), as
        ``get_messages_as_conversation(include_ancestors=True)`` shows them: what a resumed
        session's display puts before its own history. Empty without ancestors."""
        return self._lineage_conversation(self._parent_chain(session_id)[:-1], False)

    def get_messages_around(
        self, session_id: str, around_message_id: int, window: int = 5
    ) -> dict[str, Any]:
        """The messages of the session around one (rewound ones too), in id order:
        ``window`` (up to ``window`` before it, itself, up to ``window`` after),
        ``messages_before`` and ``messages_after`` (fewer than ``window``: the session's
        start or end is reached). An empty window when the message is not in the session."""
        window = max(window, 0)
        in_session: Filter = ("=", "session_id", session_id)
        before = self._store.query(
            "messages", where=all_of(in_session, ("<=", "id", around_message_id)),
            order_by=["-id"], limit=window + 1)
        if not before or before[0]["id"] != around_message_id:
            return {"window": [], "messages_before": 0, "messages_after": 0}
        after = self._store.query(
            "messages", where=all_of(in_session, (">", "id", around_message_id)),
            order_by=["id"], limit=window)
        return {"window": before[::-1] + after, "messages_before": len(before) - 1,
                "messages_after": len(after)}

    def get_anchored_view(
        self,
        session_id: str,
        around_message_id: int,
        window: int = 5,
        bookend: int = 3,
        keep_roles: tuple[str, ...] | None = ("user", "assistant"),
    ) -> dict[str, Any]:
        """:meth:`get_messages_around`, its window kept to ``keep_roles`` (the anchor
        always stays; None keeps every role), plus the session's first and last
        ``bookend`` messages with text of those roles outside the window
        (``bookend_start``, ``bookend_end``): a hit anywhere in a long session shows its
        opening and its end too."""
        around = self.get_messages_around(session_id, around_message_id, window)
        rows = around["window"]
        around.update(bookend_start=[], bookend_end=[])
        if not rows:
            return around
        if keep_roles is not None:
            around["window"] = [m for m in rows
                                if m["id"] == around_message_id or m["role"] in keep_roles]
        if bookend <= 0:
            return around
        with_text: Filter = all_of(("=", "session_id", session_id),
                                   ("is not null", "content"), ("!=", "content", ""))
        if keep_roles is not None:
            with_text = all_of(with_text, ("in", "role", list(keep_roles)))
        around["bookend_start"] = self._store.query(
            "messages", where=all_of(with_text, ("<", "id", rows[0]["id"])), order_by=["id"],
            limit=bookend)
        around["bookend_end"] = self._store.query(
            "messages", where=all_of(with_text, (">", "id", rows[-1]["id"])),
            order_by=["-id"], limit=bookend)[::-1]
        return around

    def replace_messages(
        self, session_id: str, messages: Sequence[Mapping[str, Any]], active_only: bool = False
    ) -> None:
        """Replaces the session's transcript by ``messages``, in one transaction (the
        rewrite of ``/retry``, ``/undo``, ``/compress``): every row of the session is
        deleted, or with ``active_only`` only its live rows (archived and rewound ones
        stay). Raises SessionNotFoundError, having changed nothing, for a missing session."""
        self._require_session(session_id)
        gone: Filter = ("=", "session_id", session_id)
        if active_only:
            gone = all_of(gone, ("=", "active", 1))
        self._store.write([Delete("messages", gone), Append(session_id, messages)])

    def archive_and_compact(
        self, session_id: str, compacted_messages: Sequence[Mapping[str, Any]]
    ) -> int:
        """Compaction that keeps the history: the session's live rows become archived
        (inactive, ``compacted``: still found by search, left out of the transcript) and
        ``compacted_messages`` the live transcript, in one transaction. Returns how many
        rows are live now. Raises SessionNotFoundError for a missing session."""
        self._require_session(session_id)
        live: Filter = all_of(("=", "session_id", session_id), ("=", "active", 1))
        _, appended = self._store.write([Update("messages", live, {"active": 0, "compacted": 1}),
                                         Append(session_id, compacted_messages)])
        return appended

    def has_archived_messages(self, session_id: str) -> bool:
        """Whether the session has inactive (archived or rewound) rows."""
        return self._store.count(
            "messages", all_of(("=", "session_id", session_id), ("=", "active", 0))) > 0

    def set_latest_user_api_content(self, session_id: str, content: Any, api_content: str) -> int:
        """Sets ``api_content`` (the text the model was sent) on the session's newest live
        user message, if its content is ``content``; returns the rows changed (0 or 1)."""
        newest = self._store.query(
            "messages", columns=["id", "content"],
            where=all_of(("=", "session_id", session_id), ("=", "role", "user"),
                         ("=", "active", 1)),
            order_by=["-id"], limit=1)
        if not newest or newest[0]["content"] != content:
            return 0
        [changed] = self._store.write([Update(
            "messages", all_of(("=", "id", newest[0]["id"]), ("=", "active", 1)),
            {"api_content": valid_text(api_content)})])
        return changed

    def clear_messages(self, session_id: str) -> None:
        """Deletes every message of the session. Raises SessionNotFoundError for a missing
        session."""
        self._require_session(session_id)
        self._store.write([Delete("messages", ("=", "session_id", session_id))])

    def rewind_to_message(self, session_id: str, target_message_id: int) -> dict[str, Any]:
        """Takes the conversation back to before the user message ``target_message_id``:
        it and every later live row become inactive (kept on disk, hidden from the
        transcript and from search), and the session's ``rewind_count`` goes up by one.

        Returns ``rewound_count`` (rows made inactive now), ``target_message`` (its row,
        to prefill the prompt) and ``new_head_id`` (the last live row's id, or None).
        Raises MessageNotFoundError (a ValueError) when the message is not in the session
        or is not a user message.
        """
        found = self._store.query("messages", where=all_of(
            ("=", "id", target_message_id), ("=", "session_id", session_id)))
        target = found[0] if found else None
        if target is None or target["role"] != "user":
            what = "not found" if target is None else f"a {target['role']!r} message"
            raise MessageNotFoundError(
                f"message {target_message_id} of session {session_id!r} in {self.db_path}: "
                f"{what}; rewind to one of the session's user messages "
                "(list_recent_user_messages)")
        later: Filter = all_of(("=", "session_id", session_id),
                               (">=", "id", target_message_id), ("=", "active", 1))
        rewound, _ = self._store.write([
            Update("messages", later, {"active": 0}),
            Update("sessions", ("=", "id", session_id), add={"rewind_count": 1}),
        ])
        head = self._store.query(
            "messages", columns=["id"],
            where=all_of(("=", "session_id", session_id), ("=", "active", 1)),
            order_by=["-id"], limit=1)
        return {"rewound_count": rewound, "target_message": target,
                "new_head_id": head[0]["id"] if head else None}

    def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        """Makes the inactive rows of the session from ``since_message_id`` on live again
        (undoes a rewind); returns how many."""
        [restored] = self._store.write([Update(
            "messages", all_of(("=", "session_id", session_id),
                               (">=", "id", since_message_id), ("=", "active", 0)),
            {"active": 1})])
        return restored

    def list_recent_user_messages(
        self, session_id: str, limit: int = 20, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """The session's newest user messages first (for the ``/rewind`` picker): ``id``,
        ``timestamp`` and ``preview``, the text on one line, at most 80 characters."""
        check_page(limit, 0)
        where: Filter = all_of(("=", "session_id", session_id), ("=", "role", "user"))
        if not include_inactive:
            where = all_of(where, ("=", "active", 1))
        rows = self._store.query("messages", columns=["id", "timestamp", "content"],
                                 where=where, order_by=["-id"], limit=limit)
        recent = []
        for row in rows:
            preview = " ".join(message_text(row["content"]).split())
            if len(preview) > _PREVIEW_CHARS:
                preview = preview[:_PREVIEW_CHARS - 3] + "..."
            recent.append({"id": row["id"], "timestamp": row["timestamp"], "preview": preview})
        return recent

    def _lineage_conversation(
        self, sessions: list[str], include_inactive: bool
    ) -> list[dict[str, Any]]:
        """The conversations of ``sessions`` one after the other, without user prompts
        replayed since the last answer."""
        messages: list[dict[str, Any]] = []
        for session in sessions:
            for message in self._store.get_conversation(
                    session, include_inactive, mend_leaked_memory=_without_leaked_memory):
                if not _replays_a_user_prompt(messages, message):
                    messages.append(message)
        return messages

    def _require_session(self, session_id: str) -> None:
        if self._store.count("sessions", ("=", "id", session_id)) == 0:
            raise SessionNotFoundError(
                f"session {session_id!r}: not found in {self.db_path}. "
                "Create it first with create_session().")

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
    replace_messages = offloaded(Messages.replace_messages)
    archive_and_compact = offloaded(Messages.archive_and_compact)
    has_archived_messages = offloaded(Messages.has_archived_messages)
    set_latest_user_api_content = offloaded(Messages.set_latest_user_api_content)
    clear_messages = offloaded(Messages.clear_messages)
    rewind_to_message = offloaded(Messages.rewind_to_message)
    restore_rewound = offloaded(Messages.restore_rewound)
    list_recent_user_messages = offloaded(Messages.list_recent_user_messages)
    get_ancestor_display_prefix = offloaded(Messages.get_ancestor_display_prefix)
    get_resume_conversations = offloaded(Messages.get_resume_conversations)
    get_messages_around = offloaded(Messages.get_messages_around)
    get_anchored_view = offloaded(Messages.get_anchored_view)
