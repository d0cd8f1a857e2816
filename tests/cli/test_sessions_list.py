"""``hermes sessions list`` run as a real process: hermes-agent's ``--workspace`` filter, its
workspace column, the sessions it hides, and ``--json`` parsed back."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import as_json, hermes

from hermes.state import SessionDB


@pytest.fixture
def store(hermes_home: Path) -> Path:
    path = hermes_home / "state.db"
    with SessionDB(path) as db:
        db.create_session("in-repo", "cli", started_at=1.0, cwd="/home/ann/Hermes/src",
                          git_repo_root="/home/ann/Hermes")
        db.create_session("notes", "local", started_at=2.0, cwd="/srv/notes")
        db.create_session("unbound", "local", started_at=3.0)
        db.create_session("a-tool", "tool", started_at=4.0, cwd="/srv/notes")
    return path


def listed(done_stdout: str) -> list[dict[str, str]]:
    header, *lines = done_stdout.splitlines()
    return [dict(zip(header.split("\t"), line.split("\t"))) for line in lines]


def test_workspace_keeps_the_sessions_of_one_repo_or_folder(hermes_home: Path,
                                                            store: Path) -> None:
    rows = as_json(hermes(hermes_home, "sessions", "list", "--workspace", "HERMES", "--json"))
    assert [row["id"] for row in rows] == ["in-repo"]
    rows = as_json(hermes(hermes_home, "sessions", "list", "--workspace", "srv/no", "--json"))
    assert [row["id"] for row in rows] == ["notes"]  # the tool's session stays hidden
    rows = as_json(hermes(hermes_home, "sessions", "list", "--workspace", "srv/no",
                          "--source", "tool", "--json"))
    assert [row["id"] for row in rows] == ["a-tool"]
    # --limit counts matching sessions, not the newest ones before the filter.
    rows = as_json(hermes(hermes_home, "sessions", "list", "--workspace", "hermes",
                          "--limit", "1", "--json"))
    assert [row["id"] for row in rows] == ["in-repo"]
    assert as_json(hermes(hermes_home, "sessions", "list", "--workspace", "nowhere",
                          "--json")) == []


def test_the_table_names_each_session_s_workspace(hermes_home: Path, store: Path) -> None:
    done = hermes(hermes_home, "sessions", "list")
    assert done.returncode == 0, done.stderr
    rows = listed(done.stdout)
    assert [(row["id"], row["workspace"]) for row in rows] == [
        ("unbound", ""), ("notes", "notes"), ("in-repo", "Hermes")]


def test_without_workspaces_the_table_has_no_such_column(hermes_home: Path) -> None:
    with SessionDB(hermes_home / "state.db") as db:
        db.create_session("plain", "local")
    done = hermes(hermes_home, "sessions", "list")
    assert done.returncode == 0, done.stderr
    assert "workspace" not in done.stdout.splitlines()[0].split("\t")
    assert [row["id"] for row in listed(done.stdout)] == ["plain"]
