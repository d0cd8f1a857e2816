"""The exceptions hermes raises, in one hierarchy.

They are defined by the Rust core (so storage failures map to them in one
place, ``rust/src/exceptions.rs``) and re-exported here as the public names, all but
the ones only Python raises (``InvalidSettingError``, ``InvalidImportError``, the title errors,
``TopicAlreadyLinkedError``)::

    HermesError
    ├── StateDbError                 the session database failed an operation
    │   ├── CorruptDatabaseError     damaged file
    │   │   └── NotADatabaseError    not SQLite at all (left untouched)
    │   ├── DatabaseLockedError      write lock held past the retry budget
    │   │   └── WriterBusyError      a write made without waiting found another one
    │   ├── ReadOnlyDatabaseError    file or directory not writable
    │   ├── DiskFullError            no space left
    │   └── DatabaseClosedError      used after close()
    ├── MessageEncodeError           a message could not become a row
    ├── SearchQueryError             a search query could not run
    ├── SessionNotFoundError         unknown session id
    ├── MessageNotFoundError         no such message in the session (also a ValueError)
    ├── InvalidImportError           an import_sessions batch refused whole (also a ValueError)
    ├── InvalidTitleError            a session title too long to keep (also a ValueError)
    │   └── TitleInUseError          another session has that title
    ├── TopicAlreadyLinkedError      the session has another Telegram topic (also a ValueError)
    └── ConfigError                  bad config.yaml / environment / flags
        └── InvalidSettingError      a setting's value fails its section's own check

Every message names the file or session and says what to do.
"""

from hermes._core import (
    ConfigError,
    CorruptDatabaseError,
    DatabaseClosedError,
    DatabaseLockedError,
    DiskFullError,
    HermesError,
    MessageEncodeError,
    NotADatabaseError,
    ReadOnlyDatabaseError,
    SearchQueryError,
    SessionNotFoundError,
    StateDbError,
    WriterBusyError,
)

__all__ = [
    "ConfigError",
    "InvalidSettingError",
    "CorruptDatabaseError",
    "DatabaseClosedError",
    "DatabaseLockedError",
    "DiskFullError",
    "HermesError",
    "InvalidImportError",
    "MessageNotFoundError",
    "InvalidTitleError",
    "MessageEncodeError",
    "NotADatabaseError",
    "ReadOnlyDatabaseError",
    "SearchQueryError",
    "SessionNotFoundError",
    "StateDbError",
    "TitleInUseError",
    "TopicAlreadyLinkedError",
    "WriterBusyError",
]


class InvalidSettingError(ConfigError):
    """A setting's value fails the check of the settings object it belongs to (a range, a
    choice). ``key`` names the setting within that object, so that the configuration loader
    can say where the value came from (the file or an environment variable)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class MessageNotFoundError(HermesError, ValueError):
    """The message id is not in the session, or is not the kind of message asked for."""


class InvalidImportError(HermesError, ValueError):
    """An ``import_sessions`` batch that is refused whole before anything is written (not a
    list, too many sessions). A ``ValueError`` too, as hermes-agent raises."""


class InvalidTitleError(HermesError, ValueError):
    """A session title that cannot be kept (too long once cleaned). A ``ValueError`` too, as
    hermes-agent raises one."""


class TitleInUseError(InvalidTitleError):
    """Another session already has the title: titles are unique (``holder`` has it)."""

    def __init__(self, title: str, session_id: str, holder: str) -> None:
        super().__init__(
            f"Title {title!r} is already in use by session {holder}; choose another title "
            f"for session {session_id} (or rename {holder} first)"
        )
        self.title = title
        self.holder = holder


class TopicAlreadyLinkedError(HermesError, ValueError):
    """A session is bound to one Telegram topic at a time, and this one already has another
    (``chat_id``, ``thread_id``). A ``ValueError`` too, as hermes-agent raises one."""

    def __init__(self, session_id: str, chat_id: str, thread_id: str) -> None:
        super().__init__(
            f"session {session_id!r} is already linked to another Telegram topic (chat "
            f"{chat_id}, thread {thread_id}); unbind that topic first "
            "(delete_telegram_topic_binding) or bind a new session to this topic"
        )
        self.session_id = session_id
        self.chat_id = chat_id
        self.thread_id = thread_id
