"""Every failure of the ``hermes`` command, run as a real process: one line on stderr saying
what and what to do, a non-zero exit status, never a traceback, and nothing lost."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import HERMES, hermes, one_line_failure
from support.processes import child_env

from hermes.state import SessionDB


@pytest.fixture
def long_session(hermes_home: Path) -> str:
    """A session whose export is far larger than a pipe's buffer (up to 1 MiB on Linux)."""
    with SessionDB(hermes_home / "state.db") as db:
        db.create_session("long", "local", title="A long one")
        db.append_messages("long", [{"role": "user", "content": f"line {i} " + "x" * 1000}
                                    for i in range(2000)])
    return "long"


@pytest.mark.parametrize("argv", [["sessions", "export", "long"],
                                  ["sessions", "export", "long", "--format", "md", "-o", "-"],
                                  ["sessions", "show", "long"],
                                  ["sessions", "show", "long", "--json"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(
        hermes_home: Path, long_session: str, argv: list[str]) -> None:
    command = " ".join([*HERMES, *argv])
    done = subprocess.run(["bash", "-c", f"{command} | head -n 2; exit ${{PIPESTATUS[0]}}"],
                          env=child_env(hermes_home), capture_output=True, text=True,
                          timeout=120)
    assert done.stderr == ""  # no BrokenPipeError traceback, not even at exit
    assert len(done.stdout.splitlines()) == 2
    assert done.returncode == 141  # as a Unix tool ended by SIGPIPE


@pytest.mark.parametrize(("target", "form", "expected"), [
    ("/nonexistent/dir/x.md", "md", "cannot write /nonexistent/dir/x.md: No such file or "
                                    "directory; check the path; its directory must exist"),
    ("{home}", "html", "cannot write {home}: Is a directory; name a file, not a directory"),
    ("/dev/full", "md", "cannot write /dev/full: No space left on device; free some space"),
    ("/proc/x/", "md", "cannot create the directory /proc/x: No such file or directory"),
])
def test_an_unwritable_output_path_is_one_line(hermes_home: Path, long_session: str,
                                               target: str, form: str, expected: str) -> None:
    target, expected = (text.format(home=hermes_home) for text in (target, expected))
    done = hermes(hermes_home, "sessions", "export", "long", "--format", form, "-o", target)
    assert one_line_failure(done).startswith(f"hermes: {expected}")
    with SessionDB(hermes_home / "state.db") as db:  # nothing lost
        assert db.live_message_count("long") == 2000


@pytest.mark.parametrize("command", ["show", "export"])
def test_a_missing_session_is_one_line(hermes_home: Path, long_session: str,
                                       command: str) -> None:
    line = one_line_failure(hermes(hermes_home, "sessions", command, "no-such-session"))
    assert "no session, title or conversation 'no-such-session'" in line
    assert "hermes sessions list" in line


@pytest.mark.parametrize("argv", [["sessions", "list"], ["sessions", "show", "x"],
                                  ["sessions", "search", "x"], ["sessions", "recover"],
                                  ["sessions", "export", "x"]])
def test_a_file_of_garbage_is_one_line_and_left_as_it_was(hermes_home: Path,
                                                          argv: list[str]) -> None:
    garbage = hermes_home / "state.db"
    garbage.write_bytes(b"this is no database\n" * 500)
    line = one_line_failure(hermes(hermes_home, *argv))
    assert f"{garbage}: not a SQLite database" in line
    assert "--db" in line  # what to do
    assert garbage.read_bytes() == b"this is no database\n" * 500


def test_a_locked_database_is_one_line(hermes_home: Path, long_session: str) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sqlite3, sys\n"
         f"c = sqlite3.connect({str(hermes_home / 'state.db')!r}, isolation_level=None)\n"
         "c.execute('BEGIN EXCLUSIVE')\n"
         "print('locked', flush=True)\n"
         "sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        line = one_line_failure(hermes(hermes_home, "sessions", "list"))
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)
    assert "database is locked" in line and "retry later" in line
    assert hermes(hermes_home, "sessions", "list").returncode == 0  # once it is released


@pytest.mark.parametrize(("argv", "expected"), [
    (["sessions", "list", "--limit", "many"],
     "hermes sessions list: argument --limit: 'many' is not a whole number; "
     "see `hermes sessions list --help`"),
    (["sessions", "list", "--limit", "-3"], "argument --limit: '-3' is negative"),
    (["sessions", "show"], "the following arguments are required: id"),
    (["sessions", "export", "x", "--format", "pdf"], "argument --format: invalid choice: 'pdf'"),
    (["sessions", "frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
    (["--bogus"], "hermes: unrecognized arguments: --bogus"),
])
def test_a_bad_argument_is_one_line_with_status_2(hermes_home: Path, argv: list[str],
                                                  expected: str) -> None:
    assert expected in one_line_failure(hermes(hermes_home, *argv), status=2)


