"""Copying a whole store into another (``hermes migrate``): a ``state.db`` into a PostgreSQL
server, back, or between any two stores.

Every relation is copied as the source holds it (every column, message ids, timestamps to
the bit, ``\\0json:`` content and NUL bytes), a page at a time in key order, each page one
transaction of the target (``Store.copy_to``, an ``Import`` in the core). A row whose key the
target has already is left as it is there, so a copy stopped anywhere (even by SIGKILL) is
finished by running it again, and a second run copies only what is new. The target's search
index is filled from the copied messages as it is from appended ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hermes._core import StateDbError
from hermes.state.face import AsyncFace, StoreFace, offloaded

if TYPE_CHECKING:
    from hermes._core import _Filter, _Relation, _Scalar

#: Every relation, in the order it is copied: sessions before the rows that name them.
COPY_ORDER: tuple[_Relation, ...] = (
    "sessions",
    "messages",
    "session_model_usage",
    "telegram_dm_topic_mode",
    "telegram_dm_topic_bindings",
    "gateway_routing",
    "state_meta",
    "compression_locks",
    "hermes_responses",
)
#: Rows one page (one transaction of the target) copies.
PAGE_ROWS = 2000

#: Called after each page: the step (a relation, or ``"parents"``) and the rows it read.
OnPage = Callable[[str, int], None]


@dataclass
class RelationCopy:
    """What a copy did to one relation."""

    relation: _Relation
    #: Rows of the source (counted before the copy began).
    in_source: int
    #: Rows the target did not have, now written.
    copied: int = 0
    #: Rows read from the source.
    read: int = 0

    @property
    def already_there(self) -> int:
        """Rows read whose key the target had already (an earlier run, or its own)."""
        return self.read - self.copied


class Migration(StoreFace):
    def copy_into(self, target: StoreFace, *, page_rows: int = PAGE_ROWS,
                  on_page: OnPage | None = None) -> list[RelationCopy]:
        """Copies every row of this store into ``target`` (see the module doc); returns what
        was copied of each relation, in :data:`COPY_ORDER`.

        Sessions are linked to their parents in a pass of their own once every session is
        there. Before anything is written, each relation's columns are checked: a column of
        this store that ``target`` lacks is left out when no row holds a value in it, and
        refused (:class:`~hermes.errors.StateDbError`, nothing copied) when one does.
        """
        if page_rows <= 0:
            raise ValueError(f"page_rows={page_rows} must be at least 1")
        columns = {relation: self._shared_columns(target, relation) for relation in COPY_ORDER}
        copies = [RelationCopy(relation, self._store.count(relation)) for relation in COPY_ORDER]
        for copy in copies:
            copy.read, copy.copied = self._copy_relation(
                target, copy.relation, columns[copy.relation], None, page_rows, on_page,
                copy.relation)
            if copy.relation == "sessions":
                self._copy_relation(target, "sessions", columns["sessions"],
                                    ("is not null", "parent_session_id"), page_rows, on_page,
                                    "parents")
        return copies

    def copy_steps(self) -> dict[str, int]:
        """The rows each step of :meth:`copy_into` will read from this store: each relation,
        and ``"parents"`` (the sessions that have one), for a progress display."""
        steps: dict[str, int] = {relation: self._store.count(relation) for relation in COPY_ORDER}
        steps["parents"] = self._store.count("sessions", ("is not null", "parent_session_id"))
        return steps

    def _copy_relation(self, target: StoreFace, relation: _Relation, columns: list[str],
                       where: _Filter | None, page_rows: int, on_page: OnPage | None,
                       step: str) -> tuple[int, int]:
        """Pages through ``relation`` (the rows ``where`` matches); returns (read, written)."""
        read = written = 0
        after: tuple[_Scalar, ...] | None = None
        while True:
            page_read, page_written, after = self._store.copy_to(
                target._store, relation, columns=columns, after=after, where=where,
                limit=page_rows)
            read += page_read
            written += page_written
            if on_page is not None and page_read:
                on_page(step, page_read)
            if page_read < page_rows:
                return read, written

    def _shared_columns(self, target: StoreFace, relation: _Relation) -> list[str]:
        """This store's columns of ``relation`` that ``target`` has too; refuses when a
        column ``target`` lacks holds a value here."""
        theirs = set(target._store.columns(relation))
        ours = self._store.columns(relation)
        held = [column for column in ours if column not in theirs
                and self._store.count(relation, ("is not null", column))]
        if held:
            raise StateDbError(
                f"{target.location} has no column {', '.join(held)} of {relation}, which rows of "
                f"{self.location} hold values in; nothing was copied. Add the column(s) to the "
                f"target's {relation} table first (a newer hermes-agent made them in the source)")
        return [column for column in ours if column in theirs]


class AsyncMigration(AsyncFace):
    copy_into = offloaded(Migration.copy_into)
    copy_steps = offloaded(Migration.copy_steps)
