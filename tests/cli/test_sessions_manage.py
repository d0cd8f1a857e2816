"""``hermes sessions delete | prune | archive | rename | stats | optimize`` run as real
processes on a real ``state.db``: what they change, what they refuse, their ``--json``
parsed back, and their confirmation (a pty answers it; a pipe cannot)."""

from __future__ import annotations

import time
from pathlib import Path

import pexpect
import pytest
from support.cli import as_json, hermes, one_line_failure, spawn

from hermes.state import SessionDB

DAY = 86400.0


@pytest.fixture
def store(hermes_home: Path) -> Path:
    """Sessions of several ages and platforms: ended ``old-*`` (200 and 100 days ago),
    ``mid`` (40 days), ``new`` (1 day), and ``live`` (200 days old, never ended)."""
    path = hermes_home / "state.db"
    now = time.time()
    with SessionDB(path) as db:
        for session_id, source, age, title in [
                ("old-telegram", "telegram", 200, "Trip plans"),
                ("old-local", "local", 100, None),
                ("mid", "api_server", 40, "Budget"),
                ("new", "local", 1, None),
                ("live", "telegram", 200, None)]:
            db.create_session(session_id, source, started_at=now - age * DAY, title=title)
            db.append_message(session_id, "user", f"hello from {session_id}")
            db.append_message(session_id, "assistant", "hi")
            if session_id != "live":
                db.end_session(session_id, "session_reset")
    return path


def ids(home: Path) -> set[str]:
    with SessionDB(home / "state.db") as db:
        return {row["id"] for row in db.list_sessions(limit=100)}


# -- delete ------------------------------------------------------------------------------


def test_delete_with_yes_removes_the_session_and_its_messages(hermes_home: Path,
                                                              store: Path) -> None:
    assert as_json(hermes(hermes_home, "sessions", "delete", "mid", "--yes", "--json")) == {
        "deleted": ["mid"]}
    assert "mid" not in ids(hermes_home)
    with SessionDB(store) as db:
        assert db.get_messages("mid") == []
    # By title, too.
    done = hermes(hermes_home, "sessions", "delete", "Trip plans", "-y")
    assert done.returncode == 0 and "deleted session old-telegram" in done.stdout


def test_delete_without_yes_and_without_a_terminal_refuses_and_keeps_it(
        hermes_home: Path, store: Path) -> None:
    line = one_line_failure(hermes(hermes_home, "sessions", "delete", "mid"))
    assert "stdin is not a terminal" in line and "--yes" in line
    assert "mid" in ids(hermes_home)


def test_delete_asks_on_a_terminal(hermes_home: Path, store: Path) -> None:
    child = spawn(hermes_home, "sessions", "delete", "mid")
    child.expect_exact("Delete session mid and its 2 messages? [y/N]")
    child.sendline("n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1 and "mid" in ids(hermes_home)

    child = spawn(hermes_home, "sessions", "delete", "mid")
    child.expect_exact("[y/N]")
    child.sendline("y")
    child.expect_exact("deleted session mid")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0 and "mid" not in ids(hermes_home)


def test_delete_of_an_unknown_session_is_one_line(hermes_home: Path, store: Path) -> None:
    line = one_line_failure(hermes(hermes_home, "sessions", "delete", "nope", "--yes"))
    assert "'nope'" in line and "hermes sessions list" in line


# -- prune -------------------------------------------------------------------------------


def test_prune_older_than_deletes_only_old_ended_sessions(hermes_home: Path,
                                                          store: Path) -> None:
    preview = as_json(hermes(hermes_home, "sessions", "prune", "--older-than", "30d",
                             "--dry-run", "--json"))
    assert preview["dry_run"] is True and preview["changed"] == 0
    # Oldest first; the live one is never a candidate.
    assert [row["id"] for row in preview["matched"]] == ["old-telegram", "old-local", "mid"]
    assert ids(hermes_home) == {"old-telegram", "old-local", "mid", "new", "live"}

    done = as_json(hermes(hermes_home, "sessions", "prune", "--older-than", "30", "--yes",
                          "--json"))
    assert done["changed"] == 3
    assert ids(hermes_home) == {"new", "live"}


def test_bare_prune_means_older_than_90_days(hermes_home: Path, store: Path) -> None:
    done = hermes(hermes_home, "sessions", "prune", "--yes")
    assert done.returncode == 0, done.stderr
    assert "deleted 2 sessions" in done.stdout
    assert ids(hermes_home) == {"mid", "new", "live"}


def test_prune_filters_combine(hermes_home: Path, store: Path) -> None:
    done = as_json(hermes(hermes_home, "sessions", "prune", "--source", "telegram",
                          "--title", "trip", "--yes", "--json"))
    assert [row["id"] for row in done["matched"]] == ["old-telegram"]
    assert ids(hermes_home) == {"old-local", "mid", "new", "live"}
    nothing = hermes(hermes_home, "sessions", "prune", "--after", "2d", "--before", "1h",
                     "--source", "telegram", "--yes")
    assert nothing.returncode == 0 and "no sessions match" in nothing.stdout


def test_prune_without_yes_and_without_a_terminal_refuses(hermes_home: Path,
                                                          store: Path) -> None:
    line = one_line_failure(hermes(hermes_home, "sessions", "prune", "--older-than", "30"))
    assert "not deleting 3 sessions" in line and "--yes" in line
    assert len(ids(hermes_home)) == 5


def test_prune_asks_on_a_terminal_showing_what_it_would_delete(hermes_home: Path,
                                                               store: Path) -> None:
    child = spawn(hermes_home, "sessions", "prune", "--older-than", "150")
    child.expect_exact("old-telegram")
    child.expect_exact("Delete this session? [y/N]")
    child.sendline("y")
    child.expect_exact("deleted 1 session")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert ids(hermes_home) == {"old-local", "mid", "new", "live"}


@pytest.mark.parametrize(("argv", "says"), [
    (["--older-than", "soon"], "--older-than 'soon' is neither a duration nor a date"),
    (["--after", "1d", "--before", "2d"], "the window is empty"),
    (["--min-messages", "many"], "invalid int value"),
])
def test_bad_filters_are_one_line_usage_errors(hermes_home: Path, store: Path,
                                               argv: list[str], says: str) -> None:
    assert says in one_line_failure(hermes(hermes_home, "sessions", "prune", *argv, "--yes"),
                                    status=2)
    assert len(ids(hermes_home)) == 5


# -- archive -----------------------------------------------------------------------------


def test_archive_hides_matching_sessions_and_deletes_nothing(hermes_home: Path,
                                                             store: Path) -> None:
    done = as_json(hermes(hermes_home, "sessions", "archive", "--source", "local", "--yes",
                          "--json"))
    assert sorted(row["id"] for row in done["matched"]) == ["new", "old-local"]
    with SessionDB(store) as db:
        assert db.get_session("old-local")["archived"] == 1  # type: ignore[index]
        assert db.get_session("mid")["archived"] == 0  # type: ignore[index]
        assert len(db.get_messages("old-local")) == 2
    listed = as_json(hermes(hermes_home, "sessions", "list", "--json"))
    assert {row["id"] for row in listed} == {"old-telegram", "mid", "live"}  # hidden
    again = as_json(hermes(hermes_home, "sessions", "archive", "--source", "local", "--yes",
                           "--json"))
    assert again["changed"] == 0  # already archived: a no-op
    # Prune keeps archived sessions unless asked.
    pruned = as_json(hermes(hermes_home, "sessions", "prune", "--older-than", "50", "--yes",
                            "--json"))
    assert [row["id"] for row in pruned["matched"]] == ["old-telegram"]
    pruned = as_json(hermes(hermes_home, "sessions", "prune", "--older-than", "50",
                            "--include-archived", "--yes", "--json"))
    assert [row["id"] for row in pruned["matched"]] == ["old-local"]


def test_archive_without_a_filter_is_refused(hermes_home: Path, store: Path) -> None:
    line = one_line_failure(hermes(hermes_home, "sessions", "archive", "--yes"), status=2)
    assert "at least one filter" in line


# -- rename ------------------------------------------------------------------------------


def test_rename_sets_the_title_and_refuses_one_in_use(hermes_home: Path, store: Path) -> None:
    done = hermes(hermes_home, "sessions", "rename", "new", "Weekend", "ideas")
    assert done.returncode == 0, done.stderr
    assert "new is now titled 'Weekend ideas'" in done.stdout
    shown = as_json(hermes(hermes_home, "sessions", "show", "Weekend ideas", "--json"))
    assert shown["session"]["id"] == "new"

    line = one_line_failure(hermes(hermes_home, "sessions", "rename", "mid", "Weekend ideas"))
    assert "Weekend ideas" in line
    with SessionDB(store) as db:
        assert db.get_session("mid")["title"] == "Budget"  # type: ignore[index]
    assert "'nope'" in one_line_failure(hermes(hermes_home, "sessions", "rename", "nope", "x"))


# -- stats and optimize --------------------------------------------------------------------


def test_stats_counts_sessions_and_messages(hermes_home: Path, store: Path) -> None:
    stats = as_json(hermes(hermes_home, "sessions", "stats", "--json"))
    assert stats["sessions"] == 5 and stats["messages"] == 10 and stats["archived"] == 0
    assert stats["by_source"] == {"local": 2, "api_server": 1, "telegram": 2}
    assert stats["database_bytes"] > 0 and stats["database"] == str(store)
    text = hermes(hermes_home, "sessions", "stats")
    assert text.returncode == 0 and "sessions: 5 (0 archived)" in text.stdout
    assert "messages: 10" in text.stdout and "telegram: 2 sessions" in text.stdout


def test_optimize_changes_no_session(hermes_home: Path, store: Path) -> None:
    before = as_json(hermes(hermes_home, "sessions", "list", "--json"))
    report = as_json(hermes(hermes_home, "sessions", "optimize", "--json"))
    assert report["bytes_after"] > 0 and report["search_indexes_merged"] >= 1
    assert as_json(hermes(hermes_home, "sessions", "list", "--json")) == before
    hits = as_json(hermes(hermes_home, "sessions", "search", "hello", "--json"))
    assert len(hits) == 5  # the search index still answers
