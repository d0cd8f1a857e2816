"""``hermes sessions export``: one session, the sessions filters match, or every session, as
JSONL, Markdown, Quarto Markdown, HTML or an agent trace, with hermes-agent 0.19.0's options.

What is exported:

* ``ID`` (or ``--session-id ID``, hermes-agent's spelling): that session, found by id, title,
  chat id or session key;
* filters (``--older-than``, ``--source``, ... as ``prune`` takes them): the ended sessions
  they match, archived ones included, oldest first, as hermes-agent's export;
* neither: every session, newest first.

One session's JSONL is its conversation, one message a line; several sessions' JSONL is one
session a line with every column and message (hermes-agent's export form, which
``SessionDB.import_sessions`` reads back). Every other format is one document for any number
of sessions, except a trace of several sessions: one ``<id>.trace.jsonl`` a session, written
into the directory ``-o`` names (default ``$HERMES_HOME/session-exports``), as hermes-agent's.
A file written is created 0600, as private as ``state.db``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from hermes.cli import session_filters
from hermes.cli.arguments import Commands, add_db_flag
from hermes.cli.configuration import open_db
from hermes.cli.failures import CommandError, UsageError, describe_os_error
from hermes.cli.output import ProgressDisplay, plural, private_file, progress
from hermes.cli.transcripts import (
    Format,
    Markdown,
    MessageLines,
    PromptLines,
    PromptMarkdown,
    SessionLines,
    Transcript,
)
from hermes.errors import SessionNotFoundError
from hermes.paths import hermes_home

if TYPE_CHECKING:
    from hermes.state import SessionDB

FORMATS = ("jsonl", "md", "qmd", "html", "trace")
# Sessions read a query while listing every session.
_PAGE = 1000
# The columns of a session a selection keeps before its transcript is read.
_LISTED_COLUMNS = ("id", "source", "title", "model", "started_at", "ended_at",
                   "message_count", "archived")


def add_commands(commands: Commands) -> None:
    export = commands.add_parser(
        "export", help="write sessions as JSONL, Markdown, Quarto Markdown, HTML or a trace",
        description="One session (ID or --session-id), the ended sessions filters match "
                    "(archived ones too), or every session. JSONL of one session: a message a "
                    "line; of several: a session a line, hermes-agent's export form, which "
                    "import reads back. A trace of several sessions is a file each in the "
                    "directory -o names.")
    export.add_argument("id", nargs="?", help="session id (an api_server answer's "
                        "X-Hermes-Session-Id) or title, chat id or session key")
    export.add_argument("--session-id", metavar="ID", help="the same as ID (hermes-agent's "
                        "spelling)")
    export.add_argument("--format", choices=FORMATS, default="jsonl",
                        help="jsonl (default), md, qmd (Quarto Markdown), html (one "
                             "self-contained page), trace (Claude Code JSONL, for agent "
                             "trace viewers; secrets redacted unless --no-redact)")
    export.add_argument("-o", "--output", type=Path,
                        help="file to write, created mode 0600 (default, or -: stdout); for a "
                             "trace of several sessions, a directory (default "
                             "$HERMES_HOME/session-exports)")
    export.add_argument("--only", choices=("user-prompts",),
                        help="only what the user wrote: a prompt a line (jsonl) or a heading "
                             "a prompt (md)")
    export.add_argument("--redact", action="store_true",
                        help="replace secrets (API keys, tokens, passwords, private keys) "
                             "by [REDACTED]")
    export.add_argument("--no-redact", action="store_true",
                        help="trace only: keep secrets (a trace is redacted by default)")
    export.add_argument("--lineage", choices=("single", "logical"), default="single",
                        help="logical: a compressed conversation as one session, all its "
                             "segments in order (default: single, each session alone)")
    export.add_argument("--force", action="store_true",
                        help="trace of several sessions: overwrite files already in the "
                             "directory (default: keep them, and say so)")
    session_filters.add_filter_flags(
        export, "only sessions started more than AGE ago (5h, 2d, 1w, a number of days, or "
                "a date)", asks=False)
    add_db_flag(export)
    export.set_defaults(handler=export_sessions)


def export_sessions(args: argparse.Namespace) -> int:
    ident = _ident(args)
    filtered = session_filters.has_filters(args)
    if ident is not None and filtered:
        raise UsageError("export takes one session (ID) or filters, not both; drop one")
    chosen = _format(args)
    with open_db(args) as db:
        if ident is not None:
            selection = [_find(db, ident)]
            what = f"session {selection[0]['id']}"
        elif filtered:
            filters = session_filters.store_filters(args)
            filters["archived"] = None  # unlike prune and archive, export includes them
            what = session_filters.describe(filters)
            with progress("finding sessions"):
                selection = db.list_prune_candidates(**filters)
        else:
            what = "every session"
            with progress("listing sessions") as bar:
                selection = _every_session(db, bar)
        if args.dry_run:
            session_filters.print_matches(
                selection, f"{plural(len(selection), 'session')} would be exported ({what})",
                limit=None)
            return 0
        if not selection:
            # On stderr: stdout may be the file a script reads the export from.
            found = f"match ({what})" if filtered else "are stored"
            print(f"no sessions {found}; nothing exported", file=sys.stderr)
            return 0
        several = ident is None
        if several and args.format == "trace":
            _export_to_directory(db, args, chosen, selection)
        else:
            _export_to_file(db, args, chosen, selection, several=several)
    return 0


def _ident(args: argparse.Namespace) -> str | None:
    given = {name for name in (args.id, args.session_id) if name is not None}
    if len(given) > 1:
        raise UsageError(f"ID {args.id!r} and --session-id {args.session_id!r} name two "
                         "sessions; give one")
    return given.pop() if given else None


def _format(args: argparse.Namespace) -> Format:
    """The format the flags ask for, or a ``UsageError`` for flags that do not go together."""
    if args.redact and args.no_redact:
        raise UsageError("--redact and --no-redact contradict each other; give one")
    if args.no_redact and args.format != "trace":
        raise UsageError("--no-redact is for --format trace (the only format redacted by "
                         "default); the others keep secrets unless --redact")
    several = args.id is None and args.session_id is None
    if args.only:
        if args.format not in ("jsonl", "md"):
            raise UsageError(f"--only user-prompts writes jsonl or md, not {args.format}")
        return PromptLines() if args.format == "jsonl" else PromptMarkdown()
    if args.force and not (several and args.format == "trace"):
        raise UsageError("--force is for a trace of several sessions, which writes a file a "
                         "session; a single output file is always replaced")
    if args.format == "jsonl":
        return SessionLines() if several else MessageLines()
    if args.format in ("md", "qmd"):
        return Markdown(front_matter=args.format == "qmd")
    # Imported here: every other command loads this module.
    if args.format == "html":
        from hermes.cli.transcript_html import HtmlPage

        return HtmlPage()
    from hermes.cli.transcript_trace import Trace

    return Trace()


def _find(db: SessionDB, ident: str) -> dict[str, Any]:
    from hermes.session_lookup import find_session

    try:
        return find_session(db, ident)
    except SessionNotFoundError as exc:
        # hermes-agent's `export FILE` names the output where ours names the session.
        raise SessionNotFoundError(f"{exc}; to write every session to a file, use -o FILE "
                                   "(ID names a session, not the output)") from None


def _every_session(db: SessionDB, bar: ProgressDisplay) -> list[dict[str, Any]]:
    """Every session, newest first, in the columns a selection keeps."""
    total = db.session_count(include_archived=True)
    seen: set[str] = set()
    found: list[dict[str, Any]] = []
    while page := db.list_sessions(limit=_PAGE, offset=len(found)):
        for row in page:
            if row["id"] not in seen:  # a session started meanwhile shifts the pages
                seen.add(row["id"])
                found.append({key: row.get(key) for key in _LISTED_COLUMNS})
        bar.update(len(found), max(total, len(found)))
        if len(page) < _PAGE:
            break
    return found


def _transcripts(db: SessionDB, args: argparse.Namespace, chosen: Format,
                 selection: Sequence[dict[str, Any]]) -> Iterator[Transcript]:
    """Each selected session's transcript, read when it is its turn (a large export never
    holds more than one); with ``--lineage logical`` a compression chain once, whole."""
    from hermes.cli.redaction import redact

    redacting = args.redact or (args.format == "trace" and not args.no_redact)
    exported: set[str] = set()
    for row in selection:
        if row["id"] in exported:
            continue
        transcript = _read(db, row["id"], logical=args.lineage == "logical",
                           rows=chosen.wants_rows)
        if transcript is None:  # deleted since it was listed
            continue
        exported.update(transcript.session.get("lineage_session_ids") or [row["id"]])
        if redacting:
            session = dict(transcript.session)
            if session.get("system_prompt"):
                session["system_prompt"] = redact(session["system_prompt"])
            transcript = Transcript(session, redact(transcript.messages))
        yield transcript


def _read(db: SessionDB, session_id: str, *, logical: bool, rows: bool) -> Transcript | None:
    if rows:
        data = db.export_session_lineage(session_id) if logical else db.export_session(
            session_id)
        if data is None:
            return None
        messages = data.pop("messages")
        return Transcript(data, messages)
    ids = db.get_compression_lineage(session_id) if logical else [session_id]
    session = db.get_session(ids[-1]) if ids else None
    if session is None:
        return None
    if logical:
        session["lineage_session_ids"] = ids
    return Transcript(session, [message for segment in ids
                                for message in db.get_messages_as_conversation(segment)])


def _export_to_file(db: SessionDB, args: argparse.Namespace, chosen: Format,
                    selection: list[dict[str, Any]], *, several: bool) -> None:
    transcripts = _transcripts(db, args, chosen, selection)
    if several:
        total, unit = len(selection), "session"
    else:
        first = next(transcripts, None)
        if first is None:
            raise CommandError(f"session {selection[0]['id']} was deleted meanwhile; nothing "
                               "exported")
        transcripts = iter([first])
        total, unit = len(first.messages), "message"
    if args.output is None or str(args.output) == "-":
        # A bar on the terminal the export is printed to would be in its way.
        _write(sys.stdout, chosen, selection, transcripts, total, per_message=not several,
               show_progress=not sys.stdout.isatty())
        return
    with private_file(args.output) as out:
        _write(out, chosen, selection, transcripts, total, per_message=not several,
               show_progress=True)
    print(f"wrote {plural(total, unit)} to {args.output}", file=sys.stderr)


def _write(out: IO[str], chosen: Format, selection: Sequence[dict[str, Any]],
           transcripts: Iterator[Transcript], total: int, *, per_message: bool,
           show_progress: bool) -> None:
    """The document: its beginning, each session's pieces, its end. The progress display
    counts messages for one session, sessions for several."""
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(progress("exporting", total=total)) if show_progress else None
        out.write(chosen.begin(selection))
        for index, transcript in enumerate(transcripts):
            for piece in chosen.session(transcript, index):
                out.write(piece)
                if per_message and bar is not None:
                    bar.advance()
            if not per_message and bar is not None:
                bar.advance()
        out.write(chosen.end())


def _export_to_directory(db: SessionDB, args: argparse.Namespace, chosen: Format,
                         selection: list[dict[str, Any]]) -> None:
    """One ``<id>.trace.jsonl`` a session in the directory ``-o`` names."""
    if args.output is not None and str(args.output) == "-":
        raise UsageError("a trace of several sessions is a file each; name a directory with "
                         "-o (or export one session to stdout)")
    folder = args.output if args.output is not None else hermes_home() / "session-exports"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(describe_os_error(exc, "create the directory")) from None
    if not folder.is_dir():
        raise CommandError(f"{folder} is a file, and a trace of several sessions is written "
                           "into a directory; name a directory with -o")
    written = kept = 0
    names: set[str] = set()
    with progress("exporting", total=len(selection)) as bar:
        for transcript in _transcripts(db, args, chosen, selection):
            name = _file_name(transcript.session["id"])
            while name in names:  # two ids that differ only in characters made "_"
                name += "_"
            names.add(name)
            target = folder / f"{name}.trace.jsonl"
            if target.exists() and not args.force:
                kept += 1
            else:
                with private_file(target) as out:
                    out.writelines(chosen.session(transcript, 0))
                written += 1
            bar.advance()
    note = f"; kept {plural(kept, 'file')} already there (--force replaces them)" if kept else ""
    print(f"wrote {plural(written, 'session trace')} to {folder}{note}", file=sys.stderr)


def _file_name(session_id: str) -> str:
    """A session id as a file name: letters, digits, ``.``, ``-`` and ``_`` as they are,
    anything else (a ``/`` above all) as ``_``."""
    safe = "".join(char if char.isascii() and (char.isalnum() or char in "._-") else "_"
                   for char in session_id)
    return safe.lstrip(".") or "session"
