"""Titles and lineage (``hermes/state/titles.py``) on a real ``state.db``."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes.errors import HermesError, InvalidTitleError, TitleInUseError
from hermes.state import AsyncSessionDB, SessionDB


def compressed(db: SessionDB, parent: str, child: str, **columns: object) -> None:
    """``parent`` ended by compression, continued by a new session ``child``."""
    db.end_session(parent, "compression")
    db.create_session(child, "cli", parent_session_id=parent, **columns)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("  Plan\t\n the   trip ", "Plan the trip"),
        ("a\x00b\x07\x1b\x7fc", "abc"),
        ("zero\u200bwidth\u202e\ufeff", "zerowidth"),
        ("\x00\u200b \u2066", None),
        ("", None),
        (None, None),
        ("数据库 🚀 Résumé — 'x' #2", "数据库 🚀 Résumé — 'x' #2"),
        ("lone \ud800 surrogate", "lone \ufffd surrogate"),
        ("A" * 100, "A" * 100),
    ],
)
def test_a_title_is_cleaned_before_it_is_kept(raw: str | None, clean: str | None) -> None:
    assert SessionDB.sanitize_title(raw) == clean


@settings(max_examples=300, deadline=None)
@given(st.text(
    st.one_of(st.characters(exclude_categories=()), st.sampled_from("\x00\t\n \u200b\u202e\ufeff\ud800")),
    max_size=140,
))
def test_any_text_cleans_to_a_storable_title_once_and_for_all(raw: str) -> None:
    try:
        clean = SessionDB.sanitize_title(raw)
    except InvalidTitleError:
        return
    if clean is None:
        return
    assert clean == clean.strip() and "  " not in clean and 0 < len(clean) <= 100
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in clean)
    clean.encode("utf-8")  # no lone surrogate left
    assert SessionDB.sanitize_title(clean) == clean


def test_a_title_too_long_is_refused_saying_the_limit(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    with pytest.raises(InvalidTitleError) as info:
        db.set_session_title("s1", "X" * 101)
    assert isinstance(info.value, ValueError) and isinstance(info.value, HermesError)
    assert "101" in str(info.value) and "max 100" in str(info.value)
    assert db.get_session_title("s1") is None


def test_a_title_taken_by_another_session_is_refused_and_nothing_changes(db: SessionDB) -> None:
    db.create_session("a", "cli")
    db.create_session("b", "cli")
    assert db.set_session_title("a", "shared") is True
    assert db.set_session_title("b", "mine") is True
    with pytest.raises(TitleInUseError) as info:
        db.set_session_title("b", "  shared ")
    assert isinstance(info.value, ValueError)
    assert info.value.holder == "a" and "already in use by session a" in str(info.value)
    assert (db.get_session_title("a"), db.get_session_title("b")) == ("shared", "mine")
    assert db.set_session_title("a", "shared") is True  # its own title again


def test_titles_are_set_cleared_and_missing_sessions_report_false(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.create_session("s2", "cli")
    assert db.set_session_title("ghost", "Title") is False
    assert db.get_session_title("ghost") is None
    db.set_session_title("s1", "first")
    db.set_session_title("s1", "")
    db.set_session_title("s2", "   ")
    assert (db.get_session_title("s1"), db.get_session_title("s2")) == (None, None)
    assert db.get_session_by_title("first") is None


def test_an_automatic_title_never_replaces_one_already_set(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.set_session_title("s1", "chosen")
    assert db.set_auto_title_if_empty("s1", "generated") is False
    assert db.set_auto_title_if_empty("ghost", "generated") is False
    db.create_session("s2", "cli")
    assert db.set_auto_title_if_empty("s2", "generated") is True
    assert db.get_session_title("s1") == "chosen"
    row = db.get_session_by_title("generated")
    assert row is not None and row["id"] == "s2"


def test_a_continuation_takes_the_title_of_its_hidden_predecessors(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.set_session_title("root", "deep-dive")
    compressed(db, "root", "mid")
    compressed(db, "mid", "tip")
    assert db.set_session_title("tip", "deep-dive") is True
    assert (db.get_session_title("root"), db.get_session_title("tip")) == (None, "deep-dive")
    db.create_session("branch", "cli", parent_session_id="tip")  # tip is live: not compressed
    with pytest.raises(TitleInUseError):
        db.set_session_title("branch", "deep-dive")


def test_titles_resolve_to_the_latest_numbered_continuation(db: SessionDB) -> None:
    now = time.time()
    for n, (sid, title) in enumerate([("s1", "my_project"), ("s2", "my_project #2"),
                                      ("s3", "my_project #3"), ("x", "myXproject #9"),
                                      ("p", "100% done")]):
        db.create_session(sid, "cli", started_at=now + n)
        db.set_session_title(sid, title)
    assert db.resolve_session_by_title("my_project") == "s3"
    assert db.resolve_session_by_title("my_project #2") == "s2"
    assert db.resolve_session_by_title("100% done") == "p"
    assert db.resolve_session_by_title("100X done") is None
    assert db.get_next_title_in_lineage("my_project") == "my_project #4"
    assert db.get_next_title_in_lineage("my_project #2") == "my_project #4"
    assert db.get_next_title_in_lineage("100% done") == "100% done #2"
    assert db.get_next_title_in_lineage("fresh") == "fresh"


def test_ids_resolve_exactly_or_by_an_unambiguous_literal_prefix(db: SessionDB) -> None:
    for sid in ("20260101_abc", "20260101_abd", "20260202_xyz", "a%b"):
        db.create_session(sid, "cli")
    assert db.resolve_session_id("20260202") == "20260202_xyz"
    assert db.resolve_session_id("20260101_ab") is None  # two match
    assert db.resolve_session_id("20260101_abc") == "20260101_abc"
    assert db.resolve_session_id("a%") == "a%b"
    assert db.resolve_session_id("2026%") is None  # % is a character, not a wildcard
    assert db.resolve_session_id("nothing") is None


def test_the_tip_follows_continuations_not_branches_subagents_or_tools(db: SessionDB) -> None:
    now = time.time()
    db.create_session("root", "cli", started_at=now)
    compressed(db, "root", "closed", started_at=now + 1)
    db.end_session("closed", "ws_orphan_reap")
    db.create_session("live", "cli", parent_session_id="root", started_at=now + 2)
    db.create_session("branch", "cli", parent_session_id="root", started_at=now + 3,
                      model_config={"_branched_from": "root"})
    db.create_session("sub", "cli", parent_session_id="root", started_at=now + 4,
                      model_config={"_delegate_from": "root"})
    db.create_session("tool", "tool", parent_session_id="root", started_at=now + 5)
    assert db.get_compression_tip("root") == "live"
    assert db.get_compression_tip("live") == "live"
    assert db.get_compression_tip("ghost") == "ghost"
    # The lineage follows the first continuation started (closed), which "live" is not on.
    assert db.get_compression_lineage("root") == ["root", "closed"]
    assert db.get_compression_lineage("live") == ["live"]
    assert db.get_conversation_root("sub") == "root"
    assert db.get_conversation_root("root") == "root"


def test_a_lineage_runs_from_the_first_predecessor_through_the_compressed_ones(db: SessionDB) -> None:
    now = time.time()
    db.create_session("a", "cli", started_at=now)
    compressed(db, "a", "b", started_at=now + 1)
    compressed(db, "b", "c", started_at=now + 2)
    db.create_session("side", "cli", parent_session_id="c", started_at=now + 3,
                      model_config={"_branched_from": "c"})
    assert db.get_compression_lineage("c") == ["a", "b", "c"]
    assert db.get_compression_lineage("a") == ["a", "b", "c"]
    assert db.get_compression_lineage("side") == ["side"]
    assert db.get_compression_lineage("ghost") == []


def test_a_resume_lands_on_the_session_holding_the_latest_messages(db: SessionDB) -> None:
    now = time.time()
    db.create_session("root", "cli", started_at=now)
    db.append_message("root", role="user", content="before compression")
    compressed(db, "root", "tip", started_at=now + 1)
    db.append_message("tip", role="user", content="after")
    db.create_session("empty", "cli", started_at=now)
    assert db.resolve_resume_session_id("root") == "tip"
    assert db.resolve_resume_session_id("empty") == "empty"
    assert db.resolve_resume_session_id("") == ""


def test_titles_and_lineage_run_as_coroutines(db: SessionDB) -> None:
    adb = AsyncSessionDB(db)

    async def scenario() -> None:
        db.create_session("s1", "cli")
        assert await adb.set_session_title("s1", "async title") is True
        assert await adb.resolve_session_by_title("async title") == "s1"
        assert await adb.get_next_title_in_lineage("async title") == "async title #2"
        assert await adb.get_compression_tip("s1") == "s1"

    asyncio.run(scenario())


def test_a_title_taken_between_the_check_and_the_write_is_refused_by_the_index(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    db.create_session("a", "cli")
    db.create_session("b", "cli")
    db.set_session_title("a", "shared")
    db.set_session_title("b", "mine")
    real_holder = db._title_holder
    calls: list[str] = []

    def racing_holder(title: str, session_id: str) -> str | None:
        # The check before the write sees the title free, as it would in a race.
        calls.append(title)
        return None if len(calls) == 1 else real_holder(title, session_id)

    monkeypatch.setattr(db, "_title_holder", racing_holder)
    with pytest.raises(TitleInUseError) as info:
        db.set_session_title("b", "shared")
    assert info.value.holder == "a" and len(calls) == 2
    assert (db.get_session_title("a"), db.get_session_title("b")) == ("shared", "mine")
