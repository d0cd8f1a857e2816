"""The session database, ``state.db``: sessions, messages, full-text search.

File-compatible with hermes-agent 0.19.0 (schema_version 22): either program
opens, reads and appends to a file the other wrote. The work happens in the
Rust core (:class:`hermes._core.Store`), which releases the GIL for every SQL
statement, fsync and busy wait; this module is its typed, documented face.

``SessionDB`` is synchronous and thread-safe. ``AsyncSessionDB`` offers the
same methods as coroutines that run off the event loop, each declared with the
sync method's exact signature (``get_session = _offloaded(SessionDB.get_session)``),
so ``mypy --strict`` types every awaited result; ``writes_without_waiting``
lets an event loop make a short write itself when no other writer is in the way.
``SCHEMA_VERSION`` (the version we write) and ``SCHEMA_SQL`` (the DDL of a file we
create) carry the names hermes-agent's module gives its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, overload

from hermes._core import SCHEMA_SQL, SCHEMA_VERSION, FlushTracker, Store, set_writes_wait
from hermes.paths import state_db_path

__all__ = [
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "AsyncSessionDB",
    "SessionDB",
    "Synchronous",
    "writes_without_waiting",
]

Synchronous = Literal["FULL", "NORMAL"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

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


class SessionDB:
    """An open ``state.db``.

    ``db_path`` defaults to ``$HERMES_HOME/state.db`` (resolved now, not at
    import). ``synchronous="FULL"`` (the default) makes every write that
    returned survive power loss; ``"NORMAL"`` survives process crashes only.
    A write that finds the database locked retries the whole transaction
    with jitter for up to ``busy_budget`` seconds, then raises
    :class:`~hermes.errors.DatabaseLockedError` having committed nothing.
    """

    def __init__(
        self,
        db_path: str | Path | None = None,
        *,
        synchronous: Synchronous = "FULL",
        busy_budget: float = 10.0,
    ) -> None:
        self.db_path = Path(db_path) if db_path is not None else state_db_path()
        self.synchronous = synchronous
        self._store = Store(self.db_path, synchronous=synchronous, busy_budget=busy_budget)

    def __repr__(self) -> str:
        return f"SessionDB({str(self.db_path)!r}, synchronous={self.synchronous!r})"

    def __enter__(self) -> SessionDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ---------------------------------------------------------

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
            _epoch(started_at) if started_at is not None else None,
        )
        return session_id

    def ensure_session(self, /, session_id: str, source: str = "unknown", **columns: Any) -> str:
        """Same as :meth:`create_session`: makes sure the row exists."""
        return self.create_session(session_id, source, **columns)

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """Every column of the session row, or None if there is none."""
        return self._store.get_session(session_id)

    def message_count(self, session_id: str) -> int | None:
        """The session's live ``message_count`` (None if it does not exist).

        A single indexed read, microseconds: the gateway's coherence guard
        calls it on every turn.
        """
        return self._store.message_count(session_id)

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
        _check_page(limit, offset)
        return self._store.list_sessions(source, limit, offset)

    # -- messages ---------------------------------------------------------

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

    def get_messages(self, session_id: str, include_inactive: bool = False) -> list[dict[str, Any]]:
        """Message rows with every column, ``content`` and JSON columns decoded."""
        return self._store.get_messages(session_id, include_inactive)

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

    def search_messages(
        self,
        query: str,
        source: str | None = None,
        session_id: str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Full-text search (FTS5 syntax: words, ``"phrases"``, ``OR``, ``NOT``,
        ``prefix*``) over content, tool names and tool calls, best match first.

        Each hit is the message row plus ``source``, ``title`` and a
        ``snippet`` with the match between ``>>>`` and ``<<<``. A malformed
        query raises ValueError saying how to fix it.
        """
        _check_page(limit, offset)
        if not query.strip():
            raise ValueError("search query is empty; pass words to look for")
        return self._store.search(query, source, session_id, limit, offset)

    # -- gateway routing and metadata --------------------------------------

    def save_routing_entry(self, session_key: str, entry_json: str, scope: str = "") -> None:
        """Stores the gateway's entry for a session key (one transaction)."""
        self._store.save_routing(session_key, entry_json, scope)

    def load_routing_entries(self, scope: str = "") -> dict[str, str]:
        """Every session key's entry JSON in ``scope``."""
        return dict(self._store.load_routing(scope))

    def delete_routing_entries(self, session_keys: Sequence[str], scope: str = "") -> None:
        self._store.delete_routing(list(session_keys), scope)

    def get_meta(self, key: str) -> str | None:
        return self._store.get_meta(key)

    def set_meta(self, key: str, value: str) -> None:
        self._store.set_meta(key, value)

    def close(self) -> None:
        """Closes the file; later calls raise DatabaseClosedError."""
        self._store.close()


class _offloaded(Generic[_P, _R]):
    """One :class:`SessionDB` method as an :class:`AsyncSessionDB` coroutine with the same
    signature, run in a worker thread: ``get_session = _offloaded(SessionDB.get_session)``.

    The attribute must carry the method's name (checked when the class is made), and the
    call goes to that method of the wrapped DB object (a subclass's override included).
    """

    def __init__(self, method: Callable[Concatenate[SessionDB, _P], _R]) -> None:
        self._name = method.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self._name:
            raise TypeError(f"{owner.__name__}.{name} offloads SessionDB.{self._name}: "
                            "name the coroutine after the method it runs")

    @overload
    def __get__(self, instance: None, owner: type) -> _offloaded[_P, _R]: ...

    @overload
    def __get__(
        self, instance: AsyncSessionDB, owner: type
    ) -> Callable[_P, Coroutine[Any, Any, _R]]: ...

    def __get__(
        self, instance: AsyncSessionDB | None, owner: type
    ) -> _offloaded[_P, _R] | Callable[_P, Coroutine[Any, Any, _R]]:
        if instance is None:
            return self
        method: Callable[_P, _R] = getattr(instance.sync, self._name)

        @functools.wraps(method)
        async def offloaded(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            return await asyncio.to_thread(method, *args, **kwargs)

        return offloaded


class AsyncSessionDB:
    """Every public :class:`SessionDB` method as a coroutine run in a worker thread, so the
    event loop never waits on SQLite. ``sync`` is the wrapped DB (also ``self._db``), for
    the calls that are cheap enough to make on the loop.
    """

    def __init__(self, db: SessionDB) -> None:
        self._db = db

    @property
    def sync(self) -> SessionDB:
        """The wrapped synchronous DB."""
        return self._db

    create_session = _offloaded(SessionDB.create_session)
    ensure_session = _offloaded(SessionDB.ensure_session)
    get_session = _offloaded(SessionDB.get_session)
    message_count = _offloaded(SessionDB.message_count)
    own_appends = _offloaded(SessionDB.own_appends)
    foreign_commit_since_last_look = _offloaded(SessionDB.foreign_commit_since_last_look)
    update_session = _offloaded(SessionDB.update_session)
    end_session = _offloaded(SessionDB.end_session)
    reopen_session = _offloaded(SessionDB.reopen_session)
    list_sessions = _offloaded(SessionDB.list_sessions)
    append_message = _offloaded(SessionDB.append_message)
    append_messages = _offloaded(SessionDB.append_messages)
    flush = _offloaded(SessionDB.flush)
    get_messages = _offloaded(SessionDB.get_messages)
    get_messages_as_conversation = _offloaded(SessionDB.get_messages_as_conversation)
    has_platform_message_id = _offloaded(SessionDB.has_platform_message_id)
    search_messages = _offloaded(SessionDB.search_messages)
    save_routing_entry = _offloaded(SessionDB.save_routing_entry)
    load_routing_entries = _offloaded(SessionDB.load_routing_entries)
    delete_routing_entries = _offloaded(SessionDB.delete_routing_entries)
    get_meta = _offloaded(SessionDB.get_meta)
    set_meta = _offloaded(SessionDB.set_meta)
    close = _offloaded(SessionDB.close)


@contextlib.contextmanager
def writes_without_waiting() -> Iterator[None]:
    """Within the block, every write made on this thread (to any ``SessionDB``) starts at once
    or raises :class:`hermes.errors.WriterBusyError` having written nothing: when another write
    of the same store is running or queued, or another process holds the file's write lock.

    For an event loop: it may commit a short write itself (a thread hop costs more than the
    commit at ``synchronous="NORMAL"``) but must never sit waiting for another writer. Retry a
    ``WriterBusyError`` off the loop.
    """
    waited = set_writes_wait(False)
    try:
        yield
    finally:
        set_writes_wait(waited)


def _epoch(value: float | datetime) -> float:
    return value.timestamp() if isinstance(value, datetime) else float(value)


def _check_page(limit: int, offset: int) -> None:
    if limit < 0 or offset < 0:
        raise ValueError(f"limit={limit} and offset={offset} must be >= 0")
