"""Building inbound messages and runner configs for in-process gateway tests."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from hermes.gateway.config import Platform
from hermes.gateway.platforms.base import MessageEvent
from hermes.gateway.run import GatewayRunner
from hermes.gateway.session import SessionSource

RECORDING = "support.recording_adapter:RecordingAdapter"
SCRIPTED = "support.scripted_agent:build_agent"

RunnerFactory = Callable[..., Coroutine[Any, Any, GatewayRunner]]


def event(text: str, chat_id: str = "42", *, user_id: str | None = None,
          chat_type: str = "dm", message_id: str | None = None,
          platform: Platform = Platform.LOCAL) -> MessageEvent:
    source = SessionSource(platform=platform, chat_id=chat_id, chat_type=chat_type,
                           user_id=user_id or chat_id)
    return MessageEvent(text=text, source=source, message_id=message_id)
