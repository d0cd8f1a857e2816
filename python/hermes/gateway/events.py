"""The types the runner and the platform adapters exchange: where a message came from, the
message itself, and what sending a reply achieved.

They belong to the gateway core, so that the core (turn pipeline, transcript, session store)
never imports the adapter layer (``hermes.gateway.platforms``). Adapters find them re-exported
in ``hermes.gateway.platforms.base`` beside ``BasePlatformAdapter``; ``SessionSource`` is also
re-exported by ``hermes.gateway.session``, which keys conversations by it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from hermes.gateway.config import Platform

__all__ = ["MessageEvent", "MessageHandler", "SendResult", "SessionSource"]

if TYPE_CHECKING:
    from hermes.gateway.client_turn import ClientTurn


@dataclass(frozen=True)
class SessionSource:
    """Where a message came from: enough to route the reply and to key the conversation."""

    platform: Platform
    chat_id: str
    chat_type: str = "dm"  # "dm", "group", "channel" or "thread"
    user_id: str | None = None
    user_name: str | None = None
    thread_id: str | None = None
    chat_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "platform": self.platform.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionSource:
        """Ignores keys it does not know (entries written by other gateway versions)."""
        known = {f.name for f in fields(cls)} - {"platform"}
        return cls(platform=Platform(data["platform"]),
                   **{k: v for k, v in data.items() if k in known})


@dataclass
class MessageEvent:
    """One inbound message, normalised; ``message_id`` is the platform's own id (for dedupe).

    ``client`` is set by request/response clients (the api_server): the conversation the
    client sent or names, and the place the turn reports back to (``hermes.gateway.client_turn``).
    """

    text: str
    source: SessionSource
    message_id: str | None = None
    client: ClientTurn | None = None


@dataclass(frozen=True)
class SendResult:
    """What a send achieved; adapters report failures here instead of raising."""

    success: bool
    message_id: str | None = None
    error: str | None = None


#: The runner's handler an adapter hands each event to; it returns the reply (or ``None``).
MessageHandler = Callable[[MessageEvent], Awaitable["str | None"]]
