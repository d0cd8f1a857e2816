"""How complete a ``state.db``'s search indexes are, read with the stdlib's SQLite while no
worker has the file open (two SQLite copies must not share an open file)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any


def index_state(path: Path, tables: tuple[str, ...] = ("messages_fts",), token: str = "") -> dict[str, Any]:
    """Rows in ``messages``, in each search index, and still pending (our
    deferred indexing), plus the hits for ``token``, a word of the last
    message written; ``complete`` when every row is in every index."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        def count(sql: str, *args: Any) -> int:
            return int(conn.execute(sql, args).fetchone()[0])

        out: dict[str, Any] = {"messages": count("SELECT COUNT(*) FROM messages")}
        for table in tables:  # its size table holds one row per indexed message
            out[table] = count(f"SELECT COUNT(*) FROM {table}_docsize")
        has_pending = count("SELECT COUNT(*) FROM sqlite_master WHERE name = 'hermes_fts_pending'")
        out["pending_ranges"] = count("SELECT COUNT(*) FROM hermes_fts_pending") if has_pending else 0
        if token:
            out["token_hits"] = count("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH ?", token)
    finally:
        conn.close()
    out["complete"] = (
        all(out[t] == out["messages"] for t in tables) and out["pending_ranges"] == 0
        and out.get("token_hits", 1) == 1
    )
    return out
