"""Writing a finished turn to the conversation's transcript.

The agent normally writes its own messages as they happen (its flush), and reports so with
``agent_persisted``; the gateway then passes them to the store with ``skip_db=True`` so nothing
is written twice. The gateway itself writes two things to the database:

* on a conversation's first turn, one ``session_meta`` row (tools, model, platform), so a
  transcript says what it was produced with;
* a turn's messages when the agent did not persist them (an agent without a database, or one
  whose flush failed), with the platform's message id on the user message so a redelivered
  message is recognised.

The count re-baseline of the agent cache must come after all of these writes (the runner
does it after ``write_turn`` returns): the ``session_meta`` row, too, moves ``message_count``.

``write_turn`` is synchronous: the turn pipeline runs it, with the routing update that follows,
in one worker thread (``AsyncSessionStore.call``) when ``writes_rows`` says it writes, so a
turn's writes cost one thread hop, and on the event loop otherwise. A turn whose only write is
the ``session_meta`` row (``writes_only_meta``) may commit it on the loop, without waiting for
other writers; a ``WriterBusyError`` then leaves ``write_turn`` unwritten, to be run again in a
thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from hermes.errors import HermesError, WriterBusyError
from hermes.gateway.events import MessageEvent
from hermes.gateway.session import SessionStore

logger = logging.getLogger(__name__)


def _new_messages(result: Mapping[str, Any], event: MessageEvent,
                  history_len: int) -> list[dict[str, Any]]:
    messages: Sequence[Mapping[str, Any]] = result.get("messages") or []
    offset = result.get("history_offset", history_len)
    new = [dict(m) for m in messages[offset:] if m.get("role") != "system"]
    if not new:
        # The agent returned no transcript of its own: keep at least the exchange.
        new = [{"role": "user", "content": event.text}]
        if result.get("final_response"):
            new.append({"role": "assistant", "content": result["final_response"]})
    return new


def _tool_names(tools: Sequence[Any]) -> list[str]:
    """Tool names from OpenAI tool schemas (or names already)."""
    names = []
    for tool in tools:
        if isinstance(tool, Mapping):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
        else:
            name = tool
        names.append(str(name))
    return names


def writes_rows(*, first_turn: bool, result: Mapping[str, Any]) -> bool:
    """Whether ``write_turn`` writes to the database: a ``session_meta`` row on a first turn,
    the turn's messages when the agent did not persist them."""
    return first_turn or not _agent_persisted(result)


def writes_only_meta(*, first_turn: bool, result: Mapping[str, Any]) -> bool:
    """Whether the ``session_meta`` row is ``write_turn``'s only database write (and its first)."""
    return first_turn and _agent_persisted(result)


def _agent_persisted(result: Mapping[str, Any]) -> bool:
    return bool(result.get("agent_persisted", True))


def write_turn(
    store: SessionStore,
    session_id: str,
    event: MessageEvent,
    *,
    first_turn: bool,
    history_len: int,
    result: Mapping[str, Any],
) -> None:
    """Write this turn's rows; ``history_len`` is the length of the history the agent got."""
    now = time.time()
    if first_turn:
        # The description goes in ``content`` (stored as JSON, read back as a dict): the
        # messages table has no columns of its own for it.
        meta = {
            "role": "session_meta",
            "content": {
                "tools": _tool_names(result.get("tools") or []),
                "model": result.get("model"),
                "platform": event.source.platform.value,
            },
            "timestamp": now,
        }
        try:
            store.append_to_transcript(session_id, meta)
        except WriterBusyError:
            raise  # written without waiting, from the event loop: the caller retries in a thread
        except HermesError as exc:
            # A description, not conversation: the next turn writes it (it finds none).
            logger.warning("could not write the session_meta row of %s: %s", session_id, exc)
    skip_db = _agent_persisted(result)
    new = _new_messages(result, event, history_len)
    if not skip_db and event.message_id:
        first_user = next((m for m in new if m.get("role") == "user"), None)
        if first_user is not None:
            if store.has_platform_message_id(session_id, event.message_id):
                new.remove(first_user)  # a redelivery: the message is already stored
            else:
                first_user.setdefault("platform_message_id", event.message_id)
    for message in new:
        message.setdefault("timestamp", now)
        store.append_to_transcript(session_id, message, skip_db=skip_db)
