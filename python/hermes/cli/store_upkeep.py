"""``hermes sessions stats | optimize | repair``: what the store holds, compacting it, and
mending its search index."""

from __future__ import annotations

import argparse
import os
import shutil
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes.cli.arguments import Commands, add_db_flag, add_json_flag
from hermes.cli.configuration import open_db
from hermes.cli.failures import CommandError
from hermes.cli.output import print_json, print_text, progress
from hermes.errors import StateDbError

if TYPE_CHECKING:
    from hermes.state import SessionDB

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
        "optimize", help="merge the search index, then give the space of deleted rows back "
                         "to the disk (VACUUM)",
        description="Changes no session or message. Takes the write lock for as long as "
                    "it runs: other writers wait (run it when the gateway is quiet).")
    add_json_flag(optimize)
    add_db_flag(optimize)
    optimize.set_defaults(handler=optimize_store)

    repair = commands.add_parser(
        "repair", help="rebuild the search index from the messages (when searches or writes "
                       "fail on it)",
        description="Copies the file first (state.db.bak-TIME, unless --no-backup), then "
                    "indexes every message afresh from the messages themselves; no session or "
                    "message changes. A file that cannot be opened at all is beyond it: "
                    "restore a backup. Run it when the gateway is stopped.")
    repair.add_argument("--check-only", action="store_true",
                        help="only say whether the file opens and its search index answers "
                             "(exit status 1 if not)")
    repair.add_argument("--no-backup", action="store_true",
                        help="skip the copy made first (not recommended)")
    add_json_flag(repair)
    add_db_flag(repair)
    repair.set_defaults(handler=repair_store)


def show_stats(args: argparse.Namespace) -> int:
    with open_db(args) as db, progress("counting sessions"):
        stats: dict[str, Any] = {
            "database": str(db.db_path),
            "sessions": db.session_count(include_archived=True),
            "archived": db.session_count(archived_only=True),
            "messages": db.message_count(),
            "by_source": {source: count for source in _SOURCES
                          if (count := db.session_count(source=source, include_archived=True))},
            # A PostgreSQL store has no file to measure.
            "database_bytes": _size(db.db_path) if isinstance(db.db_path, Path) else None,
        }
    if args.json:
        print_json(stats)
        return 0
    size = stats["database_bytes"]
    where = stats["database"] + (f" ({_megabytes(size)})" if size is not None else "")
    print_text(f"database: {where}",
               f"sessions: {stats['sessions']} ({stats['archived']} archived)",
               f"messages: {stats['messages']}",
               *(f"  {source}: {count} sessions" for source, count in stats["by_source"].items()))
    return 0


def optimize_store(args: argparse.Namespace) -> int:
    with open_db(args) as db:
        path = _file(db, "optimize")
        before = _size(path)
        with progress("optimizing (search index merge, VACUUM)"):
            merged = db.optimize_fts()
            db.vacuum()
        after = _size(path)
    if args.json:
        print_json({"search_indexes_merged": merged, "bytes_before": before,
                    "bytes_after": after})
        return 0
    print_text(f"merged {merged} search index(es); {_megabytes(before)} -> "
               f"{_megabytes(after)} (reclaimed {_megabytes(max(before - after, 0))})")
    return 0


def repair_store(args: argparse.Namespace) -> int:
    with open_db(args) as db:
        with progress("checking"):
            problem = _search_index_problem(db)
        if args.check_only:
            if args.json:
                print_json({"database": str(db.db_path), "healthy": problem is None,
                            "problem": problem})
            else:
                print_text(f"{db.db_path} opens, and its search index answers" if problem is None
                           else f"{db.db_path}: {problem}; `hermes sessions repair` rebuilds "
                                "the search index")
            return 0 if problem is None else 1
        backup = None if args.no_backup else _backup(_file(db, "repair"))
        with progress("rebuilding the search index"):
            rebuilt = db.rebuild_fts()
        after = _search_index_problem(db)
    if after is not None:
        advice = f"restore the copy made first, {backup}" if backup else "restore a backup"
        raise CommandError(f"the search index still fails after its rebuild: {after}; "
                           f"{advice}")
    if args.json:
        print_json({"problem_before": problem, "search_indexes_rebuilt": rebuilt,
                    "backup": str(backup) if backup else None})
        return 0
    print_text(*([f"copied the file first to {backup}"] if backup else []),
               f"rebuilt {rebuilt} search index(es) from the messages"
               + (f" (before: {problem})" if problem else " (it was healthy)"))
    return 0


def _search_index_problem(db: SessionDB) -> str | None:
    """Why a search fails on the store, or ``None`` when one answers."""
    try:
        db.search_messages("hermes", limit=1)
    except StateDbError as exc:
        return str(exc)
    return None


def _backup(path: Path) -> Path:
    """A copy of the database (and its write-ahead log) beside it, mode 0600 like it."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.bak-{stamp}")
    for source, copy in ((path, target), (Path(f"{path}-wal"), Path(f"{target}-wal"))):
        if source.exists():
            try:
                shutil.copyfile(source, copy)
                copy.chmod(0o600)
            except OSError as exc:
                raise CommandError(f"cannot copy {source} to {copy} before the repair: "
                                   f"{exc.strerror or exc}; free some space, or pass "
                                   "--no-backup") from None
    return target


def _size(path: Path) -> int:
    """The database's bytes on disk, its write-ahead log included."""
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


def _file(db: SessionDB, command: str) -> Path:
    """The store's file: ``command`` works on a state.db file, not on a PostgreSQL server."""
    if isinstance(db.db_path, Path):
        return db.db_path
    raise CommandError(f"`hermes sessions {command}` works on a state.db file, and "
                       f"{db.db_path} is a PostgreSQL server; use the server's own tools "
                       "(VACUUM, REINDEX) there")


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"
