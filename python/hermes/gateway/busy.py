"""One turn at a time per conversation: its running slot, its queue, its run generations.

A conversation's *running slot* is its key in ``runner._running_agents`` (the value is the
agent once built, ``PENDING`` before). The first message of an idle conversation claims the
slot and starts the conversation's worker; a message arriving while the slot is taken joins
the conversation's queue (``runner._pending_messages``) and its sender waits for its own
reply. The worker runs queued messages in arrival order and releases the slot when the queue
is empty — so turns of one conversation never overlap and no message is dropped.

*Run generations* let a command (``/new``, ``/stop``) disown a turn that is still running:
the turn's generation is no longer current when it finishes, and its result is dropped
instead of landing in the conversation that replaced it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from dataclasses import dataclass, field

from hermes.gateway.events import MessageEvent

class _Pending:
    """The slot is claimed but the turn's agent is not built yet."""

    def __repr__(self) -> str:
        return "PENDING"


PENDING = _Pending()


@dataclass
class QueuedMessage:
    """A message waiting for its turn, where its reply goes, and its sender's context (so
    per-request context, such as a streaming reply sink, follows the message to its turn)."""

    event: MessageEvent
    reply: asyncio.Future[str | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    context: contextvars.Context = field(default_factory=contextvars.copy_context)

    def resolve(self, reply: str | None) -> None:
        """Hand over the reply unless the sender stopped waiting (disconnected)."""
        if not self.reply.done():
            self.reply.set_result(reply)


MessageQueues = dict[str, deque[QueuedMessage]]


def enqueue(queues: MessageQueues, session_key: str, event: MessageEvent) -> QueuedMessage:
    item = QueuedMessage(event)
    queues.setdefault(session_key, deque()).append(item)
    return item


def next_queued(queues: MessageQueues, session_key: str) -> QueuedMessage | None:
    """Pop the conversation's oldest waiting message; forgets the queue once empty."""
    waiting = queues.get(session_key)
    if not waiting:
        queues.pop(session_key, None)
        return None
    item = waiting.popleft()
    if not waiting:
        del queues[session_key]
    return item


class RunGenerations:
    """A counter per conversation; a turn is current while its number is the latest."""

    def __init__(self) -> None:
        self._latest: dict[str, int] = {}

    def begin(self, session_key: str) -> int:
        self._latest[session_key] = self._latest.get(session_key, 0) + 1
        return self._latest[session_key]

    def is_current(self, session_key: str, generation: int) -> bool:
        return self._latest.get(session_key, 0) == generation
