"""The ``hermes`` command.

::

    hermes gateway run [--host H] [--port P] [--model M] [--base-url URL] [--db FILE]
    hermes chat [--session NAME] [--resume ID|TITLE] [--model M] [--base-url URL] [--db FILE]
    hermes sessions list [--source S] [--workspace NEEDLE] [--limit N] [--json]
    hermes sessions show ID [--json]
    hermes sessions search QUERY [--source S] [--session ID] [--limit N] [--json]
    hermes sessions export [ID | FILTERS] [--format jsonl|md|qmd|html|trace] [-o PATH]
                           [--only user-prompts] [--redact | --no-redact] [--lineage L]
                           [--force] [--delete-after-verified --yes] [--upload [--public]]
    hermes sessions import FILE [--json]
    hermes sessions recover
    hermes sessions browse [--source S] [--limit N]
    hermes sessions rename ID TITLE...
    hermes sessions delete ID [--yes] [--json]
    hermes sessions prune|archive [FILTERS] [--dry-run] [--yes] [--json]
    hermes sessions stats|optimize [--json]
    hermes sessions repair [--check-only] [--no-backup] [--json]
    hermes migrate SOURCE TARGET [--page-rows N] [--json]
    hermes doctor
    hermes --version

One module a command group (``gateway``, ``chat``, ``sessions``, ``migrate``), each adding its parsers
with ``add_commands``; ``output`` prints (tables, JSON, progress), ``failures`` turns every
exception into one line and an exit status, in one place: ``main``. Settings come from
``$HERMES_HOME/config.yaml``, then the environment, then these flags (``hermes.config``
documents every key and variable).

Exit status: 0 done, 1 failed (the message says why and what to do), 2 bad usage,
130 interrupted, 141 output closed (``| head``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from hermes.cli import chat, coexistence, doctor, failures, gateway, migrate, sessions
from hermes.cli.arguments import Parser

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    note = coexistence.shadow_note()
    if note is not None:
        print(f"hermes: {note}", file=sys.stderr)
    try:
        args = build_parser().parse_args(argv)
        handler: Handler | None = getattr(args, "handler", None)
        if handler is None:
            # ``hermes`` or ``hermes sessions`` alone: show what can follow.
            args.help_parser.print_help()
            return failures.USAGE
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.WARNING,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        status = handler(args)
        sys.stdout.flush()  # here, so that a reader gone away is seen by the one error path
        return status
    except (Exception, KeyboardInterrupt) as exc:
        return failures.report(exc)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the top-level options, then each command group's own."""
    parser = Parser(
        prog="hermes",
        description="Agent gateway with durable conversation transcripts.",
        epilog="Settings: $HERMES_HOME/config.yaml, overridden by environment, then flags.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what happens")
    parser.add_argument("--version", action="version", version=doctor.version())
    parser.set_defaults(help_parser=parser)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    gateway.add_commands(commands)
    chat.add_commands(commands)
    sessions.add_commands(commands)
    migrate.add_commands(commands)
    doctor.add_commands(commands)
    return parser
