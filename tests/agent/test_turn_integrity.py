"""What a turn leaves behind when the gateway annotates it, cuts it off, or the database
refuses it: the stored transcript stays true to what the user said and what happened."""

from __future__ import annotations

from pathlib import Path

from agent_support import ScriptedBackend, answer, make_agent, tool_call

from hermes.recovery import recover_all, spool_path
from hermes.state import SessionDB


def test_a_gateway_note_is_sent_but_the_users_own_text_is_stored(db: SessionDB) -> None:
    backend = ScriptedBackend(answer("welcome back"))
    agent = make_agent(db, backend)
    agent.run_conversation("[note: your last turn was cut off]\nhello", persist_user_message="hello")

    sent_user = [m for m in backend.requests[0] if m["role"] == "user"][-1]
    assert sent_user["content"] == "[note: your last turn was cut off]\nhello"
    stored_user = db.get_messages_as_conversation("sess-1")[0]
    assert stored_user["content"] == "hello"
    assert stored_user["api_content"] == "[note: your last turn was cut off]\nhello"


def test_stored_api_content_is_replayed_to_the_model(db: SessionDB) -> None:
    first = make_agent(db, ScriptedBackend(answer("ok")))
    first.run_conversation("note\nhi", persist_user_message="hi")
    backend = ScriptedBackend(answer("again"))
    second = make_agent(db, backend)
    second.run_conversation("next", conversation_history=db.get_messages_as_conversation("sess-1"))
    assert [m["content"] for m in backend.requests[0] if m["role"] == "user"] == ["note\nhi", "next"]


def test_tool_calls_a_shutdown_left_unanswered_get_a_placeholder_result(db: SessionDB) -> None:
    history = [
        {"role": "user", "content": "scan the repo"},
        {"role": "assistant", "content": "", "tool_calls": [tool_call("c1", "terminal"),
                                                            tool_call("c2", "terminal")]},
        {"role": "tool", "tool_call_id": "c1", "content": "partial"},
    ]
    backend = ScriptedBackend(answer("sorry, where were we"))
    make_agent(db, backend).run_conversation("still there?", conversation_history=history)

    request = backend.requests[0]
    roles = [(m["role"], m.get("tool_call_id")) for m in request]
    assert roles[1:5] == [("assistant", None), ("tool", "c1"), ("tool", "c2"), ("user", None)]
    assert "cut off" in request[3]["content"]


def test_a_turn_the_database_refused_ends_up_in_the_spool_not_lost(
    db: SessionDB, db_path: Path
) -> None:
    db.create_session("sess-1", "local")
    agent = make_agent(db, ScriptedBackend(answer("hi there")))
    db.close()  # every flush of this turn now fails

    result = agent.run_conversation("hello")

    assert result["agent_persisted"] is True  # durable: in the spool
    assert spool_path("sess-1").exists()
    reopened = SessionDB(db_path)
    report = recover_all(reopened)
    assert report.written == 2 and not report.failed
    assert [(m["role"], m["content"]) for m in reopened.get_messages_as_conversation("sess-1")] == [
        ("user", "hello"), ("assistant", "hi there")]
    assert recover_all(reopened).written == 0
