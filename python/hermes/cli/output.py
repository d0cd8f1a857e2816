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
import functools
import json
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeAlias

from hermes.cli.failures import CommandError, describe_os_error

# rich is imported where it draws (a terminal's table, styled text, a progress bar that is
# due): a piped table, plain text and a quick command never pay its ~30 ms of imports.
if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.progress import Progress, TaskID
    from rich.text import Text

#: Seconds of work before a progress bar appears.
SHOW_PROGRESS_AFTER = 0.5
# Narrowest a folding column may get before a table turns into blocks.
_MIN_FOLDED_WIDTH = 8


@functools.cache
def _console_class() -> type[Console]:
    from rich.console import Console

    class PipeAwareConsole(Console):
        def on_broken_pipe(self) -> None:
            # rich would exit with status 1 here; the command's one error path decides.
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")

    return PipeAwareConsole


def console() -> Console:
    """stdout. Off a terminal it never wraps lines (rich would at 80 columns). Markup in
    strings is not read: text is printed as written."""
    return _console_class()(highlight=False, markup=False, soft_wrap=not sys.stdout.isatty())


def stderr_console() -> Console:
    return _console_class()(stderr=True, highlight=False, markup=False, soft_wrap=True)


# -- tables ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str
    #: An identifier someone copies: printed whole, always.
    is_id: bool = False


Cell: TypeAlias = "str | Text"


def print_table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> None:
    if not sys.stdout.isatty():
        _print_plain(columns, rows)
        return
    from rich.table import Table

    out = console()
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
    from rich.text import Text

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
    return cell if isinstance(cell, str) else cell.plain


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
    """Each renderable on its line(s); plain strings are written as they are."""
    if all(isinstance(renderable, str) for renderable in renderables):
        sys.stdout.write("".join(f"{renderable}\n" for renderable in renderables))
        return
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
    shows it, and rich keeps it moving from its own thread. Until then it only counts (rich
    is not even imported)."""

    def __init__(self, description: str, total: int | None, *, out: Console | None = None,
                 show_after: float = SHOW_PROGRESS_AFTER) -> None:
        self._out = out
        self._description = description
        self._total = total
        self._completed = 0
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._show_at = time.monotonic() + show_after
        self._lock = threading.Lock()
        self._closed = False
        self._on_terminal = out.is_terminal if out is not None else sys.stderr.isatty()
        self._timer = threading.Timer(show_after, self._reveal)
        self._timer.daemon = True
        if self._on_terminal:
            self._timer.start()

    def advance(self, amount: int = 1) -> None:
        with self._lock:
            self._completed += amount
            if self._progress is not None and self._task is not None:
                self._progress.advance(self._task, amount)
        self._reveal_when_due()

    def update(self, completed: int, total: int | None = None) -> None:
        with self._lock:
            self._completed, self._total = completed, total
            if self._progress is not None and self._task is not None:
                self._progress.update(self._task, completed=completed, total=total)
        self._reveal_when_due()

    def _reveal_when_due(self) -> None:
        if self._progress is None and self._on_terminal and time.monotonic() >= self._show_at:
            self._reveal()

    def _reveal(self) -> None:
        with self._lock:
            if self._closed or self._progress is not None:
                return
            from rich.progress import Progress

            self._progress = Progress(console=self._out or stderr_console(), transient=True)
            self._task = self._progress.add_task(self._description, total=self._total,
                                                 completed=self._completed)
            self._progress.start()

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._closed = True
            if self._progress is not None:
                self._progress.stop()


@contextlib.contextmanager
def progress(description: str, total: int | None = None) -> Iterator[ProgressDisplay]:
    """``with progress("exporting", total=n) as bar: ... bar.advance()``: the one progress
    display of long work (export, import, recover, prune, archive, optimize, and reads of a large
    store)."""
    display = ProgressDisplay(description, total)
    try:
        yield display
    finally:
        display.close()


# -- files -----------------------------------------------------------------------------


@contextlib.contextmanager
def private_file(path: Path, *, append: bool = False) -> Iterator[IO[str]]:
    """``path`` opened for writing text (at its end with ``append``, else emptied), created
    0600 (what we write is as private as state.db); a failure to open or write it is a
    ``CommandError`` naming it."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT
                             | (os.O_APPEND if append else os.O_TRUNC), 0o600)
        with open(descriptor, "w", encoding="utf-8") as handle:
            yield handle
    except BrokenPipeError:
        raise  # a pipe named as the file (-o /dev/stdout | head): the reader left
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise CommandError(describe_os_error(exc, "write")) from None
