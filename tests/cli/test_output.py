"""What the commands print: tables that never cut an id (piped: tab-separated, never wrapped;
on a terminal of any width: whole ids), and progress only where a person watches."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
from rich.console import Console
from support.processes import child_env

from hermes.cli.output import ProgressDisplay
from hermes.recovery import recover_all, spool
from hermes.state import SessionDB

LONG_ID = "20260101_120000_" + "0123456789abcdef01234567"  # 40 characters
LONG_TITLE = "a title far longer than any terminal line " * 5
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def db_path(hermes_home: Path) -> Path:
    path = hermes_home / "state.db"
    with SessionDB(path) as db:
        db.create_session(LONG_ID, "api_server", chat_id="conversation-with-a-long-name",
                          title=LONG_TITLE)
        db.append_message(LONG_ID, "user", "the needle in it")
    return path


def test_a_piped_table_keeps_whole_ids_and_lines(db_path: Path, hermes_home: Path) -> None:
    assert len(LONG_ID) == 40
    for argv in (["sessions", "list"], ["sessions", "search", "needle"]):
        done = subprocess.run([sys.executable, "-m", "hermes.cli", *argv],
                              env=child_env(hermes_home, COLUMNS="80"), capture_output=True,
                              text=True, timeout=60, check=True)
        header, row = done.stdout.splitlines()  # one line a row: nothing wrapped at 80
        fields = row.split("\t")
        assert len(fields) == len(header.split("\t"))
        assert fields[0] == LONG_ID
    listed = dict(zip(header.split("\t"), fields))
    assert listed["source"] == "api_server"


def test_sessions_list_of_a_piped_table_has_the_whole_title(db_path: Path,
                                                            hermes_home: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "hermes.cli", "sessions", "list"],
                          env=child_env(hermes_home, COLUMNS="80"), capture_output=True,
                          text=True, timeout=60, check=True)
    header, row = done.stdout.splitlines()
    assert dict(zip(header.split("\t"), row.split("\t")))["title"] == LONG_TITLE.strip()


@pytest.mark.parametrize("columns", [200, 90, 50])
def test_a_terminal_table_never_cuts_an_id(db_path: Path, hermes_home: Path,
                                           columns: int) -> None:
    env = child_env(hermes_home)
    del env["COLUMNS"]  # the terminal's own width
    child = pexpect.spawn(sys.executable, ["-m", "hermes.cli", "sessions", "list"], env=env,
                          encoding="utf-8", timeout=60, dimensions=(40, columns))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    lines = [ANSI.sub("", line) for line in child.before.splitlines()]
    assert all(len(line) <= columns for line in lines), lines
    assert any(LONG_ID in line for line in lines), lines  # whole, on one line
    # The other columns fold (or, too narrow for a table, go one to a line) instead.
    assert "conversation-with-a-long-name" in "".join(line.replace("│", "").replace(" ", "")
                                                      for line in lines)


def test_progress_shows_on_a_terminal_once_work_takes_long() -> None:
    terminal = io.StringIO()
    shown = ProgressDisplay("exporting", 10, show_after=0.0,
                            out=Console(file=terminal, force_terminal=True, width=80))
    shown.advance(5)
    shown.close()
    assert "exporting" in terminal.getvalue()

    for out, show_after in ((Console(file=io.StringIO(), force_terminal=True), 3600.0),
                            (Console(file=io.StringIO(), force_terminal=False), 0.0)):
        hidden = ProgressDisplay("exporting", 10, show_after=show_after, out=out)
        hidden.advance(10)
        hidden.close()
        assert isinstance(out.file, io.StringIO) and out.file.getvalue() == ""


def test_progress_shows_during_one_long_call_that_reports_nothing() -> None:
    terminal = io.StringIO()
    display = ProgressDisplay("pruning", None, show_after=0.05,
                              out=Console(file=terminal, force_terminal=True, width=80))
    time.sleep(0.5)  # as a prune of a large store does: one call, no advance
    display.close()
    assert "pruning" in terminal.getvalue()


def test_recover_reports_progress_file_by_file(db_path: Path) -> None:
    for session in ("one", "two"):
        spool(session, "local", [{"role": "user", "content": f"spooled in {session}"}])
    seen: list[tuple[int, int]] = []
    with SessionDB(db_path) as db:
        report = recover_all(db, progress=lambda done, total: seen.append((done, total)))
        assert report.written == 2
        assert db.get_messages_as_conversation("two")[-1]["content"] == "spooled in two"
    assert seen == [(1, 2), (2, 2)]
