"""The turn pipeline on a started runner: real state.db, scripted agent, recording adapter."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from pathlib import Path
from typing import Any

import pytest
from support import scripted_agent
from support.events import (
    RECORDING,
    RunnerFactory,
    current_session_id,
    event,
    runner_db,
)

from hermes.errors import HermesError
from hermes.gateway import turn
from hermes.gateway.config import PlatformConfig
from hermes.gateway.run import GatewayRunner
from hermes.state import SessionDB

pytestmark = pytest.mark.asyncio


def _roles(runner: GatewayRunner, chat_id: str = "42") -> list[str]:
    session_id = current_session_id(runner, chat_id)
    return [m["role"] for m in runner_db(runner).get_messages_as_conversation(session_id)]


async def _wait_for(path: Path, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if path.exists():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


async def test_first_turn_writes_meta_and_turn_two_reuses_the_agent(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    reply = await runner._handle_message(event("hello"))
    assert reply == "echo: hello [history=0]"
    assert _roles(runner) == ["user", "assistant", "session_meta"]  # meta follows the turn
    sid = current_session_id(runner)
    key = runner._session_key_for(event("").source)
    assert runner._agent_cache[key][2] == runner_db(runner).live_message_count(sid) == 3

    assert await runner._handle_message(event("again")) == "echo: again [history=2]"
    assert scripted_agent.BUILDS == [sid]  # turn 2 reused the cached agent
    assert _roles(runner) == ["user", "assistant", "session_meta", "user", "assistant"]


async def test_session_meta_row_says_what_the_transcript_was_made_with(
        make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    await runner._handle_message(event("hello"))
    meta = [m for m in runner_db(runner).get_messages_as_conversation(current_session_id(runner))
            if m["role"] == "session_meta"]
    assert len(meta) == 1
    assert meta[0]["content"]["platform"] == "local"
    assert isinstance(meta[0]["content"]["tools"], list)


async def test_foreign_write_rebuilds_the_agent_once(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    await runner._handle_message(event("one"))
    sid = current_session_id(runner)
    other = SessionDB(runner_db(runner).db_path)  # another process's connection
    other.append_message(sid, "user", "written elsewhere")
    other.append_message(sid, "assistant", "answered elsewhere")
    other.close()

    reply = await runner._handle_message(event("two"))
    assert reply == "echo: two [history=4]"  # the rebuilt agent saw the foreign rows
    assert len(scripted_agent.BUILDS) == 2
    await runner._handle_message(event("three"))
    assert len(scripted_agent.BUILDS) == 2


async def test_settings_change_retires_the_cached_agent(make_runner: RunnerFactory,
                                                        home: Path) -> None:
    runner = await make_runner()
    await runner._handle_message(event("one"))
    (home / "config.yaml").write_text("model:\n  name: another-model\n")
    await runner._handle_message(event("two"))
    assert len(scripted_agent.BUILDS) == 2


async def test_busy_conversation_queues_and_never_runs_concurrently(
        make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    first = asyncio.ensure_future(runner._handle_message(event("sleep:0.3")))
    await asyncio.sleep(0.05)
    followers = [asyncio.ensure_future(runner._handle_message(event(f"m{i}"))) for i in range(5)]
    replies = await asyncio.gather(first, *followers)
    assert replies[0].startswith("echo: sleep:0.3")
    assert [r.split(" [")[0] for r in replies[1:]] == [f"echo: m{i}" for i in range(5)]
    sid = current_session_id(runner)
    assert scripted_agent.MAX_CONCURRENT_PER_SESSION[sid] == 1
    users = [m["content"] for m in runner_db(runner).get_messages_as_conversation(sid)
             if m["role"] == "user"]
    assert users == ["sleep:0.3"] + [f"m{i}" for i in range(5)]
    assert not runner._running_agents and not runner._pending_messages


async def test_interrupt_policy_stops_the_running_turn(make_runner: RunnerFactory) -> None:
    runner = await make_runner(busy_policy="interrupt")
    first = asyncio.ensure_future(runner._handle_message(event("sleep:10")))
    await asyncio.sleep(0.2)
    second = await asyncio.wait_for(runner._handle_message(event("next")), 5)
    assert await first == "interrupted"
    assert second.startswith("echo: next")


async def test_stop_command_disowns_the_running_turn(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    running = asyncio.ensure_future(runner._handle_message(event("sleep:10")))
    await asyncio.sleep(0.2)
    assert await runner._handle_message(event("/stop")) == "Stopped the running turn."
    assert await asyncio.wait_for(running, 5) is None  # stale generation: result dropped
    # The gateway wrote nothing for the disowned turn: no session_meta row.
    assert "session_meta" not in _roles(runner)
    assert await runner._handle_message(event("/stop")) == "Nothing is running right now."


async def test_stop_while_the_agent_is_being_built_stops_the_turn_it_starts(
        make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    scripted_agent.BUILD_GATE = gate = threading.Event()
    running = asyncio.ensure_future(runner._handle_message(event("sleep:60")))
    assert await asyncio.to_thread(scripted_agent.BUILDING.wait, 10)
    assert await runner._handle_message(event("/stop")) == "Stopped the running turn."
    gate.set()
    assert await asyncio.wait_for(running, 10) is None  # disowned, and not a minute later
    tool_output = [m["content"] for m in runner_db(runner).get_messages_as_conversation(
        current_session_id(runner)) if m["role"] == "tool"]
    assert tool_output == ["stopped early"]  # the agent started interrupted


async def test_new_command_starts_a_new_session(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    await runner._handle_message(event("one"))
    old = current_session_id(runner)
    assert await runner._handle_message(event("/new")) == "Started a new conversation."
    assert current_session_id(runner) != old
    assert runner_db(runner).get_session(old)["end_reason"] == "session_reset"
    assert await runner._handle_message(event("two")) == "echo: two [history=0]"
    assert len(scripted_agent.BUILDS) == 2  # the old session's agent was not reused


async def test_unauthorized_user_gets_no_turn(make_runner: RunnerFactory) -> None:
    runner = await make_runner(platform_config=PlatformConfig(
        enabled=True, adapter=RECORDING, allowed_users=("alice",)))
    assert await runner._handle_message(event("hi", user_id="mallory")) is None
    assert scripted_agent.BUILDS == []
    assert (await runner._handle_message(event("hi", user_id="alice"))).startswith("echo")


async def test_failed_turn_answers_and_frees_the_conversation(make_runner: RunnerFactory) -> None:
    runner = await make_runner()

    async def broken(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("model exploded")

    runner._run_agent = broken  # type: ignore[method-assign]
    assert await runner._handle_message(event("hi")) == turn.FAILURE_NOTICE
    assert not runner._running_agents
    del runner._run_agent
    assert (await runner._handle_message(event("hi"))).startswith("echo")


async def test_gateway_writes_turn_the_agent_did_not_persist(make_runner: RunnerFactory) -> None:
    runner = await make_runner()

    async def unpersisted(message: str, history: list[dict[str, Any]], *_: Any,
                          **__: Any) -> dict[str, Any]:
        return {"final_response": "ok", "messages": [*history, {"role": "user", "content": message},
                                                    {"role": "assistant", "content": "ok"}],
                "history_offset": len(history), "agent_persisted": False}

    runner._run_agent = unpersisted  # type: ignore[method-assign]
    await runner._handle_message(event("hi", message_id="p-1"))
    sid = current_session_id(runner)
    rows = runner_db(runner).get_messages(sid)
    assert [r["role"] for r in rows] == ["session_meta", "user", "assistant"]
    assert rows[1]["platform_message_id"] == "p-1"


async def test_redelivered_message_is_answered_from_the_transcript(
        make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    assert await runner._handle_message(event("hi", message_id="p-1")) == "echo: hi [history=0]"
    sid = current_session_id(runner)
    assert [r["platform_message_id"] for r in runner_db(runner).get_messages(sid)
            if r["role"] == "user"] == ["p-1"]  # the agent's own row carries the id
    runs: list[str] = []
    real_run = runner._run_agent

    async def counted(message: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        runs.append(message)
        return await real_run(message, *args, **kwargs)

    runner._run_agent = counted  # type: ignore[method-assign]
    # The platform delivers it again (a crash before it was confirmed): the stored reply,
    # no model call, nothing written.
    assert await runner._handle_message(event("hi", message_id="p-1")) == "echo: hi [history=0]"
    assert runs == [] and len(runner_db(runner).get_messages(sid)) == 3
    assert await runner._handle_message(event("next", message_id="p-2")) == (
        "echo: next [history=2]")
    assert runs == ["next"]


async def test_redelivered_message_whose_turn_was_cut_off_runs_again(
        make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    await runner._handle_message(event("hi", message_id="p-1"))
    sid = current_session_id(runner)
    # A turn cut off after its user row was stored (the process died before the answer).
    runner_db(runner).append_message(sid, "user", "second", platform_message_id="p-2")
    reply = await runner._handle_message(event("second", message_id="p-2"))
    assert reply == "echo: second [history=3]"  # run again; it sees the earlier copy
    rows = runner_db(runner).get_messages(sid)
    assert [(r["role"], r["platform_message_id"]) for r in rows[-3:]] == [
        ("user", "p-2"), ("user", "p-2"), ("assistant", None)]
    # Delivered a third time: now it has an answer.
    assert await runner._handle_message(event("second", message_id="p-2")) == reply


async def test_hooks_see_each_turn(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    seen: list[str] = []

    async def record(event_type: str, context: Any) -> None:
        seen.append(event_type)

    def explode(event_type: str, context: Any) -> None:
        raise ValueError("a broken hook must not break the turn")

    for name in ("session:start", "agent:start", "agent:end"):
        runner.hooks.register(name, record)
        runner.hooks.register(name, explode)
    await runner._handle_message(event("one"))
    await runner._handle_message(event("two"))
    assert seen == ["session:start", "agent:start", "agent:end", "agent:start", "agent:end"]


async def test_executor_keeps_the_callers_context(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    variable: contextvars.ContextVar[str] = contextvars.ContextVar("v", default="unset")
    variable.set("from the turn")
    assert await runner._run_in_executor_with_context(variable.get) == "from the turn"


async def test_a_queued_message_runs_in_its_own_senders_context(make_runner: RunnerFactory) -> None:
    """A streaming request queued behind a running turn must see its own reply sink."""
    runner = await make_runner()
    variable: contextvars.ContextVar[str] = contextvars.ContextVar("sender", default="unset")
    seen: list[str] = []
    original = runner._run_agent

    async def recording(*args: Any, **kwargs: Any) -> dict[str, Any]:
        seen.append(variable.get())
        return await original(*args, **kwargs)

    runner._run_agent = recording  # type: ignore[method-assign]

    async def send(text: str, sender: str) -> str | None:
        variable.set(sender)
        return await runner._handle_message(event(text))

    first = asyncio.ensure_future(send("sleep:0.3", "first sender"))
    await asyncio.sleep(0.05)  # the first turn is running; the second message queues
    await asyncio.gather(first, send("hello", "second sender"))
    assert seen == ["first sender", "second sender"]


async def test_lru_cap_releases_the_oldest_agent(make_runner: RunnerFactory) -> None:
    runner = await make_runner(agent_cache_size=2)
    await runner._handle_message(event("hi", "a"))
    key_a = runner._session_key_for(event("", "a").source)
    oldest = runner._agent_cache[key_a][0]
    for chat in ("b", "c"):
        await runner._handle_message(event("hi", chat))
    assert len(runner._agent_cache) == 2 and key_a not in runner._agent_cache
    for _ in range(100):  # the evicted agent is released in the background
        if oldest._closed:
            break
        await asyncio.sleep(0.02)
    assert oldest._closed


async def test_only_turns_that_cannot_wait_on_the_database_run_on_the_loop(
        make_runner: RunnerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = await make_runner()
    store = runner.session_store
    loop_thread = threading.current_thread()
    on_loop: dict[str, list[bool]] = {}
    for name in ("get_or_create_session", "load_transcript", "append_to_transcript",
                 "update_session"):
        def recording(*args: Any, _name: str = name, _original: Any = getattr(store, name),
                      **kwargs: Any) -> Any:
            on_loop.setdefault(_name, []).append(threading.current_thread() is loop_thread)
            return _original(*args, **kwargs)
        monkeypatch.setattr(store, name, recording)

    await runner._handle_message(event("one"))  # new conversation, session_meta row
    assert not any(any(calls) for calls in on_loop.values()), on_loop
    on_loop.clear()
    await runner._handle_message(event("two"))  # cached, 3 rows, the agent wrote its rows
    assert all(all(calls) for calls in on_loop.values()) and len(on_loop) == 4, on_loop
    on_loop.clear()
    monkeypatch.setattr(turn, "INLINE_OPEN_MAX_ROWS", 4)  # the transcript has 5 rows now
    assert await runner._handle_message(event("three")) == "echo: three [history=4]"
    # The routing entry is still looked up in memory; the long transcript is read off the loop.
    assert (on_loop["get_or_create_session"], on_loop["load_transcript"]) == ([True], [False])
    assert _roles(runner) == ["user", "assistant", "session_meta"] + ["user", "assistant"] * 2


async def test_at_normal_a_first_turn_commits_its_session_meta_on_the_loop(
        make_runner: RunnerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = await make_runner(synchronous="NORMAL")
    assert runner_db(runner).synchronous == "NORMAL"
    loop_thread = threading.current_thread()
    on_loop: list[bool] = []
    original = runner.session_store.append_to_transcript

    def recording(session_id: str, message: dict[str, Any], skip_db: bool = False) -> None:
        if not skip_db:
            on_loop.append(threading.current_thread() is loop_thread)
        original(session_id, message, skip_db=skip_db)
    monkeypatch.setattr(runner.session_store, "append_to_transcript", recording)

    await runner._handle_message(event("one"))
    assert on_loop == [True]  # the session_meta row, committed on the loop
    sid = current_session_id(runner)
    key = runner._session_key_for(event("").source)
    assert runner._agent_cache[key][2] == runner_db(runner).live_message_count(sid) == 3


async def test_a_first_turn_never_waits_on_the_loop_for_another_writer(
        make_runner: RunnerFactory, monkeypatch: pytest.MonkeyPatch,
        hold_write_lock: Any) -> None:
    """At NORMAL, when another process holds the write lock as the session_meta row is due,
    the commit on the loop gives up at once, writing nothing, and the row is written from a
    thread once the lock is free; the loop keeps serving meanwhile."""
    runner = await make_runner(synchronous="NORMAL")
    loop_thread = threading.current_thread()
    lock = contextlib.ExitStack()
    run_agent = runner._run_agent

    async def run_then_lock(*args: Any, **kwargs: Any) -> dict[str, Any]:
        result = await run_agent(*args, **kwargs)  # the agent has written its rows
        # Another process: SQLite's locks are per process, so it must be one to be seen.
        await asyncio.to_thread(lock.enter_context, hold_write_lock(runner_db(runner).db_path))
        return result
    monkeypatch.setattr(runner, "_run_agent", run_then_lock)
    meta_writes: list[tuple[bool, str]] = []
    append = runner.session_store.append_to_transcript

    def recording(session_id: str, message: dict[str, Any], skip_db: bool = False) -> None:
        if skip_db:
            return append(session_id, message, skip_db=True)
        where = threading.current_thread() is loop_thread
        try:
            append(session_id, message)
        except HermesError as exc:
            meta_writes.append((where, type(exc).__name__))
            raise
        meta_writes.append((where, "written"))
    monkeypatch.setattr(runner.session_store, "append_to_transcript", recording)

    turn_task = asyncio.ensure_future(runner._handle_message(event("hello")))
    for _ in range(2000):  # 10 s at most
        if meta_writes:
            break
        await asyncio.sleep(0.005)
    assert meta_writes == [(True, "WriterBusyError")]
    for _ in range(20):  # 0.2 s in which the loop keeps running: this sleep returns
        await asyncio.sleep(0.01)
    assert not turn_task.done()  # the row waits for the lock, in a thread
    lock.close()  # the holder rolls back and exits
    assert await turn_task == "echo: hello [history=0]"
    assert meta_writes == [(True, "WriterBusyError"), (False, "written")]
    assert _roles(runner) == ["user", "assistant", "session_meta"]
    sid = current_session_id(runner)
    key = runner._session_key_for(event("").source)
    assert runner._agent_cache[key][2] == runner_db(runner).live_message_count(sid) == 3
