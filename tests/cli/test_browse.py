"""``hermes sessions browse``: the picker in a pty, and its refusal without a terminal."""

from __future__ import annotations

import getpass
import subprocess
import sys
from pathlib import Path

import pexpect
from support.processes import child_env

from hermes.gateway.resume import CLEAN_SHUTDOWN_MARKER
from hermes.state import SessionDB


def spawn_browse(home: Path) -> pexpect.spawn[str]:
    return pexpect.spawn(sys.executable, ["-m", "hermes.cli", "sessions", "browse"],
                         env=child_env(home, PROMPT_TOOLKIT_NO_CPR="1"), encoding="utf-8",
                         timeout=30, dimensions=(40, 200))


def make_sessions(home: Path) -> None:
    with SessionDB(home / "state.db") as db:
        for session_id, title in [("s-dogs", "Dog names"), ("s-cats", "Cat facts")]:
            db.create_session(session_id, "local", user_id=getpass.getuser(),
                              chat_id="elsewhere", title=title)
            db.append_message(session_id, "user", f"tell me about {title.lower()}")
    # As a chat that ended cleanly leaves it: no note about a cut-off turn.
    (home / CLEAN_SHUTDOWN_MARKER).touch()


def test_browse_without_a_terminal_says_what_to_use(hermes_home: Path) -> None:
    make_sessions(hermes_home)
    done = subprocess.run([sys.executable, "-m", "hermes.cli", "sessions", "browse"],
                          env=child_env(hermes_home), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert "needs a terminal" in done.stderr and "hermes sessions list" in done.stderr


def test_browse_picks_a_session_and_continues_it_in_chat(hermes_home: Path) -> None:
    make_sessions(hermes_home)
    child = spawn_browse(hermes_home)
    child.expect_exact("2 of 2 sessions")
    child.send("cat")
    child.expect_exact("1 of 2 sessions")
    child.send("\r")
    child.expect_exact("continuing 'default' (session s-cats, 'Cat facts', 1 messages)")
    child.expect_exact("you>")
    child.send("/exit\r")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_browse_left_with_escape_starts_no_chat(hermes_home: Path) -> None:
    make_sessions(hermes_home)
    child = spawn_browse(hermes_home)
    child.expect_exact("sessions; Enter continues")
    child.send("\x1b")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "continuing" not in (child.before or "")
