"""Listings and counts (``hermes/state/listing.py``) on real files: what a picker lists, the
compression projection, id and title search along a chain, cron runs, cwds, counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes.state import AsyncSessionDB, SessionDB


@pytest.fixture()
def db(tmp_path: Path) -> SessionDB:
    return SessionDB(tmp_path / "state.db")


def _lineage(db: SessionDB) -> None:
    """root (compressed) -> tip; a branch and a delegate run of root; a plain root."""
    db.create_session("root", "cli", started_at=1.0, title="AN-94 rollout")
    db.append_message("root", "user", "first\nquestion " + "x" * 80, timestamp=2.0)
    db.update_session("root", end_reason="compression", ended_at=3.0)
    db.create_session("tip", "cli", started_at=3.5, parent_session_id="root", title="Tip")
    db.append_message("tip", "user", "continued", timestamp=90.0)
    db.create_session(
        "branch", "cli", started_at=4.0, parent_session_id="root",
        model_config={"_branched_from": "root"},
    )
    db.create_session(
        "delegate", "tool", started_at=5.0, parent_session_id="root",
        model_config={"_delegate_from": "root"},
    )
    db.create_session("plain", "telegram", started_at=10.0, cwd="/repo/sub")


def test_a_picker_lists_roots_and_branches_with_previews_and_the_tip_projected(db: SessionDB) -> None:
    _lineage(db)
    rows = db.list_sessions_rich()
    assert [r["id"] for r in rows] == ["plain", "branch", "tip"]
    projected = rows[2]
    assert projected["_lineage_root_id"] == "root"
    assert projected["started_at"] == 1.0  # the root's place in the order
    assert projected["title"] == "Tip" and projected["preview"] == "continued"
    assert projected["last_active"] == 90.0
    raw = db.list_sessions_rich(project_compression_tips=False)[2]
    assert raw["id"] == "root" and raw["preview"].startswith("first question xxx")
    assert raw["preview"].endswith("...") and len(raw["preview"]) == 63
    every = db.list_sessions_rich(include_children=True)
    assert {r["id"] for r in every} == {"root", "tip", "branch", "delegate", "plain"}
    assert db.session_count() == 5 and db.session_count(exclude_children=True) == 3


def test_equal_starts_are_listed_in_the_order_they_were_written(db: SessionDB) -> None:
    for sid in ("b", "a", "c"):
        db.create_session(sid, "cli", started_at=5.0)
    db.create_session("z", "cli", started_at=6.0)
    assert [r["id"] for r in db.list_sessions_rich()] == ["z", "b", "a", "c"]
    assert [r["id"] for r in db.list_sessions_rich(limit=2, offset=1)] == ["b", "a"]
    row = db.list_sessions_rich(limit=1)[0]
    assert row["title"] is None and row["source"] == "cli" and row["preview"] == ""


def test_a_preview_is_the_first_user_message_cut_and_stripped_as_hermes_agent_does(
    db: SessionDB,
) -> None:
    contents = [
        "short", " \t padded\u3000\x1c ", "x" * 60, "y" * 61, "z" * 70, "\u3000" * 5 + "w" * 62,
        "line\nbreak\r\nand more " * 5, "北京 東京 " * 12, "   ", "a" + " " * 62 + "b",
    ]
    for n, content in enumerate(contents):
        db.create_session(f"s{n}", "cli", started_at=float(n))
        db.append_message(f"s{n}", "assistant", "not this one", timestamp=1.0)
        db.append_message(f"s{n}", "user", content, timestamp=2.0)
        db.append_message(f"s{n}", "user", "nor this one", timestamp=3.0)

    def hermes_agents(content: str) -> str:  # its rule, applied to what its SQL selects
        raw = content[:63].replace("\n", " ").replace("\r", " ").strip()
        return raw[:60] + ("..." if len(raw) > 60 else "")

    rows = {r["id"]: r["preview"] for r in db.list_sessions_rich(limit=len(contents))}
    assert rows == {f"s{n}": hermes_agents(c) for n, c in enumerate(contents)}


def test_filters_pages_and_the_last_active_order(db: SessionDB) -> None:
    _lineage(db)
    assert [r["id"] for r in db.list_sessions_rich(source="telegram")] == ["plain"]
    assert [r["id"] for r in db.list_sessions_rich(exclude_sources=["telegram"])] == ["branch", "tip"]
    assert [r["id"] for r in db.list_sessions_rich(cwd_prefix="/repo/")] == ["plain"]
    assert [r["id"] for r in db.list_sessions_rich(limit=1, offset=1)] == ["branch"]
    assert [r["id"] for r in db.list_sessions_rich(min_message_count=1)] == ["tip"]
    by_activity = db.list_sessions_rich(order_by_last_active=True)
    assert [r["id"] for r in by_activity] == ["tip", "plain", "branch"]
    compact = db.list_sessions_rich(compact_rows=True)
    assert "system_prompt" not in compact[0] and "preview" in compact[0]
    with pytest.raises(ValueError):
        db.list_sessions_rich(limit=-1)


def test_id_and_title_search_follow_the_compression_chain(db: SessionDB) -> None:
    _lineage(db)
    assert [r["id"] for r in db.search_sessions_by_id("ROOT")] == ["tip"]
    assert [r["id"] for r in db.search_sessions_by_id("pla")] == ["plain"]
    assert db.search_sessions_by_id("  ") == [] and db.search_sessions_by_id("x", limit=0) == []
    # A LIKE wildcard in the needle is a literal character.
    assert db.search_sessions_by_id("%") == []
    found = db.list_sessions_rich(order_by_last_active=True, search_query="an94")
    assert [r["id"] for r in found] == ["tip"]


def test_cron_runs_of_one_job_only_newest_first(db: SessionDB) -> None:
    for i in range(3):
        db.create_session(f"cron_job1_{i}", "cron", started_at=float(i))
    db.create_session("cron_job10_0", "cron", started_at=9.0)
    db.create_session("cron_job1_x", "cli", started_at=9.0)
    runs = db.list_cron_job_runs("job1", limit=2)
    assert [r["id"] for r in runs] == ["cron_job1_2", "cron_job1_1"]
    assert [r["id"] for r in db.list_cron_job_runs("job1", offset=2)] == ["cron_job1_0"]
    assert runs[0]["preview"] == "" and runs[0]["last_active"] == 2.0


def test_cwds_counts_and_message_counts(db: SessionDB) -> None:
    _lineage(db)
    db.create_session("blank", "cli", cwd="  ", started_at=0.5)
    assert db.distinct_session_cwds() == [{"cwd": "/repo/sub", "sessions": 1, "last_active": 10.0}]
    assert db.message_count() == 2 and db.message_count("tip") == 1
    assert db.message_count("missing") == 0 and db.live_message_count("missing") is None
    assert db.session_count(cwd_prefix="/repo") == 1 and db.session_count(source="nope") == 0
    assert [s["id"] for s in db.search_sessions(limit=2)] == ["tip", "plain"]


def test_a_model_config_that_is_not_json_lists_as_a_root(db: SessionDB, tmp_path: Path) -> None:
    db.create_session("odd", "cli")
    db.update_session("odd", model_config="{not json")
    assert [r["id"] for r in db.list_sessions_rich()] == ["odd"]
    assert json.dumps(db.list_sessions_rich(), default=str)


def test_async_listing_matches_the_sync_one(db: SessionDB) -> None:
    import asyncio

    _lineage(db)
    adb = AsyncSessionDB(db)
    assert asyncio.run(adb.list_sessions_rich()) == db.list_sessions_rich()
    assert asyncio.run(adb.message_count()) == 2


def test_a_workspace_is_the_repo_root_else_the_cwd_matched_by_any_part(db: SessionDB) -> None:
    db.create_session("in-repo", "cli", started_at=1.0, cwd="/home/ann/Hermes/src",
                      git_repo_root="/home/ann/Hermes")
    db.create_session("no-root", "cli", started_at=2.0, cwd="/srv/notes", git_repo_root="")
    db.create_session("elsewhere", "cli", started_at=3.0, cwd="/tmp/scratch")
    db.create_session("unbound", "cli", started_at=4.0)
    # The repo's name, any case; a part of its path; the cwd when there is no root.
    assert [r["id"] for r in db.list_sessions_rich(workspace="hermes")] == ["in-repo"]
    assert [r["id"] for r in db.list_sessions_rich(workspace="ann/her")] == ["in-repo"]
    assert [r["id"] for r in db.list_sessions_rich(workspace="notes")] == ["no-root"]
    # The root wins over the cwd: the cwd's subfolder is not the workspace.
    assert db.list_sessions_rich(workspace="src") == []
    # A blank needle filters nothing; a % or _ is a character, not a wildcard.
    assert len(db.list_sessions_rich(workspace="  ")) == 4
    assert db.list_sessions_rich(workspace="%") == []
    db.create_session("odd", "cli", started_at=5.0, cwd="/srv/50%_off")
    assert [r["id"] for r in db.list_sessions_rich(workspace="50%_")] == ["odd"]
