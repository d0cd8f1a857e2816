"""The contract between the runner and a chat platform: events in, replies out.

An adapter turns whatever its platform delivers into ``MessageEvent`` objects and hands each to
the runner's handler (``set_message_handler``). The handler returns the reply text, or ``None``
when there is nothing to say. Push platforms (chat bots) call ``handle_message``, which sends
the reply with ``send``; request/response platforms (the HTTP api_server) call ``dispatch`` and
put the reply in their response instead.

The event types themselves belong to the gateway core (``hermes.gateway.events``); they are
re-exported here so that an adapter finds its whole contract in one module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.events import MessageEvent, MessageHandler, SendResult

if TYPE_CHECKING:
    from hermes.gateway.session import AsyncSessionStore

__all__ = ["BasePlatformAdapter", "MessageEvent", "MessageHandler", "SendResult"]


class BasePlatformAdapter(ABC):
    """Base of every platform adapter; the runner owns its lifecycle (connect … disconnect)."""

    def __init__(self, config: PlatformConfig, platform: Platform) -> None:
        self.config = config
        self.platform = platform
        self._message_handler: MessageHandler | None = None
        #: The gateway's store, for an adapter that also serves what is stored (the
        #: api_server's sessions and responses); ``None`` until the runner attaches it.
        self.session_store: AsyncSessionStore | None = None

    def set_message_handler(self, handler: MessageHandler) -> None:
        """Called by the runner before ``connect``; events arriving earlier are refused."""
        self._message_handler = handler

    def set_session_store(self, store: AsyncSessionStore) -> None:
        """Called by the runner before ``connect``, with the store its turns use."""
        self.session_store = store

    async def dispatch(self, event: MessageEvent) -> str | None:
        """Run the runner's handler for ``event`` and return the reply (request/response use)."""
        if self._message_handler is None:
            raise RuntimeError(f"{self.platform.value} adapter received a message before the "
                               "gateway runner attached its handler")
        return await self._message_handler(event)

    async def handle_message(self, event: MessageEvent) -> SendResult | None:
        """Run the handler and send a non-empty reply back to the event's chat (push use)."""
        reply = await self.dispatch(event)
        if not reply:
            return None
        return await self.send(event.source.chat_id, reply, reply_to=event.message_id)

    @abstractmethod
    async def connect(self) -> bool:
        """Start receiving messages; ``False`` when the platform cannot be reached."""

    async def stop_receiving(self) -> None:
        """The gateway is stopping: take no new messages from now on (the runner calls it
        first thing in ``stop()``, before the drain); sending must keep working. A platform
        that redelivers what was never confirmed (Telegram) leaves new messages with it for
        the next start. Default: nothing (such a message is told the gateway is stopping)."""

    @abstractmethod
    async def disconnect(self) -> None:
        """Stop receiving and release connections; must be safe to call twice."""

    @abstractmethod
    async def send(
        self,
        chat_id: str,
        content: str,
        reply_to: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SendResult:
        """Deliver ``content`` to ``chat_id`` (used for replies and shutdown notices)."""
