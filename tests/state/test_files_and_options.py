"""Where ``state.db`` lives, its file modes, refusing foreign files, options,
and ``AsyncSessionDB``."""

from __future__ import annotations

import asyncio
import inspect
import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes.errors import (
    ConfigError,
    CorruptDatabaseError,
    DatabaseLockedError,
    NotADatabaseError,
    ReadOnlyDatabaseError,
    StateDbError,
    WriterBusyError,
)
from hermes.state import (
    SCHEMA_SQL,
    SCHEMA_VERSION,
    AsyncSessionDB,
    SessionDB,
    writes_without_waiting,
)



def sidecars(path: Path) -> list[str]:
    return [p.name for p in path.parent.iterdir() if p.name != path.name and p.name.startswith(path.name)]


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0)
    yield
    os.umask(old)


# -- $HERMES_HOME ------------------------------------------------------------------------


def test_default_path_follows_hermes_home_at_open_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    monkeypatch.setenv("HERMES_HOME", str(first))
    a = SessionDB()
    monkeypatch.setenv("HERMES_HOME", str(second))  # changed after import and after `a`
    b = SessionDB()
    assert a.db_path == first / "state.db" and b.db_path == second / "state.db"
    a.create_session("in-one", "cli")
    b.create_session("in-two", "cli")
    assert (first / "state.db").is_file() and (second / "state.db").is_file()
    assert a.get_session("in-two") is None and b.get_session("in-one") is None
    a.close()
    b.close()


def test_default_path_without_hermes_home_is_dot_hermes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    db = SessionDB()
    assert db.db_path == tmp_path / ".hermes" / "state.db"
    assert db.db_path.is_file()
    db.close()


# -- file modes ---------------------------------------------------------------------------


def test_files_are_created_0600(tmp_path: Path, permissive_umask: None) -> None:
    path = tmp_path / "deep" / "state.db"
    db = SessionDB(path)
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "hello")
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        f = path.parent / name
        assert f.exists(), f"{name} missing"
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, (name, oct(f.stat().st_mode))
    db.close()


# -- refusing files that are not ours ------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        b"this is a text file, not a database\n" * 20,
        b"hello",
        bytes(range(256)) * 4,
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 300,
    ],
    ids=["text", "short", "binary", "png"],
)
def test_not_a_database_is_refused_and_left_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(content)
    os.chmod(path, 0o644)
    mtime = path.stat().st_mtime_ns
    with pytest.raises(NotADatabaseError) as info:
        SessionDB(path)
    assert isinstance(info.value, StateDbError) and isinstance(info.value, CorruptDatabaseError)
    assert str(path) in str(info.value)
    assert path.read_bytes() == content
    assert path.stat().st_mtime_ns == mtime
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sidecars(path) == []


def test_damaged_sqlite_header_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    db.create_session("s1", "cli")
    db.close()
    data = bytearray(path.read_bytes())
    data[16:18] = b"\x00\x03"  # page size 3: impossible
    path.write_bytes(bytes(data))
    for name in sidecars(path):
        (tmp_path / name).unlink()
    with pytest.raises(CorruptDatabaseError) as info:
        SessionDB(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == bytes(data)
    assert sidecars(path) == []


def test_empty_file_becomes_a_database(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.touch()
    db = SessionDB(path)
    db.create_session("s1", "cli")
    assert path.read_bytes()[:16] == b"SQLite format 3\x00"
    db.close()


def test_schema_sql_is_the_ddl_of_a_file_we_create(tmp_path: Path, sql: Any,
                                                   write_sql: Any) -> None:
    def schema(path: Path) -> set[tuple[str, str]]:
        return set(sql(path, "SELECT name, sql FROM sqlite_schema WHERE sql IS NOT NULL"))

    ours = tmp_path / "ours.db"
    SessionDB(ours).close()
    scripted = tmp_path / "scripted.db"
    write_sql(scripted, SCHEMA_SQL)
    # All but the word-pair index, which needs SQLite 3.43+; the store adds it on open.
    pairs = {(name, ddl) for name, ddl in schema(ours)
             if name.startswith("hermes_fts_pairs") or name == "hermes_fts_stale"}
    assert len(pairs) == 9
    assert schema(scripted) == schema(ours) - pairs
    SessionDB(scripted).close()
    assert schema(scripted) == schema(ours)
    assert sql(ours, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    assert SCHEMA_VERSION == 22  # hermes-agent 0.19.0's


# -- options ----------------------------------------------------------------------------


def test_synchronous_normal_is_accepted(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db", synchronous="NORMAL")
    assert db.synchronous == "NORMAL"
    db.create_session("s1", "cli")
    db.append_messages("s1", [{"role": "user", "content": str(i)} for i in range(10)])
    db.close()
    again = SessionDB(tmp_path / "state.db")
    assert again.live_message_count("s1") == 10
    again.close()


@pytest.mark.parametrize("kwargs", [{"synchronous": "bogus"}, {"synchronous": "OFF"},
                                    {"busy_budget": -1.0}, {"busy_budget": float("nan")}])
def test_bad_options_raise_config_error_and_create_nothing(tmp_path: Path, kwargs: dict[str, object]) -> None:
    path = tmp_path / "state.db"
    with pytest.raises(ConfigError) as info:
        SessionDB(path, **kwargs)  # type: ignore[arg-type]
    assert next(iter(kwargs)) in str(info.value)
    assert not path.exists()


def test_read_only_filesystem_raises_read_only_error(mount_tmpfs: Callable[..., Path]) -> None:
    mnt = mount_tmpfs("ro")
    SessionDB(mnt / "state.db").close()
    if subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot remount read-only here")
    for name in ("state.db", "new.db"):
        with pytest.raises(ReadOnlyDatabaseError) as info:
            SessionDB(mnt / name)
        assert str(mnt / name) in str(info.value)


# -- AsyncSessionDB ------------------------------------------------------------------------

ASYNC_METHODS = [
    "create_session", "append_message", "append_messages", "get_session", "live_message_count",
    "foreign_commit_since_last_look", "get_messages", "get_messages_as_conversation",
    "update_session", "end_session", "reopen_session", "list_sessions", "search_messages",
    "has_platform_message_id", "save_gateway_routing_entry", "load_gateway_routing_entries",
    "delete_gateway_routing_entries", "get_meta", "set_meta", "close",
]


def test_async_session_db_every_method_is_awaitable(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    adb = AsyncSessionDB(db)
    assert adb.sync is db
    for name in ASYNC_METHODS:
        assert inspect.iscoroutinefunction(getattr(adb, name)), name

    async def scenario() -> None:
        assert await adb.create_session(session_id="s1", source="cli") == "s1"
        rid = await adb.append_message(session_id="s1", role="user", content="hello async",
                                       platform_message_id="p1")
        assert isinstance(rid, int)
        assert len(await adb.append_messages("s1", [{"role": "assistant", "content": "hi"}])) == 1
        assert (await adb.get_session("s1"))["message_count"] == 2
        assert await adb.live_message_count("s1") == 2
        assert await adb.foreign_commit_since_last_look() in (True, False)
        assert [m["content"] for m in await adb.get_messages("s1")] == ["hello async", "hi"]
        assert [m["role"] for m in await adb.get_messages_as_conversation("s1")] == ["user", "assistant"]
        await adb.update_session("s1", title="T")
        await adb.end_session("s1", "done")
        assert (await adb.get_session("s1"))["end_reason"] == "done"
        await adb.reopen_session("s1")
        assert (await adb.get_session("s1"))["end_reason"] is None
        assert [s["id"] for s in await adb.list_sessions()] == ["s1"]
        assert len(await adb.search_messages("async")) == 1
        assert await adb.has_platform_message_id("s1", "p1") is True
        await adb.save_gateway_routing_entry("k", "{}")
        assert await adb.load_gateway_routing_entries() == {"k": "{}"}
        await adb.delete_gateway_routing_entries(["k"])
        assert await adb.load_gateway_routing_entries() == {}
        await adb.set_meta("m", "v")
        assert await adb.get_meta("m") == "v"
        await adb.close()

    asyncio.run(scenario())
    assert db.get_session.__self__ is db  # the sync DB is the same object
    with pytest.raises(StateDbError):
        db.get_session("s1")


def _public_methods(obj: object) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")
            and inspect.ismethod(getattr(obj, name))}


def test_async_session_db_has_a_coroutine_for_every_public_method(tmp_path: Path) -> None:
    """A method added to SessionDB without its AsyncSessionDB twin fails here, by name."""
    with SessionDB(tmp_path / "state.db") as db:
        adb = AsyncSessionDB(db)
        coroutines = {name for name in dir(adb) if not name.startswith("_")
                      and inspect.iscoroutinefunction(getattr(adb, name))}
        assert _public_methods(db) - coroutines == set(), "SessionDB methods without a coroutine"
        assert coroutines - _public_methods(db) == set(), "coroutines without a SessionDB method"
        assert {n for n in dir(adb) if not n.startswith("_")} - coroutines == {"sync"}
        assert adb.sync is db
        for name in coroutines:  # each keeps its method's signature and documentation
            assert inspect.signature(getattr(adb, name)) == inspect.signature(getattr(db, name))
            assert getattr(adb, name).__doc__ == getattr(db, name).__doc__


def test_a_coroutine_must_be_named_after_its_method() -> None:
    with pytest.raises((TypeError, RuntimeError)) as raised:  # RuntimeError wraps it before 3.12
        class Misnamed(AsyncSessionDB):
            get_sesion = AsyncSessionDB.get_session
    assert "name the coroutine after the method it runs" in str(raised.value.__cause__ or raised.value)


def test_a_coroutine_calls_the_wrapped_objects_own_method(tmp_path: Path) -> None:
    class CountingDB(SessionDB):
        def live_message_count(self, session_id: str) -> int | None:
            return 41

    with CountingDB(tmp_path / "state.db") as db:
        assert asyncio.run(AsyncSessionDB(db).live_message_count("s1")) == 41


def test_async_session_db_runs_off_the_event_loop(tmp_path: Path, hold_write_lock: Any) -> None:
    """While a write waits for a lock held by another connection, the loop keeps running."""
    path = tmp_path / "state.db"
    db = SessionDB(path, busy_budget=0.6)
    db.create_session("s1", "cli")
    adb = AsyncSessionDB(db)
    ticks = 0

    async def ticker(stop: asyncio.Event) -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    async def scenario() -> float:
        stop = asyncio.Event()
        t = asyncio.create_task(ticker(stop))
        start = time.monotonic()
        with pytest.raises(DatabaseLockedError):
            await adb.append_message("s1", "user", "blocked")
        elapsed = time.monotonic() - start
        stop.set()
        await t
        return elapsed

    with hold_write_lock(path):
        elapsed = asyncio.run(scenario())
    assert elapsed >= 0.5
    assert ticks >= 15, f"event loop starved: {ticks} ticks in {elapsed:.2f}s"
    assert db.live_message_count("s1") == 0
    db.close()


def test_writes_without_waiting_give_up_at_once_and_write_nothing(
        tmp_path: Path, hold_write_lock: Any) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path, synchronous="NORMAL", busy_budget=5.0)
    db.create_session("s1", "cli")
    with hold_write_lock(path):
        start = time.monotonic()
        with writes_without_waiting(), pytest.raises(WriterBusyError, match="nothing was written"):
            db.append_message("s1", "user", "on the loop")
        assert time.monotonic() - start < 1.0, "it waited for the lock"
        assert db.live_message_count("s1") == 0
    with writes_without_waiting():  # the lock is free: the write goes through at once
        db.append_message("s1", "user", "free now")
    assert [m["content"] for m in db.get_messages_as_conversation("s1")] == ["free now"]
    db.close()


# -- file compatibility: what hermes-agent 0.19.0 adds to our file -----------------------------

# hermes-agent 0.19.0 (hermes_state.FTS_TRIGRAM_SQL) adds this index and trigger the first
# time it opens a state.db, and back-fills it; its CJK / substring search reads it.
# Ours has the trigram index too: the other program drops it first (as a file of a
# hermes-agent run with HERMES_DISABLE_FTS_TRIGRAM would have none), then adds its own.
AGENT_TRIGRAM_DDL = """
DROP TABLE messages_fts_trigram;
DROP TRIGGER messages_fts_trigram_insert;
DROP TRIGGER messages_fts_trigram_delete;
DROP TRIGGER messages_fts_trigram_update;
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(content, tokenize='trigram');
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id,
        COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || COALESCE(new.tool_calls, ''));
END;
INSERT INTO messages_fts_trigram(rowid, content)
    SELECT id, COALESCE(content, '') || ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')
    FROM messages;
"""


def test_triggers_another_program_added_still_fire_for_our_writes(tmp_path: Path, sql: Any,
                                                                  write_sql: Any) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "first 東京タワー")
    db.close()
    write_sql(path, AGENT_TRIGRAM_DDL)
    db = SessionDB(path)
    db.append_message("s1", "user", "second 大阪城公園")
    db.append_messages("s1", [{"role": "user", "content": "third 名古屋城"}])
    db.close()
    indexed = sql(path, "SELECT rowid FROM messages_fts_trigram WHERE messages_fts_trigram MATCH '大阪城'")
    assert len(indexed) == 1
    assert sql(path, "SELECT COUNT(*) FROM messages_fts_trigram") == [(3,)]
