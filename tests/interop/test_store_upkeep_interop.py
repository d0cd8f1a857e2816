"""Listing, archive, export/import and deletion across the two programs (issue [H], item 3):
what one side archives, deletes or exports, the other lists, imports and counts the same way.

hermes-agent runs in its own venv through ``peer_driver.py`` (see
``test_hermes_agent_interop.py``, whose ``peer`` this uses).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_hermes_agent_interop import PEER_PYTHON, SKIP_REASON, peer

from hermes.state import SessionDB

pytestmark = pytest.mark.skipif(PEER_PYTHON is None, reason=SKIP_REASON)


def their(path: Path, home: Path, method: str, *args: Any, **kwargs: Any) -> Any:
    """What hermes-agent's ``SessionDB.method(*args, **kwargs)`` returns on the file."""
    [answer] = peer("calls", path, "", home, calls=[[method, list(args), kwargs]])["results"]
    assert "ok" in answer, f"hermes-agent's {method} raised {answer.get('error')}"
    return answer["ok"]


def listed(rows: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(r["id"], r["preview"], r["message_count"]) for r in rows]


def test_listings_archives_and_deletes_agree_both_ways(tmp_path: Path, hermes_home: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        for n in range(4):
            db.create_session(f"s{n}", "cli", started_at=float(n + 1))
            db.append_message(f"s{n}", "user", f"question {n}\nwith a second line")
        db.create_session("run", "tool", parent_session_id="s0", model_config={"_delegate_from": "s0"})
        assert db.set_session_archived("s1", True)
        ours = db.list_sessions_rich()
    theirs = their(path, hermes_home, "list_sessions_rich")
    assert listed(theirs) == listed(ours) and [r["id"] for r in ours] == ["s3", "s2", "s0"]
    assert their(path, hermes_home, "session_count", exclude_children=True) == 3
    assert their(path, hermes_home, "set_session_archived", "s2", True) is True
    assert their(path, hermes_home, "delete_session", "s0") is True  # takes its delegate run
    with SessionDB(path) as db:
        assert [r["id"] for r in db.list_sessions_rich()] == ["s3"]
        assert db.get_session("run") is None and db.message_count() == 3
        assert [r["id"] for r in db.list_sessions_rich(archived_only=True)] == ["s2", "s1"]
        assert db.search_sessions_by_id("s2", include_archived=False) == []
        assert len(db.search_sessions_by_id("s")) == 3


def test_an_export_of_either_side_imports_into_the_other(tmp_path: Path, hermes_home: Path) -> None:
    ours_path, theirs_path = tmp_path / "ours.db", tmp_path / "theirs.db"
    with SessionDB(ours_path) as db:
        db.create_session("mine", "cli", model="m", cwd="/w")
        db.append_message("mine", "user", "hello from ours", timestamp=10.0)
        db.append_message("mine", "assistant", "reply", timestamp=11.0,
                          tool_calls=[{"id": "c1", "type": "function",
                                       "function": {"name": "noop", "arguments": "{}"}}])
        exported = db.export_session("mine")
    result = their(theirs_path, hermes_home, "import_sessions", [exported])
    assert result["ok"] and result["imported_ids"] == ["mine"]
    again = their(theirs_path, hermes_home, "export_session", "mine")
    assert (again["message_count"], again["tool_call_count"], again["cwd"]) == (2, 1, "/w")
    assert [m["content"] for m in again["messages"]] == ["hello from ours", "reply"]
    with SessionDB(tmp_path / "back.db") as back:
        assert back.import_sessions([again])["imported"] == 1
        assert [m["content"] for m in back.get_messages("mine")] == ["hello from ours", "reply"]
        assert back.get_session("mine")["tool_call_count"] == 1


def test_a_prune_by_either_side_leaves_the_same_sessions(tmp_path: Path, hermes_home: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        for sid, started in (("old-a", 1.0), ("old-b", 2.0), ("new", 4e9)):
            db.create_session(sid, "cli", started_at=started)
            db.append_message(sid, "user", f"words of {sid}")
            db.end_session(sid, "done")
        db.create_session("child", "cli", parent_session_id="old-a", started_at=4e9)
        assert [r["id"] for r in db.list_prune_candidates(older_than_days=90)] == ["old-a", "old-b"]
    assert [r["id"] for r in their(path, hermes_home, "list_prune_candidates", older_than_days=90)] == [
        "old-a", "old-b",
    ]
    assert their(path, hermes_home, "prune_sessions", older_than_days=90, source="cli", max_messages=0) == 0
    assert their(path, hermes_home, "prune_sessions", older_than_days=90) == 2
    with SessionDB(path) as db:
        assert db.get_session("child")["parent_session_id"] is None
        assert db.count_empty_sessions() == 0 and db.message_count() == 1
        assert db.search_messages("words") and {h["session_id"] for h in db.search_messages("words")} == {"new"}
