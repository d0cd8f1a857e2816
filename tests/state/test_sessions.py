"""Session updates and token accounting (``hermes/state/sessions.py``) on a real ``state.db``."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes.errors import DatabaseLockedError, SessionNotFoundError
from hermes.state import AsyncSessionDB, SessionDB

Sql = Callable[[Path, str], list[tuple[Any, ...]]]
HoldLock = Callable[[Path], contextlib.AbstractContextManager[subprocess.Popen[str]]]
DAY = 86400.0


def usage_rows(sql: Sql, path: Path, session_id: str) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    rows = sql(
        path,
        "SELECT model, billing_provider, task, api_call_count, input_tokens, output_tokens, "
        f"estimated_cost_usd FROM session_model_usage WHERE session_id = '{session_id}'",
    )
    return {(r[0], r[1], r[2]): r[3:] for r in rows}


def test_the_first_end_wins_until_the_session_is_reopened(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.end_session("s1", "compression")
    first = db.get_session("s1")
    assert first is not None and first["end_reason"] == "compression"
    db.end_session("s1", "user_exit")
    assert db.get_session("s1") == first
    db.reopen_session("s1")
    db.end_session("s1", "user_exit")
    again = db.get_session("s1")
    assert again is not None and again["end_reason"] == "user_exit"
    assert again["ended_at"] >= first["ended_at"]


@pytest.mark.parametrize(
    "update",
    [
        lambda db: db.end_session("ghost", "user_exit"),
        lambda db: db.reopen_session("ghost"),
        lambda db: db.update_session_cwd("ghost", "/work"),
        lambda db: db.update_system_prompt("ghost", "SYS"),
        lambda db: db.update_session_model("ghost", "m"),
        lambda db: db.update_session_meta("ghost", "{}"),
        lambda db: db.update_session_billing_route("ghost", provider="p", base_url="u"),
    ],
    ids=["end", "reopen", "cwd", "prompt", "model", "meta", "billing"],
)
def test_an_update_of_a_missing_session_says_which_and_creates_nothing(
    db: SessionDB, update: Callable[[SessionDB], None]
) -> None:
    with pytest.raises(SessionNotFoundError) as info:
        update(db)
    assert "'ghost'" in str(info.value) and "create_session" in str(info.value)
    assert db.get_session("ghost") is None


def test_a_failed_probe_keeps_the_recorded_branch_and_repository(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.update_session_cwd("s1", "/work/repo/src", git_branch="feature", git_repo_root="/work/repo")
    db.update_session_cwd("s1", "/work/repo", git_branch="  ", git_repo_root="")
    row = db.get_session("s1")
    assert row is not None
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == ("/work/repo", "feature", "/work/repo")
    db.update_session_cwd("s1", "")  # no cwd: nothing to record
    assert db.get_session("s1") == row


def test_repository_roots_are_backfilled_only_where_none_is_recorded(db: SessionDB) -> None:
    db.create_session("a", "cli", cwd="/r/a")
    db.create_session("b", "cli", cwd="/r/b", git_repo_root="/kept")
    db.create_session("c", "cli", cwd="/r/c", git_repo_root="")
    db.create_session("d", "cli", cwd="/elsewhere")
    db.backfill_repo_roots({"/r/a": "/r", "/r/b": "/r", "/r/c": "/r", "/elsewhere": ""})
    roots = {sid: (db.get_session(sid) or {})["git_repo_root"] for sid in "abcd"}
    assert roots == {"a": "/r", "b": "/kept", "c": "/r", "d": None}


def test_token_counts_add_up_and_absolute_totals_replace_them(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    for _ in range(2):
        db.update_token_counts("s1", input_tokens=100, output_tokens=50, estimated_cost_usd=0.25,
                               api_call_count=1)
    row = db.get_session("s1")
    assert row is not None
    assert (row["input_tokens"], row["output_tokens"], row["api_call_count"]) == (200, 100, 2)
    assert row["estimated_cost_usd"] == pytest.approx(0.5)
    db.update_token_counts("s1", input_tokens=7, output_tokens=3, api_call_count=9, absolute=True,
                           cost_status="estimated")
    row = db.get_session("s1")
    assert row is not None
    assert (row["input_tokens"], row["output_tokens"], row["api_call_count"]) == (7, 3, 9)
    assert row["cost_status"] == "estimated" and row["estimated_cost_usd"] == 0


def test_token_counts_make_a_missing_session_and_fill_only_an_empty_model(db: SessionDB) -> None:
    db.update_token_counts("late", input_tokens=5, model="m1")
    row = db.get_session("late")
    assert row is not None and (row["source"], row["model"], row["input_tokens"]) == ("unknown", "m1", 5)
    db.update_token_counts("late", input_tokens=5, model="m2")
    assert (db.get_session("late") or {})["model"] == "m1"


def test_the_first_accounted_call_replaces_the_requested_route_once(db: SessionDB) -> None:
    db.create_session("s1", "cli", model="primary")
    db.update_token_counts("s1", input_tokens=1, model="fallback", billing_provider="zai",
                           billing_base_url="https://z.example/v1", api_call_count=1)
    db.update_token_counts("s1", input_tokens=1, model="third", billing_provider="other",
                           api_call_count=1)
    row = db.get_session("s1")
    assert row is not None
    assert (row["model"], row["billing_provider"], row["billing_base_url"]) == (
        "fallback", "zai", "https://z.example/v1")
    assert row["api_call_count"] == 2


def test_usage_is_split_per_model_and_route_but_not_for_absolute_totals(
    db: SessionDB, db_path: Path, sql: Sql
) -> None:
    db.create_session("s1", "cli", model="m1")
    db.update_token_counts("s1", input_tokens=10, output_tokens=1, api_call_count=1)
    db.update_token_counts("s1", input_tokens=20, output_tokens=2, model="m1", api_call_count=1,
                           estimated_cost_usd=0.5)
    db.update_session_model("s1", "m2")
    db.update_token_counts("s1", input_tokens=40, model="m2", billing_provider="p2",
                           api_call_count=1)
    db.update_token_counts("s1", input_tokens=999, absolute=True)
    assert usage_rows(sql, db_path, "s1") == {
        ("m1", "", ""): (2, 30, 3, 0.5),
        ("m2", "p2", ""): (1, 40, 0, 0.0),
    }


def test_auxiliary_usage_is_counted_by_task_apart_from_the_session_totals(
    db: SessionDB, db_path: Path, sql: Sql
) -> None:
    db.record_auxiliary_usage("new", "vision", model="gemini", input_tokens=30)
    db.record_auxiliary_usage("new", "vision", model="gemini", input_tokens=5)
    db.record_auxiliary_usage("new", "title_generation")
    db.record_auxiliary_usage("", "vision")  # no session: nothing to count against
    row = db.get_session("new")
    assert row is not None and row["source"] == "unknown" and row["input_tokens"] == 0
    assert usage_rows(sql, db_path, "new") == {
        ("gemini", "", "vision"): (2, 35, 0, 0.0),
        ("unknown", "", "title_generation"): (1, 0, 0, 0.0),
    }


def test_a_locked_file_fails_the_whole_token_update_and_writes_nothing(
    db_path: Path, hermes_home: Path, hold_write_lock: HoldLock, sql: Sql
) -> None:
    db = SessionDB(db_path, busy_budget=0.2)
    try:
        db.create_session("s1", "cli", model="m1")
        with hold_write_lock(db_path), pytest.raises(DatabaseLockedError):
            db.update_token_counts("s1", input_tokens=10, api_call_count=1)
        assert (db.get_session("s1") or {})["input_tokens"] == 0
        assert usage_rows(sql, db_path, "s1") == {}
    finally:
        db.close()


def test_a_billing_switch_clears_the_prompt_and_keeps_an_unnamed_mode(db: SessionDB) -> None:
    db.create_session("s1", "telegram", system_prompt="Model: old")
    db.update_session_billing_route("s1", provider="ollama", base_url="http://l/v1",
                                    billing_mode="local")
    db.update_session_billing_route("s1", provider="openai", base_url="https://o/v1")
    row = db.get_session("s1")
    assert row is not None
    assert (row["billing_provider"], row["billing_base_url"], row["billing_mode"]) == (
        "openai", "https://o/v1", "local")
    assert row["system_prompt"] is None


def test_a_reset_overwrites_only_a_live_or_accidental_end(db: SessionDB) -> None:
    for sid, reason in [("live", None), ("closed", "agent_close"), ("split", "compression")]:
        db.create_session(sid, "telegram")
        if reason:
            db.end_session(sid, reason)
    assert db.promote_to_session_reset("live", "idle") is True
    assert db.promote_to_session_reset("closed") is True
    assert db.promote_to_session_reset("split") is False
    assert db.promote_to_session_reset("ghost") is False
    reasons = {sid: (db.get_session(sid) or {})["end_reason"] for sid in ("live", "closed", "split")}
    assert reasons == {"live": "idle", "closed": "session_reset", "split": "compression"}


def test_ghost_sessions_go_with_their_files_and_real_ones_stay(db: SessionDB, tmp_path: Path) -> None:
    old = time.time() - 2 * DAY
    for sid, source, started in [("ghost", "tui", old), ("talked", "tui", old),
                                 ("named", "tui", old), ("recent", "tui", time.time()),
                                 ("cli", "cli", old), ("open", "tui", old)]:
        db.create_session(sid, source, started_at=started)
        if sid != "open":
            db.end_session(sid, "tui_close")
    db.append_message("talked", role="user", content="hello")
    db.set_session_title("named", "kept")
    files = tmp_path / "sessions"
    files.mkdir()
    doomed = [files / "ghost.json", files / "ghost.jsonl", files / "request_dump_ghost_1.json"]
    for path in [*doomed, files / "talked.json"]:
        path.write_text("{}")
    assert db.prune_empty_ghost_sessions(files) == 1
    assert db.get_session("ghost") is None
    assert [p for p in doomed if p.exists()] == [] and (files / "talked.json").exists()
    for sid in ("talked", "named", "recent", "cli", "open"):
        assert db.get_session(sid) is not None, sid
    assert db.prune_empty_ghost_sessions() == 0


def test_orphaned_compression_continuations_are_ended_and_keep_their_messages(db: SessionDB) -> None:
    old = time.time() - 8 * DAY
    db.create_session("parent", "cli", started_at=old)
    db.end_session("parent", "compression")
    for sid in ("orphan", "empty", "working"):
        db.create_session(sid, "cli", parent_session_id="parent", started_at=old)
    db.create_session("young", "cli", parent_session_id="parent")
    for sid in ("orphan", "working", "young"):
        db.append_message(sid, role="user", content="kept")
    db.update_token_counts("working", input_tokens=1, api_call_count=1)
    assert db.finalize_orphaned_compression_sessions() == 1
    orphan = db.get_session("orphan")
    assert orphan is not None and orphan["end_reason"] == "orphaned_compression"
    assert [m["content"] for m in db.get_messages("orphan")] == ["kept"]
    for sid in ("empty", "working", "young"):
        assert (db.get_session(sid) or {})["ended_at"] is None, sid
    assert db.finalize_orphaned_compression_sessions() == 0


def test_the_session_updates_run_as_coroutines(db: SessionDB) -> None:
    adb = AsyncSessionDB(db)

    async def scenario() -> None:
        await adb.ensure_session("s1", "cli", model="m")
        await adb.update_token_counts("s1", input_tokens=3, api_call_count=1)
        await adb.update_session_cwd("s1", "/w", git_branch="main")
        await adb.end_session("s1", "done")
        assert await adb.promote_to_session_reset("s1") is False

    asyncio.run(scenario())
    row = db.get_session("s1")
    assert row is not None
    assert (row["input_tokens"], row["git_branch"], row["end_reason"]) == (3, "main", "done")
