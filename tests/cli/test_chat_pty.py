"""``hermes chat`` in a pseudo-terminal: two turns, exit, start again, the history is there."""

from __future__ import annotations

import sys
from pathlib import Path

import pexpect

from support.processes import child_env

from hermes.state import SessionDB


def spawn_chat(home: Path) -> pexpect.spawn[str]:
    return pexpect.spawn(sys.executable, ["-m", "hermes.cli", "chat", "--session", "pty-test"],
                         env=child_env(home), encoding="utf-8", timeout=30, dimensions=(40, 200))


def say(child: pexpect.spawn[str], text: str) -> None:
    child.expect_exact("you> ")
    child.sendline(text)
    child.expect_exact(f"You said: {text}")  # the offline backend's echo


def test_two_turns_exit_resume_history_intact(hermes_home: Path) -> None:
    first = spawn_chat(hermes_home)
    first.expect_exact("new conversation 'pty-test'")
    say(first, "my cat is called Mochi")
    say(first, "she is grey")
    first.expect_exact("you> ")
    first.sendline("/exit")
    first.expect(pexpect.EOF)
    first.close()
    assert first.exitstatus == 0

    second = spawn_chat(hermes_home)
    second.expect_exact("continuing 'pty-test'")
    second.expect_exact("4 messages")
    # The earlier turns are shown before the prompt, in order.
    second.expect_exact("you: my cat is called Mochi")
    second.expect_exact("you: she is grey")
    say(second, "what was her name?")
    second.expect_exact("you> ")
    second.sendeof()  # Ctrl-D ends the chat too
    second.expect(pexpect.EOF)
    second.close()
    assert second.exitstatus == 0

    db = SessionDB(hermes_home / "state.db")
    try:
        (session,) = db.list_sessions(source="local")
        transcript = db.get_messages_as_conversation(session["id"])
    finally:
        db.close()
    said = [m["content"] for m in transcript if m["role"] == "user"]
    assert said == ["my cat is called Mochi", "she is grey", "what was her name?"]
    assert [m["role"] for m in transcript if m["role"] != "session_meta"] == [
        "user", "assistant"] * 3
    assert session["chat_id"] == "pty-test"
