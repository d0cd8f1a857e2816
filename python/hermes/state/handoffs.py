"""Handoffs: a session passed from one platform or agent to another, and its state.

The CLI asks for a session to continue on a gateway platform (``request_handoff``: state
``pending``); the gateway's watcher claims it (``running``) and ends it ``completed`` or
``failed`` (with the error). A session with no handoff has state None. The states live in
the session row (``handoff_state``, ``handoff_platform``, ``handoff_error``).
"""

from __future__ import annotations

from typing import Any

from hermes._core import Update
from hermes.state.face import AsyncFace, StoreFace, all_of, any_of, offloaded

#: The longest error kept with a failed handoff (the rest is cut off).
MAX_HANDOFF_ERROR_CHARS = 500


class Handoffs(StoreFace):
    def request_handoff(self, session_id: str, platform: str) -> bool:
        """Asks for the session to be handed to ``platform``; False when there is no such
        session or a handoff of it is already pending or running."""
        idle = any_of(("is null", "handoff_state"), ("in", "handoff_state", ["completed", "failed"]))
        state = {"handoff_state": "pending", "handoff_platform": platform, "handoff_error": None}
        [changed] = self._store.write(
            [Update("sessions", all_of(("=", "id", session_id), idle), state)]
        )
        return changed == 1

    def get_handoff_state(self, session_id: str) -> dict[str, Any] | None:
        """``{"state", "platform", "error"}`` of the session's handoff (all None when it has
        had none); None when there is no such session."""
        rows = self._store.query(
            "sessions",
            columns=["handoff_state", "handoff_platform", "handoff_error"],
            where=("=", "id", session_id),
            limit=1,
        )
        if not rows:
            return None
        [row] = rows
        return {
            "state": row["handoff_state"],
            "platform": row["handoff_platform"],
            "error": row["handoff_error"],
        }

    def list_pending_handoffs(self) -> list[dict[str, Any]]:
        """The session rows with a pending handoff, longest waiting (oldest session) first."""
        return self._store.query(
            "sessions", where=("=", "handoff_state", "pending"), order_by=["started_at", "id"]
        )

    def claim_handoff(self, session_id: str) -> bool:
        """Takes a pending handoff (it becomes ``running``); False when it is not pending
        (another watcher took it, or there is none)."""
        pending = all_of(("=", "id", session_id), ("=", "handoff_state", "pending"))
        [changed] = self._store.write(
            [Update("sessions", pending, {"handoff_state": "running"})]
        )
        return changed == 1

    def complete_handoff(self, session_id: str) -> None:
        """Marks the handoff done; raises SessionNotFoundError if there is no such session."""
        self._store.update_session(
            session_id, {"handoff_state": "completed", "handoff_error": None}
        )

    def fail_handoff(self, session_id: str, error: str) -> None:
        """Marks the handoff failed with ``error`` (its first 500 characters); raises
        SessionNotFoundError if there is no such session."""
        self._store.update_session(
            session_id,
            {"handoff_state": "failed", "handoff_error": error[:MAX_HANDOFF_ERROR_CHARS]},
        )


class AsyncHandoffs(AsyncFace):
    request_handoff = offloaded(Handoffs.request_handoff)
    get_handoff_state = offloaded(Handoffs.get_handoff_state)
    list_pending_handoffs = offloaded(Handoffs.list_pending_handoffs)
    claim_handoff = offloaded(Handoffs.claim_handoff)
    complete_handoff = offloaded(Handoffs.complete_handoff)
    fail_handoff = offloaded(Handoffs.fail_handoff)
