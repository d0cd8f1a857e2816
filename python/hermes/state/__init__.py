"""The session database, ``state.db``: sessions, messages, full-text search.

File-compatible with hermes-agent 0.19.0 (schema_version 22): either program
opens, reads and appends to a file the other wrote. The work happens in the
Rust core (:class:`hermes._core.Store`), which releases the GIL for every SQL
statement, fsync and busy wait; this package is its typed, documented face:
one module per group of methods (``sessions.py``, ``messages.py``, ``titles.py``, ...),
composed in ``session_db.py``.

``SessionDB`` is synchronous and thread-safe. ``AsyncSessionDB`` offers the
same methods as coroutines that run off the event loop, each declared with the
sync method's exact signature (``get_session = offloaded(Sessions.get_session)``),
so ``mypy --strict`` types every awaited result; ``writes_without_waiting``
lets an event loop make a short write itself when no other writer is in the way.
``SCHEMA_VERSION`` (the version we write), ``SCHEMA_SQL`` (the DDL of a file we
create, but the word-pair index the store adds on open), ``MAX_FTS5_QUERY_CHARS`` (how much of a search query is read) and
``apply_wal_with_fallback`` (WAL for a caller's own ``sqlite3`` connection)
carry the names hermes-agent's module gives its own. So do ``time`` and ``sys``, the
standard modules: code written against hermes-agent patches ``time.time`` and
``sys.platform`` through this module's names. ``file_problems`` and ``mend_schema`` look at
and mend a damaged file before a ``SessionDB`` can open it (``hermes sessions repair``).
"""

import sys as sys
import time as time

from hermes._core import (
    MAX_FTS5_QUERY_CHARS,
    SCHEMA_SQL,
    SCHEMA_VERSION,
    file_problems,
    mend_schema,
)
from hermes.state.face import Synchronous
from hermes.state.session_db import AsyncSessionDB, SessionDB, writes_without_waiting
from hermes.state.wal import apply_wal_with_fallback

__all__ = [
    "MAX_FTS5_QUERY_CHARS",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "AsyncSessionDB",
    "SessionDB",
    "Synchronous",
    "apply_wal_with_fallback",
    "file_problems",
    "mend_schema",
    "writes_without_waiting",
]
