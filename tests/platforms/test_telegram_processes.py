"""Real ``hermes`` gateway processes on Telegram (the fake Bot API) with the real agent.

Signals are real (SIGTERM, SIGKILL), so is ``state.db``; the model is the rule-based fake
endpoint, whose requests show what the model received. "Answered" means a message the bot
sent replying to the user's message, as the fake Bot API recorded it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from platforms.conftest import TOKEN
from support.echo_model import LONG_REPLY, EchoModel
from support.fake_telegram import LOSE, SEND, FakeTelegram, utf16_units
from support.processes import child_env
from support.telegram_process import TelegramGatewayProcess

from hermes.gateway.resume import resume_note
from hermes.state import SessionDB

pytestmark = pytest.mark.asyncio

Launcher = Callable[..., TelegramGatewayProcess]


@pytest.fixture
def model() -> Iterator[EchoModel]:
    with EchoModel() as fake:
        yield fake
        fake.release()


@pytest_asyncio.fixture
async def launch(tmp_path: Path, telegram: FakeTelegram,
                 model: EchoModel) -> AsyncIterator[Launcher]:
    """Start gateway processes on one home and one state.db; any left running is killed."""
    processes: list[TelegramGatewayProcess] = []

    def start() -> TelegramGatewayProcess:
        process = TelegramGatewayProcess(tmp_path / "home", tmp_path / "state.db", telegram,
                                         model)
        processes.append(process)
        return process.start()

    yield start
    for process in processes:
        process.kill()


def _user_rows(state_db: Path, platform_id: int) -> list[dict[str, Any]]:
    with SessionDB(state_db) as db:
        return [m for s in db.list_sessions() for m in db.get_messages(s["id"])
                if m["role"] == "user" and m["platform_message_id"] == str(platform_id)]


async def _stopped(process: TelegramGatewayProcess) -> int:
    return await asyncio.to_thread(process.stop)


async def test_conversations_long_reply_and_no_secret_at_rest(
        launch: Launcher, telegram: FakeTelegram, tmp_path: Path) -> None:
    gateway = launch()
    dm, group = telegram.chat(42), telegram.chat(-1001, "supergroup")
    hello = telegram.message(dm, "hello", user=42)
    mine = telegram.message(group, "mine", user=42)
    yours = telegram.message(group, "yours", user=43)
    for message in (hello, mine, yours):
        await telegram.wait_for(lambda: telegram.replies_to(message), what=message["text"])
    assert telegram.replies_to(hello) == ["echo: hello"]
    assert telegram.replies_to(yours) == ["echo: yours"]

    asked = telegram.message(dm, "a long reply please", user=42)
    await telegram.wait_for(lambda: telegram.sent_to(42)[-1]["text"].rstrip().endswith("all of it."),
                            what="the whole long reply")
    parts = [s for s in telegram.sent_to(42) if s["reply_to"] != hello["message_id"]]
    assert len(LONG_REPLY) > 5000 and len(parts) >= 2
    assert parts[0]["reply_to"] == asked["message_id"]
    assert all(utf16_units(p["text"]) <= 4096 and p["text"].count("```") % 2 == 0 for p in parts)
    assert "".join("".join(p["text"] for p in parts).split()).replace("```python", "").replace(
        "```", "") == "".join(LONG_REPLY.split()).replace("```python", "").replace("```", "")
    assert await _stopped(gateway) == 0

    with SessionDB(tmp_path / "state.db") as db:
        keys = set(db.load_gateway_routing_entries())
        session_id = next(s["id"] for s in db.list_sessions() if s["chat_type"] == "dm")
    assert keys == {"agent:main:telegram:dm:42", "agent:main:telegram:group:-1001:42",
                    "agent:main:telegram:group:-1001:43"}
    export = subprocess.run(
        [sys.executable, "-c", "import sys; from hermes.cli import main; sys.exit(main())",
         "sessions", "export", session_id, "--format", "jsonl"],
        env=child_env(gateway.home), capture_output=True, text=True, check=True).stdout
    assert "a long reply please" in export
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name.startswith("state.db") for p in files) and gateway.log_path in files
    secret = TOKEN.split(":")[1]
    for path in files:
        assert secret.encode() not in path.read_bytes(), path
    assert secret not in export


async def test_sigterm_mid_turn_then_restart(launch: Launcher, telegram: FakeTelegram,
                                             model: EchoModel, tmp_path: Path) -> None:
    gateway = launch()
    dm = telegram.chat(42)
    question = telegram.message(dm, "hold on, question one", user=42)
    await telegram.wait_for(lambda: model.arrived, what="the model call")
    assert await _stopped(gateway) == 0  # the model call never returned: the turn is cut off
    notices = telegram.sent_to(42)
    assert [n["reply_to"] for n in notices] == [None] and "shutting down" in notices[0]["text"]
    assert telegram.pending_ids() != []  # never confirmed: Telegram still has it

    model.release()
    restarted = launch()
    await telegram.wait_for(lambda: telegram.replies_to(question), what="the resumed answer")
    resumed = model.arrived[-1]
    assert resumed.startswith(resume_note("shutdown_timeout"))  # the note reached the model
    assert resumed.endswith("hold on, question one")
    follow_up = telegram.message(dm, "question two", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(follow_up))
    await telegram.wait_for(lambda: not telegram.pending_ids(), what="everything confirmed")
    assert await _stopped(restarted) == 0

    assert telegram.replies_to(question) == [f"echo: {resumed}"]  # answered once ...
    assert telegram.replies_to(follow_up) == ["echo: question two"]  # ... each of them
    assert len(telegram.sent_to(42)) == 3  # the notice and the two answers, nothing else
    rows = _user_rows(tmp_path / "state.db", question["message_id"])
    assert [r["content"] for r in rows] == ["hold on, question one"] * 2  # cut off, then run


async def test_kill9_after_the_turn_before_the_reply_went_out(
        launch: Launcher, telegram: FakeTelegram, model: EchoModel, tmp_path: Path) -> None:
    gateway = launch()
    dm = telegram.chat(42)
    question = telegram.message(dm, "what is 6 x 7?", user=42)

    def die_instead(record: dict[str, Any]) -> str:
        if record["reply_to"] != question["message_id"]:
            return SEND
        os.kill(gateway.pid, signal.SIGKILL)  # the turn is stored; the reply never leaves
        return LOSE

    telegram.on_send = die_instead
    await asyncio.to_thread(gateway.process.wait, 30)  # type: ignore[union-attr]
    assert gateway.process is not None and gateway.process.returncode == -signal.SIGKILL
    assert telegram.replies_to(question) == []
    telegram.on_send = None

    restarted = launch()
    await telegram.wait_for(lambda: telegram.replies_to(question), what="the stored reply")
    follow_up = telegram.message(dm, "thanks", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(follow_up))
    await telegram.wait_for(lambda: not telegram.pending_ids(), what="everything confirmed")
    assert await _stopped(restarted) == 0

    assert telegram.replies_to(question) == ["echo: what is 6 x 7?"]
    assert model.arrived.count("what is 6 x 7?") == 1  # the stored reply, not a new answer
    assert len(_user_rows(tmp_path / "state.db", question["message_id"])) == 1  # nothing lost


async def test_kill9_after_the_reply_went_out_before_it_was_confirmed(
        launch: Launcher, telegram: FakeTelegram, model: EchoModel, tmp_path: Path) -> None:
    gateway = launch()
    dm = telegram.chat(42)
    question = telegram.message(dm, "what is 6 x 9?", user=42)
    update_id = telegram.pending_ids()[-1]

    def cut_the_network_after(record: dict[str, Any]) -> str:
        if record["reply_to"] == question["message_id"]:
            telegram.frozen = True  # from now on nothing the bot confirms counts
        return SEND

    telegram.on_send = cut_the_network_after
    # The bot has sent its answer and asks to confirm it: kill it before that lands.
    await telegram.wait_for(lambda: any(o is not None and o > update_id
                                        for o in telegram.snapshot("polls")),
                            what="the bot confirming the update")
    gateway.kill()
    assert update_id in telegram.pending_ids()  # Telegram will send it again
    telegram.on_send = None
    telegram.frozen = False

    restarted = launch()
    follow_up = telegram.message(dm, "and 6 x 7?", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(follow_up))
    await telegram.wait_for(lambda: not telegram.pending_ids(), what="everything confirmed")
    assert await _stopped(restarted) == 0

    assert telegram.replies_to(question) == ["echo: what is 6 x 9?"]  # not a second time
    first, second = model.arrived  # the redelivered question never reached the model again
    assert first == "what is 6 x 9?" and second.endswith("and 6 x 7?")
    assert len(_user_rows(tmp_path / "state.db", question["message_id"])) == 1
