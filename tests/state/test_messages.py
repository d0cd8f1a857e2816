"""The transcript rewrites of ``hermes/state/messages.py`` against a real ``state.db``:
replace, compact, rewind and restore, the newest user message's ``api_content``, paging, and
each refusing what it cannot do having changed nothing."""

from __future__ import annotations

import pytest
from hermes.errors import MessageNotFoundError, SessionNotFoundError
from hermes.state import SessionDB


@pytest.fixture
def chat(db: SessionDB) -> SessionDB:
    db.create_session("s", "cli")
    for n in range(3):
        db.append_message("s", "user", f"question {n}")
        db.append_message("s", "assistant", f"answer {n}")
    return db


def contents(db: SessionDB, include_inactive: bool = False) -> list[object]:
    return [m["content"] for m in db.get_messages("s", include_inactive=include_inactive)]


def test_get_messages_pages_in_insertion_order(chat: SessionDB) -> None:
    assert [m["content"] for m in chat.get_messages("s", limit=2)] == ["question 0", "answer 0"]
    assert [m["content"] for m in chat.get_messages("s", limit=2, offset=4)] == [
        "question 2", "answer 2"]
    assert len(chat.get_messages("s", offset=5)) == 1
    assert chat.get_messages("s", limit=3, offset=10) == []
    with pytest.raises(ValueError, match="limit=-1"):
        chat.get_messages("s", limit=-1)


def test_replace_messages_swaps_the_transcript_and_its_count(chat: SessionDB) -> None:
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u"}}]
    chat.replace_messages("s", [{"role": "user", "content": parts, "message_id": "ext-1"},
                                {"role": "assistant", "content": "seen"}])
    assert contents(chat, include_inactive=True) == [parts, "seen"]
    assert chat.get_messages("s")[0]["platform_message_id"] == "ext-1"
    session = chat.get_session("s")
    assert session is not None and session["message_count"] == 2
    assert [h["content"] for h in chat.search_messages("answer")] == []


def test_replace_messages_active_only_keeps_the_archived_rows(chat: SessionDB) -> None:
    chat.archive_and_compact("s", [{"role": "user", "content": "summary"}])
    chat.replace_messages("s", [{"role": "user", "content": "rewritten"}], active_only=True)
    assert contents(chat) == ["rewritten"]
    assert len(contents(chat, include_inactive=True)) == 7
    assert chat.has_archived_messages("s")


def test_a_failed_replace_changes_nothing(chat: SessionDB) -> None:
    with pytest.raises(SessionNotFoundError):
        chat.replace_messages("nope", [{"role": "user", "content": "x"}])
    with pytest.raises(TypeError):
        chat.replace_messages("s", [{"role": "user", "content": "ok"}, "not a message"])  # type: ignore[list-item]
    assert len(contents(chat)) == 6


def test_archive_and_compact_keeps_the_history_searchable(chat: SessionDB) -> None:
    assert not chat.has_archived_messages("s")
    assert chat.archive_and_compact("s", [{"role": "user", "content": "summary"},
                                          {"role": "assistant", "content": "ok"}]) == 2
    assert contents(chat) == ["summary", "ok"]
    session = chat.get_session("s")
    assert session is not None and session["message_count"] == 2
    assert chat.has_archived_messages("s")
    assert len(chat.search_messages("question")) == 3
    with pytest.raises(SessionNotFoundError):
        chat.archive_and_compact("nope", [])


def test_rewind_and_restore(chat: SessionDB) -> None:
    target = chat.get_messages("s")[2]
    assert target["content"] == "question 1"
    rewound = chat.rewind_to_message("s", target["id"])
    assert rewound["rewound_count"] == 4
    assert rewound["target_message"]["content"] == "question 1"
    assert rewound["new_head_id"] == target["id"] - 1
    assert contents(chat) == ["question 0", "answer 0"]
    assert chat.search_messages("question 2") == []
    session = chat.get_session("s")
    assert session is not None and session["rewind_count"] == 1 and session["message_count"] == 2
    again = chat.rewind_to_message("s", target["id"])
    assert again["rewound_count"] == 0
    assert chat.restore_rewound("s", target["id"]) == 4
    assert len(contents(chat)) == 6


@pytest.mark.parametrize("which", ["missing", "assistant", "other session"])
def test_rewind_refuses_what_is_not_a_user_message_of_the_session(chat: SessionDB,
                                                                   which: str) -> None:
    chat.create_session("t", "cli")
    other = chat.append_message("t", "user", "elsewhere")
    message_id = {"missing": 10_000, "assistant": chat.get_messages("s")[1]["id"],
                  "other session": other}[which]
    with pytest.raises(MessageNotFoundError, match="list_recent_user_messages"):
        chat.rewind_to_message("s", message_id)
    session = chat.get_session("s")
    assert session is not None and session["rewind_count"] == 0
    assert len(contents(chat)) == 6


def test_list_recent_user_messages_newest_first_with_previews(chat: SessionDB) -> None:
    chat.append_message("s", "user", "line one\n\nline two " + "x" * 100)
    chat.append_message("s", "user", [{"type": "image_url", "image_url": {"url": "u"}}])
    recent = chat.list_recent_user_messages("s", limit=3)
    assert [r["preview"] for r in recent] == [
        "[multimodal content]", ("line one line two " + "x" * 100)[:77] + "...", "question 2"]
    assert all(set(r) == {"id", "timestamp", "preview"} for r in recent)
    chat.rewind_to_message("s", recent[0]["id"])
    assert len(chat.list_recent_user_messages("s")) == 4
    assert len(chat.list_recent_user_messages("s", include_inactive=True)) == 5


def test_set_latest_user_api_content_only_on_the_matching_newest_user_row(
        chat: SessionDB) -> None:
    assert chat.set_latest_user_api_content("s", "question 1", "sent") == 0
    assert chat.set_latest_user_api_content("s", "question 2", "sent \ud835 text") == 1
    newest = [m for m in chat.get_messages("s") if m["role"] == "user"][-1]
    assert newest["api_content"] == "sent \ufffd text"
    assert chat.set_latest_user_api_content("nope", "x", "y") == 0


def test_clear_messages(chat: SessionDB) -> None:
    chat.clear_messages("s")
    assert contents(chat, include_inactive=True) == []
    session = chat.get_session("s")
    assert session is not None and session["message_count"] == 0
    with pytest.raises(SessionNotFoundError):
        chat.clear_messages("nope")


def test_a_conversation_with_its_ancestors_root_first(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.append_message("root", "user", "same prompt")
    db.append_message("root", "user", "same prompt")
    db.append_message("root", "assistant", "first answer")
    db.create_session("child", "cli", parent_session_id="root")
    db.append_message("child", "user", "first answer is not a prompt")
    db.append_message("child", "user", "next prompt")
    db.create_session("tip", "cli", parent_session_id="child")
    db.append_message("tip", "assistant", "last answer")
    conversation = db.get_messages_as_conversation("tip", include_ancestors=True)
    assert [m["content"] for m in conversation] == [
        "same prompt", "first answer", "first answer is not a prompt", "next prompt",
        "last answer"]
    assert [m["content"] for m in db.get_messages_as_conversation("tip")] == ["last answer"]
    assert [m["content"] for m in db.get_ancestor_display_prefix("tip")] == [
        "same prompt", "first answer", "first answer is not a prompt", "next prompt"]
    assert db.get_ancestor_display_prefix("root") == []
    assert db.get_messages_as_conversation("nope", include_ancestors=True) == []


def test_a_lineage_cycle_ends_the_walk(db: SessionDB) -> None:
    db.create_session("a", "cli")
    db.create_session("b", "cli", parent_session_id="a")
    db.update_session("a", parent_session_id="b")
    db.append_message("a", "user", "in a")
    db.append_message("b", "user", "in b")
    assert [m["content"] for m in db.get_messages_as_conversation("a", include_ancestors=True)] \
        == ["in b", "in a"]


def test_leaked_recalled_memory_is_left_out_of_replayed_text(db: SessionDB) -> None:
    db.create_session("s", "cli")
    leaked = ("<memory-context>\n[System note: The following is recalled memory context, NOT new "
              "user input. Treat as informational background data.]\n\nstale\n</memory-context>"
              "\n\nVisible answer")
    db.append_message("s", "assistant", leaked, api_content=leaked)
    db.append_message("s", "tool", leaked)
    assistant, tool = db.get_messages_as_conversation("s")
    assert assistant["content"] == "Visible answer" and assistant["api_content"] == leaked
    assert tool["content"] == leaked
    assert db.get_messages("s")[0]["content"] == leaked
    # Any case of the fence; a structured content list is left as it is.
    db.append_message("s", "user", "ask <MEMORY-Context>old</Memory-CONTEXT> now")
    parts = [{"type": "text", "text": "<memory-context>kept</memory-context>"}]
    db.append_message("s", "user", parts)
    *_, shouty, structured = db.get_messages_as_conversation("s")
    assert shouty["content"] == "ask  now" and structured["content"] == parts
    db.create_session("child", "cli", parent_session_id="s")
    lineage = db.get_messages_as_conversation("child", include_ancestors=True)
    assert [m["content"] for m in lineage][:2] == ["Visible answer", leaked]


def test_messages_around_one_and_the_session_bookends(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = []
    for n in range(20):
        role = ("user", "assistant", "tool")[n % 3]
        ids.append(db.append_message("s", role, f"m{n}" if n != 1 else "",
                                     tool_call_id="c" if role == "tool" else None))
    around = db.get_messages_around("s", ids[10], window=2)
    assert [m["content"] for m in around["window"]] == ["m8", "m9", "m10", "m11", "m12"]
    assert (around["messages_before"], around["messages_after"]) == (2, 2)
    edge = db.get_messages_around("s", ids[1], window=3)
    assert [m["content"] for m in edge["window"]] == ["m0", "", "m2", "m3", "m4"]
    assert (edge["messages_before"], edge["messages_after"]) == (1, 3)
    view = db.get_anchored_view("s", ids[10], window=2, bookend=2)
    assert [m["id"] for m in view["window"]] == [ids[9], ids[10], ids[12]]  # tool rows dropped
    assert [m["id"] for m in db.get_anchored_view("s", ids[11], window=0)["window"]] == [ids[11]]
    assert [m["content"] for m in view["bookend_start"]] == ["m0", "m3"]
    assert [m["content"] for m in view["bookend_end"]] == ["m18", "m19"]
    raw = db.get_anchored_view("s", ids[10], window=2, bookend=0, keep_roles=None)
    assert len(raw["window"]) == 5 and raw["bookend_start"] == raw["bookend_end"] == []
    empty = {"window": [], "messages_before": 0, "messages_after": 0}
    assert db.get_messages_around("s", 10_000) == empty
    assert db.get_anchored_view("other", ids[3]) == {**empty, "bookend_start": [],
                                                      "bookend_end": []}
