"""``hermes sessions browse``: pick a session in the terminal, then continue it in
``hermes chat``.

Type to narrow the list (any part of the title, id or first words), Up/Down to move, Enter
to continue the chosen session, Esc or Ctrl-C to leave. It needs a terminal; a script lists
sessions with ``hermes sessions list --json`` instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hermes.cli.arguments import Commands, add_db_flag, count
from hermes.cli.configuration import open_db
from hermes.cli.failures import CommandError
from hermes.cli.output import print_text, when

if TYPE_CHECKING:
    from prompt_toolkit.formatted_text import StyleAndTextTuples

# Rows of the list shown at once.
_VISIBLE = 15


def add_commands(commands: Commands) -> None:
    browse = commands.add_parser(
        "browse", help="pick a session interactively and continue it in hermes chat",
        description="Type to filter, Up/Down to move, Enter to continue the session in "
                    "`hermes chat`, Esc to leave. Needs a terminal.")
    browse.add_argument("--source", default="local",
                        help="only this platform (default: local, the sessions hermes chat "
                             "continues)")
    browse.add_argument("--limit", type=count, default=500,
                        help="how many sessions to load, newest first (default 500)")
    add_db_flag(browse)
    browse.set_defaults(handler=browse_sessions)


def browse_sessions(args: argparse.Namespace) -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise CommandError("browse is interactive and needs a terminal; use `hermes sessions "
                           "list` (--json for scripts) and `hermes chat --resume ID`")
    with open_db(args) as db:
        sessions = db.list_sessions_rich(source=args.source, limit=args.limit,
                                         compact_rows=True)
    if not sessions:
        print_text(f"no {args.source} sessions to browse")
        return 0
    chosen = pick(sessions)
    if chosen is None:
        return 0
    print_text(f"continuing session {chosen}")
    command = [sys.executable, "-m", "hermes.cli", "chat", "--resume", chosen]
    if args.db:
        command += ["--db", str(args.db)]
    sys.stdout.flush()
    os.execv(sys.executable, command)


def label(session: dict[str, Any]) -> str:
    """One line of the list: when, how long, the title (else the conversation's name), id."""
    name = session.get("title") or session.get("chat_id") or ""
    return (f"{when(session.get('started_at'))}  {session.get('message_count') or 0:>5} msgs  "
            f"{name}  {session['id']}")


def matching(sessions: Sequence[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    words = text.lower().split()
    return [s for s in sessions if all(word in label(s).lower() for word in words)]


class _Picker:
    """What the picker shows: the sessions matching the filter, and the one selected."""

    def __init__(self, sessions: Sequence[dict[str, Any]]) -> None:
        self.sessions = sessions
        self.shown = list(sessions)
        self.selected = 0

    def narrow(self, text: str) -> None:
        self.shown = matching(self.sessions, text)
        self.selected = 0

    def move(self, by: int) -> None:
        self.selected = max(0, min(len(self.shown) - 1, self.selected + by))

    def chosen(self) -> str | None:
        return str(self.shown[self.selected]["id"]) if self.shown else None

    def rows(self) -> StyleAndTextTuples:
        if not self.shown:
            return [("italic", "  no session matches\n")]
        first = max(0, min(self.selected - _VISIBLE // 2, len(self.shown) - _VISIBLE))
        lines: StyleAndTextTuples = [("reverse" if index == self.selected else "",
                  f"{'> ' if index == self.selected else '  '}{label(self.shown[index])}\n")
                 for index in range(first, min(first + _VISIBLE, len(self.shown)))]
        lines.append(("italic", (f"  {len(self.shown)} of {len(self.sessions)} sessions; "
                                 "Enter continues, Esc leaves\n")))
        return lines


def pick(sessions: Sequence[dict[str, Any]]) -> str | None:
    """The id of the session picked, or ``None`` when the person left without one."""
    from prompt_toolkit import Application
    from prompt_toolkit.buffer import Buffer
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
    from prompt_toolkit.layout import (BufferControl, FormattedTextControl, HSplit, Layout,
                                       VSplit, Window)

    picker = _Picker(sessions)
    query = Buffer(multiline=False, on_text_changed=lambda buffer: picker.narrow(buffer.text))
    keys = KeyBindings()
    keys.add("up")(lambda _event: picker.move(-1))
    keys.add("down")(lambda _event: picker.move(1))

    @keys.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        event.app.exit(result=picker.chosen())

    @keys.add("escape", eager=True)
    @keys.add("c-c")
    @keys.add("c-d")
    def _leave(event: KeyPressEvent) -> None:
        event.app.exit(result=None)

    layout = Layout(HSplit([
        VSplit([Window(FormattedTextControl([("bold", "filter> ")]), width=8, height=1),
                Window(BufferControl(query), height=1)]),
        Window(FormattedTextControl(picker.rows), height=_VISIBLE + 1),
    ]), focused_element=query)
    application: Application[str | None] = Application(
        layout=layout, key_bindings=keys, erase_when_done=True)
    return application.run()
