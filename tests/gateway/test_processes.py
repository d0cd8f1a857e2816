"""Real gateway processes on loopback: signals, restarts, two processes on one state.db, load.

Each test starts ``hermes.gateway.run.run_gateway`` in subprocesses (``support.gateway_process``)
with the loopback adapter and the scripted agent, and checks ``state.db`` afterwards.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from support.gateway_process import GatewayProcess

from hermes.gateway.resume import CLEAN_SHUTDOWN_MARKER
from hermes.gateway.session import SessionEntry
from hermes.state import SessionDB

pytestmark = pytest.mark.asyncio

Launcher = Callable[..., GatewayProcess]


@pytest_asyncio.fixture
async def launch() -> AsyncIterator[Launcher]:
    """Start gateway processes; any still running at the end is killed."""
    processes: list[GatewayProcess] = []

    def start(home: Path, state_db: Path, **settings: object) -> GatewayProcess:
        process = GatewayProcess(home, state_db, **settings)
        processes.append(process)
        return process.start()

    yield start
    for process in processes:
        process.kill()


def _routing(db: SessionDB) -> dict[str, SessionEntry]:
    return {k: SessionEntry.from_json(v) for k, v in db.load_gateway_routing_entries().items()}


def _conversation(db: SessionDB, chat_id: str) -> tuple[SessionEntry, list[dict[str, object]]]:
    entry = next(e for k, e in _routing(db).items() if k.endswith(f":dm:{chat_id}"))
    return entry, db.get_messages_as_conversation(entry.session_id)


async def _wait_for_file(path: Path, timeout: float = 15.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if path.exists():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


async def test_sigterm_mid_tool_call_then_restart_resumes(launch: Launcher, tmp_path: Path) -> None:
    state_db, home, release = tmp_path / "state.db", tmp_path / "home", tmp_path / "release"
    gateway = launch(home, state_db)
    async with aiohttp.ClientSession() as http:
        assert await gateway.send(http, "c1", "hello") == "echo: hello [history=0]"
        blocked = asyncio.ensure_future(gateway.send(http, "c1", f"block:{release}"))
        await _wait_for_file(Path(f"{release}.started"))
        assert await asyncio.to_thread(gateway.stop) == 0, gateway.log()
        await asyncio.gather(blocked, return_exceptions=True)  # its connection died with it

        db = SessionDB(state_db)
        entry, transcript = _conversation(db, "c1")
        assert entry.resume_pending and entry.resume_reason == "shutdown_timeout"
        assert [m["role"] for m in transcript] == [
            "user", "assistant", "session_meta", "user", "assistant"], (transcript, gateway.log())
        assert transcript[3]["content"] == f"block:{release}"  # the in-flight round survived
        assert transcript[4]["tool_calls"][0]["function"]["name"] == "block"  # type: ignore[index]
        assert not (home / CLEAN_SHUTDOWN_MARKER).exists()
        notices = [json.loads(line) for line in gateway.outbox.read_text().splitlines()]
        assert [n["chat_id"] for n in notices] == ["c1"]
        db.close()

        restarted = launch(home, state_db)
        reply = await restarted.send(http, "c1", "are you there?")
        assert reply is not None
        assert reply.startswith("echo: [System note: your previous turn in this conversation "
                                "did not finish because the gateway shut down"), reply
        assert reply.endswith("are you there? [history=4]")
        assert await restarted.send(http, "c1", "and now?") == "echo: and now? [history=6]"
        assert await asyncio.to_thread(restarted.stop) == 0
    assert (home / CLEAN_SHUTDOWN_MARKER).exists()
    with SessionDB(state_db) as db:
        entry, _ = _conversation(db, "c1")
        assert not entry.resume_pending


async def test_two_processes_share_one_state_db(launch: Launcher, tmp_path: Path) -> None:
    state_db = tmp_path / "state.db"
    first, second = launch(tmp_path / "p1", state_db), launch(tmp_path / "p2", state_db)
    async with aiohttp.ClientSession() as http:
        assert await first.send(http, "x", "one") == "echo: one [history=0]"
        assert await first.send(http, "x", "two") == "echo: two [history=2]"
        assert len(first.builds()) == 1  # turn 2 of a fresh conversation reused its agent

        # The second process continues the same conversation (routing is in state.db) ...
        assert await second.send(http, "x", "three") == "echo: three [history=4]"
        assert len(second.builds()) == 1 and len(first.builds()) == 1
        # ... so the first one's cached agent is stale: rebuilt on its next turn, once.
        assert await first.send(http, "x", "four") == "echo: four [history=6]"
        assert len(first.builds()) == 2
        assert await first.send(http, "x", "five") == "echo: five [history=8]"
        assert len(first.builds()) == 2

        assert await first.send(http, "y", "fresh") == "echo: fresh [history=0]"
        assert await first.send(http, "y", "again") == "echo: again [history=2]"
        assert len(first.builds()) == 3
        for process in (first, second):
            assert await asyncio.to_thread(process.stop) == 0

    with SessionDB(state_db) as db:
        entry, transcript = _conversation(db, "x")
        users = [m["content"] for m in transcript if m["role"] == "user"]
        assert users == ["one", "two", "three", "four", "five"]
        assert set(first.builds()[:2]) == {entry.session_id}


async def test_fifty_conversations_and_a_burst(launch: Launcher, tmp_path: Path) -> None:
    state_db = tmp_path / "state.db"
    gateway = launch(tmp_path / "home", state_db)
    turns, burst = 3, 20

    async def converse(http: aiohttp.ClientSession, chat: str) -> None:
        for n in range(turns):
            reply = await gateway.send(http, chat, f"{chat}-{n}")
            assert reply == f"echo: {chat}-{n} [history={2 * n}]"

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        burst_replies = asyncio.gather(*(gateway.send(http, "burst", f"b{n}")
                                         for n in range(burst)))
        await asyncio.wait_for(asyncio.gather(
            burst_replies, *(converse(http, f"c{i}") for i in range(50))), 50)
    assert sorted(r.split(" [")[0] for r in burst_replies.result()) == sorted(
        f"echo: b{n}" for n in range(burst))
    assert await asyncio.to_thread(gateway.stop) == 0

    with SessionDB(state_db) as db:
        for i in range(50):
            _, transcript = _conversation(db, f"c{i}")
            chat = [m for m in transcript if m["role"] != "session_meta"]
            assert [m["content"] for m in chat if m["role"] == "user"] == [
                f"c{i}-{n}" for n in range(turns)]
            assert [m["role"] for m in chat] == ["user", "assistant"] * turns
        _, transcript = _conversation(db, "burst")
        chat = [m for m in transcript if m["role"] != "session_meta"]
        assert [m["role"] for m in chat] == ["user", "assistant"] * burst
        for position, (asked, answered) in enumerate(zip(chat[::2], chat[1::2])):
            assert answered["content"] == f"echo: {asked['content']} [history={2 * position}]"
        assert sorted(str(m["content"]) for m in chat[::2]) == sorted(f"b{n}" for n in range(burst))
