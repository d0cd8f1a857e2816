"""The gateway keeps the books of its sessions in state.db: a title from the first exchange
(the model's, else the first message's),
the reason a session ended (a reset, an expiry), on a started runner with a real database."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.events import RunnerFactory, current_session_id, event, runner_db
from support.fake_openai import FakeOpenAI, Reply

from hermes.config import load_config
from hermes.errors import InvalidSettingError
from hermes.gateway.auto_title import MAX_AUTO_TITLE, title_from
from hermes.gateway.config import SessionResetPolicy
from hermes.gateway.run import GatewayRunner


async def _session(runner: GatewayRunner, chat_id: str = "42", *,
                   until: str | None = None) -> dict[str, Any]:
    """The chat's current session row; with ``until``, once that column is set (the title is
    written in the background)."""
    for _ in range(250):
        row = runner_db(runner).get_session(current_session_id(runner, chat_id))
        assert row is not None
        if until is None or row.get(until) is not None:
            return row
        await asyncio.sleep(0.02)
    raise AssertionError(f"{until} never set: {row}")


@pytest.mark.asyncio
async def test_the_first_exchange_titles_the_session(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    await runner._handle_message(event("Plan a weekend in Lisbon\nwith two kids, in May"))
    assert (await _session(runner, until="title"))["title"] == "Plan a weekend in Lisbon"
    await runner._handle_message(event("and where to eat?"))
    await asyncio.sleep(0.2)
    assert (await _session(runner))["title"] == "Plan a weekend in Lisbon"  # kept

    # The same first words in another chat: numbered, not refused.
    await runner._handle_message(event("Plan a weekend in Lisbon", chat_id="7"))
    assert (await _session(runner, "7", until="title"))["title"] == (
        "Plan a weekend in Lisbon #2")


@pytest.mark.asyncio
async def test_a_title_set_first_is_not_replaced(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    assert await runner._handle_message(event("/title Holidays")) == "Title set: Holidays"
    await runner._handle_message(event("Plan a weekend in Lisbon"))
    await asyncio.sleep(0.3)
    assert (await _session(runner))["title"] == "Holidays"


class _TitlingModel(FakeOpenAI):
    """Answers a title request with ``title`` (a 500 when it is None)."""

    def __init__(self, title: str | None) -> None:
        super().__init__()
        self.title = title

    def next_reply(self, body: dict[str, Any]) -> Reply:
        assert body["messages"][0]["content"].startswith("Name this conversation")
        if self.title is None:
            return Reply(status=500, error="scripted outage")
        return Reply(content=self.title)


@pytest.fixture
def titling_model(monkeypatch: pytest.MonkeyPatch, home: Path) -> Iterator[Callable[..., Any]]:
    """``start(title)``: a model endpoint on loopback that names conversations, configured
    for the gateway (the scripted agent itself never calls it), title generation on."""
    servers: list[_TitlingModel] = []

    def start(title: str | None) -> _TitlingModel:
        server = _TitlingModel(title).__enter__()
        servers.append(server)
        monkeypatch.setenv("HERMES_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("HERMES_MODEL", "titler")
        monkeypatch.setenv("HERMES_TITLE_GENERATION", "true")
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


@pytest.mark.asyncio
async def test_the_model_names_a_platform_conversation(
        make_runner: RunnerFactory, titling_model: Callable[..., Any]) -> None:
    model = titling_model('<think>They want a trip.</think>\nTitle: "Lisbon weekend with kids."')
    runner = await make_runner()
    reply = await runner._handle_message(event("Plan a weekend in Lisbon\nwith two kids"))
    assert (await _session(runner, until="title"))["title"] == "Lisbon weekend with kids"
    # Asked once, shown the first exchange: the user's message and the reply.
    (asked,) = model.requests
    shown = asked["messages"][-1]["content"]
    assert "User: Plan a weekend in Lisbon\nwith two kids" in shown
    assert f"Assistant: {reply}" in shown
    await runner._handle_message(event("and where to eat?"))
    await asyncio.sleep(0.2)
    assert len(model.requests) == 1  # only after the first exchange


@pytest.mark.asyncio
async def test_a_model_that_fails_leaves_the_first_message_as_the_title(
        make_runner: RunnerFactory, titling_model: Callable[..., Any]) -> None:
    model = titling_model(None)
    runner = await make_runner()
    await runner._handle_message(event("Plan a weekend in Lisbon"))
    assert (await _session(runner, until="title"))["title"] == "Plan a weekend in Lisbon"
    assert len(model.requests) == 1  # no retry


@pytest.mark.asyncio
async def test_title_generation_off_asks_nothing(
        make_runner: RunnerFactory, titling_model: Callable[..., Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = titling_model("Never used")
    monkeypatch.setenv("HERMES_TITLE_GENERATION", "false")
    runner = await make_runner()
    await runner._handle_message(event("Plan a weekend in Lisbon"))
    assert (await _session(runner, until="title"))["title"] == "Plan a weekend in Lisbon"
    assert model.requests == []


def test_titles_are_the_first_line_cut_at_a_word() -> None:
    assert title_from("  \n  hello   there \nsecond line") == "hello there"
    long = title_from("word " * 40)
    assert len(long) <= MAX_AUTO_TITLE and long.endswith("word…")
    assert title_from("   ") == ""


@pytest.mark.asyncio
async def test_reset_ends_the_old_session_with_its_reason(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    await runner._handle_message(event("one"))
    old = current_session_id(runner)
    await runner._handle_message(event("/reset"))
    ended = runner_db(runner).get_session(old)
    assert ended is not None and ended["end_reason"] == "session_reset"
    assert ended["ended_at"] is not None

    # A session closed by accident meanwhile (which recovery would reopen) is reset too.
    await runner._handle_message(event("two"))
    closed = current_session_id(runner)
    runner_db(runner).end_session(closed, "agent_close")
    await runner._handle_message(event("/new"))
    assert runner_db(runner).get_session(closed)["end_reason"] == "session_reset"  # type: ignore[index]


@pytest.mark.asyncio
async def test_an_idle_conversation_expires_into_a_new_session(
        make_runner: RunnerFactory) -> None:
    runner = await make_runner(session_reset=SessionResetPolicy(mode="idle",
                                                                idle_minutes=0.5 / 60))
    assert await runner._handle_message(event("one")) == "echo: one [history=0]"
    first = current_session_id(runner)
    assert await runner._handle_message(event("two")) == "echo: two [history=2]"  # not yet
    await asyncio.sleep(0.7)
    assert await runner._handle_message(event("three")) == "echo: three [history=0]"
    second = current_session_id(runner)
    assert second != first
    ended = runner_db(runner).get_session(first)
    assert ended is not None and ended["end_reason"] == "idle"
    assert [m["content"] for m in runner_db(runner).get_messages(first)
            if m["role"] == "user"] == ["one", "two"]


def test_daily_expiry_is_the_first_message_after_the_hour() -> None:
    daily = SessionResetPolicy(mode="daily", at_hour=4)
    at = datetime(2026, 7, 5, 10, 0)
    assert daily.expiry(datetime(2026, 7, 5, 4, 30), at) is None
    assert daily.expiry(datetime(2026, 7, 5, 3, 59), at) == "daily"
    before_four = datetime(2026, 7, 5, 2, 0)
    assert daily.expiry(datetime(2026, 7, 4, 5, 0), before_four) is None
    assert daily.expiry(datetime(2026, 7, 4, 3, 0), before_four) == "daily"
    both = SessionResetPolicy(mode="both", idle_minutes=60, at_hour=4)
    assert both.expiry(datetime(2026, 7, 5, 8, 0), at) == "idle"
    assert SessionResetPolicy().expiry(datetime(2000, 1, 1), at) is None  # "none"


@pytest.mark.parametrize("settings", [{"mode": "weekly"}, {"idle_minutes": 0},
                                      {"at_hour": 24}])
def test_a_bad_reset_policy_is_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(InvalidSettingError, match="session_reset"):
        SessionResetPolicy(**settings)


def test_the_reset_policy_is_read_from_config_yaml(home: Path) -> None:
    (home / "config.yaml").write_text(
        "gateway:\n  session_reset: {mode: both, idle_minutes: 30, at_hour: 6}\n")
    assert load_config().gateway.session_reset == SessionResetPolicy(
        mode="both", idle_minutes=30, at_hour=6)
