"""Export and import (``hermes/state/export.py``) between real files: a round trip, parents
and cycles, limits, and an import that fails writing nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes.errors import DiskFullError, InvalidImportError, StateDbError
from hermes.state import SessionDB


@pytest.fixture()
def db(tmp_path: Path) -> SessionDB:
    return SessionDB(tmp_path / "state.db")


def test_a_session_round_trips_between_files(db: SessionDB, tmp_path: Path) -> None:
    db.create_session("s1", "cli", model="m", model_config={"t": 0.2}, cwd="/w", title="Mine")
    db.append_message("s1", "user", "hello", timestamp=10.0)
    db.append_message("s1", "assistant", "hi", timestamp=11.0,
                      tool_calls=[{"id": "c1", "function": {"name": "noop"}}])
    db.update_session("s1", handoff_state="pending", rewind_count=2)
    exported = db.export_session("s1")
    assert exported is not None and [m["content"] for m in exported["messages"]] == ["hello", "hi"]
    with SessionDB(tmp_path / "other.db") as other:
        result = other.import_sessions([exported])
        assert result["ok"] and result["imported_ids"] == ["s1"]
        got = other.get_session("s1")
        assert got is not None
        assert (got["title"], got["message_count"], got["tool_call_count"]) == ("Mine", 2, 1)
        assert json.loads(got["model_config"]) == {"t": 0.2}
        assert got["handoff_state"] is None and got["rewind_count"] == 0
        assert [m["timestamp"] for m in other.get_messages("s1")] == [10.0, 11.0]
        assert other.search_messages("hello")[0]["session_id"] == "s1"
        again = other.import_sessions([exported])
        assert (again["imported"], again["skipped_ids"]) == (0, ["s1"])
    assert db.export_session("missing") is None
    assert [s["id"] for s in db.export_all(source="cli")] == ["s1"] and db.export_all("nope") == []


def test_parents_link_in_the_batch_or_to_existing_rows_and_cycles_detach(db: SessionDB) -> None:
    db.create_session("existing", "cli")
    result = db.import_sessions([
        {"id": "child", "parent_session_id": "parent"},
        {"id": "parent", "parent_session_id": "existing"},
        {"id": "orphan", "parent_session_id": "missing"},
        {"id": "a", "parent_session_id": "b"},
        {"id": "b", "parent_session_id": "a"},
        {"id": "self", "parent_session_id": "self"},
    ])
    assert result["ok"] and result["detached"] == 3
    parents = {s: db.get_session(s)["parent_session_id"] for s in ("child", "parent", "orphan", "a", "b", "self")}
    assert parents == {"child": "parent", "parent": "existing", "orphan": None, "a": None, "b": "a", "self": None}
    assert db.get_session("child")["source"] == "import"


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("not a dict", "session must be an object"),
        ({"id": " "}, "session id is required"),
        ({"id": "x", "messages": "no"}, "messages must be a list"),
        ({"id": "x", "messages": [1]}, "messages must contain only objects"),
        ({"id": "x", "model_config": "[1]"}, "model_config must be a JSON object"),
        ({"id": "x", "title": 3}, "title must be a string"),
        ({"id": "x", "messages": [{"role": "user", "token_count": "many"}]}, "token_count must be an integer"),
        ({"id": "x", "messages": [{"role": "user", "content": "x" * (5 * 1024 * 1024)}]},
         "session exceeds the import size limit"),
        ({"id": "x", "messages": [{"role": "user"}] * 10_001}, "messages exceeds the per-session import limit"),
    ],
)
def test_an_invalid_entry_refuses_the_whole_batch(db: SessionDB, entry: Any, error: str) -> None:
    result = db.import_sessions([{"id": "fine"}, entry])
    assert result["ok"] is False and result["errors"][0]["error"] == error
    assert result["errors"][0]["index"] == 1
    assert db.session_count() == 0


def test_a_batch_over_the_limits_raises_a_value_error_that_says_what_to_do(db: SessionDB) -> None:
    with pytest.raises(InvalidImportError, match="at most 500") as info:
        db.import_sessions([{"id": str(i)} for i in range(501)])
    assert isinstance(info.value, ValueError) and "batches" in str(info.value)
    with pytest.raises(ValueError, match="list"):
        db.import_sessions({"id": "x"})  # type: ignore[arg-type]


def test_a_write_that_fails_half_way_leaves_nothing(db: SessionDB) -> None:
    db.create_session("taken", "cli", title="Same title")
    with pytest.raises(StateDbError):
        db.import_sessions([
            {"id": "first", "messages": [{"role": "user", "content": "lost"}]},
            {"id": "second", "title": "Same title"},
        ])
    assert db.get_session("first") is None and db.message_count() == 0


def test_a_compression_lineage_exports_as_one_session(db: SessionDB) -> None:
    db.create_session("root", "cli", started_at=1.0)
    db.append_message("root", "user", "before compression")
    db.end_session("root", "compression")
    db.create_session("tip", "cli", started_at=2.0, parent_session_id="root")
    db.append_message("tip", "user", "after")
    db.append_message("tip", "assistant", "done")
    whole = db.export_session_lineage("tip")
    assert whole is not None and whole["id"] == "tip"
    assert whole["lineage_session_ids"] == ["root", "tip"] and whole["message_count"] == 3
    assert [m["content"] for m in whole["messages"]] == ["before compression", "after", "done"]
    assert db.export_session_lineage("missing") is None


def test_an_import_that_fills_the_disk_raises_and_writes_nothing(
    mount_tmpfs: Callable[..., Path],
) -> None:
    mnt = mount_tmpfs("full", "2m")
    with SessionDB(mnt / "state.db") as db:
        db.create_session("before", "cli")
        db.append_message("before", "user", "kept")
        text = "words " * 100_000  # 600 kB a message: the batch cannot fit in 2 MB
        batch = [{"id": f"big{i}", "messages": [{"role": "user", "content": text}]} for i in range(4)]
        with pytest.raises(DiskFullError) as info:
            db.import_sessions(batch)
        assert str(mnt / "state.db") in str(info.value)
        assert db.session_count() == 1 and db.message_count() == 1
    with SessionDB(mnt / "state.db") as again:
        assert again.get_session("big0") is None and again.search_messages("kept")
