"""``hermes sessions``: the stored conversations, read and exported from the command line.

``show`` and ``export`` take a session id (for an api_server conversation, the
``X-Hermes-Session-Id`` its answers carried) or title, or a chat's conversation id or session
key, and then pick that conversation's newest session. Option names follow hermes-agent's ``hermes sessions``.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from hermes.cli import browse, pruning, session_export, session_import, store_upkeep, transcripts
from hermes.cli.arguments import Commands, add_db_flag, add_json_flag, count
from hermes.cli.configuration import open_db, store_location
from hermes.cli.output import (
    Column,
    console,
    plural,
    print_json,
    print_table,
    print_text,
    progress,
    when,
)
from hermes.paths import store_exists

if TYPE_CHECKING:
    from rich.text import Text

_IDENT_HELP = ("session id (an api_server answer's X-Hermes-Session-Id) or title, chat id "
               "or session key")


def add_commands(commands: Commands) -> None:
    sessions = commands.add_parser("sessions", help="inspect stored conversations")
    sessions.set_defaults(help_parser=sessions)
    session_commands = sessions.add_subparsers(title="commands", metavar="COMMAND")

    listing = session_commands.add_parser(
        "list", help="newest sessions first",
        description="Archived sessions, sub-agent runs and compression continuations are "
                    "hidden, and so are other tools' sessions (source tool) unless --source "
                    "names one.")
    listing.add_argument("--source", help="only this platform (api_server, local, ...)")
    listing.add_argument("--workspace", metavar="NEEDLE",
                         help="only sessions of one workspace: its git repo root (else its "
                              "working directory) contains NEEDLE, e.g. a repo's name")
    listing.add_argument("--limit", type=count, default=20, help="how many (default 20)")
    add_json_flag(listing)
    add_db_flag(listing)
    listing.set_defaults(handler=list_sessions)

    show = session_commands.add_parser("show", help="print a whole transcript")
    show.add_argument("id", help=_IDENT_HELP)
    add_json_flag(show)
    add_db_flag(show)
    show.set_defaults(handler=show_session)

    search = session_commands.add_parser(
        "search", help="full-text search over messages",
        description='FTS5 syntax: words, "phrases", OR, NOT, prefix*.')
    search.add_argument("query")
    search.add_argument("--source", help="only this platform")
    search.add_argument("--session", help="only this session id")
    search.add_argument("--limit", type=count, default=20, help="how many hits (default 20)")
    add_json_flag(search)
    add_db_flag(search)
    search.set_defaults(handler=search_messages)

    recover = session_commands.add_parser(
        "recover", help="import messages spooled while the database was failing",
        description="Re-imports $HERMES_HOME/sessions/*.recovery.jsonl; running it again "
                    "writes nothing twice.")
    add_db_flag(recover)
    recover.set_defaults(handler=recover_spools)

    rename = session_commands.add_parser("rename", help="set or change a session's title")
    rename.add_argument("id", help=_IDENT_HELP)
    rename.add_argument("title", nargs="+", help="the new title (words are joined by spaces)")
    add_db_flag(rename)
    rename.set_defaults(handler=rename_session)

    session_export.add_commands(session_commands)
    session_import.add_commands(session_commands)
    pruning.add_commands(session_commands)
    store_upkeep.add_commands(session_commands)
    browse.add_commands(session_commands)


def list_sessions(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    # No database yet (a new $HERMES_HOME): nothing is stored, and a reading command creates
    # no file.
    if store_exists(store_location(args)):
        with open_db(args) as db, progress("reading sessions"):
            # As hermes-agent lists them: archived sessions, sub-agent runs and compression
            # continuations hidden (a compressed conversation is one row), and other tools'.
            rows = db.list_sessions_rich(
                source=args.source, exclude_sources=None if args.source else ["tool"],
                workspace=args.workspace, limit=args.limit, compact_rows=True)
    if args.json:
        print_json(rows)
        return 0
    columns = [Column("id", is_id=True), Column("title"), Column("source"),
               Column("chat"), Column("started"), Column("messages"),
               Column("ended")]
    # A workspace column only where some session has one (or one was asked for).
    workspaces = [_workspace_name(row) for row in rows]
    with_workspace = bool(args.workspace) or any(workspaces)
    if with_workspace:
        columns.insert(2, Column("workspace"))
    print_table(f"{plural(len(rows), 'session')} (newest first)", columns, [
        [row["id"], row.get("title") or "",
         *([workspace] if with_workspace else []), row.get("source") or "",
         str(row.get("chat_id") or row.get("display_name") or ""), when(row.get("started_at")),
         str(row.get("message_count") or 0), row.get("end_reason") or ""]
        for row, workspace in zip(rows, workspaces)])
    return 0


def _workspace_name(row: dict[str, Any]) -> str:
    """The session's workspace as the list shows it: the folder name of its git repo root,
    else of its working directory ("" when it has neither)."""
    where = (row.get("git_repo_root") or "").strip() or (row.get("cwd") or "").strip()
    return os.path.basename(where.rstrip("/\\")) or where


def show_session(args: argparse.Namespace) -> int:
    from hermes.session_lookup import find_session

    with open_db(args) as db:
        session = find_session(db, args.id)
        messages = db.get_messages_as_conversation(session["id"])
    if args.json:
        print_json({"session": session, "messages": messages})
        return 0
    from rich.text import Text

    print_text(Text(f"session {session['id']}", style="bold"),
               *(Text(f"  {key}: {value}", style="dim")
                 for key, value in transcripts.heading(session)))
    out = console()
    for message in messages:
        out.print()
        out.print(transcripts.message_text(message))
    return 0


def search_messages(args: argparse.Namespace) -> int:
    with open_db(args) as db, progress("searching"):
        sources = [args.source] if args.source else None
        hits = db.search_messages(args.query, source_filter=sources, limit=args.limit,
                                  session_id=args.session)
    if args.json:
        print_json(hits)
        return 0
    columns = [Column("session", is_id=True), Column("source"), Column("role"),
               Column("when"), Column("match")]
    print_table(f"{plural(len(hits), 'match', 'matches')} for {args.query!r}", columns, [
        [hit.get("session_id") or "", hit.get("source") or "", hit.get("role") or "",
         when(hit.get("timestamp")), _highlight(str(hit.get("snippet") or hit.get("content")
                                                    or ""))]
        for hit in hits])
    return 0


def _highlight(snippet: str) -> Text:
    """The store marks matches as >>>word<<<; show them bold instead."""
    from rich.text import Text

    text = Text()
    for index, piece in enumerate(snippet.replace("<<<", ">>>").split(">>>")):
        text.append(piece, style="bold reverse" if index % 2 else "")
    return text


def rename_session(args: argparse.Namespace) -> int:
    from hermes.session_lookup import find_session

    title = " ".join(" ".join(args.title).split())
    with open_db(args) as db:
        session = find_session(db, args.id)
        # A title another session has, or one too long, is a ValueError saying so.
        db.set_session_title(session["id"], title)
    print_text(f"session {session['id']} is now titled {title!r}")
    return 0


def recover_spools(args: argparse.Namespace) -> int:
    from hermes.recovery import recover_all

    with open_db(args) as db, progress("recovering") as bar:
        report = recover_all(db, progress=bar.update)
    if not report.imported and not report.failed:
        print_text("nothing to recover: no spooled messages")
        return 0
    print_text(*(f"imported {written} messages from {path}"
                 for path, written in report.imported.items()),
               *(f"could not import {path}: {reason}" for path, reason in report.failed.items()),
               f"{report.written} messages recovered, {len(report.failed)} files failed")
    return 1 if report.failed else 0
