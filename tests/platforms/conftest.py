"""Fixtures for the platform tests: a fake Telegram Bot API and in-process runners on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from support.events import SCRIPTED
from support.fake_telegram import FakeTelegram

from hermes.gateway.config import GatewayConfig, Platform, PlatformConfig
from hermes.gateway.run import GatewayRunner

TOKEN = "123456:TEST-token-never-logged-9f8e7d6c5b4a"
ALLOWED = ("42", "43")

TelegramRunner = Callable[..., Coroutine[Any, Any, GatewayRunner]]


@pytest.fixture(autouse=True)
def _fresh_script_counters() -> None:
    from support import scripted_agent

    scripted_agent.BUILDS.clear()
    scripted_agent.MAX_CONCURRENT_PER_SESSION.clear()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    hermes_home = tmp_path / "home"
    hermes_home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(hermes_home))
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HERMES_BASE_URL", "HERMES_MODEL"):
        monkeypatch.delenv(variable, raising=False)
    return hermes_home


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
