"""Messages and search shared with the real hermes-agent 0.19.0 through one ``state.db``
(issue [H], item 3): CJK text, typed punctuation, compaction-archived and rewound rows that one
side writes, the other finds, hides and counts the same way, both directions. hermes-agent runs
in its own venv, one subprocess per step (see ``test_hermes_agent_interop.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hermes.state import SessionDB
from test_hermes_agent_interop import PEER_PYTHON, SKIP_REASON
from test_session_books_interop import calls

pytestmark = pytest.mark.skipif(PEER_PYTHON is None, reason=SKIP_REASON)

CHAT = [
    {"role": "user", "content": "昨天和其他Agent的聊天记录，记忆断裂问题复现了"},
    {"role": "assistant", "content": "run the chat-send command for C++ builds"},
    {"role": "user", "content": "TODO: fix 100%完成率"},
    {"role": "assistant", "content": "done"},
]


def oks(answer: dict[str, Any]) -> list[Any]:
    results = answer["results"]
    assert all("ok" in r for r in results), results
    return [r["ok"] for r in results]


def hit_ids(hits: list[dict[str, Any]]) -> list[int]:
    return sorted(h["id"] for h in hits)


def test_what_we_write_hermes_agent_finds_and_hides_the_same_way(tmp_path: Path,
                                                                hermes_home: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        ids = db.append_messages("s1", CHAT)
        db.archive_and_compact("s1", [{"role": "user", "content": "summary of 记忆断裂"},
                                      {"role": "assistant", "content": "ok"}])
        db.append_message("s1", "user", "a prompt taken back")
        [taken_back] = [m["id"] for m in db.get_messages("s1") if m["content"] == "a prompt taken back"]
        db.rewind_to_message("s1", taken_back)
        ours = {q: hit_ids(db.search_messages(q)) for q in ("记忆断裂", "chat-send", "通信", "taken")}
    theirs = oks(calls(
        path, "s1", hermes_home,
        ("search_messages", "记忆断裂"), ("search_messages", "chat-send"),
        ("search_messages", "通信"), ("search_messages", "taken"),
        ("get_messages_as_conversation", "s1"), ("has_archived_messages", "s1"),
        ("get_messages", "s1", {"include_inactive": True}),
    ))
    assert dict(zip(ours, [hit_ids(h) for h in theirs[:4]], strict=True)) == ours
    assert ours["记忆断裂"] == sorted([ids[0], ids[-1] + 1])  # the archived row and the summary
    assert ours["taken"] == []
    assert [m["content"] for m in theirs[4]] == ["summary of 记忆断裂", "ok"]
    assert theirs[5] is True and len(theirs[6]) == 7


def test_what_hermes_agent_writes_we_find_and_hide_the_same_way(tmp_path: Path,
                                                                hermes_home: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
    steps: list[tuple[Any, ...]] = [("append_message", "s1", m["role"], m["content"]) for m in CHAT]
    written = oks(calls(path, "s1", hermes_home, *steps))
    oks(calls(
        path, "s1", hermes_home,
        ("archive_and_compact", "s1", [{"role": "user", "content": "summary of 记忆断裂"}]),
        ("append_message", "s1", "user", "a prompt taken back"),
    ))
    [taken_back] = oks(calls(path, "s1", hermes_home, ("get_messages", "s1")))[0][-1:]
    oks(calls(path, "s1", hermes_home, ("rewind_to_message", "s1", taken_back["id"])))
    with SessionDB(path) as db:
        assert hit_ids(db.search_messages("记忆断裂")) == sorted([written[0], written[-1] + 1])
        assert [h["id"] for h in db.search_messages("100%完成")] == [written[2]]
        assert db.search_messages("taken") == []
        assert [m["content"] for m in db.get_messages_as_conversation("s1")] == [
            "summary of 记忆断裂"]
        assert db.has_archived_messages("s1")
        assert len(db.get_messages("s1", include_inactive=True)) == 6
        session = db.get_session("s1")
        assert session is not None and session["rewind_count"] == 1
