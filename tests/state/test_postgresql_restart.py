"""The flush contract when the PostgreSQL server goes away: a real server of the test's own
(``support/pg_server.py``) restarted (``pg_ctl restart``) under a conversation, or stopped for
longer than the busy budget; and a ``COMMIT`` whose answer is lost on the way back (a loopback
relay in front of the shared test server, ``support/commit_cutter.py``). No turn lost, none
written twice."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import postgres
from support.agents import assert_exact, contents
from support.commit_cutter import CommitCutter
from support.pg_server import postgres_server

from hermes.errors import DatabaseLockedError
from hermes.recovery import recover_all
from hermes.state import SessionDB

needs_server = pytest.mark.skipif(not os.environ.get("HERMES_TEST_POSTGRES_URL"),
                                  reason="no test server: run under scripts/postgres")


def msg(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": text}


def server_started_at(url: str) -> str:
    return postgres.psql("SELECT pg_postmaster_start_time()", url=url).strip()


def test_turns_flushed_across_a_server_restart_are_each_written_once(
        hermes_home: Path, agent_factory: Callable[..., Any]) -> None:
    with postgres_server() as server:
        turns_across_a_restart(server, agent_factory)


def turns_across_a_restart(server: Any, agent_factory: Callable[..., Any]) -> None:
    db = SessionDB(server.url, busy_budget=30)
    agent = agent_factory(db)
    messages: list[dict[str, Any]] = []
    results: list[bool | None] = []
    restarted = threading.Event()
    after_restart = 0

    def converse() -> None:
        nonlocal after_restart
        turn = 0
        while after_restart < 20:
            messages.extend([msg(f"u{turn}"), msg(f"a{turn}", "assistant")])
            results.append(agent._flush_messages_to_session_db(messages))
            turn += 1
            after_restart += restarted.is_set()

    started = server_started_at(server.url)
    conversation = threading.Thread(target=converse)
    conversation.start()
    while len(results) < 20 and conversation.is_alive():
        threading.Event().wait(0.01)
    server.restart()  # its sessions are ended, mid-turn or not
    restarted.set()
    conversation.join(120)
    assert not conversation.is_alive()
    assert server_started_at(server.url) != started, "the server was restarted"
    assert all(results), results  # each flush waited for the server within the budget
    assert_exact(db, [m["content"] for m in messages])  # reads reconnect too
    db.close()


def test_a_flush_meeting_a_down_server_is_spooled_and_recover_restores_it(
        hermes_home: Path, agent_factory: Callable[..., Any]) -> None:
    with postgres_server() as server:
        db = SessionDB(server.url, busy_budget=0.3)
        agent = agent_factory(db)
        messages = [msg("m0")]
        assert agent._flush_messages_to_session_db(messages) is True
        spool = hermes_home / "sessions" / "s1.recovery.jsonl"
        server.stop()
        messages += [msg("m1"), msg("m2", "assistant")]
        for _ in range(3):  # the third failure in a row spools
            assert agent._flush_messages_to_session_db(messages) is False
        assert spool.is_file()
        with pytest.raises(DatabaseLockedError, match="did not answer"):
            db.get_messages("s1")
        server.start()
        report = recover_all(db)
        assert report.written == 2 and report.failed == {}
        assert_exact(db, ["m0", "m1", "m2"])
        messages.append(msg("m3"))
        assert agent._flush_messages_to_session_db(messages) is True
        assert_exact(db, ["m0", "m1", "m2", "m3"])
        assert recover_all(db).written == 0
        db.close()


@needs_server
@pytest.mark.parametrize("pass_commit_on", [True, False], ids=["committed", "rolled-back"])
def test_a_commit_whose_answer_is_lost_is_settled_not_written_twice(
        pass_commit_on: bool, hermes_home: Path) -> None:
    # Whether the server committed or not, the store asks it once it can, and the message
    # is there exactly once either way.
    cutter = CommitCutter(postgres.fresh_store())
    db = SessionDB(cutter.url)
    try:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "before")
        cutter.arm(pass_commit_on=pass_commit_on)
        db.append_message("s1", "user", "the one")
        assert cutter.cut.is_set(), "the COMMIT's answer was lost"
        assert contents(db) == ["before", "the one"]
        assert db.get_session("s1")["message_count"] == 2  # type: ignore[index]
    finally:
        db.close()
        cutter.close()


@needs_server
def test_a_read_on_a_connection_the_server_ended_is_tried_again(hermes_home: Path) -> None:
    # As in a restart: the server ends the store's idle connections (57P01) and the next
    # read on one of them meets that error before the link knows it is closed. A read
    # changes nothing, so it is tried again on a new connection within the busy budget.
    url = postgres.fresh_store() + "&application_name=hermes_ended"
    db = SessionDB(url)
    try:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello")
        for _ in range(20):
            assert contents(db) == ["hello"]  # leaves idle reader connections in the pool
            postgres.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE application_name = 'hermes_ended'")
            assert [m["content"] for m in db.get_messages("s1")] == ["hello"]
            # A transcript load, which hands rows over as they arrive, too: it failed
            # before handing any over.
            postgres.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE application_name = 'hermes_ended'")
            loaded = db.get_messages_as_conversation("s1")
            assert [(m["role"], m["content"]) for m in loaded] == [("user", "hello")]
    finally:
        db.close()
