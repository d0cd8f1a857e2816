"""Fixtures for the gateway tests: an isolated $HERMES_HOME and started in-process runners."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from support.events import RECORDING, SCRIPTED, RunnerFactory

from hermes.gateway.config import GatewayConfig, Platform, PlatformConfig
from hermes.gateway.run import GatewayRunner


@pytest.fixture(autouse=True)
def _fresh_script_counters() -> None:
    from support import scripted_agent

    scripted_agent.BUILDS.clear()
    scripted_agent.MAX_CONCURRENT_PER_SESSION.clear()
    scripted_agent.BUILD_GATE = None
    scripted_agent.BUILDING.clear()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    hermes_home = tmp_path / "home"
    hermes_home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(hermes_home))
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HERMES_BASE_URL", "HERMES_MODEL"):
        monkeypatch.delenv(variable, raising=False)
    return hermes_home


@pytest_asyncio.fixture
async def make_runner(home: Path) -> AsyncIterator[RunnerFactory]:
    """Start runners on ``$HERMES_HOME/state.db`` with the recording adapter and the
    scripted agent; whatever a test leaves running is stopped afterwards."""
    started: list[GatewayRunner] = []

    async def start(**settings: Any) -> GatewayRunner:
        platform = settings.pop("platform_config", PlatformConfig(enabled=True, adapter=RECORDING))
        config = GatewayConfig(platforms={Platform.LOCAL: platform}, agent_factory=SCRIPTED,
                               drain_timeout=settings.pop("drain_timeout", 2.0),
                               interrupt_grace=settings.pop("interrupt_grace", 0.5), **settings)
        runner = GatewayRunner(config)
        started.append(runner)
        assert await runner.start()
        return runner

    yield start
    for runner in started:
        await runner.stop()
