"""Every ``SessionDB`` method of docs/ARCHITECTURE.md against a real ``state.db``."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from hermes.errors import (
    ConfigError,
    DatabaseClosedError,
    SessionNotFoundError,
    StateDbError,
)
from hermes.state import SessionDB

# The hermes-agent 0.19.0 session columns SPEC §3 names (a subset of all of them).
CORE_SESSION_COLUMNS = {
    "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
    "display_name", "origin_json", "model", "model_config", "system_prompt",
    "parent_session_id", "started_at", "ended_at", "end_reason", "message_count",
    "tool_call_count", "input_tokens", "output_tokens", "title", "archived",
}
CORE_MESSAGE_COLUMNS = {
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "effect_disposition", "timestamp", "token_count", "finish_reason", "reasoning",
    "reasoning_content", "reasoning_details", "codex_reasoning_items", "codex_message_items",
    "platform_message_id", "observed", "active", "compacted", "api_content",
}


@pytest.fixture
def count_rows(sql: Any, db_path: Path) -> Any:
    """Counts rows through an independent SQLite connection (in another process)."""
    def count(query: str = "SELECT COUNT(*) FROM messages") -> int:
        return int(sql(db_path, query)[0][0])
    return count


def tool_call(n: int, name: str = "terminal") -> dict[str, Any]:
    return {"id": f"call_{n}", "type": "function",
            "function": {"name": name, "arguments": json.dumps({"n": n})}}


# -- create_session / get_session ------------------------------------------------


def test_create_session_returns_id_and_row_has_every_column(db: SessionDB) -> None:
    before = time.time()
    assert db.create_session(session_id="s1", source="telegram", user_id="u1", model="m1",
                             system_prompt="be brief") == "s1"
    row = db.get_session("s1")
    assert row is not None
    assert CORE_SESSION_COLUMNS <= set(row), CORE_SESSION_COLUMNS - set(row)
    assert row["id"] == "s1" and row["source"] == "telegram"
    assert (row["user_id"], row["model"], row["system_prompt"]) == ("u1", "m1", "be brief")
    assert row["message_count"] == 0 and row["tool_call_count"] == 0
    assert before - 1 <= row["started_at"] <= time.time() + 1
    assert row["ended_at"] is None
    assert db.get_session("nope") is None


def test_create_session_is_idempotent_and_fills_only_null_columns(db: SessionDB, count_rows: Any, db_path: Path) -> None:
    db.create_session("s1", "cli", model="first-model", started_at=1000.0)
    db.append_message("s1", "user", "hello")
    db.create_session("s1", "gateway", user_id="u9", model="second-model",
                      model_config={"temperature": 0.5}, title="A title", started_at=5.0)
    row = db.get_session("s1")
    assert row is not None
    assert row["source"] == "cli"               # kept
    assert row["model"] == "first-model"         # kept: was not NULL
    assert row["started_at"] == 1000.0           # kept
    assert row["user_id"] == "u9"                # filled: was NULL
    assert row["title"] == "A title"             # filled
    assert json.loads(row["model_config"]) == {"temperature": 0.5}
    assert row["message_count"] == 1             # the counter survives the repeat create
    assert count_rows("SELECT COUNT(*) FROM sessions") == 1


def test_ensure_session_creates_once_and_keeps_the_row(db: SessionDB) -> None:
    """hermes-agent's ``ensure_session``: the row exists afterwards; a second call keeps it."""
    assert db.ensure_session("s1", "cli", model="m1") == "s1"
    db.append_message("s1", "user", "hello")
    assert db.ensure_session("s1", "gateway", model="m2") == "s1"
    row = db.get_session("s1")
    assert row is not None
    assert (row["source"], row["model"], row["message_count"]) == ("cli", "m1", 1)


def test_create_session_extra_columns_and_unknown_column(db: SessionDB, count_rows: Any, db_path: Path) -> None:
    db.create_session("s1", "telegram", session_key="agent:main:telegram:dm:1", chat_id="42",
                      chat_type="dm", parent_session_id=None)
    row = db.get_session("s1")
    assert row is not None
    assert (row["session_key"], row["chat_id"], row["chat_type"]) == (
        "agent:main:telegram:dm:1", "42", "dm")
    with pytest.raises(ConfigError, match="no_such_column"):
        db.create_session("s2", "cli", no_such_column="x")
    assert db.get_session("s2") is None
    assert count_rows("SELECT COUNT(*) FROM sessions") == 1


def test_parent_session_id_links_sessions(db: SessionDB) -> None:
    db.create_session("parent", "cli")
    db.create_session("child", "cli", parent_session_id="parent")
    child = db.get_session("child")
    assert child is not None and child["parent_session_id"] == "parent"


# -- append_message ---------------------------------------------------------------


def test_append_message_every_keyword_field_round_trips(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    calls = [tool_call(1), tool_call(2, "read_file")]
    rid = db.append_message(
        session_id="s1", role="assistant", content="let me look", tool_calls=calls,
        token_count=17, finish_reason="tool_calls", reasoning="thinking",
        reasoning_content="raw reasoning", reasoning_details=[{"type": "summary", "text": "r"}],
        codex_reasoning_items=[{"id": "rs_1"}], codex_message_items=[{"id": "msg_1"}],
        platform_message_id="pm-7", observed=True, effect_disposition="applied",
        timestamp=1_700_000_000.25, api_content="api view",
    )
    rid2 = db.append_message("s1", "tool", content="file body", tool_name="read_file",
                             tool_call_id="call_2")
    assert isinstance(rid, int) and rid2 > rid
    raw = db.get_messages("s1")
    assert [r["id"] for r in raw] == [rid, rid2]
    assert CORE_MESSAGE_COLUMNS <= set(raw[0])
    a = raw[0]
    assert a["session_id"] == "s1" and a["role"] == "assistant" and a["content"] == "let me look"
    assert a["tool_calls"] == calls
    assert (a["token_count"], a["finish_reason"], a["reasoning"], a["reasoning_content"]) == (
        17, "tool_calls", "thinking", "raw reasoning")
    assert a["reasoning_details"] == [{"type": "summary", "text": "r"}]
    assert a["codex_reasoning_items"] == [{"id": "rs_1"}]
    assert a["codex_message_items"] == [{"id": "msg_1"}]
    assert a["platform_message_id"] == "pm-7" and a["observed"] == 1
    assert a["effect_disposition"] == "applied" and a["api_content"] == "api view"
    assert a["timestamp"] == 1_700_000_000.25 and a["active"] == 1
    t = raw[1]
    assert (t["role"], t["tool_name"], t["tool_call_id"], t["tool_calls"]) == (
        "tool", "read_file", "call_2", None)

    conv = db.get_messages_as_conversation("s1")
    assert conv[0]["role"] == "assistant" and conv[0]["content"] == "let me look"
    assert conv[0]["tool_calls"] == calls
    assert conv[0]["finish_reason"] == "tool_calls" and conv[0]["reasoning"] == "thinking"
    assert conv[0]["reasoning_content"] == "raw reasoning"
    assert conv[0]["reasoning_details"] == [{"type": "summary", "text": "r"}]
    assert conv[0]["codex_reasoning_items"] == [{"id": "rs_1"}]
    assert conv[0]["timestamp"] == 1_700_000_000.25
    assert conv[1] == {"role": "tool", "content": "file body", "tool_name": "read_file",
                       "tool_call_id": "call_2", "timestamp": conv[1]["timestamp"]}
    row = db.get_session("s1")
    assert row is not None
    assert row["message_count"] == 2 and row["tool_call_count"] == 2


@pytest.mark.parametrize(
    "content",
    [
        "plain text",
        "",
        None,
        "ünïcödé — 日本語 — 🚀",
        [{"type": "text", "text": "look at this"},
         {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
    ],
    ids=["str", "empty", "none", "non-ascii", "parts"],
)
def test_append_message_content_forms(db: SessionDB, content: Any) -> None:
    db.create_session("s1", "cli")
    db.append_message("s1", "user", content)
    assert db.get_messages("s1")[0]["content"] == content
    got = db.get_messages_as_conversation("s1")[0]["content"]
    assert got == content and type(got) is type(content)


def test_tool_calls_json_round_trip_preserves_key_order(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    calls = [{"type": "function", "id": "c1", "zeta": 1, "alpha": {"z": 1, "a": 2},
              "function": {"name": "x", "arguments": "{\"b\": 1, \"a\": 2}"}}]
    db.append_message("s1", "assistant", None, tool_calls=calls)
    for got in (db.get_messages("s1")[0]["tool_calls"],
                db.get_messages_as_conversation("s1")[0]["tool_calls"]):
        assert got == calls
        assert list(got[0]) == list(calls[0])
        assert list(got[0]["alpha"]) == ["z", "a"]
        assert json.dumps(got) == json.dumps(calls)


def test_message_and_tool_call_counts_move(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "q")
    db.append_message("s1", "assistant", None, tool_calls=[tool_call(i) for i in range(3)])
    db.append_message("s1", "tool", "r", tool_call_id="call_0", tool_name="terminal")
    row = db.get_session("s1")
    assert row is not None
    assert (row["message_count"], row["tool_call_count"]) == (3, 3)
    assert db.live_message_count("s1") == 3
    assert db.live_message_count("missing") is None


def test_tool_calls_tuple_counts_every_call(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.append_message("s1", "assistant", None, tool_calls=(tool_call(1), tool_call(2), tool_call(3)))
    row = db.get_session("s1")
    assert row is not None
    stored = db.get_messages("s1")[0]["tool_calls"]
    assert len(stored) == 3
    assert row["tool_call_count"] == len(stored)


def test_append_message_to_missing_session_raises(db: SessionDB, count_rows: Any, db_path: Path) -> None:
    with pytest.raises(SessionNotFoundError, match="ghost"):
        db.append_message("ghost", "user", "x")
    assert count_rows() == 0


# -- append_messages ----------------------------------------------------------------


def test_append_messages_batch(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    batch = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call(1), tool_call(2)]},
        {"role": "tool", "content": "r1", "tool_call_id": "call_1", "name": "terminal"},
        {"role": "tool", "content": "r2", "tool_call_id": "call_2", "tool_name": "terminal"},
    ]
    ids = db.append_messages("s1", batch)
    assert len(ids) == 4 and ids == list(range(ids[0], ids[0] + 4))
    conv = db.get_messages_as_conversation("s1")
    assert [m["role"] for m in conv] == ["user", "assistant", "tool", "tool"]
    assert conv[2]["tool_name"] == "terminal"  # OpenAI "name" of a tool result
    row = db.get_session("s1")
    assert row is not None
    assert (row["message_count"], row["tool_call_count"]) == (4, 2)
    assert db.append_messages("s1", []) == []
    assert db.live_message_count("s1") == 4


def test_append_messages_missing_session_commits_nothing(db: SessionDB, count_rows: Any, db_path: Path) -> None:
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "keep")
    with pytest.raises(SessionNotFoundError) as info:
        db.append_messages("ghost", [{"role": "user", "content": str(i)} for i in range(5)])
    assert "ghost" in str(info.value) and str(db_path) in str(info.value)
    assert count_rows() == 1
    assert db.get_messages("ghost") == []


def test_append_messages_non_dict_item_commits_nothing(db: SessionDB, count_rows: Any, db_path: Path) -> None:
    db.create_session("s1", "cli")
    with pytest.raises(TypeError, match="message 1"):
        db.append_messages("s1", [{"role": "user", "content": "a"}, "oops",
                                  {"role": "user", "content": "c"}])
    assert count_rows() == 0
    assert db.live_message_count("s1") == 0


def test_append_messages_is_one_transaction_for_a_concurrent_reader(db_path: Path) -> None:
    """A reader on another connection only ever sees whole batches."""
    import threading

    writer = SessionDB(db_path, synchronous="NORMAL")
    reader = SessionDB(db_path)
    writer.create_session("s1", "cli")
    seen: list[tuple[int, int]] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append((reader.live_message_count("s1") or 0, len(reader.get_messages("s1"))))

    t = threading.Thread(target=read)
    t.start()
    try:
        for b in range(40):
            writer.append_messages("s1", [{"role": "user", "content": f"{b}-{i}"} for i in range(25)])
            sampled = len(seen)
            deadline = time.monotonic() + 5
            while len(seen) <= sampled + 1 and time.monotonic() < deadline:
                time.sleep(0.0005)  # let the reader look between (and during) batches
    finally:
        done.set()
        t.join()
    assert len({count for count, _ in seen}) >= 20, "the reader did not interleave with the writer"
    assert all(count % 25 == 0 and rows % 25 == 0 for count, rows in seen), seen[:20]
    assert reader.live_message_count("s1") == 1000
    writer.close()
    reader.close()


def test_once_key_is_not_consumed_by_a_failed_append(db: SessionDB) -> None:
    msgs = [{"role": "user", "content": "precious"}]
    with pytest.raises(SessionNotFoundError):
        db.append_messages("later", msgs, once_key="import-1")
    db.create_session("later", "cli")
    assert len(db.append_messages("later", msgs, once_key="import-1")) == 1
    assert [m["content"] for m in db.get_messages("later")] == ["precious"]


def test_once_key_writes_a_batch_once(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    msgs = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    assert len(db.append_messages("s1", msgs, once_key="k")) == 2
    assert db.append_messages("s1", msgs, once_key="k") == []
    assert db.live_message_count("s1") == 2


# -- reads ----------------------------------------------------------------------------


def test_get_messages_unknown_session_is_empty(db: SessionDB) -> None:
    assert db.get_messages("nobody") == []
    assert db.get_messages_as_conversation("nobody") == []


def test_conversation_is_ordered_by_id_even_when_timestamps_go_backwards(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    for i, ts in enumerate([3000.0, 2000.0, 1000.0, 2500.0]):
        db.append_message("s1", "user" if i % 2 == 0 else "assistant", f"m{i}", timestamp=ts)
    conv = db.get_messages_as_conversation("s1")
    assert [m["content"] for m in conv] == ["m0", "m1", "m2", "m3"]
    assert [m["timestamp"] for m in conv] == [3000.0, 2000.0, 1000.0, 2500.0]
    assert [m["content"] for m in db.get_messages("s1")] == ["m0", "m1", "m2", "m3"]


def conversation_shape(row: dict[str, Any]) -> dict[str, Any]:
    """What get_messages_as_conversation makes of a get_messages row (for the rows
    written below: no api content, effect, platform id, reasoning or observed flag)."""
    out = {"role": row["role"], "content": row["content"]}
    if row["timestamp"]:
        out["timestamp"] = row["timestamp"]
    for key in ("tool_call_id", "tool_name"):
        if row[key]:
            out[key] = row[key]
    if row["tool_calls"]:
        out["tool_calls"] = row["tool_calls"]
    return out


@pytest.mark.parametrize("length", [64, 65, 66, 97, 1000])
def test_long_conversation_matches_get_messages_row_for_row(
    db: SessionDB, db_path: Path, length: int, write_sql: Any
) -> None:
    # Past 64 rows a helper thread reads the rest (in tables of 32) while the
    # rows read so far become dicts: lengths at and across the table edges.
    db.create_session("s1", "cli")
    half = length // 2
    for i in range(half):
        kind = i % 3
        if kind == 0:
            db.append_message("s1", "user", f"question {i} ünï 🚀", timestamp=1000.0 + i)
        elif kind == 1:
            db.append_message("s1", "assistant", f"calling {i}", tool_calls=[tool_call(i)],
                              timestamp=1000.0 + i)
        else:
            db.append_message("s1", "tool", f"result {i}", tool_call_id=f"call_{i - 1}",
                              tool_name="terminal", timestamp=1000.0 + i)
    # Text another writer stored as invalid UTF-8, in the middle of the transcript
    # (from another process: a second SQLite in this one would drop our file locks).
    write_sql(db_path, "INSERT INTO messages (session_id, role, content, timestamp, active)"
                       " VALUES ('s1', 'user', CAST(x'6f6bff21' AS TEXT), 0, 1)")
    db.append_messages("s1", [{"role": "user", "content": f"later {i}"}
                              for i in range(length - half - 1)])
    rows = db.get_messages("s1")
    conv = db.get_messages_as_conversation("s1")
    assert len(conv) == len(rows) == length
    assert [list(m.items()) for m in conv] == [list(conversation_shape(r).items()) for r in rows]
    assert conv[half] == {"role": "user", "content": "ok\ufffd!"}
    # Fresh dicts on every load.
    again = db.get_messages_as_conversation("s1")
    assert again == conv and all(a is not b for a, b in zip(again, conv))


@pytest.mark.parametrize("length", [63, 64, 65, 576, 577, 1500])
def test_a_load_across_its_table_edges_matches_get_messages(db: SessionDB, length: int) -> None:
    # Both stores hand a long load over in tables (on PostgreSQL as the rows arrive: 64,
    # then 512 a table): lengths at and across the edges, every row once and in order.
    db.create_session("s1", "cli")
    db.append_messages("s1", [
        {"role": "user", "content": f"question {i} ünï 🚀"} if i % 3 == 0 else
        {"role": "assistant", "content": f"calling {i}", "tool_calls": [tool_call(i)]}
        if i % 3 == 1 else
        {"role": "tool", "content": f"result {i}", "tool_call_id": f"call_{i - 1}",
         "tool_name": "terminal"}
        for i in range(length)])
    rows = db.get_messages("s1")
    conv = db.get_messages_as_conversation("s1")
    assert len(conv) == len(rows) == length
    assert [list(m.items()) for m in conv] == [list(conversation_shape(r).items()) for r in rows]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_long_loads_work_in_a_forked_child(db: SessionDB, db_path: Path) -> None:
    # A long load reads ahead on a helper thread that is kept, awake for a
    # moment, for the next load; a forked child has none of its parent's
    # threads and starts its own. Forked right after a load, several times:
    # the parent's helper is then busy looking for its next job.
    db.create_session("s1", "cli")
    db.append_messages("s1", [{"role": "user", "content": f"m{i}"} for i in range(500)])
    for _ in range(5):
        assert len(db.get_messages_as_conversation("s1")) == 500
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a store of its own, as after any fork
            try:
                child = SessionDB(db_path)
                loaded = [len(child.get_messages_as_conversation("s1")) for _ in range(3)]
                os.write(write_end, json.dumps(loaded).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        deadline = time.monotonic() + 30
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("the forked child's load hung")
            time.sleep(0.01)
        with os.fdopen(read_end) as got:
            assert json.loads(got.read() or "null") == [500, 500, 500]
    assert len(db.get_messages_as_conversation("s1")) == 500


def test_conversation_is_openai_shaped(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.append_message("s1", "system", "sys")
    db.append_message("s1", "user", "hi", platform_message_id="42")
    db.append_message("s1", "assistant", "hello", finish_reason="stop")
    conv = db.get_messages_as_conversation("s1")
    assert [set(m) - {"timestamp"} for m in conv] == [
        {"role", "content"}, {"role", "content", "message_id"},
        {"role", "content", "finish_reason"}]
    assert conv[1]["message_id"] == "42"
    # other sessions never leak in
    db.create_session("s2", "cli")
    db.append_message("s2", "user", "other")
    assert len(db.get_messages_as_conversation("s1")) == 3


# -- update / end / reopen ---------------------------------------------------------------


def test_update_session_sets_columns(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.update_session("s1", title="Trip plan", input_tokens=120, model_config={"k": [1, 2]})
    row = db.get_session("s1")
    assert row is not None
    assert (row["title"], row["input_tokens"]) == ("Trip plan", 120)
    assert json.loads(row["model_config"]) == {"k": [1, 2]}


def test_update_session_unknown_column_writes_nothing(db: SessionDB) -> None:
    db.create_session("s1", "cli", title="before")
    with pytest.raises(ConfigError) as info:
        db.update_session("s1", title="after", not_a_column=1)
    assert "not_a_column" in str(info.value)
    row = db.get_session("s1")
    assert row is not None and row["title"] == "before"


def test_update_session_missing_raises(db: SessionDB) -> None:
    with pytest.raises(SessionNotFoundError):
        db.update_session("ghost", title="x")


def test_end_and_reopen_session(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    before = time.time()
    db.end_session("s1", "user_exit")
    row = db.get_session("s1")
    assert row is not None
    assert row["end_reason"] == "user_exit"
    assert before - 1 <= row["ended_at"] <= time.time() + 1
    db.reopen_session("s1")
    row = db.get_session("s1")
    assert row is not None and row["ended_at"] is None and row["end_reason"] is None
    with pytest.raises(SessionNotFoundError):
        db.end_session("ghost", "x")


# -- list_sessions -----------------------------------------------------------------------


def test_list_sessions_newest_first_paged_and_filtered(db: SessionDB) -> None:
    for i in range(7):
        db.create_session(f"s{i}", "telegram" if i % 2 else "cli", started_at=1000.0 + i)
    ids = lambda rows: [r["id"] for r in rows]
    assert ids(db.list_sessions()) == [f"s{i}" for i in range(6, -1, -1)]
    assert ids(db.list_sessions(limit=3)) == ["s6", "s5", "s4"]
    assert ids(db.list_sessions(limit=3, offset=3)) == ["s3", "s2", "s1"]
    assert ids(db.list_sessions(limit=3, offset=6)) == ["s0"]
    assert db.list_sessions(limit=3, offset=7) == []
    assert ids(db.list_sessions(source="telegram")) == ["s5", "s3", "s1"]
    assert ids(db.list_sessions(source="telegram", limit=2, offset=1)) == ["s3", "s1"]
    assert db.list_sessions(source="nowhere") == []
    row = db.list_sessions(limit=1)[0]
    assert "message_count" in row and row["source"] == "cli"
    with pytest.raises(ValueError):
        db.list_sessions(limit=-1)


# -- platform ids, routing, meta ----------------------------------------------------------


def test_has_platform_message_id(db: SessionDB) -> None:
    db.create_session("s1", "telegram")
    db.create_session("s2", "telegram")
    db.append_message("s1", "user", "hi", platform_message_id="1001")
    db.append_messages("s1", [{"role": "user", "content": "x", "message_id": "1002"}])
    assert db.has_platform_message_id("s1", "1001")
    assert db.has_platform_message_id("s1", 1002)  # type: ignore[arg-type]
    assert not db.has_platform_message_id("s1", "1003")
    assert not db.has_platform_message_id("s2", "1001")
    assert not db.has_platform_message_id("ghost", "1001")


def test_routing_entries_save_load_delete(db_path: Path, db: SessionDB) -> None:
    assert db.load_gateway_routing_entries() == {}
    db.save_gateway_routing_entry("k1", '{"session_id": "a"}')
    db.save_gateway_routing_entry("k2", '{"session_id": "b"}')
    db.save_gateway_routing_entry("k1", '{"session_id": "c"}')  # replaces
    db.save_gateway_routing_entry("k1", '{"session_id": "other-scope"}', scope="profile2")
    assert db.load_gateway_routing_entries() == {"k1": '{"session_id": "c"}', "k2": '{"session_id": "b"}'}
    assert db.load_gateway_routing_entries(scope="profile2") == {"k1": '{"session_id": "other-scope"}'}
    db.delete_gateway_routing_entries(["k1", "never-there"])
    assert db.load_gateway_routing_entries() == {"k2": '{"session_id": "b"}'}
    assert db.load_gateway_routing_entries(scope="profile2") == {"k1": '{"session_id": "other-scope"}'}
    db.delete_gateway_routing_entries([], scope="profile2")
    db.close()
    again = SessionDB(db_path)
    assert again.load_gateway_routing_entries() == {"k2": '{"session_id": "b"}'}
    again.close()


def test_meta(db_path: Path, db: SessionDB) -> None:
    assert db.get_meta("gateway.version") is None
    db.set_meta("gateway.version", "1")
    db.set_meta("gateway.version", "2")
    db.set_meta("other", "x")
    assert db.get_meta("gateway.version") == "2"
    db.close()
    again = SessionDB(db_path)
    assert (again.get_meta("gateway.version"), again.get_meta("other")) == ("2", "x")
    again.close()


def test_message_count_and_foreign_commit_detection(db_path: Path) -> None:
    a = SessionDB(db_path)
    b = SessionDB(db_path)
    a.create_session("s1", "cli")
    a.foreign_commit_since_last_look()
    b.foreign_commit_since_last_look()
    a.append_message("s1", "user", "own write")
    assert a.foreign_commit_since_last_look() is False
    b.append_message("s1", "user", "other connection")
    # b indexes its row right after the commit, in a commit of its own: let it finish, so
    # that the one foreign write is seen exactly once.
    assert b.search_messages("connection")
    assert a.foreign_commit_since_last_look() is True
    assert a.foreign_commit_since_last_look() is False
    assert a.live_message_count("s1") == 2 and b.live_message_count("s1") == 2
    a.close()
    b.close()


# -- close ---------------------------------------------------------------------------------


def test_close_then_use_raises_database_closed(db_path: Path) -> None:
    db = SessionDB(db_path)
    db.create_session("s1", "cli")
    db.close()
    db.close()  # closing twice is harmless
    calls = [
        lambda: db.get_session("s1"),
        lambda: db.append_message("s1", "user", "x"),
        lambda: db.append_messages("s1", [{"role": "user", "content": "x"}]),
        lambda: db.get_messages("s1"),
        lambda: db.create_session("s2", "cli"),
        lambda: db.search_messages("x"),
        lambda: db.set_meta("k", "v"),
        lambda: db.live_message_count("s1"),
        lambda: db.foreign_commit_since_last_look(),
    ]
    for call in calls:
        with pytest.raises(DatabaseClosedError) as info:
            call()
        assert isinstance(info.value, StateDbError)
        assert str(db_path) in str(info.value)
    other = SessionDB(db_path)
    assert other.get_session("s1") is not None
    other.close()


def test_context_manager_closes(db_path: Path) -> None:
    with SessionDB(db_path) as db:
        db.create_session("s1", "cli")
    with pytest.raises(DatabaseClosedError):
        db.get_session("s1")


@pytest.mark.parametrize("write", ["create", "update"])
def test_counters_cannot_be_overwritten_through_columns(db: SessionDB, write: str) -> None:
    if write == "create":
        with pytest.raises(ConfigError):
            db.create_session("s1", "cli", message_count=7)
    else:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "one")
        with pytest.raises(ConfigError):
            db.update_session("s1", message_count=0, tool_call_count=-3)
    row = db.get_session("s1")
    assert row is None or row["message_count"] == len(db.get_messages("s1"))
