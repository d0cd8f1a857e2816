"""Where hermes keeps its files. Resolved on every call, never at import."""

from __future__ import annotations

import os
import re
from pathlib import Path

#: ``scheme://...`` as RFC 3986 spells a scheme (the Rust core reads locations by the same rule).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def hermes_home() -> Path:
    """``$HERMES_HOME``, or ``~/.hermes`` when it is unset or empty."""
    configured = os.environ.get("HERMES_HOME", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".hermes"


def state_db_path() -> Path:
    """The default session database: ``$HERMES_HOME/state.db``."""
    return hermes_home() / "state.db"


def is_database_url(location: str | Path) -> bool:
    """Whether ``location`` names a database server (``postgresql://...``) rather than a file.
    Such a location stays a string: ``Path`` would fold its ``//``."""
    return isinstance(location, str) and _URL.match(location) is not None


def store_exists(location: str | Path | None) -> bool:
    """Whether a store is there to read: a file that exists, or any server URL (its server
    says when it has no store)."""
    return location is not None and (is_database_url(location) or Path(location).exists())


def shown_location(location: str | Path) -> str:
    """``location`` for messages: a server URL without the password of its user info (the
    rule of the core's ``Store.location``)."""
    text = str(location)
    if not is_database_url(location):
        return text
    scheme, rest = text.split("://", 1)
    authority_end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:authority_end], rest[authority_end:]
    user_info, at, host = authority.rpartition("@")
    if not at:
        return text
    return f"{scheme}://{user_info.partition(':')[0]}@{host}{tail}"


def recovery_dir() -> Path:
    """Where unwritten messages are spooled after repeated flush failures."""
    return hermes_home() / "sessions"


def chat_history_path() -> Path:
    """The lines typed into ``hermes chat``, for the Up arrow of the next chat."""
    return hermes_home() / "chat_history"
