"""``hermes migrate SOURCE TARGET``: every session, message, routing entry, meta value, topic
binding and handoff of one store copied into another, a ``state.db`` file or a
``postgresql://`` server either way (``hermes.state.migration`` does the copying).

Safe to stop and to run again: each page of rows is one transaction of the target, and a row
the target has already is left as it is, so a second run copies only what is new. Progress
goes to stderr: a bar on a terminal, a plain line every few seconds and one per step when
piped. The summary goes to stdout (``--json``: one JSON document).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hermes.cli.arguments import Commands, add_json_flag, count
from hermes.cli.failures import CommandError, UsageError
from hermes.cli.output import Column, ProgressDisplay, print_json, print_table, print_text
from hermes.paths import is_database_url, shown_location, store_exists

if TYPE_CHECKING:
    from hermes.state.migration import RelationCopy

#: Seconds between two plain progress lines when stderr is not a terminal.
PLAIN_PROGRESS_EVERY = 5.0
_STEP_NAMES = {"parents": "sessions linked to their parents",
               "gateway_routing": "routing entries", "state_meta": "meta values",
               "telegram_dm_topic_mode": "topic modes",
               "telegram_dm_topic_bindings": "topic bindings",
               "hermes_responses": "stored responses", "session_model_usage": "model usage rows",
               "compression_locks": "compression locks"}


def add_commands(commands: Commands) -> None:
    migrate = commands.add_parser(
        "migrate", help="copy every session and message from one store into another",
        description="Copies every session (handoffs included), message (every column, ids and "
                    "timestamps exactly), routing entry, meta value, topic binding and stored "
                    "response of SOURCE into TARGET, and fills TARGET's search index. Each "
                    "is a state.db path or a postgresql:// URL; TARGET is created if it does "
                    "not exist. A row TARGET has already is left as it is, so running it again "
                    "(after an interruption, or to bring over what is new) copies each row "
                    "once. Stop the gateways writing to SOURCE before the last run.")
    migrate.add_argument("source", metavar="SOURCE",
                         help="the store to copy from: a state.db path or a postgresql:// URL")
    migrate.add_argument("target", metavar="TARGET",
                         help="the store to copy into (created if it does not exist)")
    migrate.add_argument("--page-rows", type=count, default=None, metavar="N",
                         help="rows copied per transaction of the target (default 2000)")
    add_json_flag(migrate)
    migrate.set_defaults(handler=migrate_store)


def migrate_store(args: argparse.Namespace) -> int:
    from hermes.state import SessionDB
    from hermes.state.migration import PAGE_ROWS

    source, target = _location(args.source), _location(args.target)
    if not store_exists(source):
        raise CommandError(f"no store at {source} to copy from; give the path of a state.db "
                           "or a postgresql:// URL")
    if _same(source, target):
        raise CommandError(f"SOURCE and TARGET are the same store ({shown_location(source)}); "
                           "name another TARGET")
    if args.page_rows == 0:
        raise UsageError("hermes migrate: --page-rows 0 copies nothing; give at least 1")
    page_rows = args.page_rows or PAGE_ROWS
    started = time.monotonic()
    # The target's busy budget also bounds the search index's catch-up at its close: a
    # copy of 100,000 messages leaves them all to index, which takes longer than 10 s.
    with SessionDB(source) as source_db, SessionDB(target, busy_budget=3600) as target_db:
        steps = source_db.copy_steps()
        shown = _Progress(steps)
        try:
            copies = source_db.copy_into(target_db, page_rows=page_rows, on_page=shown.page)
            shown.filling_search_index()
            indexing = time.monotonic()
            # A search first indexes every row still pending, on either backend, within the
            # target's busy budget; closing a file indexes what could remain.
            target_db.search_messages("migrate", limit=1)
            target_db.close()
            indexed = time.monotonic() - indexing
        finally:
            shown.close()
        where = (source_db.location, target_db.location)
    _print_summary(args, where, copies, time.monotonic() - started, indexed)
    return 0


def _location(given: str) -> str | Path:
    return given if is_database_url(given) else Path(given).expanduser()


def _same(source: str | Path, target: str | Path) -> bool:
    if isinstance(source, Path) and isinstance(target, Path):
        if source.exists() and target.exists():
            return os.path.samefile(source, target)
        return source.resolve() == target.resolve()
    return source == target


class _Progress:
    """The copy's progress on stderr: a bar on a terminal; piped, a plain line every
    :data:`PLAIN_PROGRESS_EVERY` seconds and one when a step is done."""

    def __init__(self, steps: dict[str, int]) -> None:
        self._steps = steps
        self._done = dict.fromkeys(steps, 0)
        self._bar: ProgressDisplay | None = None
        self._plain = not sys.stderr.isatty()
        self._last_line = time.monotonic()
        self._current: str | None = None
        if not self._plain:
            self._bar = ProgressDisplay("copying", total=sum(steps.values()))

    def page(self, step: str, rows: int) -> None:
        if step != self._current:
            self._finish_step()
            self._current = step
        self._done[step] += rows
        if self._bar is not None:
            self._bar.advance(rows)
        elif time.monotonic() - self._last_line >= PLAIN_PROGRESS_EVERY:
            self._line(step, "copying")

    def filling_search_index(self) -> None:
        self._finish_step()
        if self._plain:
            print("hermes migrate: filling the search index", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def _finish_step(self) -> None:
        if self._current is not None and self._plain:
            self._line(self._current, "done")
        self._current = None

    def _line(self, step: str, state: str) -> None:
        name = _STEP_NAMES.get(step, step)
        print(f"hermes migrate: {name}: {self._done[step]:,} of {self._steps[step]:,} rows read "
              f"({state})", file=sys.stderr, flush=True)
        self._last_line = time.monotonic()


def _print_summary(args: argparse.Namespace, where: tuple[str, str],
                   copies: list[RelationCopy], seconds: float, indexed: float) -> None:
    source, target = where
    copied = sum(c.copied for c in copies)
    there = sum(c.already_there for c in copies)
    if args.json:
        print_json({
            "source": source, "target": target,
            "copied": copied, "already_there": there, "seconds": round(seconds, 3),
            "search_index_seconds": round(indexed, 3),
            "relations": {c.relation: {"in_source": c.in_source, "read": c.read,
                                       "copied": c.copied, "already_there": c.already_there}
                          for c in copies},
        })
        return
    print_table("hermes migrate", [Column("relation"), Column("in source"), Column("copied"),
                                   Column("already there")],
                [[c.relation, f"{c.in_source:,}", f"{c.copied:,}", f"{c.already_there:,}"]
                 for c in copies])
    print_text(f"copied {copied:,} row{'s' if copied != 1 else ''} from {source} into {target} "
               f"in {seconds:.1f} s" + (f"; {there:,} were there already" if there else ""))
