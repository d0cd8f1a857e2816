"""stop(): the order of its phases, their bounds, and what a clean or cut-off stop leaves."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.events import RunnerFactory, event
from support.recording_adapter import RecordingAdapter

from hermes.gateway import shutdown, turn
from hermes.gateway.config import GatewayConfig, Platform
from hermes.gateway.resume import CLEAN_SHUTDOWN_MARKER
from hermes.gateway.run import GatewayRunner
from hermes.gateway.session import SessionStore
from hermes.state import SessionDB

pytestmark = pytest.mark.asyncio


def _record_phases(runner: GatewayRunner, log: list[str]) -> None:
    """Wrap the observable step of each phase so the test sees their order."""
    adapter = runner.adapters[Platform.LOCAL]
    store = runner.session_store
    wrapped = {
        (adapter, "send"): "notify", (store, "mark_resume_pending"): "mark",
        (adapter, "disconnect"): "disconnect", (runner, "_finalize_shutdown_agents"): "finalize",
        (runner, "_close_resources"): "close",
    }
    for (owner, name), label in wrapped.items():
        original = getattr(owner, name)

        def recorder(*args: Any, _original: Any = original, _label: str = label) -> Any:
            log.append(_label)
            return _original(*args)

        setattr(owner, name, recorder)


async def _started(path: Path) -> None:
    for _ in range(250):
        if path.exists():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the turn never reached its tool")


async def test_graceful_stop_drains_and_leaves_the_clean_marker(make_runner: RunnerFactory,
                                                                  home: Path) -> None:
    runner = await make_runner(drain_timeout=5.0)
    log: list[str] = []
    _record_phases(runner, log)
    reply = asyncio.ensure_future(runner._handle_message(event("sleep:0.3")))
    await asyncio.sleep(0.1)
    queued = asyncio.ensure_future(runner._handle_message(event("behind it")))
    await asyncio.sleep(0.05)
    assert await runner.stop() is True
    assert log == ["notify", "mark", "finalize", "disconnect", "close"]
    assert (await reply).startswith("echo: sleep:0.3")
    assert await queued == turn.STOPPING_NOTICE  # not started: the sender is told to resend
    assert await runner._handle_message(event("late")) == turn.STOPPING_NOTICE
    assert (home / CLEAN_SHUTDOWN_MARKER).exists()
    entry = SessionStore(SessionDB(home / "state.db")).get_entry(
        runner._session_key_for(event("").source))
    assert entry is not None and not entry.resume_pending  # the drained turn finished


async def test_drain_timeout_interrupts_flushes_and_skips_the_marker(
        make_runner: RunnerFactory, home: Path, tmp_path: Path) -> None:
    runner = await make_runner(drain_timeout=0.3, interrupt_grace=0.2)
    log: list[str] = []
    _record_phases(runner, log)
    release = tmp_path / "release"
    await runner._handle_message(event("before"))
    stuck = asyncio.ensure_future(runner._handle_message(event(f"block:{release}")))
    await _started(Path(f"{release}.started"))
    key = runner._session_key_for(event("").source)
    agent = runner._running_agents[key]
    began = time.monotonic()
    assert await runner.stop() is False
    assert time.monotonic() - began < 3
    assert log == ["notify", "mark", "finalize", "disconnect", "close"]
    assert agent.is_interrupted
    assert not (home / CLEAN_SHUTDOWN_MARKER).exists()

    db = SessionDB(home / "state.db")
    entry = SessionStore(db).get_entry(key)
    assert entry is not None and entry.resume_pending
    assert entry.resume_reason == "shutdown_timeout"
    transcript = db.get_messages_as_conversation(entry.session_id)
    # The in-flight round, which the agent itself never flushed, was saved by the shutdown,
    # and the history the agent was given was not written a second time.
    assert [m["role"] for m in transcript] == [
        "user", "assistant", "session_meta", "user", "assistant"]
    assert transcript[4]["tool_calls"][0]["function"]["name"] == "block"
    release.touch()
    stuck.cancel()


async def test_stop_runs_once(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    adapter = runner.adapters[Platform.LOCAL]
    assert isinstance(adapter, RecordingAdapter)
    assert await asyncio.gather(runner.stop(), runner.stop()) == [True, True]
    assert adapter.events == ["connect", "disconnect"]


class _WedgedAgent:
    """Its cleanup hangs (a memory provider that never answers)."""

    def __init__(self) -> None:
        self._session_messages = [{"role": "user", "content": "x"}]
        self.flushed: list[Any] = []
        self.release = threading.Event()

    def _flush_messages_to_session_db(self, messages: list[Any]) -> bool:
        self.flushed.append(messages)
        return True

    def shutdown_memory_provider(self, messages: Any = None) -> None:
        self.release.wait(10)

    def close(self) -> None:
        pass


async def test_finalize_is_bounded_on_a_bare_runner() -> None:
    runner = object.__new__(GatewayRunner)
    runner.config = GatewayConfig(cleanup_timeout=0.2)
    agent = _WedgedAgent()
    began = time.monotonic()
    assert await runner._finalize_shutdown_agents({"k": agent}) is False
    assert time.monotonic() - began < 2
    assert agent.flushed == [agent._session_messages]
    agent.release.set()


async def test_bounded_reports_failures() -> None:
    async def boom() -> None:
        raise ValueError("x")

    assert await shutdown.bounded(boom(), 1, "a failing step") is False
    assert await shutdown.bounded(asyncio.sleep(0), 1, "a quick step") is True


async def test_stop_writes_the_activity_still_in_memory(make_runner: RunnerFactory,
                                                         home: Path) -> None:
    runner = await make_runner()
    await runner._handle_message(event("one"))
    await runner._handle_message(event("two"))
    key = runner._session_key_for(event("").source)
    in_memory = runner.session_store.get_entry(key)
    assert in_memory is not None and in_memory.last_prompt_tokens > 0
    await runner.stop()
    stored = SessionStore(SessionDB(home / "state.db")).get_entry(key)
    assert stored == in_memory
