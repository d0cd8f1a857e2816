"""The agent's transcript persistence: every message written exactly once.

``_flush_messages_to_session_db`` is called from many exit paths (after each
model response and tool result, at turn end, on error, on interrupt, at
gateway shutdown). Deduplication is by object identity, tracked in Rust
(:class:`hermes._core.FlushTracker`), which holds a reference to each
tracked dict so its address cannot be reused by a new message.

Everything here works on an agent made with ``object.__new__`` (no
``__init__``): attributes have class-level defaults and helpers are created
on first use.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from hermes._core import SCAFFOLDING_FLAGS, FlushTracker
from hermes.errors import HermesError
from hermes.recovery import has_spool, import_spool, spool, spool_path
from hermes.state import SessionDB

__all__ = ["MemoryProvider", "TranscriptPersistence"]

logger = logging.getLogger(__name__)

#: Consecutive failed flushes after which the unwritten messages are spooled.
SPOOL_AFTER_FAILURES = 3

class MemoryProvider(Protocol):
    """An external memory the agent reports the finished session to."""

    def on_session_end(self, messages: Sequence[dict[str, Any]]) -> None: ...


class TranscriptPersistence:
    """Mixin: the persistence face of :class:`hermes.agent.AIAgent`."""

    _session_db: SessionDB | None = None
    _session_db_created: bool = False
    session_id: str | None = None
    platform: str | None = None
    _session_messages: list[Any] = []  # replaced per instance, never mutated here
    _last_flushed_db_idx: int = 0
    #: One-shot seed: ``id()`` of dicts a caller knows are persisted. Honoured
    #: when ``_flushed_db_message_session_id == session_id`` and
    #: ``_last_flushed_db_idx > 0``; cleared by the next successful flush.
    _flushed_db_message_ids: set[int] = set()  # replaced, never mutated
    _flushed_db_message_session_id: str | None = None
    _persist_disabled: bool = False
    _memory_provider: MemoryProvider | None = None
    _consecutive_flush_failures: int = 0
    _memory_shut_down: bool = False
    _closed: bool = False
    #: Whether ``close()`` marks the session row ended. The gateway clears it
    #: when it retires a cached agent whose conversation goes on.
    _end_session_on_close: bool = True
    _interrupt_reason: str | None = None
    #: The session whose row ``_session_db_created`` refers to (None: the current one).
    _session_row_for: str | None = None
    #: The session whose recovery spool is known to be empty.
    _spool_clear_for: str | None = None

    # -- per-instance helpers, created on first use -------------------------

    def _instance_helper(self, name: str, factory: type[Any]) -> Any:
        # dict.setdefault is atomic under the GIL: two threads get one helper.
        return self.__dict__.setdefault(name, factory())

    def _persist_lock(self) -> threading.Lock:
        lock: threading.Lock = self._instance_helper("_session_persist_lock", threading.Lock)
        return lock

    def _flush_tracker(self) -> FlushTracker:
        tracker: FlushTracker = self._instance_helper("_db_flush_tracker", FlushTracker)
        return tracker

    def _interrupt_flag(self) -> threading.Event:
        """Set when the agent is asked to stop; tools wait on it to abort."""
        event: threading.Event = self._instance_helper("_interrupt_event", threading.Event)
        return event

    # -- the flush ----------------------------------------------------------

    def _flush_messages_to_session_db(
        self,
        messages: Sequence[Any],
        conversation_history: Sequence[Any] | None = None,
    ) -> bool | None:
        """Writes every dict of ``messages`` not yet in the database, in list
        order, in one transaction with the session's counters.

        Returns True (written, or nothing new), False (failed: nothing was
        committed and the same messages are retried next time; after
        repeated failure they go to the recovery spool), or None
        (persistence is off: no database, or disabled for this agent).
        """
        if self._persist_disabled or self._session_db is None:
            return None
        with self._persist_lock():
            return self._flush_locked(self._session_db, messages, conversation_history)

    def _flush_locked(
        self,
        db: SessionDB,
        messages: Sequence[Any],
        history: Sequence[Any] | None,
    ) -> bool:
        session_id = self.session_id
        if not session_id:
            logger.warning("transcript not saved: the agent has no session_id")
            return False
        seed = self._honoured_seed(session_id)
        tracker = self._flush_tracker()
        try:
            self._ensure_session_row(db, session_id)
            self._import_pending_spool(db, session_id)
            db.flush(tracker, session_id, messages, history, seed)
        except (HermesError, OSError) as exc:  # OSError: the spool could not be read
            return self._flush_failed(exc, session_id, messages, history, seed)
        self._flushed_db_message_ids = set()
        self._flushed_db_message_session_id = session_id
        self._last_flushed_db_idx = len(messages)
        self._consecutive_flush_failures = 0
        return True

    def _honoured_seed(self, session_id: str) -> set[int] | None:
        seed = self._flushed_db_message_ids
        if (
            seed
            and self._flushed_db_message_session_id == session_id
            and self._last_flushed_db_idx > 0
        ):
            return seed
        return None

    def _ensure_session_row(self, db: SessionDB, session_id: str) -> None:
        """Creates the session row once per session the agent writes to. A caller that
        set ``_session_db_created`` vouches for the row of the current session."""
        if self._session_db_created and self._session_row_for in (None, session_id):
            self._session_row_for = session_id
            return
        db.create_session(session_id, self.platform or "unknown")
        self._session_db_created = True
        self._session_row_for = session_id

    def _record_usage(self, prompt_tokens: int, completion_tokens: int, model: str) -> None:
        """Adds one model call's usage to the session's token counts
        (``update_token_counts``). A call that reported no usage writes
        nothing; a failure is logged, never the turn's: the counts are bookkeeping."""
        db, session_id = self._session_db, self.session_id
        if (db is None or self._persist_disabled or not session_id
                or not (prompt_tokens or completion_tokens)):
            return
        try:
            db.update_token_counts(session_id, input_tokens=prompt_tokens,
                                   output_tokens=completion_tokens, model=model,
                                   api_call_count=1)
        except HermesError as exc:
            logger.warning("session %s: token counts of a model call not recorded: %s",
                           session_id, exc)

    def _import_pending_spool(self, db: SessionDB, session_id: str) -> None:
        """A spooled tail must reach the database before anything newer.

        Only this agent (after its own failures) or an earlier process for
        the same session can have left a spool, so the file system is asked
        once per session and again only after this agent spooled.
        """
        if self._spool_clear_for == session_id:
            return
        if has_spool(session_id):
            path = spool_path(session_id)
            written = import_spool(db, path)
            logger.warning("session %s: re-imported %d spooled messages from %s", session_id, written, path)
        self._spool_clear_for = session_id

    def _flush_failed(
        self,
        exc: Exception,
        session_id: str,
        messages: Sequence[Any],
        history: Sequence[Any] | None,
        seed: Iterable[int] | None,
    ) -> bool:
        self._consecutive_flush_failures += 1
        must_follow_spool = self._spool_clear_for != session_id and has_spool(session_id)
        if must_follow_spool or self._consecutive_flush_failures >= SPOOL_AFTER_FAILURES:
            self._spool_pending(session_id, messages, history, seed, cause=exc)
            return False
        logger.warning(
            "session %s: flush failed (%s); nothing was committed, the messages are retried on the next flush",
            session_id, exc,
        )
        return False

    def _spool_unflushed(
        self, messages: Sequence[Any], conversation_history: Sequence[Any] | None = None
    ) -> bool:
        """Moves what the database has not taken yet to the recovery spool.

        For the end of a turn whose last flush failed: the next turn starts from the
        stored transcript, so nothing may stay only in memory. True when every message
        is now in the database or the spool.
        """
        session_id = self.session_id
        if self._session_db is None or not session_id:
            return False
        with self._persist_lock():
            return self._spool_pending(session_id, messages, conversation_history,
                                       self._honoured_seed(session_id), cause=None)

    def _spool_pending(
        self,
        session_id: str,
        messages: Sequence[Any],
        history: Sequence[Any] | None,
        seed: Iterable[int] | None,
        cause: Exception | None,
    ) -> bool:
        tracker = self._flush_tracker()
        pending = tracker.pending(session_id, messages, history, seed)
        if not pending:
            # Nothing new, but the seed is used up as by a spool that took something: a
            # seed left standing could be replaced before it was honoured.
            tracker.mark_persisted(session_id, messages, history, seed)
            self._flushed_db_message_ids = set()
            return True
        try:
            path = spool(session_id, self.platform or "unknown", pending)
        except OSError as spool_exc:
            logger.error(
                "session %s: the database refused %d messages (%s) and the recovery spool "
                "could not be written (%s); they stay in memory and are retried on the next flush",
                session_id, len(pending), cause, spool_exc,
            )
            return False
        tracker.mark_persisted(session_id, messages, history, seed)
        self._flushed_db_message_ids = set()
        self._spool_clear_for = None
        logger.error(
            "session %s: %d messages the database refused (%s) were spooled to %s. Fix the "
            "database, then run `hermes sessions recover` (or let the next flush import it).",
            session_id, len(pending), cause or "last flush failed", path,
        )
        return True

    # -- lifecycle ----------------------------------------------------------

    def _drop_trailing_empty_response_scaffolding(self, messages: list[Any] | None = None) -> int:
        """Removes the private retry scaffolding an empty-response recovery
        left at the end of the transcript, and the dangling tool round it
        was retrying, so the next user message does not follow an orphan
        tool result. Returns how many messages were removed."""
        tail = self._session_messages if messages is None else messages
        removed = 0
        while tail and _is_scaffolding(tail[-1]):
            tail.pop()
            removed += 1
        if not removed:
            return 0
        while tail and isinstance(tail[-1], dict) and tail[-1].get("role") == "tool":
            tail.pop()
            removed += 1
        if tail and isinstance(tail[-1], dict) and tail[-1].get("role") == "assistant" and tail[-1].get("tool_calls"):
            tail.pop()
            removed += 1
        return removed

    def shutdown_memory_provider(self, messages: Sequence[dict[str, Any]] | None = None) -> None:
        """Hands the finished conversation to the memory provider, once."""
        if self._memory_shut_down:
            return
        self._memory_shut_down = True
        provider = self._memory_provider
        if provider is not None:
            provider.on_session_end(list(messages if messages is not None else self._session_messages))

    def interrupt(self, reason: str = "interrupted") -> None:
        """Asks the agent to stop between rounds; a running tool is killed."""
        self._interrupt_reason = reason
        self._interrupt_flag().set()

    @property
    def is_interrupted(self) -> bool:
        return self._interrupt_flag().is_set()

    def clear_interrupt(self) -> None:
        self._interrupt_reason = None
        self._interrupt_flag().clear()

    def close(self) -> None:
        """Marks the session row ended (unless ``_end_session_on_close`` is
        False). Does not flush: callers flush first."""
        if self._closed:
            return
        self._closed = True
        db, session_id = self._session_db, self.session_id
        if db is None or not session_id or not self._session_db_created or not self._end_session_on_close:
            return
        try:
            db.end_session(session_id, self._interrupt_reason or "closed")
        except HermesError as exc:
            logger.warning("session %s: could not mark the session ended: %s", session_id, exc)


def _is_scaffolding(message: Any) -> bool:
    return isinstance(message, dict) and any(message.get(flag) for flag in SCAFFOLDING_FLAGS)
