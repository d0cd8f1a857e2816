"""Where hermes keeps its files. Resolved on every call, never at import."""

from __future__ import annotations

import os
from pathlib import Path


def hermes_home() -> Path:
    """``$HERMES_HOME``, or ``~/.hermes`` when it is unset or empty."""
    configured = os.environ.get("HERMES_HOME", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".hermes"


def state_db_path() -> Path:
    """The default session database: ``$HERMES_HOME/state.db``."""
    return hermes_home() / "state.db"


def recovery_dir() -> Path:
    """Where unwritten messages are spooled after repeated flush failures."""
    return hermes_home() / "sessions"


def chat_history_path() -> Path:
    """The lines typed into ``hermes chat``, for the Up arrow of the next chat."""
    return hermes_home() / "chat_history"
