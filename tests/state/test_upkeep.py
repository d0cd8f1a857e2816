"""Deletion and upkeep (``hermes/state/upkeep.py``) on real files: what is deleted and what is
orphaned, transcript files, prune filters, archive lineages, vacuum, automatic maintenance."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hermes.state import SessionDB


@pytest.fixture()
def db(tmp_path: Path) -> SessionDB:
    return SessionDB(tmp_path / "state.db")


def test_deleting_a_session_takes_its_delegate_runs_and_orphans_the_rest(
    db: SessionDB, tmp_path: Path
) -> None:
    db.create_session("parent", "cli")
    db.append_message("parent", "user", "findable words")
    db.create_session("run", "tool", parent_session_id="parent", model_config={"_delegate_from": "parent"})
    db.create_session("run-of-run", "tool", parent_session_id="run", model_config={"_delegate_from": "run"})
    db.create_session("branch", "cli", parent_session_id="parent")
    (tmp_path / "parent.jsonl").write_text("")
    (tmp_path / "request_dump_run_1.json").write_text("{}")
    (tmp_path / "request_dump_runaway_1.json").write_text("{}")
    assert db.delete_session("parent", sessions_dir=tmp_path) is True
    assert [db.get_session(s) for s in ("parent", "run", "run-of-run")] == [None, None, None]
    assert db.get_session("branch")["parent_session_id"] is None
    assert db.message_count() == 0 and db.search_messages("findable") == []
    assert not (tmp_path / "parent.jsonl").exists()
    assert not (tmp_path / "request_dump_run_1.json").exists()
    assert (tmp_path / "request_dump_runaway_1.json").exists()
    assert db.delete_session("parent") is False


def test_a_session_id_that_names_a_path_deletes_no_file_outside(db: SessionDB, tmp_path: Path) -> None:
    outside = tmp_path / "victim.json"
    outside.write_text("{}")
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    db.create_session("../victim", "cli")
    assert db.delete_session("../victim", sessions_dir=sessions) is True
    assert outside.exists()


def test_bulk_delete_is_one_transaction_over_many_sessions(db: SessionDB) -> None:
    ids = [f"s{i}" for i in range(25_000)]
    for sid in ids[:3]:
        db.create_session(sid, "cli")
        db.append_message(sid, "user", "hi")
    db.create_session("keep", "cli", parent_session_id="s1")
    assert db.delete_sessions([*ids, None, "", "s0"]) == 3  # type: ignore[list-item]
    assert db.get_session("keep")["parent_session_id"] is None
    assert db.session_count() == 1 and db.delete_sessions([]) == 0


def test_empty_sweeps_skip_live_archived_titled_and_parent_sessions(db: SessionDB) -> None:
    db.create_session("ended", "cli")
    db.end_session("ended", "done")
    db.create_session("live", "cli")
    db.create_session("archived", "cli")
    db.end_session("archived", "done")
    assert db.set_session_archived("archived", True) is True
    assert db.count_empty_sessions() == 1
    assert db.delete_empty_sessions() == 1 and db.get_session("ended") is None
    db.create_session("titled", "cli", title="Keep me")
    db.create_session("parent", "cli")
    db.create_session("child", "cli", parent_session_id="parent")
    db.create_session("talked", "cli")
    db.append_message("talked", "user", "hello")
    assert [db.delete_session_if_empty(s) for s in ("titled", "parent", "talked", "live")] == [
        False, False, False, True,
    ]
    assert db.delete_session_if_empty("missing") is False


def test_prune_filters_select_only_ended_matching_sessions(db: SessionDB) -> None:
    old = time.time() - 200 * 86400
    for sid, source, tokens, cost in (("a", "cli", 10, 0.5), ("b", "cli", 1000, 2.0), ("c", "cron", 5, None)):
        db.create_session(sid, source, started_at=old, model="GPT-5 mini", billing_provider="OpenAI")
        db.update_session(sid, input_tokens=tokens, output_tokens=tokens, estimated_cost_usd=cost)
        db.end_session(sid, "done")
    db.create_session("live-old", "cli", started_at=old)
    assert [r["id"] for r in db.list_prune_candidates(older_than_days=90)] == ["a", "b", "c"]
    assert [r["id"] for r in db.list_prune_candidates(None, max_tokens=100)] == ["a", "c"]
    assert [r["id"] for r in db.list_prune_candidates(None, min_cost=1.0)] == ["b"]
    assert [r["id"] for r in db.list_prune_candidates(None, provider="openai", model_like="gpt-5")] == ["a", "b", "c"]
    assert [r["id"] for r in db.list_prune_candidates(None, source="cron")] == ["c"]
    with pytest.raises(TypeError):
        db.prune_sessions(older_than_days=None, bogus_filter="x")
    assert db.archive_sessions(None, source="cron") == 1 and db.archive_sessions(None, source="cron") == 0
    assert db.prune_sessions(older_than_days=90, archived=False) == 2
    assert db.prune_sessions() == 1  # the archived one: archived=None selects both
    assert db.get_session("live-old") is not None


def test_archiving_takes_the_whole_compression_lineage(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.end_session("root", "compression")
    db.create_session("mid", "cli", parent_session_id="root")
    db.end_session("mid", "compression")
    db.create_session("tip", "cli", parent_session_id="mid")
    db.create_session("unrelated-child", "cli", parent_session_id="tip")
    assert db.set_session_archived("mid", True) is True
    archived = {s: db.get_session(s)["archived"] for s in ("root", "mid", "tip", "unrelated-child")}
    assert archived == {"root": 1, "mid": 1, "tip": 1, "unrelated-child": 0}
    assert db.list_sessions_rich() == []
    assert [r["id"] for r in db.list_sessions_rich(archived_only=True)] == ["tip"]
    assert db.set_session_archived("missing", True) is False


def test_vacuum_shrinks_the_file_after_a_prune(db: SessionDB) -> None:
    db.create_session("big", "cli", started_at=1.0)
    db.append_messages("big", [{"role": "user", "content": "x" * 10_000} for _ in range(300)])
    db.end_session("big", "done")
    db.close()  # its last checkpoint leaves every page in the main file, nothing in the WAL
    before = db.db_path.stat().st_size
    with SessionDB(db.db_path) as again:
        assert again.prune_sessions(older_than_days=1) == 1
        assert again.vacuum() == 2  # both search indexes merged first
    assert db.db_path.stat().st_size < before / 4


def test_automatic_maintenance_runs_once_per_interval_and_never_raises(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    db.create_session("old", "cli", started_at=1.0)
    db.end_session("old", "done")
    assert db.maybe_auto_prune_and_vacuum() == {"skipped": False, "pruned": 1, "vacuumed": True}
    assert db.maybe_auto_prune_and_vacuum()["skipped"] is True
    monkeypatch.setattr(time, "time", lambda: 10.0**10)
    assert db.maybe_auto_prune_and_vacuum() == {"skipped": False, "pruned": 0, "vacuumed": False}
    db.set_meta("last_auto_prune", "not a time")
    assert db.maybe_auto_prune_and_vacuum()["skipped"] is False
    db.close()
    failed = db.maybe_auto_prune_and_vacuum()
    assert "error" in failed and "closed" in failed["error"].lower()
