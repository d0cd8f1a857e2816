"""The core's generic store operations from Python: ``Store.query``, ``count`` and ``write``
with the ``Select``/``Insert``/``Update``/``Delete``/``Append`` classes, on a real file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hermes._core import Append, Delete, Insert, Select, Store, Update
from hermes.errors import ConfigError, DatabaseLockedError, SessionNotFoundError


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "state.db")
    for sid, source, started in [("a", "cli", 1.0), ("b", "cli", 2.0), ("c", "telegram", 3.0)]:
        s.create_session(sid, source, None, started)
    return s


def ids(rows: list[dict[str, object]]) -> list[object]:
    return [r["id"] for r in rows]


def test_query_filters_orders_pages_and_derives(store: Store) -> None:
    store.append("c", [{"role": "user", "content": "first\nquestion", "timestamp": 10.0}])
    assert ids(store.query("sessions", order_by=["-started_at"])) == ["c", "b", "a"]
    assert ids(store.query("sessions", where=("=", "source", "cli"), order_by=["id"])) == ["a", "b"]
    assert ids(store.query("sessions", where=("in", "id", ["a", "c"]), order_by=["id"])) == ["a", "c"]
    assert ids(store.query("sessions", where=("not", ("like", "id", "A%")), order_by=["id"])) == [
        "b", "c"]
    either = ("or", [(">=", "started_at", 3), ("is null", "user_id")])
    assert len(store.query("sessions", where=either)) == 3
    page = store.query("sessions", order_by=["-started_at", "-id"], limit=1, offset=1)
    assert ids(page) == ["b"]
    with_user = Select("messages", "session_id", ("=", "role", "user"))
    assert ids(store.query("sessions", where=("in", "id", with_user))) == ["c"]
    rich = store.query("sessions", columns=["*", "preview", "last_active"],
                       where=("=", "id", "c"))
    assert rich[0]["source"] == "telegram" and rich[0]["message_count"] == 1
    assert (rich[0]["preview"], rich[0]["last_active"]) == ("first question", 10.0)
    assert list(store.query("sessions", columns=["id"], limit=1)[0]) == ["id"]
    assert store.count("sessions") == 3
    assert store.count("sessions", ("glob", "source", "tele*")) == 1


def test_message_rows_come_back_decoded(store: Store) -> None:
    parts = [{"type": "text", "text": "hi"}]
    store.append("a", [{"role": "user", "content": parts}])
    [row] = store.query("messages", where=("=", "session_id", "a"))
    assert row["content"] == parts


def test_write_runs_its_ops_in_one_transaction_all_or_none(store: Store) -> None:
    fails = [
        Update("sessions", ("=", "id", "a"), {"title": "kept?"}),
        Append("a", [{"role": "user", "content": "x"}]),
        Update("sessions", ("=", "id", "nope"), {"title": "y"}, must_match=True),
    ]
    with pytest.raises(LookupError, match="no row of sessions matched"):
        store.write(fails)
    a = store.get_session("a")
    assert a is not None and a["title"] is None
    assert store.live_message_count("a") == 0
    done = store.write([
        Update("sessions", ("=", "id", "a"), {"title": "kept"}, add={"rewind_count": 2}),
        Append("a", [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]),
        Insert("state_meta", {"key": "k", "value": "v"}, on_conflict="replace"),
        Delete("sessions", ("=", "id", "b")),
    ])
    assert done == [1, 2, 1, 1]
    a = store.get_session("a")
    assert a is not None and (a["title"], a["rewind_count"], a["message_count"]) == ("kept", 2, 2)
    assert store.get_session("b") is None
    assert store.get_meta("k") == "v"
    assert store.write([]) == []


def test_rewinding_through_an_update_recounts_the_session(store: Store) -> None:
    msg_ids = store.append("a", [{"role": "user", "content": str(i)} for i in range(4)])
    [n] = store.write([Update("messages", ("and", [("=", "session_id", "a"),
                                                   (">=", "id", msg_ids[2])]), {"active": 0})])
    assert n == 2
    assert store.live_message_count("a") == 2
    assert [m["content"] for m in store.get_conversation("a")] == ["0", "1"]


def test_inserts_say_what_a_row_with_the_same_key_gets(store: Store) -> None:
    store.write([Insert("state_meta", {"key": "k", "value": "1"})])
    with pytest.raises(Exception, match="UNIQUE constraint failed"):
        store.write([Insert("state_meta", {"key": "k", "value": "2"})])
    assert store.write([Insert("state_meta", {"key": "k", "value": "3"}, on_conflict="ignore")]) == [0]
    assert store.get_meta("k") == "1"
    with pytest.raises(ValueError, match='on_conflict="merge"'):
        Insert("state_meta", {"key": "k"}, on_conflict="merge")


def test_bad_names_and_shapes_are_refused_clearly_and_write_nothing(store: Store) -> None:
    with pytest.raises(ConfigError, match='no relation "session".*sessions, messages'):
        store.query("session")
    with pytest.raises(ConfigError, match='sessions has no column "nope"; valid columns: id, source'):
        store.query("sessions", where=("=", "nope", 1))
    with pytest.raises(ConfigError, match="managed by hermes"):
        store.write([Update("sessions", ("=", "id", "a"), {"message_count": 9})])
    with pytest.raises(ConfigError, match="key of its row"):
        store.write([Update("sessions", ("=", "id", "a"), {"id": "z"})])
    with pytest.raises(ConfigError, match="only by an append"):
        store.write([Insert("messages", {"role": "user"})])
    with pytest.raises(ConfigError, match="IsNull"):
        store.query("sessions", where=("=", "title", None))
    with pytest.raises(ValueError, match="is not a filter"):
        store.query("sessions", where=("~", "id", "a"))
    with pytest.raises(ValueError, match="is not a filter"):
        store.query("sessions", where=["=", "id", "a"])
    with pytest.raises(TypeError, match="compares with a str"):
        store.query("sessions", where=("=", "id", ["a"]))
    with pytest.raises(ValueError, match="needs a filter"):
        Delete("sessions", None)
    with pytest.raises(TypeError, match="takes Insert, Update, Delete and Append"):
        store.write(["DELETE FROM sessions"])
    with pytest.raises(SessionNotFoundError):
        store.write([Append("nope", [{"role": "user", "content": "x"}])])
    assert store.count("sessions") == 3 and store.count("messages") == 0


def test_columns_and_location_describe_the_open_store(store: Store, tmp_path: Path,
                                                      write_sql: Any) -> None:
    assert store.location == str(tmp_path / "state.db")
    assert {"id", "source", "message_count", "archived"} <= set(store.columns("sessions"))
    assert store.columns("gateway_routing")[:2] == ["scope", "session_key"]
    # A column another program added is known to the next store that opens the file.
    store.close()
    write_sql(tmp_path / "state.db", "ALTER TABLE sessions ADD COLUMN their_column TEXT")
    again = Store(tmp_path / "state.db")
    again.write([Update("sessions", ("=", "id", "a"), {"their_column": "x"})])
    assert again.query("sessions", columns=["their_column"], where=("=", "id", "a")) == [
        {"their_column": "x"}]
    again.close()


def test_an_unreachable_postgresql_server_is_named_without_its_password(
        tmp_path: Path) -> None:
    # Nothing listens on port 1 of the loopback.
    with pytest.raises(DatabaseLockedError) as info:
        Store("postgresql://hermes:s3cret@127.0.0.1:1/state")
    text = str(info.value)
    assert "the PostgreSQL server did not answer" in text
    assert "postgresql://hermes@127.0.0.1:1/state" in text and "s3cret" not in text
    assert list(tmp_path.iterdir()) == []
