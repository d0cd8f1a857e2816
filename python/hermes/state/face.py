"""What every group of :class:`~hermes.state.SessionDB` methods builds on.

``StoreFace`` holds the open store (``self._store``, the Rust :class:`hermes._core.Store`);
each module of this package adds one group of methods to it as a mixin (``Sessions``,
``Messages``, ...), and ``session_db.py`` composes them. ``AsyncFace`` and :func:`offloaded`
do the same for :class:`~hermes.state.AsyncSessionDB`: each group module declares its
coroutines beside its methods, ``name = offloaded(Group.name)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    TypeVar,
    overload,
)

from typing_extensions import Self

from hermes._core import Append, Delete, Insert, SessionNotFoundError, Store, Update
from hermes.paths import is_database_url, state_db_path

if TYPE_CHECKING:
    from hermes._core import _Filter as Filter

Synchronous = Literal["FULL", "NORMAL"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_Face = TypeVar("_Face", bound="StoreFace")
#: A lineage (parent links, a compression chain) longer than this is a cycle or damage.
MAX_LINEAGE = 100


class StoreFace:
    """An open store: a ``state.db`` file or a ``postgresql://`` URL, its durability and the
    Rust store behind it."""

    def __init__(
        self,
        db_path: str | Path | None = None,
        *,
        synchronous: Synchronous = "FULL",
        busy_budget: float = 10.0,
    ) -> None:
        location: str | Path = db_path if db_path is not None else state_db_path()
        #: The file; for a server, its URL as given (password included: shown nowhere).
        self.db_path: Path | str = location if is_database_url(location) else Path(location)
        self.synchronous = synchronous
        self._store = Store(self.db_path, synchronous=synchronous, busy_budget=busy_budget)

    @property
    def location(self) -> str:
        """Where the store is, printable: a file's path, or a server's URL without its
        password."""
        return self._store.location

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r}, synchronous={self.synchronous!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def apply(self, ops: Iterable[Insert | Update | Delete | Append]) -> list[int]:
        """Runs typed write operations (``hermes._core.Insert``, ``Update``, ``Delete``,
        ``Append``) in one transaction, all or none; returns the rows each wrote.

        For a caller that must write several rows atomically in a way no method offers
        (an API creating a session and its first messages, refused if the id is taken):
        names are checked against the open store's columns, and the counters and search
        index stay in step as with every other write.
        """
        return self._store.write(ops)

    def close(self) -> None:
        """Closes the file; later calls raise DatabaseClosedError."""
        self._store.close()

    def _parent_chain(self, session_id: str) -> list[str]:
        """The session and those it continues or was spawned by (``parent_session_id``), root
        first; stops at a missing session, a cycle, or :data:`MAX_LINEAGE` sessions."""
        chain: list[str] = []
        current: str | None = session_id
        while current is not None and current not in chain and len(chain) < MAX_LINEAGE:
            chain.append(current)
            rows = self._store.query(
                "sessions", columns=["parent_session_id"], where=("=", "id", current)
            )
            current = rows[0]["parent_session_id"] if rows else None
        return chain[::-1]

    def _update_session_row(
        self, session_id: str, columns: Mapping[str, Any], *, also: Filter | None = None
    ) -> int:
        """Sets columns of the session row (where the filter ``also`` holds too); raises
        SessionNotFoundError if there is no such session. Returns the rows changed."""
        where: Filter = ("=", "id", session_id)
        if also is not None:
            where = all_of(where, also)
        [changed] = self._store.write([Update("sessions", where, dict(columns))])
        if changed == 0 and self._store.count("sessions", ("=", "id", session_id)) == 0:
            raise SessionNotFoundError(
                f"session {session_id!r}: not found in {self.db_path}. "
                "Create it first with create_session()."
            )
        return changed


class offloaded(Generic[_P, _R]):
    """A ``SessionDB`` method as an ``AsyncSessionDB`` coroutine with the same signature,
    run in a worker thread: ``get_session = offloaded(Sessions.get_session)``.

    The attribute must carry the method's name (checked when the class is made), and the
    call goes to that method of the wrapped DB object (a subclass's override included).
    """

    def __init__(self, method: Callable[Concatenate[Any, _P], _R]) -> None:
        self._name = method.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self._name:
            raise TypeError(
                f"{owner.__name__}.{name} offloads SessionDB.{self._name}: "
                "name the coroutine after the method it runs"
            )

    @overload
    def __get__(self, instance: None, owner: type) -> offloaded[_P, _R]: ...

    @overload
    def __get__(self, instance: AsyncFace, owner: type) -> Callable[_P, Coroutine[Any, Any, _R]]: ...

    def __get__(
        self, instance: AsyncFace | None, owner: type
    ) -> offloaded[_P, _R] | Callable[_P, Coroutine[Any, Any, _R]]:
        if instance is None:
            return self
        method: Callable[_P, _R] = getattr(instance.sync, self._name)

        @functools.wraps(method)
        async def run_in_thread(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            import asyncio  # here: a synchronous caller (the CLI) never loads it

            return await asyncio.to_thread(method, *args, **kwargs)

        return run_in_thread


def all_of(*filters: Filter) -> Filter:
    """The store's filter matching the rows every one of ``filters`` matches.

    (A function rather than an ``("and", [...])`` literal, so mypy checks each filter.)
    """
    return ("and", filters)


def any_of(*filters: Filter) -> Filter:
    """The store's filter matching the rows any one of ``filters`` matches."""
    return ("or", filters)


class AsyncFace:
    """The synchronous DB an :class:`~hermes.state.AsyncSessionDB` runs its calls on."""

    def __init__(self, db: StoreFace) -> None:
        self._db = db

    @property
    def sync(self) -> StoreFace:
        """The wrapped synchronous DB."""
        return self._db

    apply = offloaded(StoreFace.apply)


def epoch(value: float | datetime) -> float:
    """A timestamp as the store keeps it: seconds since the epoch."""
    return value.timestamp() if isinstance(value, datetime) else float(value)


def check_page(limit: int, offset: int) -> None:
    """Refuses a negative page before it reaches SQL."""
    if limit < 0 or offset < 0:
        raise ValueError(f"limit={limit} and offset={offset} must be >= 0")
