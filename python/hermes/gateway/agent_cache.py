"""One cached agent per conversation, so the model provider's prompt cache stays warm.

An agent is reused for the next turn of its conversation only while nothing that shaped it
changed: its *signature* (model, a hash of the credentials, endpoint, tools, prompt and the
rest of the settings it was built with) and the conversation itself. The second part is the
cross-process **coherence guard**: each entry keeps the session's ``message_count`` as of the
last time this process knew the transcript. Another process writing the session (a second
gateway, the CLI) moves the live count away from that snapshot, and the agent is rebuilt from
the database instead of answering from a stale view. After its own writes the runner
re-baselines the snapshot (``rebaseline``) so the guard never fires on them. The re-baseline
is exact: it also records how many rows this process had written (``SessionDB.own_appends``),
and when the count grew by more than that since the snapshot, another process wrote during
the turn, so the snapshot is left behind and the next turn rebuilds the agent.

Entries are ``(agent, signature, message_count_snapshot, session_id)``; the 3-tuple form
without ``session_id`` is accepted too. The dict and its ``threading.Lock`` belong to the
runner (``_agent_cache``/``_agent_cache_lock``); ``AgentCache`` is a view that applies the
rules. Nothing slow happens under the lock: evicted agents are handed back to the caller,
which releases them afterwards (closing an agent can take seconds).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Collection, Mapping
from typing import Any

CacheEntry = tuple[Any, ...]

_SECRET_KEYS = frozenset({"api_key", "key", "token", "password"})


def agent_signature(build_kwargs: Mapping[str, Any]) -> str:
    """A stable digest of everything an agent is built from; secrets enter only as hashes."""
    blob = json.dumps(_plain(dict(build_kwargs)), sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return {str(k): (_secret_digest(v) if k in _SECRET_KEYS else _plain(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    return value


def _secret_digest(value: Any) -> str:
    # The full secret is hashed, not a prefix: tokens of one provider often share a prefix.
    return hashlib.sha256(str(value).encode()).hexdigest() if value else ""


class AgentCache:
    """LRU + idle-TTL rules over the runner's cache dict (insertion order = recency)."""

    def __init__(
        self,
        entries: dict[str, CacheEntry],
        lock: threading.Lock,
        used_at: dict[str, float],
        own_at: dict[str, int],
        *,
        capacity: int,
        idle_ttl: float,
    ) -> None:
        self._entries = entries
        self._lock = lock
        self._used_at = used_at
        # Rows this process had written to the entry's session when its snapshot was taken.
        self._own_at = own_at
        self._capacity = capacity
        self._idle_ttl = idle_ttl

    def checkout(
        self, key: str, signature: str, session_id: str, live_count: int | None
    ) -> tuple[Any | None, list[Any]]:
        """The reusable agent for ``key`` (or ``None``) and the agents evicted to decide so.

        Reuse needs the same signature, the same session and — the guard — a live message
        count equal to the snapshot. An unknown live count (the read failed) reuses: a
        spurious rebuild costs the prompt cache, a missed foreign write costs nothing that
        the next turn's transcript reload does not repair.
        """
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None, []
            agent, cached_signature, snapshot = entry[0], entry[1], entry[2]
            cached_session = entry[3] if len(entry) > 3 else session_id
            if (cached_signature == signature and cached_session == session_id
                    and (live_count is None or live_count == snapshot)):
                self._entries[key] = self._entries.pop(key)  # most recently used
                self._used_at[key] = time.monotonic()
                return agent, []
            return None, [self._remove(key)]

    def put(self, key: str, agent: Any, signature: str, count: int, session_id: str,
            busy: Collection[str], own: int | None = None) -> list[Any]:
        """Cache ``agent``; returns the least recently used agents pushed out by the cap.

        Agents of conversations in ``busy`` (running a turn) are never pushed out, so the
        cache may briefly exceed its cap when every cached conversation is busy.
        """
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = (agent, signature, count, session_id)
            self._used_at[key] = time.monotonic()
            self._remember_own(key, own)
            excess = len(self._entries) - self._capacity
            victims = [k for k in self._entries if k != key and k not in busy][:max(excess, 0)]
            return [self._remove(k) for k in victims]

    def rebaseline(self, key: str, session_id: str, live_count: int,
                   own: int | None = None) -> bool:
        """Record ``live_count`` as the snapshot after this process's own writes.

        Skipped when the entry belongs to another session (the key moved on, e.g. ``/new``):
        its snapshot counts a different transcript. Skipped too when ``own`` (rows this
        process has written to the session) shows the count grew by more than this process
        wrote since the snapshot: another process wrote meanwhile, and the stale snapshot
        makes the next turn rebuild the agent from the database.
        """
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (len(entry) > 3 and entry[3] != session_id):
                return False
            own_then = self._own_at.get(key)
            if own is not None and own_then is not None and live_count - entry[2] != own - own_then:
                return False
            self._entries[key] = (*entry[:2], live_count, *entry[3:])
            self._remember_own(key, own)
            return True

    def _remember_own(self, key: str, own: int | None) -> None:
        if own is None:
            self._own_at.pop(key, None)
        else:
            self._own_at[key] = own

    def sweep_idle(self, busy: Collection[str]) -> list[Any]:
        """Remove agents unused for longer than the idle TTL; returns them for release."""
        cutoff = time.monotonic() - self._idle_ttl
        with self._lock:
            idle = [k for k in self._entries
                    if k not in busy and self._used_at.get(k, 0.0) < cutoff]
            return [self._remove(k) for k in idle]

    def evict(self, key: str, agent: Any | None = None) -> Any | None:
        """Drop the conversation's agent — only if it is ``agent``, when given; returns it."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (agent is not None and entry[0] is not agent):
                return None
            return self._remove(key)

    def clear(self) -> list[Any]:
        """Empty the cache (shutdown); returns every agent it held."""
        with self._lock:
            return [self._remove(k) for k in list(self._entries)]

    def _remove(self, key: str) -> Any:
        self._used_at.pop(key, None)
        self._own_at.pop(key, None)
        return self._entries.pop(key)[0]
