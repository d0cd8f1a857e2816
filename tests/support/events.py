"""Building inbound messages and runner configs for in-process gateway tests."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from hermes.gateway.config import Platform
from hermes.gateway.platforms.base import MessageEvent
from hermes.gateway.run import GatewayRunner
from hermes.gateway.session import SessionSource
from hermes.state import SessionDB

RECORDING = "support.recording_adapter:RecordingAdapter"
SCRIPTED = "support.scripted_agent:build_agent"

RunnerFactory = Callable[..., Coroutine[Any, Any, GatewayRunner]]


def event(text: str, chat_id: str = "42", *, user_id: str | None = None,
          chat_type: str = "dm", message_id: str | None = None,
          platform: Platform = Platform.LOCAL) -> MessageEvent:
    source = SessionSource(platform=platform, chat_id=chat_id, chat_type=chat_type,
                           user_id=user_id or chat_id)
    return MessageEvent(text=text, source=source, message_id=message_id)


def runner_db(runner: GatewayRunner) -> SessionDB:
    """The started runner's own database handle."""
    assert runner._session_db is not None
    db: SessionDB = runner._session_db.sync
    return db


def current_session_id(runner: GatewayRunner, chat_id: str = "42") -> str:
    """The session the chat ``chat_id`` (built by ``event``) is routed to now."""
    entry = runner.session_store.get_entry(runner._session_key_for(event("", chat_id).source))
    assert entry is not None
    return entry.session_id
