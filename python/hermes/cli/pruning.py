"""``hermes sessions delete | prune | archive``: removing or hiding stored sessions.

Each asks first (``confirmation``), shows what it will touch, and offers ``--dry-run``. Only
ended sessions are ever pruned or archived, so a running conversation is never touched; a
bare ``prune`` means ``--older-than 90`` as in hermes-agent, and any filter replaces that
default. Archived sessions stay in ``state.db``, hidden from listings; prune skips them
unless ``--include-archived``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hermes.cli import session_filters
from hermes.cli.arguments import Commands, add_db_flag, add_json_flag
from hermes.cli.configuration import open_db
from hermes.cli.confirmation import confirm
from hermes.cli.failures import UsageError
from hermes.cli.output import plural, print_json, print_text, progress, when
from hermes.paths import hermes_home

# Sessions listed before the question (a dry run lists them all).
_PREVIEW = 15
_IDENT_HELP = "session id or title, chat id or session key"


def add_commands(commands: Commands) -> None:
    delete = commands.add_parser("delete", help="delete one session and its messages")
    delete.add_argument("id", help=_IDENT_HELP)
    delete.add_argument("--yes", "-y", action="store_true",
                        help="delete without asking (needed when stdin is not a terminal)")
    add_json_flag(delete)
    add_db_flag(delete)
    delete.set_defaults(handler=delete_session)

    prune = commands.add_parser(
        "prune", help="delete ended sessions that match filters (default: older than 90 days)")
    session_filters.add_filter_flags(
        prune, "delete sessions started more than AGE ago (5h, 2d, 1w; a bare number is days; "
               "or a date). Without any filter: 90")
    prune.add_argument("--include-archived", action="store_true",
                       help="also delete archived sessions (kept by default)")
    add_json_flag(prune)
    add_db_flag(prune)
    prune.set_defaults(handler=prune_sessions)

    archive = commands.add_parser(
        "archive", help="hide ended sessions that match filters (nothing is deleted)")
    session_filters.add_filter_flags(
        archive, "only sessions started more than AGE ago (5h, 2d, 1w, a number of days, or "
                 "a date)")
    add_json_flag(archive)
    add_db_flag(archive)
    archive.set_defaults(handler=archive_sessions)


def delete_session(args: argparse.Namespace) -> int:
    from hermes.session_lookup import find_session

    with open_db(args) as db:
        session = find_session(db, args.id)
        session_id = session["id"]
        confirm(f"Delete session {session_id} and its {plural(_messages(session), 'message')}?",
                action=f"deleting session {session_id}", yes=args.yes)
        deleted = db.delete_session(session_id, sessions_dir=transcript_files())
    if args.json:
        print_json({"deleted": [session_id] if deleted else []})
    else:
        print_text(f"deleted session {session_id}" if deleted
                   else f"session {session_id} was already gone")
    return 0


def prune_sessions(args: argparse.Namespace) -> int:
    if not session_filters.has_filters(args):
        args.older_than = "90"
    filters = session_filters.store_filters(args)
    filters["archived"] = None if args.include_archived else False
    return _change_matching(args, filters, verb="delete", done="deleted")


def archive_sessions(args: argparse.Namespace) -> int:
    if not session_filters.has_filters(args):
        raise UsageError("archive needs at least one filter (e.g. --older-than 30, --source "
                         "telegram); it refuses to hide every ended session at once")
    filters = session_filters.store_filters(args)
    filters["archived"] = False  # only those not archived yet: running it twice is a no-op
    return _change_matching(args, filters, verb="archive", done="archived")


def _change_matching(args: argparse.Namespace, filters: dict[str, Any], *, verb: str,
                     done: str) -> int:
    what = session_filters.describe(filters)
    with open_db(args) as db:
        with progress("finding sessions"):
            candidates = db.list_prune_candidates(**filters)
        if not candidates:
            _report(args, [], 0, f"no sessions match ({what}); nothing {done}")
            return 0
        span = (f"oldest {when(candidates[0].get('started_at'))}, "
                f"newest {when(candidates[-1].get('started_at'))}")
        if args.dry_run:
            _preview(candidates, f"{plural(len(candidates), 'session')} would be {done} "
                                 f"({what}; {span})", limit=None, json=args.json)
            return 0
        if not args.yes and not args.json:
            _preview(candidates, f"{plural(len(candidates), 'session')} match ({what}; {span})",
                     limit=_PREVIEW, json=False)
        these = "this session" if len(candidates) == 1 else f"these {len(candidates)} sessions"
        confirm(f"{verb.capitalize()} {these}?",
                action=f"{verb[:-1]}ing {plural(len(candidates), 'session')}", yes=args.yes)
        with progress(f"{verb[:-1]}ing {plural(len(candidates), 'session')}"):
            if verb == "delete":
                changed = db.prune_sessions(sessions_dir=transcript_files(), **filters)
            else:
                changed = db.archive_sessions(**filters)
    note = "" if verb == "delete" else "; they are hidden from listings, not deleted"
    _report(args, candidates, changed, f"{done} {plural(changed, 'session')}{note}")
    return 0


def _report(args: argparse.Namespace, candidates: list[dict[str, Any]], changed: int,
            line: str) -> None:
    if args.json:
        print_json({"matched": candidates, "changed": changed, "dry_run": False})
    else:
        print_text(line)


def _preview(candidates: list[dict[str, Any]], title: str, *, limit: int | None,
             json: bool) -> None:
    if json:
        print_json({"matched": candidates, "changed": 0, "dry_run": True})
        return
    session_filters.print_matches(candidates, title, limit=limit)


def transcript_files() -> Path:
    """Where hermes-agent keeps a session's transcript files, removed with the session as its
    own CLI does (our recovery spools there are named otherwise and stay)."""
    return hermes_home() / "sessions"


def _messages(session: dict[str, Any]) -> int:
    return int(session.get("message_count") or 0)
