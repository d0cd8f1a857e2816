"""Argument parsing for the ``hermes`` command: a parser whose usage errors are one line,
and the flags several commands share."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn, TypeAlias

from hermes.cli.failures import UsageError


class Parser(argparse.ArgumentParser):
    """``argparse`` with its errors raised as ``UsageError`` (one line, exit status 2) instead
    of a usage dump; subcommand parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}; see `{self.prog} --help`")


#: What a command group's ``add_commands`` adds its parsers to.
Commands: TypeAlias = "argparse._SubParsersAction[Parser]"


def count(text: str) -> int:
    """A whole number >= 0 (``--limit``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def add_db_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", type=Path, help="session database (default: state_db of "
                                                "config.yaml, else $HERMES_HOME/state.db)")
    parser.add_argument("--database-url", metavar="URL",
                        help="a PostgreSQL session store, postgresql://USER@HOST/DB (default: "
                             "HERMES_DATABASE_URL, else database.url of config.yaml)")


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print JSON (for scripts) instead of a table")


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model name to ask the endpoint for")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. "
                                           "http://127.0.0.1:11434/v1")
    add_db_flag(parser)
