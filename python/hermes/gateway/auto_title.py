"""A conversation's automatic title, set after its first exchange (hermes-agent does the
same, through ``set_auto_title_if_empty``).

hermes-agent asks a model to name the conversation; this title is the user's first message
itself, shortened: no extra model call (nor its cost and delay), the same answer offline.
A title already there (a ``/title`` that came first) is never replaced, and one another
session already has gets a ``#2``, ``#3``, ... suffix.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from hermes.errors import HermesError, TitleInUseError
from hermes.state import SessionDB

logger = logging.getLogger(__name__)

#: Longest automatic title; a longer first message is cut at a word.
MAX_AUTO_TITLE = 60


def is_first_exchange(history: Sequence[dict[str, Any]]) -> bool:
    """Whether a turn with this history before it is the conversation's first exchange."""
    return not any(message.get("role") == "user" for message in history)


def title_from(text: str) -> str:
    """``text``'s first line, whitespace collapsed, cut at a word to ``MAX_AUTO_TITLE``."""
    line = next((line for line in text.splitlines() if line.strip()), "")
    words = " ".join(line.split())
    if len(words) <= MAX_AUTO_TITLE:
        return words
    cut = words[:MAX_AUTO_TITLE - 1].rsplit(" ", 1)[0] or words[:MAX_AUTO_TITLE - 1]
    return cut.rstrip(" ,.;:") + "…"


def set_auto_title(db: SessionDB, session_id: str, first_message: str) -> str | None:
    """Give the session a title from its first message unless it has one; the title set, or
    ``None`` (it had one, or the message has no words)."""
    title = title_from(first_message)
    if not title:
        return None
    try:
        try:
            written = db.set_auto_title_if_empty(session_id, title)
        except TitleInUseError:
            title = db.get_next_title_in_lineage(title)  # "<title> #2", ...
            written = db.set_auto_title_if_empty(session_id, title)
    except HermesError as exc:
        # Bookkeeping: the turn is stored and answered; the session stays untitled.
        logger.warning("could not title session %s: %s", session_id, exc)
        return None
    return title if written else None
