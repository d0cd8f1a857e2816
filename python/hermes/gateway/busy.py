"""One turn at a time per conversation: its running slot, its queue, its run generations.

A conversation's *running slot* is its key in ``runner._running_agents`` (the value is the
agent once built, ``PENDING`` before). The first message of an idle conversation claims the
slot and starts the conversation's worker; a message arriving while the slot is taken joins
the conversation's queue (``runner._pending_messages``) and its sender waits for its own
reply. The worker runs queued messages in arrival order and releases the slot when the queue
is empty — so turns of one conversation never overlap and no message is dropped. ``Slots``
is that bookkeeping over the runner's dicts; the gateway modules go through it (the runner's
``_slots()``), not into the dicts.

*Run generations* let a command (``/new``, ``/stop``) disown a turn that is still running:
the turn's generation is no longer current when it finishes, and its result is dropped
instead of landing in the conversation that replaced it.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from hermes.gateway.events import MessageEvent, SessionSource


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


@dataclass(frozen=True)
class RunningTurn:
    """A conversation whose slot is taken, as the shutdown sees it."""

    session_key: str
    agent: Any | None  # ``None`` until the turn's agent is chosen
    started_at: float  # ``time.time()`` when the slot was claimed (now, if not recorded)
    source: SessionSource | None  # where to tell the chat that the gateway stops


class Slots:
    """The running slots and queues, over the runner's dicts (it owns them, and hermes-agent's
    regression tests replace them): ``agents`` holds each taken slot's agent or ``PENDING``,
    ``started`` and ``sources`` when and from where it was claimed, ``queues`` the waiting
    messages."""

    def __init__(self, agents: dict[str, Any], started: dict[str, float],
                 sources: dict[str, SessionSource], queues: MessageQueues) -> None:
        self._agents = agents
        self._started = started
        self._sources = sources
        self._queues = queues

    def claim(self, session_key: str, source: SessionSource) -> None:
        self._agents[session_key] = PENDING
        self._started[session_key] = time.time()
        self._sources[session_key] = source

    def release(self, session_key: str) -> None:
        self._agents.pop(session_key, None)
        self._started.pop(session_key, None)
        self._sources.pop(session_key, None)

    def is_running(self, session_key: str) -> bool:
        return session_key in self._agents

    def keys(self) -> Collection[str]:
        """The conversations running a turn (a live view)."""
        return self._agents.keys()

    def set_pending(self, session_key: str) -> None:
        """A turn starts: its agent is not chosen yet, so a message arriving now interrupts
        nothing (the previous turn's agent may be reused by this one)."""
        self._agents[session_key] = PENDING

    def set_agent(self, session_key: str, agent: Any) -> None:
        self._agents[session_key] = agent

    def agent(self, session_key: str) -> Any | None:
        """The running turn's agent; ``None`` if the conversation is idle or still pending."""
        agent = self._agents.get(session_key)
        return None if agent is PENDING else agent

    def turns(self) -> list[RunningTurn]:
        now = time.time()
        return [RunningTurn(key, self.agent(key), self._started.get(key, now),
                            self._sources.get(key)) for key in list(self._agents)]

    def enqueue(self, session_key: str, event: MessageEvent) -> QueuedMessage:
        item = QueuedMessage(event)
        self._queues.setdefault(session_key, deque()).append(item)
        return item

    def next_queued(self, session_key: str) -> QueuedMessage | None:
        """Pop the conversation's oldest waiting message; forgets the queue once empty."""
        waiting = self._queues.get(session_key)
        if not waiting:
            self._queues.pop(session_key, None)
            return None
        item = waiting.popleft()
        if not waiting:
            del self._queues[session_key]
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
