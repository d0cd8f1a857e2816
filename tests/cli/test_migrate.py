"""``hermes migrate SOURCE TARGET`` run as a real process on real stores: ``state.db`` files
and the test server that ``scripts/postgres`` starts. What arrives is compared row by row,
column by column, with what left (read with Python's ``sqlite3`` in another process, the
``sql`` fixture): message ids, timestamps to the bit, ``\\0json:`` content, NUL bytes, JSON text
as another writer spaced it, rewound rows, parents, routing, meta, topics, handoffs, usage,
stored responses. A second run copies nothing; a run killed with SIGKILL is finished by the
next."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pexpect
import pytest
from support import postgres
from support.cli import HERMES, as_json, hermes, one_line_failure, spawn
from support.processes import child_env

from hermes._core import Update
from hermes.state import SessionDB

#: Every table migrate copies, with the columns its rows are ordered by.
TABLES = {"sessions": "id", "messages": "id", "session_model_usage": "session_id, model",
          "telegram_dm_topic_mode": "chat_id", "telegram_dm_topic_bindings": "chat_id, thread_id",
          "gateway_routing": "scope, session_key", "state_meta": "key",
          "compression_locks": "session_id", "hermes_responses": "id"}

needs_server = pytest.mark.skipif(not os.environ.get("HERMES_TEST_POSTGRES_URL"),
                                  reason="no test server: run under scripts/postgres")
# These tests name their stores themselves, files and server alike; the PostgreSQL leg's
# redirection of every file to the server would make the files the CLI reads empty.
pytestmark = pytest.mark.skipif(postgres.ENABLED, reason="the tests choose their own stores")


def migrate(home: Path, source: Path | str, target: Path | str,
            *options: str) -> dict[str, Any]:
    summary: dict[str, Any] = as_json(hermes(home, "migrate", str(source), str(target),
                                             "--json", *options, timeout=300))
    return summary


def fill(write_sql: Any, path: Path) -> None:
    """A store with something of every kind in it, the last rows written by another program
    (JSON spaced as Python's ``json`` writes it, a timestamp no short decimal prints)."""
    with SessionDB(path) as db:
        db.create_session("z-root", "telegram", user_id="42", model="m1",
                          started_at=1_700_000_000.123456789)
        # A child whose id sorts before its parent's: the parent is copied after it.
        db.create_session("a-child", "cli", parent_session_id="z-root", title="Child")
        db.append_message("z-root", "user", "the heron waits", platform_message_id="tg-1",
                          timestamp=0.1 + 0.2)
        db.append_message("z-root", "user", [{"type": "text", "text": "multimodal egret"}])
        db.append_message("z-root", "assistant", "a\x00b\x01c", reasoning="because",
                          reasoning_details=[{"type": "summary", "text": "r"}],
                          tool_calls=[{"id": "c1", "type": "function",
                                       "function": {"name": "terminal", "arguments": "{}"}}])
        db.append_message("z-root", "tool", "exit 0", tool_name="terminal", tool_call_id="c1")
        rewound = db.append_message("a-child", "user", "rewound words")
        db.append_message("a-child", "user", "kept words", timestamp=1 / 3)
        db.apply([Update("messages", ("=", "id", rewound), {"active": 0})])
        db.update_token_counts("z-root", input_tokens=10, output_tokens=5, model="m1",
                               estimated_cost_usd=0.25)
        db.request_handoff("a-child", "telegram")
        db.save_gateway_routing_entry("agent:main:telegram:dm:42", '{"session_id": "z-root"}')
        db.set_meta("hermes_client_secret", "s3cret")
        db.enable_telegram_topic_mode(chat_id="42", user_id="42")
        db.bind_telegram_topic(chat_id="42", thread_id="7", user_id="42",
                               session_key="agent:main:telegram:dm:42:7", session_id="z-root")
        db.save_response("resp_1", "caller-a", {"id": "resp_1"}, [{"role": "user"}],
                         session_id="z-root")
    write_sql(path, "INSERT INTO messages (session_id, role, content, tool_calls, timestamp) "
                    "VALUES ('z-root', 'assistant', ?, ?, ?)",
              ("from another writer", json.dumps([{"id": "c2", "type": "function"}]),
               1_700_000_001.000000119))
    write_sql(path, "UPDATE sessions SET message_count = message_count + 1 WHERE id = 'z-root'")


def rows(sql: Any, path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every copied table, as SQLite holds it (types included)."""
    return {table: sql(path, f"SELECT * FROM {table} ORDER BY {order}")
            for table, order in TABLES.items()}


def index_state(sql: Any, path: Path) -> tuple[int, int, int]:
    """Word index rows, trigram index rows, pending ranges."""
    [counts] = sql(path, "SELECT (SELECT COUNT(*) FROM messages_fts),"
                         " (SELECT COUNT(*) FROM messages_fts_trigram),"
                         " (SELECT COUNT(*) FROM hermes_fts_pending)")
    return counts  # type: ignore[no-any-return]


def search(home: Path, store: Path | str, query: str) -> list[str]:
    flag = "--database-url" if isinstance(store, str) else "--db"
    done = hermes(home, "sessions", "search", query, "--json", flag, str(store))
    assert done.returncode == 0, done.stderr
    return sorted(hit["session_id"] for hit in json.loads(done.stdout))


def test_a_file_copied_into_a_new_file_is_row_for_row_the_same_and_searchable(
        hermes_home: Path, tmp_path: Path, sql: Any, write_sql: Any) -> None:
    source, target = tmp_path / "source.db", tmp_path / "nested" / "target.db"
    fill(write_sql, source)
    target.parent.mkdir()
    summary = migrate(hermes_home, source, target)
    before = rows(sql, source)
    assert rows(sql, target) == before
    assert summary["copied"] == sum(len(r) for r in before.values())
    assert summary["relations"]["messages"] == {"in_source": 7, "read": 7, "copied": 7,
                                                "already_there": 0}
    assert summary["source"] == str(source) and summary["target"] == str(target)
    # The search index was filled from the copied rows (the rewound one included, as
    # appended rows are), nothing left pending.
    assert index_state(sql, target) == (7, 7, 0)
    assert search(hermes_home, target, "egret") == ["z-root"]
    assert search(hermes_home, target, "rewound") == []
    with SessionDB(target) as db:
        assert db.get_session("a-child")["parent_session_id"] == "z-root"
        assert db.get_session("z-root")["message_count"] == 5
        assert db.get_handoff_state("a-child")["state"] == "pending"


def test_a_second_run_copies_nothing_and_a_later_one_only_what_is_new(
        hermes_home: Path, tmp_path: Path, sql: Any, write_sql: Any) -> None:
    source, target = tmp_path / "source.db", tmp_path / "target.db"
    fill(write_sql, source)
    first = migrate(hermes_home, source, target)
    again = migrate(hermes_home, source, target)
    assert again["copied"] == 0 and again["already_there"] == first["copied"]
    assert rows(sql, target) == rows(sql, source)
    with SessionDB(source) as db:
        db.append_message("a-child", "assistant", "new since the first run")
        db.create_session("later", "cli")
    later = migrate(hermes_home, source, target)
    assert later["copied"] == 2
    assert later["relations"]["messages"]["copied"] == 1
    assert rows(sql, target) == rows(sql, source)
    assert index_state(sql, target)[0] == 8


@needs_server
def test_through_postgresql_and_back_every_row_is_bit_for_bit_the_same(
        hermes_home: Path, tmp_path: Path, sql: Any, write_sql: Any) -> None:
    source, back = tmp_path / "source.db", tmp_path / "back.db"
    fill(write_sql, source)
    server = postgres.fresh_store()
    there = migrate(hermes_home, source, server)
    assert there["relations"]["messages"]["copied"] == 7
    assert search(hermes_home, server, "egret") == ["z-root"]
    with SessionDB(server) as db:
        assert db.get_session("z-root")["message_count"] == 5
        assert db.get_session("a-child")["parent_session_id"] == "z-root"
        # A gateway writing there next gets ids past the copied ones.
        new_id = db.append_message("z-root", "user", "written on the server")
    assert new_id > max(row[0] for row in rows(sql, source)["messages"])
    assert migrate(hermes_home, source, server)["copied"] == 0
    migrate(hermes_home, server, back)
    arrived, left = rows(sql, back), rows(sql, source)
    assert arrived["messages"][:-1] == left["messages"]
    assert arrived["messages"][-1][3] == "written on the server"
    # z-root's count moved with the server's own append; every other row is the same.
    assert [r for r in arrived["sessions"] if r[0] != "z-root"] == \
        [r for r in left["sessions"] if r[0] != "z-root"]
    assert {t: r for t, r in arrived.items() if t not in ("messages", "sessions")} == \
        {t: r for t, r in left.items() if t not in ("messages", "sessions")}
    assert index_state(sql, back) == (8, 8, 0)


def big_source(path: Path, sessions: int = 60, per_session: int = 500) -> int:
    with SessionDB(path, synchronous="NORMAL") as db:
        for n in range(sessions):
            db.create_session(f"s{n:03d}", "cli")
            db.append_messages(f"s{n:03d}", [{"role": "user", "content": f"row {n} {i} heron"}
                                             for i in range(per_session)])
    return sessions * per_session


def message_rows(sql: Any, store: Path | str) -> int:
    if isinstance(store, Path):
        if not store.exists():
            return 0
        if sql(store, "SELECT COUNT(*) FROM sqlite_schema WHERE name = 'messages'") == [(0,)]:
            return 0  # the schema is not there yet
        found: int = sql(store, "SELECT COUNT(*) FROM messages")[0][0]
        return found
    with SessionDB(store) as db:
        return db.message_count()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=needs_server)])
def test_a_copy_killed_mid_way_is_finished_by_running_it_again(
        hermes_home: Path, tmp_path: Path, kind: str, sql: Any) -> None:
    source = tmp_path / "source.db"
    total = big_source(source)
    target: Path | str = tmp_path / "target.db" if kind == "sqlite" else postgres.fresh_store()
    process = subprocess.Popen([*HERMES, "migrate", str(source), str(target), "--page-rows",
                                "200"], env=child_env(hermes_home), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while (message_rows(sql, target) == 0 and process.poll() is None
           and time.monotonic() < deadline):
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    cut = message_rows(sql, target)
    assert 0 < cut < total, f"killed after {cut} of {total} messages: not mid-way"
    summary = migrate(hermes_home, source, target, "--page-rows", "200")
    assert summary["relations"]["messages"]["copied"] == total - cut
    assert message_rows(sql, target) == total
    if isinstance(target, Path):
        assert rows(sql, target) == rows(sql, source)
        assert index_state(sql, target) == (total, total, 0)
    else:
        back = tmp_path / "back.db"
        migrate(hermes_home, target, back)
        assert rows(sql, back) == rows(sql, source)
    with SessionDB(target) as db:
        assert {db.get_session(f"s{n:03d}")["message_count"] for n in range(60)} == {500}


def test_progress_is_plain_lines_when_piped_and_a_bar_on_a_terminal(
        hermes_home: Path, tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    total = big_source(source, sessions=20)
    piped = hermes(hermes_home, "migrate", str(source), str(tmp_path / "piped.db"))
    assert piped.returncode == 0, piped.stderr
    assert f"hermes migrate: messages: {total:,} of {total:,} rows read (done)" in piped.stderr
    assert "hermes migrate: filling the search index" in piped.stderr
    assert "\x1b[" not in piped.stderr + piped.stdout  # no terminal codes in a pipe
    summary = [line.split("\t") for line in piped.stdout.splitlines()]
    assert summary[0] == ["relation", "in source", "copied", "already there"]
    assert ["messages", f"{total:,}", f"{total:,}", "0"] in summary
    # On a terminal: a bar while it copies (pages of one row, so it lasts well past 0.5 s).
    shown = spawn(hermes_home, "migrate", str(source), str(tmp_path / "shown.db"),
                  "--page-rows", "1", timeout=120)
    shown.expect("copying")
    shown.expect(r"copied [\d,]+ rows from")
    shown.expect(pexpect.EOF)
    shown.close()
    assert shown.exitstatus == 0
    assert "rows read (done)" not in (shown.before or "")


def test_failures_are_one_line(hermes_home: Path, tmp_path: Path, write_sql: Any) -> None:
    source, target = tmp_path / "source.db", tmp_path / "target.db"
    missing = one_line_failure(hermes(hermes_home, "migrate", str(tmp_path / "none.db"),
                                      str(target)))
    assert "no store at" in missing and "none.db" in missing
    assert not target.exists()
    fill(write_sql, source)
    (tmp_path / "link.db").symlink_to(source)
    same = one_line_failure(hermes(hermes_home, "migrate", str(source),
                                   str(tmp_path / "link.db")))
    assert "the same store" in same
    assert "at least 1" in one_line_failure(
        hermes(hermes_home, "migrate", str(source), str(target), "--page-rows", "0"), 2)
    nobody = one_line_failure(hermes(hermes_home, "migrate", str(source),
                                     "postgresql://hermes:pw@127.0.0.1:1/none"))
    assert "127.0.0.1:1" in nobody and "pw" not in nobody
    # A target whose message ids are other messages: refused, naming the overlap; the page
    # that met it writes nothing.
    with SessionDB(target) as db:
        db.create_session("elsewhere", "cli")
        db.append_message("elsewhere", "user", "a message of its own")
    done = hermes(hermes_home, "migrate", str(source), str(target))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    # The progress lines of the pages before, then the failure, in one line.
    *progress, clash = done.stderr.splitlines()
    assert all(line.startswith("hermes migrate: ") for line in progress), done.stderr
    assert clash.startswith("hermes: ") and "overlap" in clash and "\"elsewhere\"" in clash
    with SessionDB(target) as db:
        assert db.message_count() == 1
