"""What commands print: tables, JSON, text, progress, and files they write.

* Tables are ``rich`` tables on a terminal. An id column is never cut or folded (a copied id
  must be the whole id): the other columns fold instead, and a terminal too narrow for that
  gets one block per row. Piped, a table is tab-separated text, a header line first, one
  line a row, never wrapped.
* ``--json`` output is one JSON document on stdout.
* Progress goes to stderr, only on a terminal, and only for work still running after
  ``SHOW_PROGRESS_AFTER`` seconds: quick commands never flash a bar.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from rich.console import Console, RenderableType
from rich.progress import Progress, TaskID
from rich.table import Table
from rich.text import Text

from hermes.cli.failures import CommandError, describe_os_error

#: Seconds of work before a progress bar appears.
SHOW_PROGRESS_AFTER = 0.5
# Narrowest a folding column may get before a table turns into blocks.
_MIN_FOLDED_WIDTH = 8


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich would exit with status 1 here; the command's one error path decides instead.
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")


def console() -> Console:
    """stdout. Off a terminal it never wraps lines (rich would at 80 columns)."""
    return _Console(highlight=False, soft_wrap=not sys.stdout.isatty())


def stderr_console() -> Console:
    return _Console(stderr=True, highlight=False, soft_wrap=True)


# -- tables ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str
    #: An identifier someone copies: printed whole, always.
    is_id: bool = False


Cell = str | Text


def print_table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> None:
    out = console()
    if not out.is_terminal:
        _print_plain(columns, rows)
        return
    id_widths = {i: max([len(column.name), *(len(_plain(row[i])) for row in rows)])
                 for i, column in enumerate(columns) if column.is_id}
    others = len(columns) - len(id_widths)
    # Borders and padding take 3 columns a cell, plus the closing border.
    needed = sum(id_widths.values()) + others * _MIN_FOLDED_WIDTH + 3 * len(columns) + 1
    if needed > out.width:
        _print_blocks(out, title, columns, rows)
        return
    table = Table(title=title)
    for i, column in enumerate(columns):
        if column.is_id:
            table.add_column(column.name, no_wrap=True, min_width=id_widths[i])
        else:
            table.add_column(column.name, overflow="fold")
    for row in rows:
        table.add_row(*row)
    out.print(table)


def _print_plain(columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> None:
    write = sys.stdout.write
    write("\t".join(column.name for column in columns) + "\n")
    for row in rows:
        write("\t".join(_one_field(cell) for cell in row) + "\n")


def _print_blocks(out: Console, title: str, columns: Sequence[Column],
                  rows: Sequence[Sequence[Cell]]) -> None:
    """One block a row: its ids first, alone on their lines, then ``name: value`` lines."""
    out.print(Text(title, style="bold"))
    for row in rows:
        out.print()
        for column, cell in zip(columns, row):
            if column.is_id:
                out.print(Text(_plain(cell), style="bold"), soft_wrap=True)
        for column, cell in zip(columns, row):
            if not column.is_id and _plain(cell):
                out.print(Text.assemble(f"  {column.name}: ", cell))


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _one_field(cell: Cell) -> str:
    """A cell as one tab-separated field: tabs and line breaks become spaces."""
    return " ".join(_plain(cell).replace("\t", " ").splitlines()).strip()


# -- JSON and text ---------------------------------------------------------------------


def print_json(value: object) -> None:
    """``value`` as one JSON document (non-JSON values, such as bytes, as their text),
    written piece by piece: a large one is never held twice in memory."""
    json.dump(value, sys.stdout, ensure_ascii=False, indent=2, default=str)
    sys.stdout.write("\n")


def print_text(*renderables: RenderableType) -> None:
    out = console()
    for renderable in renderables:
        out.print(renderable)


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def when(value: Any) -> str:
    """A stored timestamp (epoch seconds) as local time."""
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M:%S")
    return "" if value is None else str(value)


# -- progress ----------------------------------------------------------------------------


class ProgressDisplay:
    """A progress bar on stderr that appears once the work has taken
    ``SHOW_PROGRESS_AFTER`` seconds, and only on a terminal. It appears then even while the
    work is one long call that reports nothing (a prune, a count of a large store): a timer
    shows it, and rich keeps it moving from its own thread."""

    def __init__(self, description: str, total: int | None, *, out: Console | None = None,
                 show_after: float = SHOW_PROGRESS_AFTER) -> None:
        self._out = out or stderr_console()
        self._progress = Progress(console=self._out, transient=True)
        self._task: TaskID = self._progress.add_task(description, total=total)
        self._show_at = time.monotonic() + show_after
        self._lock = threading.Lock()
        self._shown = self._closed = False
        self._timer = threading.Timer(show_after, self._reveal)
        self._timer.daemon = True
        if self._out.is_terminal:
            self._timer.start()

    def advance(self, amount: int = 1) -> None:
        self._progress.advance(self._task, amount)
        self._reveal_when_due()

    def update(self, completed: int, total: int | None = None) -> None:
        self._progress.update(self._task, completed=completed, total=total)
        self._reveal_when_due()

    def _reveal_when_due(self) -> None:
        if not self._shown and self._out.is_terminal and time.monotonic() >= self._show_at:
            self._reveal()

    def _reveal(self) -> None:
        with self._lock:
            if not self._closed and not self._shown:
                self._shown = True
                self._progress.start()

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._closed = True
            if self._shown:
                self._progress.stop()


@contextlib.contextmanager
def progress(description: str, total: int | None = None) -> Iterator[ProgressDisplay]:
    """``with progress("exporting", total=n) as bar: ... bar.advance()``: the one progress
    display of long work (export, recover, prune, archive, optimize, and reads of a large
    store)."""
    display = ProgressDisplay(description, total)
    try:
        yield display
    finally:
        display.close()


# -- files -----------------------------------------------------------------------------


@contextlib.contextmanager
def private_file(path: Path) -> Iterator[IO[str]]:
    """``path`` opened for writing text, created 0600 (what we write is as private as
    state.db); a failure to open or write it is a ``CommandError`` naming it."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(descriptor, "w", encoding="utf-8") as handle:
            yield handle
    except BrokenPipeError:
        raise  # a pipe named as the file (-o /dev/stdout | head): the reader left
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise CommandError(describe_os_error(exc, "write")) from None
