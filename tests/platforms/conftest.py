"""Fixtures for the platform tests: a fake Telegram Bot API and in-process runners on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from gateway.conftest import _fresh_script_counters, home
from support.events import SCRIPTED
from support.fake_telegram import FakeTelegram

from hermes.gateway.config import GatewayConfig, Platform, PlatformConfig
from hermes.gateway.run import GatewayRunner

# The gateway tests' isolated $HERMES_HOME and scripted-agent reset serve here too.
__all__ = ["_fresh_script_counters", "home"]

TOKEN = "123456:TEST-token-never-logged-9f8e7d6c5b4a"
ALLOWED = ("42", "43")

TelegramRunner = Callable[..., Coroutine[Any, Any, GatewayRunner]]


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram(TOKEN) as fake:
        yield fake


@pytest_asyncio.fixture
async def telegram_runner(home: Path, telegram: FakeTelegram) -> AsyncIterator[TelegramRunner]:
    """Start runners whose only platform is Telegram on the fake server, with the scripted
    agent; ``extra`` and ``platform`` keywords adjust the platform's settings."""
    started: list[GatewayRunner] = []

    async def start(*, extra: dict[str, Any] | None = None, **platform: Any) -> GatewayRunner:
        settings: dict[str, Any] = {"enabled": True, "token": TOKEN, "allowed_users": ALLOWED,
                                    **platform}
        settings["extra"] = {"base_url": telegram.url, "busy_poll_interval": 0.2,
                             "typing_interval": 0.3, **(extra or {})}
        config = GatewayConfig(platforms={Platform.TELEGRAM: PlatformConfig(**settings)},
                               agent_factory=SCRIPTED, drain_timeout=2.0, interrupt_grace=0.5)
        runner = GatewayRunner(config)
        started.append(runner)
        assert await runner.start()
        return runner

    yield start
    for runner in started:
        await runner.stop()
