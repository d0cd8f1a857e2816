"""Continuing a conversation whose turn was cut off by a shutdown or a crash.

Two signals say a turn was cut off:

* the conversation's routing entry is ``resume_pending`` — set by ``stop()`` for every
  conversation with a running turn (before draining, so a crash during the drain still leaves
  it), and at boot for recently active conversations when the previous process did not write
  ``.clean_shutdown``;
* the transcript ends in the middle of a tool round: in a tool result the model never saw, or
  in tool calls that got no result (a crash can cut a turn off without any flag, e.g. a turn
  running longer than the boot check's window). A transcript ending in a user message gets no
  note: answering it is right whether a crash or another writer (a cron job) left it there.

The next message of such a conversation gets a system note in front of it, so the model
neither silently continues stale work nor re-runs tool calls with side effects. Notes are
only added while the interruption is fresh (``GatewayConfig.resume_freshness``): a week-old
interruption is history, not context.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from hermes.gateway.session import AsyncSessionStore, SessionEntry

CLEAN_SHUTDOWN_MARKER = ".clean_shutdown"

TOOL_TAIL_NOTE = (
    "[System note: the conversation history ends with tool output from a turn that was "
    "interrupted. Ignore the pending tool outputs and do not re-run their tool calls. "
    "Answer the new message below first.]"
)

_REASONS = {
    "shutdown_timeout": "the gateway shut down",
    "restart_interrupted": "the gateway stopped unexpectedly",
}


def resume_note(reason: str | None) -> str:
    """The note for a ``resume_pending`` conversation; ``reason`` is its ``resume_reason``."""
    cause = _REASONS.get(reason or "", "the gateway was interrupted")
    return (
        f"[System note: your previous turn in this conversation did not finish because "
        f"{cause} while it was running. The history may end in the middle of that turn. "
        "Do not repeat its tool calls. Answer the new message below first, and tell the user "
        "briefly if the earlier request was left unfinished.]"
    )


def _is_fresh(moment: datetime | float | None, window: float, now: float) -> bool:
    if window <= 0 or moment is None:
        return True  # no gate configured, or no timestamp to judge (older transcripts)
    seconds = moment.timestamp() if isinstance(moment, datetime) else float(moment)
    return now - seconds <= window


def annotate(
    message: str,
    entry: SessionEntry,
    history: Sequence[Mapping[str, Any]],
    freshness: float,
    now: float | None = None,
) -> str:
    """``message`` with the note its conversation's state calls for (or unchanged)."""
    now = time.time() if now is None else now
    last_row = history[-1].get("timestamp") if history else None
    if entry.resume_pending and (_is_fresh(entry.last_resume_marked_at, freshness, now)
                                 or _is_fresh(last_row, freshness, now)):
        return f"{resume_note(entry.resume_reason)}\n\n{message}"
    note = _cut_off_note(history[-1]) if history else None
    if note is not None and _is_fresh(last_row, freshness, now):
        return f"{note}\n\n{message}"
    return message


def _cut_off_note(last: Mapping[str, Any]) -> str | None:
    """The note for a transcript whose last row shows a tool round did not finish."""
    role = last.get("role")
    if role == "tool" or (role == "assistant" and last.get("tool_calls")):
        return TOOL_TAIL_NOTE
    return None


def turn_completed(result: Mapping[str, Any]) -> bool:
    """Whether a turn really finished, so its conversation's resume flag may be cleared.

    An interrupted or failed turn keeps the flag: the interruption is still unanswered.
    """
    return not (result.get("interrupted") or result.get("failed") or result.get("error")
                or result.get("completed") is False)


async def mark_if_unclean_boot(store: AsyncSessionStore, home: Path, window: float) -> int:
    """At start-up: consume ``.clean_shutdown``, or, if it is missing, flag the conversations
    active within ``window`` seconds (their turns may have died with the previous process).

    Returns how many conversations were flagged.
    """
    marker = home / CLEAN_SHUTDOWN_MARKER
    if marker.exists():
        marker.unlink()
        return 0
    return await store.call(lambda s: s.mark_recently_active_resume_pending(window))
