"""Asking before a command destroys or hides stored sessions.

``--yes`` answers for the person. Without it the question goes to the terminal; when stdin is
not one (a script, a pipe, cron) nobody can answer, so the command refuses in one line
instead of waiting or guessing.
"""

from __future__ import annotations

import sys

from hermes.cli.failures import CommandError


class Declined(CommandError):
    """The person answered no: nothing was changed."""


def confirm(question: str, *, action: str, yes: bool) -> None:
    """Returns when ``action`` may go ahead; raises ``CommandError`` (nothing changed) when
    it may not. ``question`` is asked as ``question [y/N]``."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise CommandError(f"not {action}: stdin is not a terminal, so nobody can confirm; "
                           "pass --yes to go ahead (or --dry-run to see what it would do)")
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise Declined(f"not {action}: not confirmed; nothing was changed")
