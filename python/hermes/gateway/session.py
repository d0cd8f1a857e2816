"""Which conversation a message belongs to, and that conversation's transcript.

A chat message is routed by its *session key* (platform, chat, thread, participant — see
``build_session_key``) to a ``SessionEntry`` that names the current ``session_id`` in
``state.db``. The routing lives in the same database (``gateway_routing``), one row per key
written in its own transaction, so a crash never leaves it half-written and a second gateway
process on the same file finds the conversations the first one started.

Routing changes that matter after a crash (a new conversation, a reset, ``resume_pending``)
are written before the call returns. A turn's activity bookkeeping (``updated_at``,
``last_prompt_tokens``) is kept in memory and written within ``ACTIVITY_WRITE_DELAY`` by a
timer thread, so a turn never waits for it; a crash loses at most that much of it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from hermes.errors import HermesError
from hermes.gateway.config import GatewayConfig, Platform
from hermes.gateway.events import SessionSource

if TYPE_CHECKING:
    from hermes.state import SessionDB

__all__ = ["ACTIVITY_WRITE_DELAY", "AsyncSessionStore", "SessionEntry", "SessionSource",
           "SessionStore", "build_session_key"]

logger = logging.getLogger(__name__)

_P = ParamSpec("_P")
_T = TypeVar("_T")

SESSION_KEY_NAMESPACE = "agent:main"
#: The ``state_meta`` key of ``SessionStore.client_secret``.
CLIENT_SECRET_META_KEY = "hermes.client_conversation_secret"
#: Seconds a turn's activity bookkeeping may wait in memory before it is written.
ACTIVITY_WRITE_DELAY = 1.0


def build_session_key(
    source: SessionSource,
    group_sessions_per_user: bool = True,
    thread_sessions_per_user: bool = False,
) -> str:
    """The conversation a message belongs to, e.g. ``agent:main:telegram:group:-1001:12345``.

    DMs are one conversation per chat (and thread). In groups the participant is appended so
    that people sharing a group do not share an agent's memory, unless the message is in a
    thread: threads are shared by their participants (the usual expectation for forum topics
    and Slack/Discord threads) unless ``thread_sessions_per_user`` is set.
    """
    parts = [SESSION_KEY_NAMESPACE, source.platform.value, source.chat_type]
    if source.chat_type == "dm":
        # Without a chat id the sender still isolates the conversation: never one shared
        # "dm" conversation for every user of a platform.
        owner = source.chat_id or source.user_id
        parts += [p for p in (owner, source.thread_id) if p]
        return ":".join(parts)
    parts += [p for p in (source.chat_id, source.thread_id) if p]
    per_user = thread_sessions_per_user if source.thread_id else group_sessions_per_user
    if per_user and source.user_id:
        parts.append(source.user_id)
    return ":".join(parts)


def _new_session_id() -> str:
    return f"{datetime.now():%Y%m%d_%H%M%S}_{uuid.uuid4().hex[:8]}"


def _parse_time(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


@dataclass
class SessionEntry:
    """A session key's current conversation plus what the gateway remembers about it.

    ``resume_pending`` marks a conversation whose turn a shutdown or crash cut off; the next
    message of it gets a note telling the model so (``hermes.gateway.resume``).
    """

    session_key: str
    session_id: str
    created_at: datetime
    updated_at: datetime
    platform: Platform | None = None
    chat_type: str = "dm"
    origin: SessionSource | None = None
    display_name: str | None = None
    last_prompt_tokens: int = 0
    resume_pending: bool = False
    resume_reason: str | None = None
    last_resume_marked_at: datetime | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "session_key": self.session_key,
            "session_id": self.session_id,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "platform": self.platform.value if self.platform else None,
            "chat_type": self.chat_type,
            "origin": self.origin.to_dict() if self.origin else None,
            "display_name": self.display_name,
            "last_prompt_tokens": self.last_prompt_tokens,
            "resume_pending": self.resume_pending,
            "resume_reason": self.resume_reason,
            "last_resume_marked_at": (self.last_resume_marked_at.isoformat()
                                      if self.last_resume_marked_at else None),
        }
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> SessionEntry:
        data = json.loads(text)
        created = _parse_time(data.get("created_at")) or datetime.now()
        return cls(
            session_key=data["session_key"],
            session_id=data["session_id"],
            created_at=created,
            updated_at=_parse_time(data.get("updated_at")) or created,
            platform=Platform(data["platform"]) if data.get("platform") else None,
            chat_type=data.get("chat_type") or "dm",
            origin=SessionSource.from_dict(data["origin"]) if data.get("origin") else None,
            display_name=data.get("display_name"),
            last_prompt_tokens=int(data.get("last_prompt_tokens") or 0),
            resume_pending=bool(data.get("resume_pending")),
            resume_reason=data.get("resume_reason"),
            last_resume_marked_at=_parse_time(data.get("last_resume_marked_at")),
        )


# Message keys the gateway writes itself (when the agent did not persist a turn); the
# OpenAI-style ``name`` of a tool result is the stored ``tool_name``.
_MESSAGE_COLUMNS = ("content", "tool_call_id", "tool_calls", "tool_name", "reasoning",
                    "reasoning_content", "reasoning_details", "codex_reasoning_items",
                    "codex_message_items", "finish_reason", "token_count",
                    "effect_disposition", "api_content", "timestamp")


def _message_row(message: Mapping[str, Any]) -> dict[str, Any]:
    row = {k: message[k] for k in _MESSAGE_COLUMNS if message.get(k) is not None}
    if "tool_name" not in row and message.get("role") == "tool" and message.get("name"):
        row["tool_name"] = message["name"]
    if message.get("observed"):
        row["observed"] = True
    platform_id = message.get("platform_message_id") or message.get("message_id")
    if platform_id:
        row["platform_message_id"] = str(platform_id)
    return row


class SessionStore:
    """Routing (session key → ``SessionEntry``) and transcripts, both in ``state.db``.

    Thread-safe. Entries are cached in memory; a key this process has not seen is looked up
    in the database first, so conversations started by another gateway process are continued,
    not forked. Two locks: ``_lock`` guards the in-memory entries and is never held across a
    database call, so the event loop can look a known key up without waiting on the
    database; ``_write_lock`` orders the routing writes (always taken before ``_lock``), and
    each write stores the entry as it is in memory at that moment, so an older state never
    overwrites a newer one.
    """

    def __init__(self, db: SessionDB, config: GatewayConfig | None = None, scope: str = "") -> None:
        self._state_db = db
        self._config = config or GatewayConfig()
        self._scope = scope
        self._lock = threading.Lock()
        self._write_lock = threading.RLock()
        self._entries: dict[str, SessionEntry] | None = None
        self._unsaved: set[str] = set()
        self._activity_timer: threading.Timer | None = None
        self._client_secret: bytes | None = None

    @property
    def state_db(self) -> SessionDB:
        """The database the routing and the transcripts live in."""
        return self._state_db

    def _loaded(self) -> dict[str, SessionEntry]:
        """The entries in memory, read from the database on first use. Never call it while
        holding ``_lock`` (it may take ``_write_lock``)."""
        entries = self._entries
        if entries is None:
            with self._write_lock:
                if self._entries is None:
                    self._entries = self._read_entries(skip=set())
                entries = self._entries
        return entries

    def _read_entries(self, skip: set[str]) -> dict[str, SessionEntry]:
        """The database's routing entries, less the keys in ``skip``."""
        entries: dict[str, SessionEntry] = {}
        for key, text in self._state_db.load_gateway_routing_entries(scope=self._scope).items():
            if key in skip:
                continue
            try:
                entries[key] = SessionEntry.from_json(text)
            except (ValueError, KeyError, TypeError) as exc:
                # One unreadable entry must not take every conversation down; its chat
                # starts a new conversation, which overwrites the entry.
                logger.warning("ignoring unreadable routing entry %r in %s: %s", key,
                               self._state_db.location, exc)
        return entries

    def _persist(self, keys: Iterable[str]) -> None:
        """Write the entries of ``keys`` as they are in memory now. Hold ``_write_lock``."""
        entries = self._loaded()
        for key in keys:
            with self._lock:
                entry = entries.get(key)
                self._unsaved.discard(key)
            if entry is not None:
                self._state_db.save_gateway_routing_entry(key, entry.to_json(), scope=self._scope)

    def session_key(self, source: SessionSource) -> str:
        return build_session_key(source, self._config.group_sessions_per_user,
                                 self._config.thread_sessions_per_user)

    def get_entry(self, session_key: str) -> SessionEntry | None:
        return self._loaded().get(session_key)

    def get_or_create_session(self, source: SessionSource,
                              session_id: str | None = None) -> SessionEntry:
        """The key's current conversation; a new one (sessions row + routing) if it has none
        or its conversation expired (the gateway's ``session_reset``; the old one is ended
        ``idle`` or ``daily``), with ``session_id`` as its id when given (such a conversation,
        a client's, never expires). A key already in memory and not expired is answered
        without touching the database."""
        key = self.session_key(source)
        entry = self._loaded().get(key)
        expires = session_id is None  # a caller-named session is the caller's to end
        if entry is not None and not (expires and self._expiry(entry)):
            return entry
        with self._write_lock:
            entry = self._find(key)
            if entry is None:
                return self._create(key, source, session_id)
            reason = self._expiry(entry) if expires else None
            if reason is None:
                return entry
            # Expired (``session_reset``): this message starts the key's next conversation.
            logger.info("conversation %s of %s expired (%s); starting a new one",
                        entry.session_id, key, reason)
            self._state_db.promote_to_session_reset(entry.session_id, reason)
            return self._create(key, entry.origin or source, session_id)

    def _expiry(self, entry: SessionEntry) -> str | None:
        policy = self._config.session_reset
        return None if policy.mode == "none" else policy.expiry(entry.updated_at, datetime.now())

    def has_expired(self, source: SessionSource) -> bool:
        """Whether the key's conversation in memory has expired, so that its next
        ``get_or_create_session`` ends it and writes a new one. Memory only."""
        if self._config.session_reset.mode == "none":
            return False
        entry = self._loaded().get(self.session_key(source))
        return entry is not None and self._expiry(entry) is not None

    def find_session(self, source: SessionSource) -> SessionEntry | None:
        """The key's current conversation, or ``None``: like ``get_or_create_session`` without
        the creating."""
        key = self.session_key(source)
        entry = self._loaded().get(key)
        if entry is not None:
            return entry
        with self._write_lock:
            return self._find(key)

    def _find(self, key: str) -> SessionEntry | None:
        """The key's entry, from memory or else from the database, where another gateway
        process may have started the conversation. Hold ``_write_lock``."""
        entries = self._loaded()
        if key not in entries:
            found = self._read_entries(skip=set(entries))
            with self._lock:
                entries.update(found)
        return entries.get(key)

    def _create(self, key: str, source: SessionSource,
                session_id: str | None = None) -> SessionEntry:
        """A new conversation for ``key``, written. Hold ``_write_lock``."""
        now = datetime.now()
        entry = SessionEntry(
            session_key=key, session_id=session_id or _new_session_id(), created_at=now,
            updated_at=now,
            platform=source.platform, chat_type=source.chat_type, origin=source,
            display_name=source.chat_name or source.user_name,
        )
        # The sessions row first: routing must never point at a session that does not exist.
        self._state_db.create_session(
            entry.session_id, source=source.platform.value, user_id=source.user_id,
            session_key=key, chat_id=source.chat_id, chat_type=source.chat_type,
            thread_id=source.thread_id, display_name=entry.display_name,
            origin_json=json.dumps(source.to_dict(), ensure_ascii=False),
        )
        return self._install(key, entry)

    def _install(self, key: str, entry: SessionEntry) -> SessionEntry:
        """Write ``entry`` as the key's routing, then serve it from memory. Hold
        ``_write_lock``."""
        self._state_db.save_gateway_routing_entry(key, entry.to_json(), scope=self._scope)
        entries = self._loaded()
        with self._lock:
            entries[key] = entry
            self._unsaved.discard(key)
        return entry

    def load_transcript(self, session_id: str) -> list[dict[str, Any]]:
        """The conversation in ``state.db`` order, including ``session_meta`` marker rows."""
        return self._state_db.get_messages_as_conversation(session_id)

    def append_conversation(self, session_id: str,
                            messages: Sequence[Mapping[str, Any]]) -> None:
        """Write message dicts (role and stored keys, as the agent keeps them) in one
        transaction; the dicts are only read."""
        self._state_db.append_messages(session_id, messages)

    def client_secret(self) -> bytes:
        """The random key client conversations are fingerprinted with
        (``hermes.gateway.client_turn``): made once per database and kept in its
        ``state_meta``, so ids stay the same across restarts and processes but cannot be
        computed from outside. Read once per store, then from memory
        (``loaded_client_secret``)."""
        if self._client_secret is not None:
            return self._client_secret
        stored = self._state_db.get_meta(CLIENT_SECRET_META_KEY)
        if stored is None:
            made = secrets.token_hex(32)
            self._state_db.set_meta(CLIENT_SECRET_META_KEY, made)
            # Not kept in memory yet: of two processes making it at the same moment, the
            # last write wins, and the next call reads that one (only the first turn of each
            # may differ).
            return bytes.fromhex(made)
        self._client_secret = bytes.fromhex(stored)
        return self._client_secret

    @property
    def loaded_client_secret(self) -> bytes | None:
        """``client_secret`` once this store has read it, without touching the database."""
        return self._client_secret

    def append_to_transcript(self, session_id: str, message: Mapping[str, Any],
                             skip_db: bool = False) -> None:
        """Write one message row; ``skip_db`` (the agent already wrote it) writes nothing."""
        if skip_db:
            return
        self._state_db.append_message(session_id, message.get("role") or "unknown",
                                **_message_row(message))

    def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        return self._state_db.has_platform_message_id(session_id, platform_message_id)

    def update_session(self, session_key: str, last_prompt_tokens: int | None = None) -> None:
        """Record activity after a turn (``updated_at`` drives the crash-resume window).

        Changes memory only, so the event loop may call it; the entry is written within
        ``ACTIVITY_WRITE_DELAY`` (or by the next routing write, or ``save_activity``)."""
        changes: dict[str, Any] = {"updated_at": datetime.now()}
        if last_prompt_tokens is not None:
            changes["last_prompt_tokens"] = last_prompt_tokens
        entries = self._loaded()
        with self._lock:
            entry = entries.get(session_key)
            if entry is None:
                return
            entries[session_key] = replace(entry, **changes)
            self._unsaved.add(session_key)
            if self._activity_timer is None:
                self._activity_timer = threading.Timer(ACTIVITY_WRITE_DELAY, self.save_activity)
                self._activity_timer.daemon = True
                self._activity_timer.start()

    def save_activity(self) -> None:
        """Write the activity bookkeeping still only in memory (the timer's job; also called
        at shutdown). A failure is logged; the entries stay in memory for the next write."""
        with self._lock:
            if self._activity_timer is not None:
                self._activity_timer.cancel()
                self._activity_timer = None
            keys = list(self._unsaved)
        try:
            with self._write_lock:
                self._persist(keys)
        except HermesError as exc:
            logger.warning("could not write the activity of %d conversation(s): %s",
                           len(keys), exc)
            with self._lock:
                self._unsaved.update(keys)

    def reset_session(self, session_key: str) -> SessionEntry | None:
        """Start a new conversation under the key; the old session row is ended, not deleted."""
        with self._write_lock:
            old = self._loaded().get(session_key)
            if old is None:
                return None
            # As hermes-agent's gateway: an accidental end (agent_close) becomes the reset, so
            # that no recovery reopens what the user left.
            self._state_db.promote_to_session_reset(old.session_id, "session_reset")
            # Entries written by other gateway versions may lack an origin.
            source = old.origin or SessionSource(old.platform or Platform.LOCAL, "")
            return self._create(session_key, source)

    def forget_session(self, session_key: str) -> None:
        """Drop the key's routing entry, in memory and in the database: its next message
        starts a new conversation (a continued client conversation finds none)."""
        with self._write_lock:
            entries = self._loaded()
            with self._lock:
                entries.pop(session_key, None)
                self._unsaved.discard(session_key)
            self._state_db.delete_gateway_routing_entries([session_key], scope=self._scope)

    def switch_session(self, session_key: str, session_id: str,
                       source: SessionSource) -> SessionEntry:
        """Make an existing session the key's current conversation (``/resume``): the one it
        leaves is ended (``resumed_other``), the one it takes up is reopened. A key without
        an entry gets one."""
        with self._write_lock:
            old = self._loaded().get(session_key)
            if old is not None and old.session_id == session_id:
                return old
            if old is not None:
                self._state_db.end_session(old.session_id, "resumed_other")
            self._state_db.reopen_session(session_id)
            now = datetime.now()
            entry = SessionEntry(
                session_key=session_key, session_id=session_id, created_at=now, updated_at=now,
                platform=source.platform, chat_type=source.chat_type,
                origin=old.origin if old is not None and old.origin else source,
                display_name=old.display_name if old is not None else
                source.chat_name or source.user_name,
            )
            return self._install(session_key, entry)

    def mark_resume_pending(self, session_key: str, reason: str) -> bool:
        """Flag the key's conversation as cut off mid-turn; ``False`` if the key is unknown."""
        return self._change(session_key, resume_pending=True, resume_reason=reason,
                            last_resume_marked_at=datetime.now())

    def clear_resume_pending(self, session_key: str) -> bool:
        """Drop the flag after a turn that completed; ``False`` if nothing was flagged."""
        entry = self.get_entry(session_key)
        if entry is None or not entry.resume_pending:
            return False
        return self._change(session_key, resume_pending=False, resume_reason=None,
                            last_resume_marked_at=None)

    def mark_recently_active_resume_pending(self, since_seconds: float,
                                            reason: str = "restart_interrupted") -> int:
        """After an unclean exit: flag conversations active in the last ``since_seconds``."""
        cutoff = datetime.now() - timedelta(seconds=since_seconds)
        entries = self._loaded()
        with self._lock:
            keys = [k for k, e in entries.items()
                    if not e.resume_pending and e.updated_at >= cutoff]
        return sum(self.mark_resume_pending(k, reason) for k in keys)

    def _change(self, session_key: str, **changes: Any) -> bool:
        """Change the key's entry and write it before returning."""
        entries = self._loaded()
        with self._write_lock:
            with self._lock:
                entry = entries.get(session_key)
                if entry is None:
                    return False
                entries[session_key] = replace(entry, **changes)
            self._persist([session_key])
            return True


class AsyncSessionStore:
    """The store's methods as coroutines, run off the event loop.

    It asks ``current()`` for the store on every call instead of holding one, so a runner
    whose ``session_store`` is replaced (tests, a reopened database) is never served by a
    stale store.
    """

    def __init__(self, current: Callable[[], SessionStore]) -> None:
        self._current = current

    async def call(self, work: Callable[Concatenate[SessionStore, _P], _T],
                   *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run ``work(store, ...)`` in one worker thread: several store calls for the price of
        one thread hop (each costs tens of microseconds, more than the calls themselves).
        ``work`` calls the store's methods on the store it is given (never ``SessionStore``'s
        functions directly), so a replaced or stubbed store is honoured."""
        return await asyncio.to_thread(work, self._current(), *args, **kwargs)

    def call_here(self, work: Callable[Concatenate[SessionStore, _P], _T],
                  *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run ``work(store, ...)`` on the calling thread (the event loop). Only for work that
        cannot wait on the database: memory lookups and reads of a few rows, which cost less
        than the thread hop ``call`` pays."""
        return work(self._current(), *args, **kwargs)
