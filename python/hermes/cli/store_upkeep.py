"""``hermes sessions stats | optimize``: what the store holds, and compacting it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from hermes.cli.arguments import Commands, add_db_flag, add_json_flag
from hermes.cli.configuration import open_db
from hermes.cli.output import print_json, print_text, progress

# Sources counted one by one in `stats`: ours, and those hermes-agent writes to the same file.
_SOURCES = ("local", "api_server", "telegram", "discord", "whatsapp", "slack", "signal",
            "mattermost", "matrix", "homeassistant", "email", "sms", "webhook", "cli", "cron",
            "tool")


def add_commands(commands: Commands) -> None:
    stats = commands.add_parser("stats", help="how many sessions and messages, by platform")
    add_json_flag(stats)
    add_db_flag(stats)
    stats.set_defaults(handler=show_stats)

    optimize = commands.add_parser(
        "optimize", help="give the space of deleted rows back to the disk (VACUUM)",
        description="Changes no session or message. Takes the write lock for as long as "
                    "it runs: other writers wait (run it when the gateway is quiet).")
    add_json_flag(optimize)
    add_db_flag(optimize)
    optimize.set_defaults(handler=optimize_store)


def show_stats(args: argparse.Namespace) -> int:
    with open_db(args) as db, progress("counting sessions"):
        stats: dict[str, Any] = {
            "database": str(db.db_path),
            "sessions": db.session_count(include_archived=True),
            "archived": db.session_count(archived_only=True),
            "messages": db.message_count(),
            "by_source": {source: count for source in _SOURCES
                          if (count := db.session_count(source=source, include_archived=True))},
            "database_bytes": _size(db.db_path),
        }
    if args.json:
        print_json(stats)
        return 0
    print_text(f"database: {stats['database']} ({_megabytes(stats['database_bytes'])})",
               f"sessions: {stats['sessions']} ({stats['archived']} archived)",
               f"messages: {stats['messages']}",
               *(f"  {source}: {count} sessions" for source, count in stats["by_source"].items()))
    return 0


def optimize_store(args: argparse.Namespace) -> int:
    with open_db(args) as db:
        before = _size(db.db_path)
        with progress("optimizing (VACUUM)"):
            merged = db.vacuum()
        after = _size(db.db_path)
    if args.json:
        print_json({"search_indexes_merged": merged, "bytes_before": before,
                    "bytes_after": after})
        return 0
    print_text(f"merged {merged} search index(es); {_megabytes(before)} -> "
               f"{_megabytes(after)} (reclaimed {_megabytes(max(before - after, 0))})")
    return 0


def _size(path: Path) -> int:
    """The database's bytes on disk, its write-ahead log included."""
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"
