"""Telegram topic bindings against a real ``state.db``: modes, bindings, one topic a session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hermes._core import Delete, Store
from hermes.errors import DiskFullError, SessionNotFoundError, TopicAlreadyLinkedError
from hermes.state import SessionDB


def bind(db: SessionDB, thread_id: str, session_id: str, chat_id: str = "c") -> None:
    db.bind_telegram_topic(chat_id=chat_id, thread_id=thread_id, user_id="u",
                           session_key=f"telegram:dm:{chat_id}:thread:{thread_id}",
                           session_id=session_id)


def test_a_new_file_has_the_topic_tables_and_no_bindings(db: SessionDB) -> None:
    assert db.get_telegram_topic_binding(chat_id="c", thread_id="1") is None
    assert db.list_telegram_topic_bindings_for_chat(chat_id="c") == []
    assert not db.is_telegram_topic_mode_enabled(chat_id="c", user_id="u")
    assert db.get_meta("telegram_dm_topic_schema_version") is None
    db.apply_telegram_topic_migration()
    assert db.get_meta("telegram_dm_topic_schema_version") == "2"


def test_topic_mode_is_enabled_and_disabled_per_chat(db: SessionDB) -> None:
    db.enable_telegram_topic_mode(chat_id="c", user_id="u", has_topics_enabled=True)
    assert db.is_telegram_topic_mode_enabled(chat_id="c", user_id="u")
    assert not db.is_telegram_topic_mode_enabled(chat_id="c", user_id="someone-else")
    db.create_session("s", "telegram", user_id="u")
    bind(db, "1", "s")
    db.disable_telegram_topic_mode(chat_id="c", clear_bindings=False)
    assert not db.is_telegram_topic_mode_enabled(chat_id="c", user_id="u")
    assert db.is_telegram_session_linked_to_topic(session_id="s")
    db.enable_telegram_topic_mode(chat_id="c", user_id="u")
    db.disable_telegram_topic_mode(chat_id="c")
    assert not db.is_telegram_session_linked_to_topic(session_id="s")
    db.disable_telegram_topic_mode(chat_id="never-enabled")


def test_a_binding_round_trips_and_rebinding_keeps_its_link_time(db: SessionDB) -> None:
    db.create_session("s", "telegram", user_id="u")
    db.create_session("t", "telegram", user_id="u")
    bind(db, "1", "s")
    first = db.get_telegram_topic_binding(chat_id="c", thread_id="1")
    assert first is not None
    assert (first["session_id"], first["user_id"], first["managed_mode"]) == ("s", "u", "auto")
    bind(db, "1", "s")
    again = db.get_telegram_topic_binding_by_session(session_id="s")
    assert again is not None and again["linked_at"] == first["linked_at"]
    assert again["updated_at"] >= first["updated_at"]
    bind(db, "2", "t")
    assert [b["thread_id"] for b in db.list_telegram_topic_bindings_for_chat(chat_id="c")] == [
        "2", "1"]
    assert db.get_telegram_topic_binding_by_session(session_id="nope") is None


def test_a_session_has_one_topic_and_a_refused_bind_writes_nothing(db: SessionDB) -> None:
    db.create_session("s", "telegram", user_id="u")
    bind(db, "1", "s")
    with pytest.raises(TopicAlreadyLinkedError, match="already linked") as info:
        bind(db, "2", "s")
    assert isinstance(info.value, ValueError)
    assert "thread 1" in str(info.value)
    assert db.get_telegram_topic_binding(chat_id="c", thread_id="2") is None
    with pytest.raises(SessionNotFoundError, match="create it"):
        bind(db, "3", "missing")
    assert len(db.list_telegram_topic_bindings_for_chat(chat_id="c")) == 1


def test_deleting_the_last_binding_of_a_chat_turns_its_topic_mode_off(db: SessionDB) -> None:
    db.enable_telegram_topic_mode(chat_id="c", user_id="u")
    db.create_session("s", "telegram", user_id="u")
    db.create_session("t", "telegram", user_id="u")
    bind(db, "1", "s")
    bind(db, "2", "t")
    assert db.delete_telegram_topic_binding(chat_id="c", thread_id="1") == 1
    assert db.is_telegram_topic_mode_enabled(chat_id="c", user_id="u")
    assert db.delete_telegram_topic_binding(chat_id="c", thread_id="1") == 0
    assert db.delete_telegram_topic_binding(chat_id="c", thread_id="2") == 1
    assert not db.is_telegram_topic_mode_enabled(chat_id="c", user_id="u")


def test_a_deleted_session_takes_its_binding_with_it(db: SessionDB, db_path: Path) -> None:
    db.create_session("s", "telegram", user_id="u")
    bind(db, "1", "s")
    store = Store(db_path)
    store.write([Delete("sessions", ("=", "id", "s"))])
    store.close()
    assert db.get_telegram_topic_binding(chat_id="c", thread_id="1") is None


def test_unlinked_sessions_are_the_users_telegram_sessions_in_no_topic(db: SessionDB) -> None:
    db.create_session("old", "telegram", user_id="u", started_at=1.0)
    db.append_message("old", "user", "  " + "x" * 70, timestamp=5.0)
    db.create_session("recent", "telegram", user_id="u", started_at=2.0)
    db.append_message("recent", "user", "short\nline", timestamp=9.0)
    db.create_session("linked", "telegram", user_id="u", started_at=3.0)
    bind(db, "1", "linked")
    db.create_session("other-user", "telegram", user_id="v")
    db.create_session("cli", "cli", user_id="u")
    rows = db.list_unlinked_telegram_sessions_for_user(chat_id="c", user_id="u")
    assert [r["id"] for r in rows] == ["recent", "old"]
    assert rows[0]["preview"] == "short line"
    assert rows[1]["preview"] == "x" * 60 + "..."
    assert [r["id"] for r in db.list_unlinked_telegram_sessions_for_user(
        chat_id="c", user_id="u", limit=1)] == ["recent"]


def test_a_binding_that_fills_the_disk_fails_whole(mount_tmpfs: Callable[..., Path]) -> None:
    with SessionDB(mount_tmpfs("small", "1m") / "state.db") as db:
        db.create_session("s", "telegram", user_id="u")
        with pytest.raises(DiskFullError, match="state.db"):
            db.bind_telegram_topic(chat_id="c", thread_id="1", user_id="u",
                                   session_key="k" * 4_000_000, session_id="s")
        assert db.get_telegram_topic_binding(chat_id="c", thread_id="1") is None
        bind(db, "1", "s")
        assert db.is_telegram_session_linked_to_topic(session_id="s")
