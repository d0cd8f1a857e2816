"""Type stubs for the compiled core (``rust/src``). Checked by ``mypy.stubtest``."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from os import PathLike
from typing import Any, Literal, TypeAlias, final

__all__ = [
    "Append",
    "ConfigError",
    "CorruptDatabaseError",
    "DatabaseClosedError",
    "DatabaseLockedError",
    "Delete",
    "DiskFullError",
    "FlushTracker",
    "HermesError",
    "Insert",
    "MAX_FTS5_QUERY_CHARS",
    "MessageEncodeError",
    "NotADatabaseError",
    "ReadOnlyDatabaseError",
    "SCAFFOLDING_FLAGS",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "SQLITE_VERSION",
    "SearchQueryError",
    "Select",
    "SessionNotFoundError",
    "StateDbError",
    "Store",
    "Update",
    "WriterBusyError",
    "__version__",
    "file_problems",
    "mend_schema",
    "set_writes_wait",
]

SCHEMA_VERSION: int
#: The DDL of a file we create (tables, indexes, search indexes and their triggers), one script;
#: the store adds its word-pair index (SQLite 3.43+) when it opens the file.
SCHEMA_SQL: str
SQLITE_VERSION: str
#: The longest search query read, in characters; the rest is ignored.
MAX_FTS5_QUERY_CHARS: int
__version__: str
#: Keys marking a message dict as private retry scaffolding, never persisted.
SCAFFOLDING_FLAGS: tuple[str, ...]

class HermesError(Exception): ...
class StateDbError(HermesError): ...
class CorruptDatabaseError(StateDbError): ...
class NotADatabaseError(CorruptDatabaseError): ...
class DatabaseLockedError(StateDbError): ...
class WriterBusyError(DatabaseLockedError): ...
class ReadOnlyDatabaseError(StateDbError): ...
class DiskFullError(StateDbError): ...
class DatabaseClosedError(StateDbError): ...
class MessageEncodeError(HermesError): ...
class SearchQueryError(HermesError): ...
class SessionNotFoundError(HermesError): ...
class ConfigError(HermesError): ...

#: The relations the typed operations name.
_Relation: TypeAlias = Literal[
    "sessions",
    "messages",
    "gateway_routing",
    "state_meta",
    "compression_locks",
    "session_model_usage",
    "telegram_dm_topic_mode",
    "telegram_dm_topic_bindings",
    "hermes_responses",
]
#: A value a filter compares with.
_Scalar: TypeAlias = str | int | float | bytes | None
#: A filter: a tree of tuples on column names (a name may also be a derived value of the
#: relation, of sessions: ``preview``, ``last_active``, ``listed``, ``delegate_from``,
#: ``chain_last_active``, ``chain_ids``, ``chain_titles``, ``chain_titles_compact``,
#: ``total_tokens``, ``cost_usd``; see ``rust/src/store/query.rs``).
_Filter: TypeAlias = (
    tuple[Literal["=", "!=", "<", "<=", ">", ">="], str, _Scalar]
    | tuple[Literal["in"], str, Iterable[_Scalar] | Select]
    | tuple[Literal["is null", "is not null"], str]
    | tuple[Literal["like", "glob"], str, str]
    | tuple[Literal["and", "or"], Sequence[_Filter]]
    | tuple[Literal["not"], _Filter]
)
_OnConflict: TypeAlias = Literal["fail", "ignore", "replace", "fill_nulls"]

def file_problems(path: str | PathLike[str]) -> list[str]:
    """What is wrong with the SQLite file at ``path``, each as SQLite says it: empty when its
    schema reads and ``PRAGMA integrity_check`` finds nothing. A file that cannot be opened
    (missing, unreadable) raises."""

def mend_schema(path: str | PathLike[str]) -> Literal[
        "healthy", "duplicates_removed", "search_index_dropped"]:
    """Mends the schema of the SQLite file at ``path``, least destructive first: a definition
    held twice removed, else the search index dropped (the next open creates it again, empty).
    Sessions and messages are never touched; damage beyond those raises
    ``CorruptDatabaseError``."""

def set_writes_wait(wait: bool) -> bool:
    """Whether writes on the calling thread may wait for other writers; returns the previous
    setting. Without waiting, a write starts at once or raises WriterBusyError unwritten."""

@final
class FlushTracker:
    """Remembers, by identity, which of one agent's message dicts are persisted."""

    def __new__(cls) -> FlushTracker: ...
    @property
    def session_id(self) -> str | None: ...
    def __len__(self) -> int: ...
    def pending(
        self,
        session_id: str,
        messages: Sequence[Any],
        history: Sequence[Any] | None = None,
        seed: Iterable[int] | None = None,
    ) -> list[dict[str, Any]]: ...
    def mark_persisted(
        self,
        session_id: str,
        messages: Sequence[Any],
        history: Sequence[Any] | None = None,
        seed: Iterable[int] | None = None,
    ) -> None: ...

@final
class Select:
    """One column of the rows of a relation, for ``("in", column, Select(...))``."""

    def __new__(
        cls, relation: _Relation, column: str, where: _Filter | None = None
    ) -> Select: ...

@final
class Insert:
    """One row of named columns; ``on_conflict`` says what a row with the same key gets."""

    def __new__(
        cls, relation: _Relation, values: Mapping[str, Any], *, on_conflict: _OnConflict = "fail"
    ) -> Insert: ...

@final
class Update:
    """Sets (``set``), increments (``add``) and fills the NULL ones of (``fill_nulls``)
    columns of the rows ``where`` matches."""

    def __new__(
        cls,
        relation: _Relation,
        where: _Filter,
        set: Mapping[str, Any] | None = None,
        *,
        add: Mapping[str, int | float] | None = None,
        fill_nulls: Mapping[str, Any] | None = None,
        must_match: bool = False,
    ) -> Update: ...

@final
class Delete:
    """Deletes the rows ``where`` matches."""

    def __new__(cls, relation: _Relation, where: _Filter) -> Delete: ...

@final
class Append:
    """Message dicts appended to a session, with its counters."""

    def __new__(cls, session_id: str, messages: Iterable[Mapping[str, Any]]) -> Append: ...

@final
class Store:
    """An open ``state.db``; thread-safe, one per process is enough."""

    def __new__(
        cls,
        location: str | PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_budget: float = 10.0,
    ) -> Store: ...
    @property
    def location(self) -> str: ...
    def columns(self, relation: _Relation) -> list[str]: ...
    def query(
        self,
        relation: _Relation,
        *,
        columns: Sequence[str] | None = None,
        where: _Filter | None = None,
        order_by: Sequence[str] = ...,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Rows of ``relation``: ``columns`` (derived values too, ``"*"`` for every column;
        None: every column), those ``where`` matches, ordered by ``order_by`` (``"-name"``
        descending), one page."""
    def count(self, relation: _Relation, where: _Filter | None = None) -> int: ...
    def write(self, ops: Iterable[Insert | Update | Delete | Append]) -> list[int]:
        """Runs ``ops`` in one transaction, all or none; returns the rows each wrote."""
    def copy_to(
        self,
        target: Store,
        relation: _Relation,
        *,
        columns: Sequence[str],
        after: Sequence[_Scalar] | None = None,
        where: _Filter | None = None,
        limit: int = 1000,
    ) -> tuple[int, int, tuple[_Scalar, ...] | None]:
        """Copies up to ``limit`` rows of ``relation`` (``where``, keys after ``after``, in
        key order) into ``target`` as they are here (``columns``, the key among them); rows
        ``target`` has already are left. Returns (read, written, last key read)."""
    def create_session(
        self,
        session_id: str,
        source: str,
        columns: Mapping[str, Any] | None = None,
        started_at: float | None = None,
    ) -> None: ...
    def update_session(self, session_id: str, columns: Mapping[str, Any]) -> None: ...
    def append(
        self,
        session_id: str,
        messages: Iterable[Mapping[str, Any]],
        once_key: str | None = None,
    ) -> list[int]: ...
    def flush(
        self,
        tracker: FlushTracker,
        session_id: str,
        messages: Sequence[Any],
        history: Sequence[Any] | None = None,
        seed: Iterable[int] | None = None,
    ) -> int: ...
    def get_session(self, session_id: str) -> dict[str, Any] | None: ...
    def live_message_count(self, session_id: str) -> int | None: ...
    def own_appends(self, session_id: str) -> int: ...
    def foreign_commit_since_last_look(self) -> bool: ...
    def get_messages(
        self, session_id: str, include_inactive: bool = False
    ) -> list[dict[str, Any]]: ...
    def get_conversation(
        self,
        session_id: str,
        include_inactive: bool = False,
        mend_leaked_memory: Callable[[str], str] | None = None,
    ) -> list[dict[str, Any]]: ...
    def list_sessions(
        self, source: str | None = None, limit: int = 50, offset: int = 0
    ) -> list[dict[str, Any]]: ...
    def search(
        self,
        query: str,
        *,
        sources: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
        roles: Sequence[str] | None = None,
        session_id: str | None = None,
        sort: str | None = None,
        include_inactive: bool = False,
        limit: int = 20,
        offset: int = 0,
    ) -> list[dict[str, Any]]: ...
    def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool: ...
    def get_meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def search_index_upkeep(self, upkeep: Literal["optimize", "rebuild"]) -> int: ...
    def vacuum(self) -> None:
        """A truncating WAL checkpoint, then ``VACUUM``: the file shrinks to its rows."""
    def close(self) -> None: ...
