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
from hermes.cli.configuration import open_db, store_location
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
        "repair", help="mend a damaged state.db: a malformed schema, a broken search index",
        description="Looks first (the schema read, PRAGMA integrity_check, a search), copies "
                    "the file (state.db.bak-TIME, unless --no-backup), then mends what it "
                    "found, least destructive first: the search index rebuilt from the "
                    "messages; a definition the schema holds twice removed; the search index "
                    "dropped and built again. No session or message changes. Damage in the "
                    "sessions or messages themselves is beyond it: restore a backup. Run it "
                    "when the gateway is stopped.")
    repair.add_argument("--check-only", action="store_true",
                        help="only say what is wrong, changing nothing (exit status 1 if "
                             "anything is)")
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
    location = store_location(args)
    if not isinstance(location, Path):
        raise CommandError(_file_only("repair", location))
    if not location.exists():
        raise CommandError(f"no session database at {location}; nothing to repair")
    with progress("checking (schema, integrity, search)"):
        problems = _problems(location)
    if args.check_only:
        if args.json:
            print_json({"database": str(location), "healthy": not problems,
                        "problems": problems})
        elif problems:
            print_text(f"{location}: {'; '.join(problems)}",
                       "`hermes sessions repair` mends it (a copy of the file is made first)")
        else:
            print_text(f"{location}: its schema reads, its pages and indexes check out, and "
                       "its search index answers")
        return 1 if problems else 0
    backup = None if args.no_backup else _backup(location)
    restore = f"restore the copy made first, {backup}" if backup else "restore a backup"
    try:
        with progress("repairing"):
            mended, rebuilt = _mend(location, problems)
    except StateDbError as exc:
        raise CommandError(f"{exc}; {restore}") from None
    with progress("checking again"):
        left = _problems(location)
    if left:
        raise CommandError(f"{location} is still damaged after the repair: {'; '.join(left)}; "
                           f"{restore}")
    if args.json:
        print_json({"database": str(location), "problems_before": problems, "mended": mended,
                    "search_indexes_rebuilt": rebuilt,
                    "backup": str(backup) if backup else None})
        return 0
    print_text(*([f"copied the file first to {backup}"] if backup else []),
               *([f"found: {'; '.join(problems)}"] if problems else ["found nothing wrong"]),
               *([_MENDED[mended]] if mended in _MENDED else []),
               f"rebuilt {rebuilt} search index(es) from the messages; {location} checks out")
    return 0


_MENDED = {
    "duplicates_removed": "removed the definitions the schema held twice (the search index "
                          "kept)",
    "search_index_dropped": "dropped the search index's tables, to build them again from the "
                            "messages",
}


def _mend(path: Path, problems: list[str]) -> tuple[str, int]:
    """Mends what was found, least destructive first: the search index rebuilt in place; if
    the store cannot open the file or that was not enough, its schema mended (``mend_schema``)
    and the index rebuilt again. Returns what did it (``nothing`` was wrong,
    ``search_index_rebuilt``, ``duplicates_removed``, ``search_index_dropped``) and how many
    search indexes were rebuilt."""
    from hermes.state import mend_schema

    if not problems:
        return "nothing", _rebuild_search_index(path)
    try:
        rebuilt = _rebuild_search_index(path)
        if not _problems(path):
            return "search_index_rebuilt", rebuilt
    except StateDbError:
        pass  # a schema SQLite cannot read: no store opens the file
    how = mend_schema(path)
    return how, _rebuild_search_index(path)


def _rebuild_search_index(path: Path) -> int:
    from hermes.state import SessionDB

    with SessionDB(path) as db:
        return db.rebuild_fts()


def _problems(path: Path) -> list[str]:
    """What is wrong with the file: what SQLite finds (its schema, PRAGMA integrity_check),
    else why a search fails on it; empty when nothing is."""
    from hermes.state import SessionDB, file_problems

    found = file_problems(path)
    if found:
        return found
    with SessionDB(path) as db:
        try:
            db.search_messages("hermes", limit=1)
        except StateDbError as exc:
            return [str(exc)]
    return []


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
    raise CommandError(_file_only(command, db.db_path))


def _file_only(command: str, server: object) -> str:
    return (f"`hermes sessions {command}` works on a state.db file, and {server} is a "
            "PostgreSQL server; use the server's own tools (VACUUM, REINDEX) there")


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"
