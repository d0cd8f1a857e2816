"""Compression bookkeeping: failure cooldowns, the fallback streak, compression locks.

A compression lock keeps two agents holding the same session (a turn and the background
review forked after it) from both compressing it, which would end the session twice and
leave two continuations. It is a lease: ``holder`` names the owner, and a lock past its
``expires_at`` (its holder crashed) is taken over by the next one asking.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from hermes._core import Delete, Insert, Update
from hermes.state.face import AsyncFace, StoreFace, all_of, offloaded

if TYPE_CHECKING:
    from hermes._core import _Filter as Filter


class CompressionBooks(StoreFace):
    def record_compression_failure_cooldown(
        self, session_id: str, cooldown_until: float, error: str | None = None
    ) -> None:
        """Records that compressing the session failed (``error``) and must not be
        retried before ``cooldown_until`` (seconds since the epoch)."""
        if not session_id:
            return
        self._update_session_row(
            session_id,
            {
                "compression_failure_cooldown_until": cooldown_until,
                "compression_failure_error": error,
            },
        )

    def get_compression_failure_cooldown(self, session_id: str) -> dict[str, Any] | None:
        """The session's cooldown still running (``cooldown_until``, ``remaining_seconds``,
        ``error``), or None (none, over, or no such session)."""
        if not session_id:
            return None
        now = time.time()
        rows = self._store.query(
            "sessions",
            columns=["compression_failure_cooldown_until", "compression_failure_error"],
            where=("=", "id", session_id),
        )
        until = rows[0]["compression_failure_cooldown_until"] if rows else None
        if until is None or float(until) <= now:
            return None
        return {
            "cooldown_until": float(until),
            "remaining_seconds": float(until) - now,
            "error": rows[0]["compression_failure_error"],
        }

    def clear_compression_failure_cooldown(self, session_id: str) -> None:
        """Ends the session's cooldown (compression may be tried again)."""
        if not session_id:
            return
        self._update_session_row(
            session_id,
            {"compression_failure_cooldown_until": None, "compression_failure_error": None},
        )

    def get_compression_fallback_streak(self, session_id: str) -> int:
        """How many compressions in a row fell back to the deterministic summary (0 when
        there is no such session)."""
        if not session_id:
            return 0
        rows = self._store.query(
            "sessions", columns=["compression_fallback_streak"], where=("=", "id", session_id)
        )
        streak = rows[0]["compression_fallback_streak"] if rows else 0
        return max(0, int(streak or 0))

    def set_compression_fallback_streak(self, session_id: str, streak: int) -> None:
        """Records the fallback streak (a negative one counts as 0)."""
        if not session_id:
            return
        self._update_session_row(session_id, {"compression_fallback_streak": max(0, int(streak))})

    def try_acquire_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Takes the session's compression lock for ``ttl_seconds`` (an expired one is taken
        over). True if ``holder`` has it now (it may already have had it); False if
        another holder does, and then the caller must not compress."""
        if not session_id:
            return False
        now = time.time()
        lock = {
            "session_id": session_id,
            "holder": holder,
            "acquired_at": now,
            "expires_at": now + ttl_seconds,
        }
        expired = all_of(("=", "session_id", session_id), ("<", "expires_at", now))
        _, taken = self._store.write(
            [
                Delete("compression_locks", expired),
                Insert("compression_locks", lock, on_conflict="ignore"),
            ]
        )
        return taken == 1 or self._lock_holder(session_id, since=None) == holder

    def refresh_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Extends ``holder``'s lease by ``ttl_seconds`` from now; False if it does not hold
        the lock (any more: an expired lease is not renewed, another may take it)."""
        if not session_id or not holder:
            return False
        now = time.time()
        held = all_of(
            ("=", "session_id", session_id), ("=", "holder", holder), (">=", "expires_at", now)
        )
        [renewed] = self._store.write(
            [Update("compression_locks", held, {"expires_at": now + ttl_seconds})]
        )
        return renewed > 0

    def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Gives the lock back if ``holder`` has it; otherwise (expired and taken by another,
        or none) it does nothing."""
        if not session_id:
            return
        mine = all_of(("=", "session_id", session_id), ("=", "holder", holder))
        self._store.write([Delete("compression_locks", mine)])

    def get_compression_lock_holder(self, session_id: str) -> str | None:
        """Who holds the session's compression lock now (None: nobody, or it expired)."""
        if not session_id:
            return None
        return self._lock_holder(session_id, since=time.time())

    def _lock_holder(self, session_id: str, *, since: float | None) -> str | None:
        where: Filter = ("=", "session_id", session_id)
        if since is not None:
            where = all_of(where, (">=", "expires_at", since))
        rows = self._store.query("compression_locks", columns=["holder"], where=where)
        return str(rows[0]["holder"]) if rows else None


class AsyncCompressionBooks(AsyncFace):
    record_compression_failure_cooldown = offloaded(
        CompressionBooks.record_compression_failure_cooldown
    )
    get_compression_failure_cooldown = offloaded(CompressionBooks.get_compression_failure_cooldown)
    clear_compression_failure_cooldown = offloaded(
        CompressionBooks.clear_compression_failure_cooldown
    )
    get_compression_fallback_streak = offloaded(CompressionBooks.get_compression_fallback_streak)
    set_compression_fallback_streak = offloaded(CompressionBooks.set_compression_fallback_streak)
    try_acquire_compression_lock = offloaded(CompressionBooks.try_acquire_compression_lock)
    refresh_compression_lock = offloaded(CompressionBooks.refresh_compression_lock)
    release_compression_lock = offloaded(CompressionBooks.release_compression_lock)
    get_compression_lock_holder = offloaded(CompressionBooks.get_compression_lock_holder)
