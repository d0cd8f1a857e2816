"""Session keys, routing entries and transcripts in state.db."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from unittest.mock import MagicMock

import pytest

from hermes.gateway import session
from hermes.gateway.config import GatewayConfig, Platform
from hermes.gateway.session import (
    AsyncSessionStore,
    SessionEntry,
    SessionSource,
    SessionStore,
    build_session_key,
)
from hermes.state import SessionDB


def _source(**fields: object) -> SessionSource:
    values: dict[str, object] = {"platform": Platform.TELEGRAM, "chat_id": "-1001",
                                 "chat_type": "group", "user_id": "12345", **fields}
    return SessionSource(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(("fields", "options", "key"), [
    ({}, {}, "agent:main:telegram:group:-1001:12345"),
    ({}, {"group_sessions_per_user": False}, "agent:main:telegram:group:-1001"),
    ({"thread_id": "7"}, {}, "agent:main:telegram:group:-1001:7"),
    ({"thread_id": "7"}, {"thread_sessions_per_user": True},
     "agent:main:telegram:group:-1001:7:12345"),
    ({"chat_type": "dm", "chat_id": "99"}, {}, "agent:main:telegram:dm:99"),
    ({"chat_type": "dm", "chat_id": "99", "thread_id": "3"}, {}, "agent:main:telegram:dm:99:3"),
    ({"chat_type": "dm", "chat_id": ""}, {}, "agent:main:telegram:dm:12345"),
    ({"user_id": None}, {}, "agent:main:telegram:group:-1001"),
])
def test_session_keys(fields: dict[str, object], options: dict[str, bool], key: str) -> None:
    assert build_session_key(_source(**fields), **options) == key


def test_entry_json_round_trip() -> None:
    now = datetime.now()
    entry = SessionEntry("k", "s", now, now, platform=Platform.SLACK, chat_type="group",
                         origin=_source(), resume_pending=True, resume_reason="shutdown_timeout",
                         last_resume_marked_at=now, last_prompt_tokens=12)
    assert SessionEntry.from_json(entry.to_json()) == entry


@pytest.fixture
def db(tmp_path: Path) -> SessionDB:
    return SessionDB(tmp_path / "state.db")


def test_new_conversation_creates_session_row_and_routing(db: SessionDB) -> None:
    store = SessionStore(db, GatewayConfig())
    entry = store.get_or_create_session(_source(user_name="ann", chat_name="team"))
    assert entry.session_key == "agent:main:telegram:group:-1001:12345"
    row = db.get_session(entry.session_id)
    assert row is not None
    assert (row["source"], row["user_id"], row["session_key"], row["chat_type"]) == (
        "telegram", "12345", entry.session_key, "group")
    assert json.loads(row["origin_json"])["chat_id"] == "-1001"
    routed = db.load_gateway_routing_entries()
    assert SessionEntry.from_json(routed[entry.session_key]).session_id == entry.session_id
    assert store.get_or_create_session(_source()) == entry


def test_second_process_continues_the_same_conversation(db: SessionDB) -> None:
    first = SessionStore(db)
    first.get_entry("anything")  # loads the (empty) routing before the other process writes
    other = SessionStore(SessionDB(db.db_path))
    entry = other.get_or_create_session(_source())
    assert first.get_or_create_session(_source()).session_id == entry.session_id


def test_a_new_conversation_may_be_given_its_id_and_can_be_found_without_creating(
    db: SessionDB,
) -> None:
    store = SessionStore(db)
    source = _source(chat_type="dm", chat_id="caller-1", thread_id="api-abc")
    assert store.find_session(source) is None
    assert db.list_sessions() == []  # finding created nothing
    entry = store.get_or_create_session(source, "api-abc")
    assert entry.session_id == "api-abc" and db.get_session("api-abc") is not None
    assert store.find_session(source) == entry
    # A store of another process finds it in the database.
    assert SessionStore(SessionDB(db.db_path)).find_session(source) == entry


def test_the_client_secret_is_made_once_per_database(db: SessionDB, tmp_path: Path) -> None:
    store = SessionStore(db)
    assert store.loaded_client_secret is None
    secret = store.client_secret()
    # Made here, it is read back from the database (where another process may have written
    # its own at the same moment) before it is kept.
    assert len(secret) == 32 and store.loaded_client_secret is None
    assert store.client_secret() == secret and store.loaded_client_secret == secret
    assert SessionStore(SessionDB(db.db_path)).client_secret() == secret  # a restart
    with SessionDB(tmp_path / "other.db") as other:
        assert SessionStore(other).client_secret() != secret


def test_a_conversation_is_appended_in_one_go_without_touching_the_dicts(
    db: SessionDB,
) -> None:
    store = SessionStore(db)
    sid = store.get_or_create_session(_source()).session_id
    messages = [{"role": "user", "content": "a"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "tool_name": "f", "content": "r"}]
    copies = [dict(m) for m in messages]
    store.append_conversation(sid, messages)
    assert messages == copies
    stored = store.load_transcript(sid)
    assert [(m["role"], m.get("content")) for m in stored] == [
        ("user", "a"), ("assistant", None), ("tool", "r")]
    assert stored[1]["tool_calls"][0]["id"] == "c1" and stored[2]["tool_name"] == "f"


def test_transcript_writes_and_skip_db(db: SessionDB) -> None:
    store = SessionStore(db)
    sid = store.get_or_create_session(_source()).session_id
    store.append_to_transcript(sid, {"role": "user", "content": "already stored"}, skip_db=True)
    assert store.load_transcript(sid) == []
    store.append_to_transcript(sid, {"role": "user", "content": "hi", "message_id": "m1"})
    store.append_to_transcript(sid, {"role": "tool", "name": "terminal", "tool_call_id": "c1",
                                     "content": "out"})
    transcript = store.load_transcript(sid)
    assert [m["role"] for m in transcript] == ["user", "tool"]
    assert transcript[1]["tool_name"] == "terminal"
    assert store.has_platform_message_id(sid, "m1")
    assert db.live_message_count(sid) == 2


def test_resume_flags_persist_in_the_database(db: SessionDB) -> None:
    store = SessionStore(db)
    key = store.get_or_create_session(_source()).session_key
    assert store.mark_resume_pending(key, "shutdown_timeout")
    assert not store.mark_resume_pending("unknown", "shutdown_timeout")
    reloaded = SessionStore(db).get_entry(key)
    assert reloaded is not None and reloaded.resume_pending
    assert reloaded.resume_reason == "shutdown_timeout"
    assert store.clear_resume_pending(key)
    assert not store.clear_resume_pending(key)
    reloaded = SessionStore(db).get_entry(key)
    assert reloaded is not None and not reloaded.resume_pending


def test_recently_active_conversations_are_marked(db: SessionDB) -> None:
    store = SessionStore(db)
    recent = store.get_or_create_session(_source(user_id="1")).session_key
    idle = store.get_or_create_session(_source(user_id="2")).session_key
    store._change(idle, updated_at=datetime.now() - timedelta(hours=2))
    assert store.mark_recently_active_resume_pending(120) == 1
    assert store.get_entry(recent).resume_pending  # type: ignore[union-attr]
    assert not store.get_entry(idle).resume_pending  # type: ignore[union-attr]


def _stored(db: SessionDB, key: str) -> SessionEntry:
    return SessionEntry.from_json(db.load_gateway_routing_entries()[key])


def test_activity_is_written_behind_and_never_over_a_newer_state(
        db: SessionDB, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "ACTIVITY_WRITE_DELAY", 0.05)
    store = SessionStore(db)
    key = store.get_or_create_session(_source()).session_key
    store.update_session(key, last_prompt_tokens=7)
    assert _stored(db, key).last_prompt_tokens == 0  # memory only, for now
    for _ in range(100):
        if _stored(db, key).last_prompt_tokens == 7:
            break
        time.sleep(0.01)
    assert _stored(db, key) == store.get_entry(key)  # the timer wrote it
    store.update_session(key, last_prompt_tokens=8)
    assert store.mark_resume_pending(key, "shutdown_timeout")  # written now, with the activity
    assert _stored(db, key) == store.get_entry(key)
    assert _stored(db, key).last_prompt_tokens == 8


def test_concurrent_activity_and_resume_marks_end_with_the_latest_entry(db: SessionDB) -> None:
    store = SessionStore(db)
    keys = [store.get_or_create_session(_source(user_id=str(i))).session_key for i in range(4)]

    def bookkeeping(n: int) -> None:
        for i in range(200):
            store.update_session(keys[(n + i) % 4], last_prompt_tokens=i)
            if i % 25 == 0:
                store.save_activity()

    def marks() -> None:
        for i in range(100):
            key = keys[i % 4]
            store.mark_resume_pending(key, "shutdown_timeout")
            store.clear_resume_pending(key)

    threads = [threading.Thread(target=bookkeeping, args=(n,)) for n in range(3)]
    threads.append(threading.Thread(target=marks))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.save_activity()
    for key in keys:
        assert _stored(db, key) == store.get_entry(key)


def test_a_known_conversation_is_found_while_a_routing_write_waits(db: SessionDB) -> None:
    """The event loop looks known keys up while another thread holds the write side (a
    commit waiting on a busy database)."""
    store = SessionStore(db)
    entry = store.get_or_create_session(_source())
    holding, release = threading.Event(), threading.Event()

    def writer() -> None:
        with store._write_lock:
            holding.set()
            release.wait(5)

    thread = threading.Thread(target=writer)
    thread.start()
    assert holding.wait(5)
    try:
        store.update_session(entry.session_key, last_prompt_tokens=3)
        assert store.get_or_create_session(_source()).last_prompt_tokens == 3
    finally:
        release.set()
        thread.join()


def test_reset_ends_the_old_session(db: SessionDB) -> None:
    store = SessionStore(db)
    old = store.get_or_create_session(_source())
    new = store.reset_session(old.session_key)
    assert new is not None and new.session_id != old.session_id
    assert db.get_session(old.session_id)["end_reason"] == "session_reset"  # type: ignore[index]
    assert store.get_or_create_session(_source()).session_id == new.session_id
    assert store.reset_session("unknown") is None


@pytest.mark.asyncio
async def test_async_facade_uses_the_store_assigned_now() -> None:
    holder = MagicMock()
    facade = AsyncSessionStore(lambda: holder.store)
    holder.store = MagicMock()
    holder.store.load_transcript.return_value = ["first"]
    assert await facade.call(lambda store: store.load_transcript("s")) == ["first"]
    holder.store = MagicMock()
    holder.store.load_transcript.return_value = ["second"]
    assert await facade.call(lambda store: store.load_transcript("s")) == ["second"]


def test_foreign_and_broken_routing_entries_do_not_break_routing(db: SessionDB) -> None:
    now = datetime.now().isoformat()
    upstream_style = {"session_key": "agent:main:slack:dm:u1", "session_id": "s-up",
                      "created_at": now, "updated_at": now, "platform": "slack",
                      "origin": {"platform": "slack", "chat_id": "u1", "chat_topic": "t",
                                 "scope_id": "w1", "guild_id": "w1"}}
    db.save_gateway_routing_entry(upstream_style["session_key"], json.dumps(upstream_style))
    db.save_gateway_routing_entry("agent:main:slack:dm:u2", "{not json")
    store = SessionStore(db)
    entry = store.get_entry("agent:main:slack:dm:u1")
    assert entry is not None and entry.origin is not None and entry.origin.chat_id == "u1"
    assert store.get_entry("agent:main:slack:dm:u2") is None
    fresh = store.get_or_create_session(SessionSource(Platform.SLACK, "u2"))
    assert SessionStore(db).get_entry(fresh.session_key) == fresh
