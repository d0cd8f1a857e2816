"""Resume notes and the boot-time marking of conversations cut off by a crash."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from support import scripted_agent
from support.events import RunnerFactory, event

from hermes.gateway import resume
from hermes.gateway.config import Platform
from hermes.gateway.session import AsyncSessionStore, SessionEntry, SessionStore
from hermes.state import SessionDB


def _entry(**fields: object) -> SessionEntry:
    now = datetime.now()
    return SessionEntry("k", "s", now, now, platform=Platform.LOCAL, **fields)  # type: ignore[arg-type]


def test_resume_pending_gets_the_resume_note() -> None:
    entry = _entry(resume_pending=True, resume_reason="shutdown_timeout",
                   last_resume_marked_at=datetime.now())
    note = resume.annotate("hi", entry, [], freshness=3600)
    assert note == f"{resume.resume_note('shutdown_timeout')}\n\nhi"
    assert "the gateway shut down" in note


def test_tool_tail_gets_the_ignore_note() -> None:
    history = [{"role": "user", "content": "x"}, {"role": "tool", "content": "out",
                                                   "timestamp": time.time()}]
    assert resume.annotate("hi", _entry(), history, 3600) == f"{resume.TOOL_TAIL_NOTE}\n\nhi"
    assert "Ignore the pending tool outputs" in resume.TOOL_TAIL_NOTE


def test_a_transcript_cut_off_mid_turn_gets_a_note_without_any_flag() -> None:
    """A crash leaves no resume flag when the turn outlived the boot check's window."""
    now = time.time()
    unanswered_calls = [{"role": "user", "content": "x"},
                        {"role": "assistant", "content": "", "timestamp": now,
                         "tool_calls": [{"id": "c1", "function": {"name": "t", "arguments": "{}"}}]}]
    assert resume.annotate("hi", _entry(), unanswered_calls, 3600).startswith(resume.TOOL_TAIL_NOTE)
    # A user message at the end is simply answered: a crash or another writer may have left it.
    assert resume.annotate("hi", _entry(), [{"role": "user", "content": "x", "timestamp": now}],
                           3600) == "hi"


def test_stale_interruptions_and_plain_history_get_no_note() -> None:
    old = time.time() - 7200
    tail = [{"role": "tool", "content": "out", "timestamp": old}]
    assert resume.annotate("hi", _entry(), tail, 3600) == "hi"
    stale = _entry(resume_pending=True, last_resume_marked_at=datetime.now() - timedelta(hours=2))
    assert resume.annotate("hi", stale, tail, 3600) == "hi"
    assert resume.annotate("hi", stale, tail, 0).startswith("[System note")  # gate disabled
    assert resume.annotate("hi", _entry(), [{"role": "assistant", "content": "a"}], 3600) == "hi"


@pytest.mark.parametrize(("result", "completed"), [
    ({"final_response": "ok"}, True),
    ({"completed": True}, True),
    ({"interrupted": True}, False),
    ({"failed": True}, False),
    ({"error": "boom"}, False),
    ({"completed": False}, False),
])
def test_turn_completed(result: dict[str, object], completed: bool) -> None:
    assert resume.turn_completed(result) is completed


@pytest.mark.asyncio
async def test_boot_consumes_marker_or_marks_recent(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    store = SessionStore(db)
    key = store.get_or_create_session(event("x").source).session_key
    facade = AsyncSessionStore(lambda: store)
    (tmp_path / resume.CLEAN_SHUTDOWN_MARKER).touch()
    assert await resume.mark_if_unclean_boot(facade, tmp_path, 120) == 0
    assert not (tmp_path / resume.CLEAN_SHUTDOWN_MARKER).exists()
    assert await resume.mark_if_unclean_boot(facade, tmp_path, 120) == 1
    entry = store.get_entry(key)
    assert entry is not None and entry.resume_reason == "restart_interrupted"


@pytest.mark.asyncio
async def test_resumed_conversation_note_reaches_agent_once(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    await runner._handle_message(event("one"))
    key = runner._session_key_for(event("").source)
    runner.session_store.mark_resume_pending(key, "shutdown_timeout")
    reply = await runner._handle_message(event("two"))
    assert reply is not None and reply.startswith("echo: [System note")
    assert reply.rstrip().endswith("two [history=2]")
    entry = runner.session_store.get_entry(key)
    assert entry is not None and not entry.resume_pending  # the completed turn cleared it
    assert await runner._handle_message(event("three")) == "echo: three [history=4]"
    await asyncio.sleep(0)
    assert len(scripted_agent.BUILDS) == 1
