"""A message the chat platform delivers again, recognised by its platform message id.

Platforms that redeliver what the gateway never confirmed (Telegram's ``getUpdates`` offset, a
webhook sender's retries) send a message again after a crash. Its user row is then already in
the transcript (the agent stores the platform's id on it: ``platform_message_id``), and what
follows that row says how far its turn got:

* the turn finished (its last row is the model's final answer, not a tool round): the message
  is answered with that stored reply; the model is not asked again and nothing is written. The
  crash came after the turn and before the platform confirmed it: the reply may or may not have
  reached the user, which only the adapter can know (Telegram's keeps a ledger of what it
  sent);
* the turn was cut off (the rows stop at the user message or inside a tool round): the message
  runs again as a new turn. The transcript then holds the message twice, the second time with
  the turn that answered it; the resume note tells the model why.

A later attempt supersedes an earlier one: the last row carrying the id is the one judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StoredAnswer:
    """The reply a redelivered message's finished turn gave, and whether that turn is the
    transcript's last (then nothing of the conversation was cut off)."""

    reply: str
    is_last_turn: bool


def stored_answer(history: Sequence[Mapping[str, Any]],
                  platform_message_id: str) -> StoredAnswer | None:
    """The finished turn of the message ``platform_message_id`` in ``history`` (the agent's
    view of the transcript, oldest first); ``None`` if the message is not there or its turn
    did not finish, so it must run (again)."""
    for index in range(len(history) - 1, -1, -1):
        row = history[index]
        if row.get("role") == "user" and row.get("message_id") == platform_message_id:
            break
    else:
        return None
    end = next((i for i in range(index + 1, len(history)) if history[i].get("role") == "user"),
               len(history))
    last = history[end - 1]
    if end - 1 == index or last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    content = last.get("content")
    if not isinstance(content, str):
        return None
    return StoredAnswer(reply=content, is_last_turn=end == len(history))
