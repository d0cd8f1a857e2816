"""An in-process platform adapter that records what the gateway does with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.platforms.base import BasePlatformAdapter, SendResult


class RecordingAdapter(BasePlatformAdapter):
    """Connects at once; ``sent`` holds ``(chat_id, content)``; ``events`` the lifecycle."""

    def __init__(self, config: PlatformConfig, platform: Platform) -> None:
        super().__init__(config, platform)
        self.sent: list[tuple[str, str]] = []
        self.events: list[str] = []

    async def connect(self) -> bool:
        self.events.append("connect")
        return bool(self.config.extra.get("connects", True))

    async def disconnect(self) -> None:
        self.events.append("disconnect")

    async def send(self, chat_id: str, content: str, reply_to: str | None = None,
                   metadata: Mapping[str, Any] | None = None) -> SendResult:
        self.sent.append((chat_id, content))
        return SendResult(success=True)
