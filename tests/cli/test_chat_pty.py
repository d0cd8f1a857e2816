"""``hermes chat`` in a pseudo-terminal: turns, line editing and history, the slash commands
(answered locally, never sent to the model), stopping a reply, resuming by title."""

from __future__ import annotations

import getpass
import re
import signal
import subprocess
import sys
from pathlib import Path

import pexpect
from support.fake_openai import FakeOpenAI, Reply
from support.processes import child_env

from hermes.gateway.resume import CLEAN_SHUTDOWN_MARKER
from hermes.state import SessionDB

LEFT, UP = "\x1b[D", "\x1b[A"
SCRIPTED_AGENT = {"HERMES_GATEWAY_AGENT_FACTORY": "support.scripted_agent:build_agent"}


def spawn_chat(home: Path, *args: str, **variables: str) -> pexpect.spawn[str]:
    # The pty answers no cursor-position requests; without this prompt_toolkit waits for
    # them and then warns.
    env = child_env(home, PROMPT_TOOLKIT_NO_CPR="1", **variables)
    return pexpect.spawn(sys.executable, ["-m", "hermes.cli", "chat", *args], env=env,
                         encoding="utf-8", timeout=30, dimensions=(40, 200))


def say(child: pexpect.spawn[str], text: str, answer: str | None = None) -> None:
    child.expect_exact("you>")
    child.send(text + "\r")
    child.expect_exact(answer if answer is not None else f"You said: {text}")


def submit(child: pexpect.spawn[str], text: str) -> None:
    """Type ``text`` and Enter; return once it was taken and the next prompt is shown."""
    child.expect_exact("you>")
    child.send(text + "\r")
    child.expect(re.escape(text) + r"[^\n]*\n[^\n]*you>")


def finish(child: pexpect.spawn[str], how: str = "/exit\r") -> None:
    child.expect_exact("you>")
    child.send(how)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def local_transcript(home: Path) -> tuple[dict[str, object], list[dict[str, object]]]:
    with SessionDB(home / "state.db") as db:
        (session,) = db.list_sessions(source="local")
        return session, db.get_messages_as_conversation(session["id"])


def said(transcript: list[dict[str, object]]) -> list[object]:
    return [m["content"] for m in transcript if m["role"] == "user"]


def test_two_turns_exit_resume_history_intact(hermes_home: Path) -> None:
    first = spawn_chat(hermes_home, "--session", "pty-test")
    first.expect_exact("new conversation 'pty-test'")
    say(first, "my cat is called Mochi")
    say(first, "she is grey")
    finish(first)

    second = spawn_chat(hermes_home, "--session", "pty-test")
    second.expect_exact("continuing 'pty-test'")
    second.expect_exact("4 messages")
    # The earlier turns are shown before the prompt, in order.
    second.expect_exact("you: my cat is called Mochi")
    second.expect_exact("you: she is grey")
    say(second, "what was her name?")
    finish(second, "\x04")  # Ctrl-D ends the chat too

    session, transcript = local_transcript(hermes_home)
    assert said(transcript) == ["my cat is called Mochi", "she is grey", "what was her name?"]
    assert [m["role"] for m in transcript if m["role"] != "session_meta"] == [
        "user", "assistant"] * 3
    assert session["chat_id"] == "pty-test"


def test_line_editing_and_history_across_chats(hermes_home: Path) -> None:
    first = spawn_chat(hermes_home)
    first.expect_exact("you>")
    first.send("wrld" + LEFT * 3 + "o\r")  # type, move left, insert
    first.expect_exact("You said: world")
    say(first, UP, answer="You said: world")  # Up recalls the previous line
    first.expect_exact("you>")
    first.send("hello")
    first.send("\x01" + ">" + "\x05" + "!\r")  # Ctrl-A, insert at the start; Ctrl-E, append
    first.expect_exact("You said: >hello!")
    finish(first)
    assert (hermes_home / "chat_history").stat().st_mode & 0o777 == 0o600

    second = spawn_chat(hermes_home)
    # The history outlived the first chat: Up, Up passes /exit and finds the line before it.
    say(second, UP + UP, answer="You said: >hello!")
    finish(second)
    assert said(local_transcript(hermes_home)[1]) == ["world", "world", ">hello!", ">hello!"]


def test_slash_commands_are_answered_here_and_never_reach_the_model(hermes_home: Path) -> None:
    with FakeOpenAI(Reply("first answer"), Reply("second answer")) as model:
        chat = spawn_chat(hermes_home, "--base-url", model.url, "--model", "fake-model",
                          OPENAI_API_KEY="sk-test")
        say(chat, "/help", answer="/resume ID|TITLE")
        chat.expect_exact("/exit, /quit")
        say(chat, "/title Cat facts", answer="Title set: Cat facts")
        say(chat, "hello", answer="first answer")
        say(chat, "/title", answer="This conversation's title: Cat facts")
        say(chat, "/xyz now", answer="unknown command /xyz; the commands are /help, /new")
        say(chat, "/stop", answer="Nothing is running right now.")
        say(chat, "/new", answer="Started a new conversation.")
        say(chat, "/sessions", answer="Recent conversations")
        chat.expect_exact("Cat facts")
        say(chat, "/resume Cat facts", answer="Resumed ")
        say(chat, "and again", answer="second answer")
        finish(chat, "/exit now\r")

    assert len(model.requests) == 2
    sent = [m.get("content") for request in model.requests for m in request["messages"]]
    assert not [text for text in sent if isinstance(text, str) and text.startswith("/")]
    # The second request went out in the resumed conversation: its history came along.
    second = [m.get("content") for m in model.requests[1]["messages"]]
    assert second[-3:] == ["hello", "first answer", "and again"]
    with SessionDB(hermes_home / "state.db") as db:
        titled = [s for s in db.list_sessions() if s.get("title") == "Cat facts"]
        assert len(titled) == 1 and titled[0]["end_reason"] is None  # reopened by /resume
        assert said(db.get_messages_as_conversation(titled[0]["id"])) == ["hello", "and again"]


def test_stop_and_ctrl_c_stop_a_running_reply(hermes_home: Path) -> None:
    chat = spawn_chat(hermes_home, **SCRIPTED_AGENT)
    submit(chat, "sleep:60")  # a tool round of a minute, unless interrupted
    chat.send("/stop\r")
    chat.expect_exact("Stopped the running turn.")
    say(chat, "ping", answer="echo: ping")
    submit(chat, "sleep:60")
    chat.send("\x03")  # Ctrl-C at the prompt while a reply runs
    chat.expect_exact("Stopped the running turn.")
    say(chat, "pong", answer="echo: pong")
    submit(chat, "sleep:60")
    chat.kill(signal.SIGINT)  # as Ctrl-C between two prompts, when the terminal sends one
    chat.expect_exact("Stopped the running turn.")
    say(chat, "still here", answer="echo: still here")  # queued behind the stopped turn
    chat.kill(signal.SIGINT)  # nothing running: the chat goes on
    chat.expect_exact("(/exit or Ctrl-D ends the chat)")
    say(chat, "and here", answer="echo: and here")
    finish(chat)


def test_resume_by_title_continues_that_session(hermes_home: Path) -> None:
    with SessionDB(hermes_home / "state.db") as db:
        db.create_session("old-one", "local", user_id=getpass.getuser(), chat_id="elsewhere",
                          title="Old talk")
        db.append_message("old-one", "user", "remember the milk")
        db.append_message("old-one", "assistant", "noted")
    # As a chat that ended cleanly leaves it (else the gateway would tell the model that
    # the last turn of a recently active conversation may have been cut off).
    (hermes_home / CLEAN_SHUTDOWN_MARKER).touch()
    chat = spawn_chat(hermes_home, "--resume", "Old talk")
    chat.expect_exact("continuing 'default' (session old-one, 'Old talk', 2 messages)")
    chat.expect_exact("you: remember the milk")
    say(chat, "and eggs")
    finish(chat)
    with SessionDB(hermes_home / "state.db") as db:
        assert said(db.get_messages_as_conversation("old-one")) == [
            "remember the milk", "and eggs"]


def test_resume_of_an_unknown_session_is_one_line(hermes_home: Path) -> None:
    SessionDB(hermes_home / "state.db").close()
    done = subprocess.run([sys.executable, "-m", "hermes.cli", "chat", "--resume", "nope"],
                          env=child_env(hermes_home), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("hermes: no session, title or conversation 'nope'")


def test_piped_lines_are_answered_in_order(hermes_home: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "hermes.cli", "chat"],
                          input="first\n/help\n/bogus\nsecond\n", env=child_env(hermes_home),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("You said: first") < out.index("/title [TEXT]") < out.index(
        "unknown command /bogus") < out.index("You said: second")
    assert said(local_transcript(hermes_home)[1]) == ["first", "second"]
