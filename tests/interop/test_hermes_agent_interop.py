"""File compatibility with the real hermes-agent 0.19.0 (SPEC §3, issue [A]).

hermes-agent runs in its own venv (``benches/setup_peers.sh`` builds it; the
path is ``$HERMES_PEERS_PYTHON`` or ``benches/.peers/venv/bin/python``). This
process drives it through ``peer_driver.py``, one subprocess per step, so the
two programs only ever meet through the ``state.db`` file, as a gateway and
an upstream CLI would.

Both directions:

* a file WE write reads back identically through its
  ``get_messages_as_conversation``; it appends, and every ``message_count``
  stays equal to the row count, seen from either side;
* a file IT writes (its ``append_message`` and its agent's flush) opens here,
  reads identically, and our agent's flush appends with counts still exact.

hermes-agent strips and sanitizes user/assistant text on read, so the
messages here carry no leading or trailing whitespace.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from support.agents import agent_shell

from hermes.state import SessionDB

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("peer_driver.py")


def _peer_python() -> tuple[str | None, str]:
    configured = os.environ.get("HERMES_PEERS_PYTHON", "").strip()
    candidate = Path(configured) if configured else ROOT / "benches" / ".peers" / "venv" / "bin" / "python"
    if not candidate.exists():
        return None, (
            f"hermes-agent 0.19.0 peer venv not found at {candidate}: run `make peers` "
            "(benches/setup_peers.sh) or set HERMES_PEERS_PYTHON to its python"
        )
    with tempfile.TemporaryDirectory(prefix="hermes-peer-probe-") as probe_home:
        probe = subprocess.run(
            [str(candidate), "-c", "import hermes_state, run_agent, importlib.metadata as m; "
                                   "print(m.version('hermes-agent'))"],
            capture_output=True, text=True, timeout=120, env={**os.environ, "HERMES_HOME": probe_home},
        )
    if probe.returncode != 0:
        return None, f"{candidate} cannot import hermes-agent: {probe.stderr.strip()[-300:]}"
    if probe.stdout.strip() != "0.19.0":
        return None, f"{candidate} has hermes-agent {probe.stdout.strip()}, not 0.19.0"
    return str(candidate), ""


PEER_PYTHON, SKIP_REASON = _peer_python()
pytestmark = pytest.mark.skipif(PEER_PYTHON is None, reason=SKIP_REASON)


def peer(op: str, db: Path, session_id: str, home: Path, **extra: Any) -> dict[str, Any]:
    """Runs one step in hermes-agent 0.19.0 and returns its answer."""
    assert PEER_PYTHON is not None
    request = {"op": op, "db": str(db), "session_id": session_id, **extra}
    proc = subprocess.run(
        [PEER_PYTHON, str(DRIVER)],
        input=json.dumps(request), capture_output=True, text=True, timeout=180,
        env={**os.environ, "HERMES_HOME": str(home)},
    )
    assert proc.returncode == 0, f"hermes-agent step {op!r} failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


# -- the transcripts ----------------------------------------------------------------

def turn_one() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Find the failing test in résumé-parser — 日本語のテスト 🚀"},
        {
            "role": "assistant",
            "content": "Let me search the repository first.",
            "tool_calls": [
                {
                    "id": "call_search_1",
                    "type": "function",
                    "function": {"name": "search_files", "arguments": json.dumps({"pattern": "def test_", "path": "测试/"})},
                },
                {
                    "id": "call_read_2",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": "{\"path\": \"README.md\"}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_search_1", "tool_name": "search_files",
         "content": "tests/test_parse.py:12: def test_naïve_dates ✅\ntests/test_cjk.py:3: def test_中文"},
        {"role": "tool", "tool_call_id": "call_read_2", "tool_name": "read_file", "content": "# Parser\nZürich 🧪"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Here is the screenshot of the failure — 스크린샷"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
        {"role": "assistant", "content": "The date parser drops the time zone; fixed in parse.py. 🎉"},
    ]


def turn_two() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Run the suite again, please. 北京 ↔ 東京"},
        {
            "role": "assistant",
            "content": "Running it.",
            "tool_calls": [
                {"id": "call_run_3", "type": "function",
                 "function": {"name": "terminal", "arguments": "{\"command\": \"pytest -q\"}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_run_3", "tool_name": "terminal", "content": "42 passed in 1.3s ✔"},
    ]


def shape(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fields both programs must agree on."""
    keys = ("role", "content", "tool_calls", "tool_call_id", "tool_name")
    return [{k: m[k] for k in keys if m.get(k) is not None} for m in messages]


def tool_calls_in(messages: list[dict[str, Any]]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in messages)


TIMESTAMP_INDEXES = {"idx_messages_session", "idx_messages_session_active"}


def timestamp_indexes(sql: Any, path: Path) -> set[str]:
    """Which of hermes-agent's session-by-timestamp indexes the file has (we
    create neither; it creates both when it opens a file). Asserts on the way
    that the file passes ``PRAGMA integrity_check``, which checks every index
    against its table: whoever wrote last kept the indexes that exist whole.
    Read by another process (``sql``): never a second SQLite in this one."""
    names = {r[0] for r in sql(path, "SELECT name FROM sqlite_schema WHERE type = 'index'")}
    assert sql(path, "PRAGMA integrity_check") == [("ok",)]
    return names & TIMESTAMP_INDEXES


# -- a file we write ------------------------------------------------------------------

def test_file_we_write_reads_identically_in_hermes_agent_and_it_can_append(tmp_path: Path, hermes_home: Path,
                                                                           sql: Any) -> None:
    path = tmp_path / "state.db"
    first = turn_one()
    with SessionDB(path) as db:
        agent = agent_shell(db, "ours-1")
        assert agent._flush_messages_to_session_db(first) is True
        # A table of ours in the same file (the api_server's stored responses).
        db.save_response("resp_1", "key:k", {"id": "resp_1"}, [{"role": "user", "content": "hi"}])
    assert timestamp_indexes(sql, path) == set()

    theirs = peer("read", path, "ours-1", hermes_home)
    assert timestamp_indexes(sql, path) == TIMESTAMP_INDEXES
    assert shape(theirs["conversation"]) == shape(first)
    assert theirs["message_count"] == theirs["rows"] == len(first)
    assert theirs["tool_call_count"] == tool_calls_in(first)
    assert theirs["source"] == "cli"

    # hermes-agent appends to our file; its counters stay exact.
    second = turn_two()
    theirs = peer("append", path, "ours-1", hermes_home, messages=second)
    assert theirs["message_count"] == theirs["rows"] == len(first) + len(second)
    assert theirs["tool_call_count"] == tool_calls_in(first + second)
    assert shape(theirs["conversation"]) == shape(first + second)

    # We see its rows, in order, with the exact count; our agent appends after them.
    with SessionDB(path) as db:
        ours = db.get_messages_as_conversation("ours-1")
        assert shape(ours) == shape(first + second)
        assert db.live_message_count("ours-1") == len(ours) == len(first) + len(second)
        third = [{"role": "user", "content": "Thanks — ありがとう 🙏"}, {"role": "assistant", "content": "You're welcome."}]
        agent = agent_shell(db, "ours-1")
        agent._session_db_created = True
        assert agent._flush_messages_to_session_db(ours + third, ours) is True
        session = db.get_session("ours-1")
        assert session is not None
        assert session["message_count"] == len(db.get_messages("ours-1")) == len(first + second + third)

    # Our writes kept its indexes whole (integrity_check covers every index).
    assert timestamp_indexes(sql, path) == TIMESTAMP_INDEXES
    theirs = peer("read", path, "ours-1", hermes_home)
    assert shape(theirs["conversation"]) == shape(first + second + third)
    assert theirs["message_count"] == theirs["rows"] == len(first + second + third)
    with SessionDB(path) as db:
        kept = db.get_response("resp_1", "key:k")
        assert kept is not None and kept.conversation == [{"role": "user", "content": "hi"}]


def test_hermes_agent_finds_our_messages_by_full_text_search(tmp_path: Path, hermes_home: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("ours-fts", "cli")
        db.append_messages("ours-fts", [{"role": "user", "content": "the quetzalcoatl deployment failed"}])
    assert peer("search", path, "ours-fts", hermes_home, query="quetzalcoatl")["hits"] == ["ours-fts"]


def test_a_phrase_is_found_in_what_either_program_writes_and_not_in_what_it_deletes(
        tmp_path: Path, hermes_home: Path, sql: Any) -> None:
    path = tmp_path / "state.db"
    phrase = '"zebra crossing"'
    with SessionDB(path) as db:
        for session in ("ours", "ours-cleared"):
            db.create_session(session, "cli")
            db.append_messages(session, [{"role": "user", "content": "the zebra crossing is closed"},
                                         {"role": "assistant", "content": "crossing the zebra"}])
        assert {h["session_id"] for h in db.search_messages(phrase)} == {"ours", "ours-cleared"}
    # Its inserts and deletes reach our word-pair index through its triggers' notes.
    peer("append", path, "theirs", hermes_home,
         messages=[{"role": "user", "content": "Zebra-crossing lights are out"}])
    [cleared] = peer("calls", path, "", hermes_home, calls=[["clear_messages", ["ours-cleared"], {}]])["results"]
    assert "error" not in cleared
    assert sql(path, "SELECT COUNT(*) FROM hermes_fts_stale")[0][0] > 0
    with SessionDB(path) as db:
        hits = db.search_messages(phrase)
        assert {h["session_id"] for h in hits} == {"ours", "theirs"}
        assert all(">>>" in h["snippet"] for h in hits)
    assert sql(path, "SELECT COUNT(*) FROM hermes_fts_stale") == [(0,)]
    assert peer("search", path, "", hermes_home, query=phrase)["hits"] == ["ours", "theirs"]


# -- a file it writes ------------------------------------------------------------------

def test_file_hermes_agent_writes_opens_here_reads_identically_and_we_append(tmp_path: Path, hermes_home: Path) -> None:
    path = tmp_path / "state.db"
    first = turn_one()
    # Its per-message API (list-of-parts content stored as JSON) ...
    theirs = peer("append", path, "theirs-1", hermes_home, messages=first)
    assert theirs["message_count"] == theirs["rows"] == len(first)
    # ... and its agent's flush (its real write path; it flattens a list of
    # parts to text, which both programs must then read alike).
    their_flush = peer("flush", path, "theirs-agent", hermes_home, messages=first)
    assert their_flush["message_count"] == their_flush["rows"] == len(first)

    with SessionDB(path) as db:
        ours = db.get_messages_as_conversation("theirs-1")
        assert shape(ours) == shape(first) == shape(theirs["conversation"])
        assert shape(db.get_messages_as_conversation("theirs-agent")) == shape(their_flush["conversation"])
        assert db.live_message_count("theirs-1") == len(first)
        session = db.get_session("theirs-1")
        assert session is not None and session["tool_call_count"] == tool_calls_in(first)

        # Our agent resumes the session and appends a turn.
        second = turn_two()
        agent = agent_shell(db, "theirs-1")
        assert agent._flush_messages_to_session_db(ours + second, ours) is True
        # A repeated flush from another exit path writes nothing more.
        assert agent._flush_messages_to_session_db(ours + second, ours) is True
        assert db.live_message_count("theirs-1") == len(db.get_messages("theirs-1")) == len(first + second)
        assert shape(db.get_messages_as_conversation("theirs-1")) == shape(first + second)
        assert db.search_messages("pytest", session_id="theirs-1")

    theirs = peer("read", path, "theirs-1", hermes_home)
    assert shape(theirs["conversation"]) == shape(first + second)
    assert theirs["message_count"] == theirs["rows"] == len(first + second)
    assert theirs["tool_call_count"] == tool_calls_in(first + second)

    # And it can keep going after us.
    theirs = peer("append", path, "theirs-1", hermes_home, messages=[{"role": "user", "content": "One more: ¿qué tal?"}])
    assert theirs["message_count"] == theirs["rows"] == len(first + second) + 1
    with SessionDB(path) as db:
        assert db.live_message_count("theirs-1") == len(db.get_messages("theirs-1")) == len(first + second) + 1
