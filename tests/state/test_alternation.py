"""``repair_alternation`` and ``get_resume_conversations``: a stored transcript whose roles do
not alternate is replayed repaired, and the stored rows stay as they were."""

from __future__ import annotations

from typing import Any

from hermes.state import SessionDB
from hermes.state.alternation import repaired_alternation


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "grep", "arguments": "{}"}}


def test_adjacent_assistants_become_one_turn() -> None:
    merged = repaired_alternation([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "first ", "tool_calls": [call("a")]},
        {"role": "assistant", "content": " second", "tool_calls": [call("b")],
         "reasoning_content": "why"},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
    ])
    assert [m["role"] for m in merged] == ["user", "assistant", "tool", "tool"]
    assert merged[1]["content"] == "first\nsecond"
    assert [c["id"] for c in merged[1]["tool_calls"]] == ["a", "b"]
    assert merged[1]["reasoning_content"] == "why"


def test_a_verification_candidate_is_replaced_and_codex_interims_are_kept() -> None:
    assert repaired_alternation([
        {"role": "assistant", "content": "draft", "finish_reason": "verification_required"},
        {"role": "assistant", "content": "final"},
    ]) == [{"role": "assistant", "content": "final"}]
    interims = [{"role": "assistant", "content": "", "finish_reason": "incomplete"},
                {"role": "assistant", "content": "", "codex_message_items": [{"x": 1}]}]
    assert repaired_alternation([dict(m) for m in interims]) == interims


def test_tool_results_nobody_asked_for_are_dropped() -> None:
    repaired = repaired_alternation([
        {"role": "tool", "tool_call_id": "x", "content": "before any call"},
        {"role": "assistant", "content": "", "tool_calls": [{"call_id": "c", "id": "fc"}]},
        {"role": "tool", "tool_call_id": "c", "content": "answer"},
        {"role": "tool", "tool_call_id": "c", "content": "the same answer again"},
        {"role": "user", "content": "next"},
        {"role": "tool", "tool_call_id": "fc", "content": "after the user spoke"},
    ])
    assert [m["content"] for m in repaired] == ["", "answer", "next"]


def test_adjacent_user_texts_are_joined_without_their_stale_api_content() -> None:
    parts = [{"type": "text", "text": "image"}]
    repaired = repaired_alternation([
        {"role": "user", "content": "one", "api_content": "one, as sent"},
        {"role": "user", "content": "two"},
        {"role": "user", "content": ""},
        {"role": "user", "content": parts},
    ])
    assert repaired == [{"role": "user", "content": "one\n\ntwo"},
                        {"role": "user", "content": parts}]


def test_resume_repairs_the_replay_and_shows_the_lineage_as_stored(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.append_message("root", "user", "first prompt")
    db.append_message("root", "assistant", "first answer")
    db.create_session("child", "cli", parent_session_id="root")
    db.append_message("child", "user", "second prompt")
    db.append_message("child", "user", "said twice")
    db.append_message("child", "assistant", "", tool_calls=[call("dangling")])
    db.append_message("child", "tool", "late", tool_call_id="other")
    model, display = db.get_resume_conversations("child")
    assert [(m["role"], m["content"]) for m in model] == [
        ("user", "second prompt\n\nsaid twice"), ("assistant", "")]
    assert [m["content"] for m in display] == [
        "first prompt", "first answer", "second prompt", "said twice", "", "late"]
    assert model == db.get_messages_as_conversation("child", repair_alternation=True)
    assert len(db.get_messages("child")) == 4
