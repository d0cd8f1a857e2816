"""The gateway's session books against a real ``state.db``: peers, expiry, lists, origins."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from hermes.errors import DatabaseLockedError, SessionNotFoundError
from hermes.state import SessionDB


def gateway_session(db: SessionDB, session_id: str, key: str, *, started_at: float,
                    source: str = "telegram", user_id: str = "u1", chat_id: str = "c1",
                    chat_type: str = "dm", thread_id: str | None = None) -> None:
    db.create_session(session_id, source, user_id=user_id, session_key=key, chat_id=chat_id,
                      chat_type=chat_type, thread_id=thread_id, started_at=started_at)


def test_a_peer_is_recorded_and_none_keeps_the_display_name_and_origin(db: SessionDB) -> None:
    db.create_session("s", "cli")
    origin = json.dumps({"chat_name": "Ada"})
    db.record_gateway_session_peer("s", source="telegram", user_id="u1", session_key="k",
                                   chat_id="c1", chat_type="dm", display_name="Ada",
                                   origin_json=origin)
    db.record_gateway_session_peer("s", source="telegram", session_key="k2", chat_id="c2")
    row = db.get_session("s")
    assert row is not None
    assert (row["source"], row["session_key"], row["chat_id"], row["user_id"]) == (
        "telegram", "k2", "c2", None)
    assert (row["display_name"], row["origin_json"]) == ("Ada", origin)


def test_peer_and_expiry_of_a_missing_session_raise_and_empty_ids_write_nothing(
    db: SessionDB,
) -> None:
    with pytest.raises(SessionNotFoundError, match='"nope"'):
        db.record_gateway_session_peer("nope", source="telegram", session_key="k")
    with pytest.raises(SessionNotFoundError):
        db.set_expiry_finalized("nope")
    db.record_gateway_session_peer("", source="telegram", session_key="k")
    db.record_gateway_session_peer("nope", source="telegram", session_key=None)
    db.set_expiry_finalized("")
    assert db.list_sessions() == []


def test_expiry_finalized_flips_both_ways(db: SessionDB) -> None:
    db.create_session("s", "telegram", session_key="k")
    db.set_expiry_finalized("s")
    assert db.get_session("s")["expiry_finalized"] == 1  # type: ignore[index]
    db.set_expiry_finalized("s", finalized=False)
    assert db.get_session("s")["expiry_finalized"] == 0  # type: ignore[index]


def test_gateway_sessions_are_the_newest_of_each_key_by_activity(db: SessionDB) -> None:
    gateway_session(db, "old", "k1", started_at=100.0)
    gateway_session(db, "new", "k1", started_at=200.0)
    gateway_session(db, "quiet", "k2", started_at=300.0, source="Discord")
    gateway_session(db, "ended", "k3", started_at=400.0, source="slack")
    db.end_session("ended", "session_reset")
    db.create_session("cli", "cli", started_at=500.0)
    db.append_message("new", "user", "hi", timestamp=1000.0)
    assert [r["id"] for r in db.list_gateway_sessions()] == ["new", "quiet"]
    assert [r["id"] for r in db.list_gateway_sessions(platform="DISCORD")] == ["quiet"]
    rows = db.list_gateway_sessions(active_only=False)
    assert [r["id"] for r in rows] == ["new", "ended", "quiet"]
    assert rows[0]["last_active"] == 1000.0


def test_an_origin_resolves_to_its_senders_live_session_and_never_to_anothers(
    db: SessionDB,
) -> None:
    gateway_session(db, "a", "ka", started_at=1.0, user_id="ua", chat_type="group")
    gateway_session(db, "b", "kb", started_at=2.0, user_id="ub", chat_type="group")
    assert db.find_session_by_origin(platform="TELEGRAM", chat_id="c1", user_id="ua") == "a"
    assert db.find_session_by_origin(platform="telegram", chat_id="c1", user_id="uc") is None
    assert db.find_session_by_origin(platform="telegram", chat_id="c1") is None
    assert db.find_session_by_origin(platform="telegram", chat_id="") is None
    db.end_session("b", "session_reset")
    assert db.find_session_by_origin(platform="telegram", chat_id="c1", user_id="ub") == "a"
    gateway_session(db, "t", "kt", started_at=3.0, chat_id="c9", thread_id="7")
    assert db.find_session_by_origin(platform="telegram", chat_id="c9", thread_id="7") == "t"
    assert db.find_session_by_origin(platform="telegram", chat_id="c9", thread_id="8") is None


def test_a_peers_session_is_recovered_unless_it_ended_for_real(db: SessionDB) -> None:
    peer = {"source": "telegram", "user_id": "u1", "chat_id": "c1", "chat_type": "dm"}
    gateway_session(db, "empty", "k", started_at=3.0)
    gateway_session(db, "talked", "k", started_at=2.0)
    db.append_message("talked", "user", "hello")
    found = db.find_latest_gateway_session_for_peer(session_key="k", **peer)
    assert found is not None and found["id"] == "talked"
    db.end_session("talked", "agent_close")
    assert db.find_latest_gateway_session_for_peer(session_key="k", **peer)["id"] == "talked"  # type: ignore[index]
    db.reopen_session("talked")
    db.end_session("talked", "session_reset")
    assert db.find_latest_gateway_session_for_peer(session_key="k", **peer) is None
    assert db.find_latest_gateway_session_for_peer(session_key=None, **peer) is None


def test_a_peer_without_its_key_is_found_by_the_whole_peer_only(db: SessionDB) -> None:
    gateway_session(db, "s", "agent:main:telegram:dm:c1", started_at=1.0)
    db.append_message("s", "user", "hello")
    peer = {"source": "telegram", "user_id": "u1", "chat_id": "c1"}
    assert db.find_latest_gateway_session_for_peer(session_key="other", **peer) is None
    found = db.find_latest_gateway_session_for_peer(session_key="other", chat_type="dm", **peer)
    assert found is not None and found["id"] == "s"
    assert db.find_latest_gateway_session_for_peer(
        session_key="other", chat_type="dm", thread_id="9", **peer) is None


def test_a_peer_write_under_a_held_lock_fails_whole(
    tmp_path: Path, hold_write_lock: Callable[[Path], AbstractContextManager[Any]]
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path, busy_budget=0.2) as db:
        db.create_session("s", "cli")
        with hold_write_lock(path), pytest.raises(DatabaseLockedError):
            db.record_gateway_session_peer("s", source="telegram", session_key="k")
        assert db.get_session("s")["session_key"] is None  # type: ignore[index]
