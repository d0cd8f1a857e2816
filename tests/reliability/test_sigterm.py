"""SIGTERM with a stuck tool, and kill -9 inside a tool (issue 7, items 1 and 2).

``tests/gateway/test_processes.py`` covers SIGTERM mid-tool with the scripted agent that
flushes only at turn end (the upstream agent the first seed was written against). These run the
package's own ``AIAgent`` (flushing after every round, ``reliability.rounds_agent``) in a real
gateway process and add what that test does not check: a tool that *honours* the interrupt as
well as one deaf to it, the agent's durable log against state.db, the log lines of each
shutdown phase, what the model is sent after the restart (note and a request an OpenAI
endpoint accepts), and a kill -9 inside a long tool.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
from hermes.gateway.resume import CLEAN_SHUTDOWN_MARKER, TOOL_TAIL_NOTE, resume_note
from hermes.state import SessionDB

from .harness import consistency_problems, entry_for, json_lines, launch, post
from .rounds_agent import marker

pytestmark = pytest.mark.asyncio


async def wait_for(path: Path, timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if path.exists():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def stored(db: SessionDB, chat: str) -> list[str | None]:
    entry = entry_for(db, chat)
    assert entry is not None
    return [marker(m) if m["role"] != "session_meta" else "meta"
            for m in db.get_messages(entry.session_id)]


def requests(home: Path) -> dict[str, dict[str, object]]:
    """The first model request of each turn tag."""
    first: dict[str, dict[str, object]] = {}
    for record in json_lines(home / "requests.log"):
        if record["tag"]:
            first.setdefault(record["tag"], record)
    return first


@pytest.mark.parametrize("tool", ["deaf to the interrupt", "honours the interrupt"])
async def test_sigterm_with_a_stuck_tool_flushes_the_turn_and_the_next_boot_resumes(
        tmp_path: Path, tool: str) -> None:
    home, state_db, release = tmp_path / "home", tmp_path / "state.db", tmp_path / "release"
    stuck = f"block={release}" if tool == "deaf to the interrupt" else "ms=60000"
    gateway = launch(home, state_db, drain_timeout=1.0, interrupt_grace=0.5)
    try:
        async with aiohttp.ClientSession() as http:
            assert (await post(http, gateway, "c", "turn s1 rounds=2"))[1] == (
                "done s1 | seen: turn s1 rounds=2")
            in_flight = asyncio.ensure_future(post(http, gateway, "c", f"turn s2 rounds=2 {stuck}"))
            if tool == "deaf to the interrupt":
                await wait_for(Path(f"{release}.started"))
            else:
                for _ in range(3000):  # until the tool call is durable, i.e. the tool runs
                    if any("call s2 r0" in r["markers"] for r in json_lines(home / "durable.log")):
                        break
                    await asyncio.sleep(0.01)
                else:
                    raise AssertionError(f"the tool never started:\n{gateway.log()}")
            assert await asyncio.to_thread(gateway.stop) == 0, gateway.log()
            await asyncio.gather(in_flight, return_exceptions=True)
            log = gateway.log()
            assert "drain timed out; interrupting 1 turn(s)" in log, log
            assert "interrupting the turn of" in log, log
            assert "turns were cut off, next boot resumes them" in log, log
            assert not (home / CLEAN_SHUTDOWN_MARKER).exists()

            with SessionDB(state_db) as db:
                rows = stored(db, "c")
                s1 = ["user s1", "call s1 r0", "result s1 r0", "call s1 r1", "result s1 r1",
                      "done s1"]
                if tool == "deaf to the interrupt":  # the tool never returned
                    cut = ["user s2", "call s2 r0"]
                else:  # stopped, its result stored, then the loop ended the turn
                    cut = ["user s2", "call s2 r0", "result s2 r0"]
                assert rows == s1 + ["meta"] + cut, rows
                durable = {m for r in json_lines(home / "durable.log") for m in r["markers"]}
                assert durable <= set(rows)
                entry = entry_for(db, "c")
                assert entry is not None and entry.resume_pending
                assert entry.resume_reason == "shutdown_timeout"
            assert consistency_problems(state_db) == []

            restarted = launch(home, state_db)
            status, reply = await post(http, restarted, "c", "turn s3 rounds=1")
            assert status == 200 and reply is not None
            note = resume_note("shutdown_timeout")
            assert "the gateway shut down" in note
            assert reply == f"done s3 | seen: {note}\n\nturn s3 rounds=1", reply
            status, reply = await post(http, restarted, "c", "turn s4 rounds=1")
            assert reply == "done s4 | seen: turn s4 rounds=1"  # the note only once
            assert await asyncio.to_thread(restarted.stop) == 0
        assert (home / CLEAN_SHUTDOWN_MARKER).exists()
        sent = requests(home)
        for tag in ("s3", "s4"):
            assert sent[tag]["violations"] == [], sent[tag]
        with SessionDB(state_db) as db:
            rows = stored(db, "c")
            assert [n for n, c in Counter(rows).items() if c > 1] == []
            assert rows[-8:] == ["user s3", "call s3 r0", "result s3 r0", "done s3",
                                 "user s4", "call s4 r0", "result s4 r0", "done s4"]
            entry = entry_for(db, "c")
            assert entry is not None and not entry.resume_pending
        assert consistency_problems(state_db) == []
    finally:
        release.touch()
        gateway.kill()


async def kill_inside_a_long_tool(tmp_path: Path, window: float, wait: float) -> str:
    """kill -9 while round 0's tool has been running ``wait`` seconds; restart with
    ``resume_recent_window=window``; returns what the model got as the next user message."""
    home, state_db, release = tmp_path / "home", tmp_path / "state.db", tmp_path / "release"
    gateway = launch(home, state_db, resume_recent_window=window)
    restarted = None
    try:
        async with aiohttp.ClientSession() as http:
            await post(http, gateway, "k", "turn k1 rounds=1")
            in_flight = asyncio.ensure_future(post(http, gateway, "k", f"turn k2 rounds=2 block={release}"))
            await wait_for(Path(f"{release}.started"))
            await asyncio.sleep(wait)
            assert gateway.process is not None
            gateway.process.send_signal(signal.SIGKILL)
            await asyncio.to_thread(gateway.process.wait)
            await asyncio.gather(in_flight, return_exceptions=True)
            with SessionDB(state_db) as db:
                assert stored(db, "k")[-2:] == ["user k2", "call k2 r0"]
            restarted = launch(home, state_db, resume_recent_window=window)
            status, reply = await post(http, restarted, "k", "turn k3 rounds=1")
            assert status == 200 and reply is not None and reply.startswith("done k3"), reply
        record = requests(home)["k3"]
        assert record["violations"] == [], record  # the cut-off call was answered for the model
        with SessionDB(state_db) as db:
            rows = stored(db, "k")
            assert [n for n, c in Counter(rows).items() if c > 1] == []
        assert consistency_problems(state_db) == []
        return str(record["sent"])
    finally:
        release.touch()
        gateway.kill()
        if restarted is not None:
            restarted.kill()


async def test_kill_9_inside_a_tool_resumes_with_the_note(tmp_path: Path) -> None:
    sent = await kill_inside_a_long_tool(tmp_path, window=120.0, wait=0.2)
    assert sent == f"{resume_note('restart_interrupted')}\n\nturn k3 rounds=1"


async def test_kill_9_inside_a_tool_that_ran_longer_than_the_resume_window(
        tmp_path: Path) -> None:
    sent = await kill_inside_a_long_tool(tmp_path, window=1.0, wait=1.5)
    assert sent.startswith(("[System note: your previous turn", TOOL_TAIL_NOTE)), sent


async def test_a_crash_in_the_first_turn_still_leaves_a_session_meta_row(
        tmp_path: Path) -> None:
    home, state_db, release = tmp_path / "home", tmp_path / "state.db", tmp_path / "release"
    gateway = launch(home, state_db)
    restarted = None
    try:
        async with aiohttp.ClientSession() as http:
            in_flight = asyncio.ensure_future(post(http, gateway, "n", f"turn n1 rounds=1 block={release}"))
            await wait_for(Path(f"{release}.started"))
            assert gateway.process is not None
            gateway.process.send_signal(signal.SIGKILL)
            await asyncio.to_thread(gateway.process.wait)
            await asyncio.gather(in_flight, return_exceptions=True)
            restarted = launch(home, state_db)
            assert (await post(http, restarted, "n", "turn n2 rounds=1"))[0] == 200
            assert await asyncio.to_thread(restarted.stop) == 0
        with SessionDB(state_db) as db:
            assert stored(db, "n").count("meta") == 1, stored(db, "n")
    finally:
        release.touch()
        gateway.kill()
        if restarted is not None:
            restarted.kill()
