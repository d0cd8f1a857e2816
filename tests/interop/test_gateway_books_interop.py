"""Telegram topic bindings, handoffs, gateway peers and routing shared with the real
hermes-agent 0.19.0 through one ``state.db`` (issue [H], item 3): what one side writes, the
other reads and respects (a session bound to one topic, a handoff claimed once), both
directions. hermes-agent runs in its own venv, one subprocess per step (see
``test_hermes_agent_interop.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_hermes_agent_interop import PEER_PYTHON, SKIP_REASON
from test_session_books_interop import calls

from hermes.errors import TopicAlreadyLinkedError
from hermes.state import SessionDB

pytestmark = pytest.mark.skipif(PEER_PYTHON is None, reason=SKIP_REASON)


def results(path: Path, session_id: str, home: Path, *steps: tuple[Any, ...]) -> list[Any]:
    """hermes-agent's ``SessionDB`` methods called in order (see ``calls``): the value each
    returned, or ``{"error": type name}``."""
    return [r.get("ok", r) for r in calls(path, session_id, home, *steps)["results"]]


def test_topics_handoffs_and_peers_we_write_are_read_and_respected_by_hermes_agent(
    tmp_path: Path, hermes_home: Path
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("topic", "telegram", user_id="u1")
        db.append_message("topic", "user", "bound to a topic")
        db.create_session("loose", "telegram", user_id="u1")
        db.append_message("loose", "user", "in no topic")
        db.enable_telegram_topic_mode(chat_id="c1", user_id="u1", has_topics_enabled=True)
        db.bind_telegram_topic(chat_id="c1", thread_id="17", user_id="u1",
                               session_key="agent:main:telegram:dm:c1:17", session_id="topic")
        db.request_handoff("loose", "telegram")
        db.record_gateway_session_peer("loose", source="telegram", user_id="u1",
                                       session_key="agent:main:telegram:dm:c1", chat_id="c1",
                                       chat_type="dm", display_name="Ada",
                                       origin_json=json.dumps({"chat_name": "Ada"}))
        db.set_expiry_finalized("loose")
        db.replace_gateway_routing_entries({"agent:main:telegram:dm:c1": '{"session_id": "loose"}'},
                                           scope="/sessions")

    binding, by_session, enabled, linked, unlinked, relink, pending, claimed, state, peer_row, \
        routing, session = results(
            path, "loose", hermes_home,
            ("get_telegram_topic_binding", {"chat_id": "c1", "thread_id": "17"}),
            ("get_telegram_topic_binding_by_session", {"session_id": "topic"}),
            ("is_telegram_topic_mode_enabled", {"chat_id": "c1", "user_id": "u1"}),
            ("is_telegram_session_linked_to_topic", {"session_id": "topic"}),
            ("list_unlinked_telegram_sessions_for_user", {"chat_id": "c1", "user_id": "u1"}),
            ("bind_telegram_topic", {"chat_id": "c1", "thread_id": "99", "user_id": "u1",
                                     "session_key": "k99", "session_id": "topic"}),
            ("list_pending_handoffs",),
            ("claim_handoff", "loose"),
            ("get_handoff_state", "loose"),
            ("find_latest_gateway_session_for_peer",
             {"source": "telegram", "user_id": "u1", "session_key": "agent:main:telegram:dm:c1",
              "chat_id": "c1", "chat_type": "dm"}),
            ("load_gateway_routing_entries", {"scope": "/sessions"}),
            ("get_session", "loose"),
        )
    assert binding["session_id"] == "topic" and binding["session_key"].endswith(":17")
    assert by_session["thread_id"] == "17"
    assert enabled is True and linked is True
    assert [s["id"] for s in unlinked] == ["loose"] and unlinked[0]["preview"] == "in no topic"
    assert relink == {"error": "ValueError"}
    assert [s["id"] for s in pending] == ["loose"]
    assert claimed is True
    assert state == {"state": "running", "platform": "telegram", "error": None}
    assert peer_row["id"] == "loose"
    assert routing == {"agent:main:telegram:dm:c1": '{"session_id": "loose"}'}
    assert (session["display_name"], session["expiry_finalized"]) == ("Ada", 1)

    # hermes-agent's own opt-in migration keeps our tables and their rows.
    [migrated, still] = results(
        path, "loose", hermes_home, ("apply_telegram_topic_migration",),
        ("get_telegram_topic_binding", {"chat_id": "c1", "thread_id": "17"}),
    )
    assert migrated is None and still == binding


def test_topics_handoffs_and_routing_hermes_agent_writes_are_read_and_respected_here(
    tmp_path: Path, hermes_home: Path
) -> None:
    path = tmp_path / "state.db"
    calls(
        path, "theirs", hermes_home,
        ("create_session", "theirs", "telegram", {"user_id": "u1"}),
        ("create_session", "other", "telegram", {"user_id": "u1"}),
        ("enable_telegram_topic_mode", {"chat_id": "c1", "user_id": "u1"}),
        ("bind_telegram_topic", {"chat_id": "c1", "thread_id": "5", "user_id": "u1",
                                 "session_key": "k5", "session_id": "theirs"}),
        ("request_handoff", "other", "discord"),
        ("save_gateway_routing_entry", "k5", '{"session_id": "theirs"}'),
    )
    with SessionDB(path) as db:
        binding = db.get_telegram_topic_binding(chat_id="c1", thread_id="5")
        assert binding is not None and binding["session_id"] == "theirs"
        assert db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1")
        with pytest.raises(TopicAlreadyLinkedError):
            db.bind_telegram_topic(chat_id="c1", thread_id="6", user_id="u1",
                                   session_key="k6", session_id="theirs")
        assert db.load_gateway_routing_entries() == {"k5": '{"session_id": "theirs"}'}
        assert [s["id"] for s in db.list_pending_handoffs()] == ["other"]
        assert db.claim_handoff("other")
        db.fail_handoff("other", "platform offline")
        assert db.delete_telegram_topic_binding(chat_id="c1", thread_id="5") == 1
        assert not db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1")

    state, second_claim, binding_after = results(
        path, "other", hermes_home,
        ("get_handoff_state", "other"),
        ("claim_handoff", "other"),
        ("get_telegram_topic_binding", {"chat_id": "c1", "thread_id": "5"}),
    )
    assert state == {"state": "failed", "platform": "discord", "error": "platform offline"}
    assert second_claim is False and binding_after is None
