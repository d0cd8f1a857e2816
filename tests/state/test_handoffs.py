"""Handoffs against a real ``state.db``: requested, claimed once, completed or failed."""

from __future__ import annotations

import pytest

from hermes.errors import SessionNotFoundError
from hermes.state import SessionDB


def test_a_handoff_goes_pending_running_completed(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.get_handoff_state("s") == {"state": None, "platform": None, "error": None}
    assert db.request_handoff("s", "telegram")
    assert not db.request_handoff("s", "discord"), "one handoff in flight at a time"
    assert db.get_handoff_state("s") == {"state": "pending", "platform": "telegram",
                                         "error": None}
    assert [r["id"] for r in db.list_pending_handoffs()] == ["s"]
    assert db.claim_handoff("s")
    assert not db.claim_handoff("s"), "claimed once"
    assert db.list_pending_handoffs() == []
    assert not db.request_handoff("s", "discord"), "running is in flight"
    db.complete_handoff("s")
    assert db.get_handoff_state("s") == {"state": "completed", "platform": "telegram",
                                         "error": None}
    assert db.request_handoff("s", "discord"), "a finished handoff can be asked again"


def test_a_failed_handoff_keeps_its_error_cut_and_a_new_request_clears_it(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.request_handoff("s", "telegram")
    db.claim_handoff("s")
    db.fail_handoff("s", "e" * 2000)
    state = db.get_handoff_state("s")
    assert state is not None and state["state"] == "failed" and state["error"] == "e" * 500
    assert db.request_handoff("s", "telegram")
    assert db.get_handoff_state("s")["error"] is None  # type: ignore[index]


def test_pending_handoffs_are_oldest_first(db: SessionDB) -> None:
    for session_id, started_at in (("b", 2.0), ("a", 1.0), ("c", 3.0)):
        db.create_session(session_id, "cli", started_at=started_at)
        db.request_handoff(session_id, "telegram")
    assert [r["id"] for r in db.list_pending_handoffs()] == ["a", "b", "c"]


def test_a_missing_session_has_no_handoff(db: SessionDB) -> None:
    assert db.get_handoff_state("nope") is None
    assert not db.request_handoff("nope", "telegram")
    assert not db.claim_handoff("nope")
    with pytest.raises(SessionNotFoundError):
        db.complete_handoff("nope")
    with pytest.raises(SessionNotFoundError):
        db.fail_handoff("nope", "boom")
    assert db.list_sessions() == []
