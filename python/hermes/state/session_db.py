"""``SessionDB`` and ``AsyncSessionDB``: every group of methods of this package, composed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from hermes._core import set_writes_wait
from hermes.state.compression import AsyncCompressionBooks, CompressionBooks
from hermes.state.export import AsyncExport, Export
from hermes.state.face import offloaded
from hermes.state.gateway_sessions import AsyncGatewaySessions, GatewaySessions
from hermes.state.handoffs import AsyncHandoffs, Handoffs
from hermes.state.listing import AsyncListing, Listing
from hermes.state.messages import AsyncMessages, Messages
from hermes.state.migration import AsyncMigration, Migration
from hermes.state.responses import AsyncResponses, Responses
from hermes.state.routing import AsyncRouting, Routing
from hermes.state.search import AsyncSearch, Search
from hermes.state.sessions import AsyncSessions, Sessions
from hermes.state.titles import AsyncTitles, Titles
from hermes.state.topics import AsyncTopicBindings, TopicBindings
from hermes.state.upkeep import AsyncUpkeep, Upkeep


class SessionDB(
    Sessions,
    Titles,
    CompressionBooks,
    Messages,
    Search,
    Listing,
    Export,
    Upkeep,
    GatewaySessions,
    Routing,
    TopicBindings,
    Handoffs,
    Responses,
    Migration,
):
    """An open ``state.db``.

    ``db_path`` defaults to ``$HERMES_HOME/state.db`` (resolved now, not at
    import). ``synchronous="FULL"`` (the default) makes every write that
    returned survive power loss; ``"NORMAL"`` survives process crashes only.
    A write that finds the database locked retries the whole transaction
    with jitter for up to ``busy_budget`` seconds, then raises
    :class:`~hermes.errors.DatabaseLockedError` having committed nothing.
    """


class AsyncSessionDB(
    AsyncSessions,
    AsyncTitles,
    AsyncCompressionBooks,
    AsyncMessages,
    AsyncSearch,
    AsyncListing,
    AsyncExport,
    AsyncUpkeep,
    AsyncGatewaySessions,
    AsyncRouting,
    AsyncTopicBindings,
    AsyncHandoffs,
    AsyncResponses,
    AsyncMigration,
):
    """Every public :class:`SessionDB` method as a coroutine run in a worker thread, so the
    event loop never waits on SQLite. ``sync`` is the wrapped DB, for the calls that are
    cheap enough to make on the loop.
    """

    def __init__(self, db: SessionDB) -> None:
        super().__init__(db)
        self._session_db = db

    @property
    def sync(self) -> SessionDB:
        """The wrapped synchronous DB."""
        return self._session_db

    close = offloaded(SessionDB.close)


@contextlib.contextmanager
def writes_without_waiting() -> Iterator[None]:
    """Within the block, every write made on this thread (to any ``SessionDB``) starts at once
    or raises :class:`hermes.errors.WriterBusyError` having written nothing: when another write
    of the same store is running or queued, or another process holds the file's write lock.

    For an event loop: it may commit a short write itself (a thread hop costs more than the
    commit at ``synchronous="NORMAL"``) but must never sit waiting for another writer. Retry a
    ``WriterBusyError`` off the loop.
    """
    waited = set_writes_wait(False)
    try:
        yield
    finally:
        set_writes_wait(waited)
