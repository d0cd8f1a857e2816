"""``hermes sessions export``: one session, the sessions filters match, or every session, as
JSONL, Markdown, Quarto Markdown, HTML or an agent trace, with hermes-agent 0.19.0's options.

What is exported:

* ``ID`` (or ``--session-id ID``, hermes-agent's spelling): that session, found by id, title,
  chat id or session key;
* filters (``--older-than``, ``--source``, ... as ``prune`` takes them): the ended sessions
  they match, archived ones included, oldest first, as hermes-agent's export;
* neither: every session, newest first; but a bare ``--format trace`` is the latest session
  by last activity, as hermes-agent's.

Where it goes:

* JSONL, HTML and ``--only user-prompts``: stdout, or the file ``-o`` names; one document for
  any number of sessions. One session's JSONL is its conversation, one message a line;
  several sessions' JSONL is one session a line with every column and message
  (hermes-agent's export form, which ``SessionDB.import_sessions`` reads back).
* Markdown and Quarto Markdown: a file a session, ``<id>-<title>.md`` (``.qmd``), written into
  a directory (``-o DIR``, default ``$HERMES_HOME/session-exports``), each with an entry
  appended to the directory's ``manifest.jsonl`` (hermes-agent's fields: ``session_id``,
  ``lineage_session_ids``, ``path``, ``format``, ``message_count``, ``sha256`` of the file,
  ``exported_at``). One session also goes to ``-o FILE`` (a path that is not a directory and
  does not end in ``/``) or stdout (``-o -``), without a manifest. Each document ends with its
  own checksum, which ``--delete-after-verified`` reads back before it deletes the session.
* A trace: stdout or ``-o FILE`` for one session; ``<id>.trace.jsonl`` a session in a
  directory for several (or one with ``-o DIR``); ``--upload`` sends one to Hugging Face
  instead (``hermes.cli.trace_upload``).

A file already in the directory is kept unless ``--force``; a single output file is replaced.
Files are created 0600 and directories 0700, as private as ``state.db``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
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
    json_line,
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
# What a directory export's files are called, by format.
_FILE_KINDS = {"md": "Markdown file", "qmd": "Quarto Markdown file", "trace": "session trace"}
_MANIFEST = "manifest.jsonl"


@dataclass(frozen=True)
class _Target:
    """Where an export goes: stdout (``path`` None), one file, or a directory that gets a
    file a session."""

    path: Path | None
    directory: bool = False


def add_commands(commands: Commands) -> None:
    export = commands.add_parser(
        "export", help="write sessions as JSONL, Markdown, Quarto Markdown, HTML or a trace",
        description="One session (ID or --session-id), the ended sessions filters match "
                    "(archived ones too), or every session (a bare --format trace: the latest "
                    "by last activity). JSONL of one session: a message a line; of several: a "
                    "session a line, hermes-agent's export form, which import reads back. "
                    "Markdown and Quarto Markdown are a file a session in a directory, with a "
                    "manifest.jsonl entry each; so is a trace of several sessions.")
    export.add_argument("id", nargs="?", help="session id (an api_server answer's "
                        "X-Hermes-Session-Id) or title, chat id or session key")
    export.add_argument("--session-id", metavar="ID", help="the same as ID (hermes-agent's "
                        "spelling)")
    export.add_argument("--format", choices=FORMATS, default="jsonl",
                        help="jsonl (default), md, qmd (Quarto Markdown), html (one "
                             "self-contained page), trace (Claude Code JSONL, for agent "
                             "trace viewers; secrets redacted unless --no-redact)")
    export.add_argument("-o", "--output", metavar="PATH",
                        help="where to write, files created mode 0600: a file, or - for "
                             "stdout (the default for jsonl, html and a trace of one "
                             "session); for md and qmd, and a trace of several sessions, a "
                             "directory (default $HERMES_HOME/session-exports; one session "
                             "goes to a FILE unless PATH is a directory or ends in /)")
    export.add_argument("--only", choices=("user-prompts",),
                        help="only what the user wrote: a prompt a line (jsonl) or a heading "
                             "a prompt (md), one document")
    export.add_argument("--redact", action="store_true",
                        help="replace secrets (API keys, tokens, passwords, private keys) "
                             "by [REDACTED]")
    export.add_argument("--no-redact", action="store_true",
                        help="trace only: keep secrets (a trace is redacted by default)")
    export.add_argument("--lineage", choices=("single", "logical"), default="single",
                        help="logical: a compressed conversation as one session, all its "
                             "segments in order (default: single, each session alone)")
    export.add_argument("--force", action="store_true",
                        help="export into a directory: replace files already there (default: "
                             "keep them, and say so)")
    export.add_argument("--upload", action="store_true",
                        help="trace of one session: send it to your Hugging Face dataset "
                             "{user}/hermes-traces instead of writing it (HF_TOKEN; pip "
                             "install 'hermes-gateway[upload]')")
    export.add_argument("--public", action="store_true",
                        help="with --upload: create the dataset public (default: private)")
    export.add_argument("--delete-after-verified", action="store_true",
                        help="md or qmd of one session: read the written file back, check it "
                             "against the store, then delete the session (needs --yes)")
    export.add_argument("--yes", "-y", action="store_true",
                        help="go ahead with --delete-after-verified")
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
    latest = ident is None and not filtered and args.format == "trace"
    several = ident is None and not latest
    chosen = _format(args, several=several)
    target = _target(args, several=several)
    _check_actions(args, several=several, target=target)
    token = None
    if args.upload:
        from hermes.cli.trace_upload import check_client, hub_token

        check_client()
        token = hub_token()
    with open_db(args) as db:
        if ident is not None:
            selection = [_find(db, ident)]
            what = f"session {selection[0]['id']}"
        elif latest:
            what = "the latest session by last activity"
            selection = db.list_sessions_rich(limit=1, order_by_last_active=True)
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
            found = (f"match ({what})" if filtered
                     else "are stored (archived ones aside)" if latest else "are stored")
            print(f"no sessions {found}; nothing exported", file=sys.stderr)
            return 0
        if latest:
            print(f"exporting session {selection[0]['id']}, the latest by last activity "
                  "(name another with ID)", file=sys.stderr)
        if token is not None:
            _upload(db, args, chosen, selection[0], token)
            return 0
        report: str | None
        if target.directory:
            written, report = _export_to_directory(db, args, chosen, selection, target)
        else:
            report = _export_to_file(db, args, chosen, selection, target, several=several)
            written = {selection[0]["id"]: target.path} if target.path else {}
        # What was written is said once the session is deleted, if it is to be: a failure
        # is one line (the file stays).
        deleted = (_delete_verified(db, args, chosen, selection[0], written)
                   if args.delete_after_verified else None)
    for said in (report, deleted):
        if said:
            print(said, file=sys.stderr)
    return 0


def _ident(args: argparse.Namespace) -> str | None:
    given = {name for name in (args.id, args.session_id) if name is not None}
    if len(given) > 1:
        raise UsageError(f"ID {args.id!r} and --session-id {args.session_id!r} name two "
                         "sessions; give one")
    return given.pop() if given else None


def _format(args: argparse.Namespace, *, several: bool) -> Format:
    """The format the flags ask for (``several``: for more than one session), or a
    ``UsageError`` for flags that do not go together."""
    if args.redact and args.no_redact:
        raise UsageError("--redact and --no-redact contradict each other; give one")
    if args.no_redact and args.format != "trace":
        raise UsageError("--no-redact is for --format trace (the only format redacted by "
                         "default); the others keep secrets unless --redact")
    if args.only:
        if args.format not in ("jsonl", "md"):
            raise UsageError(f"--only user-prompts writes jsonl or md, not {args.format}")
        return PromptLines() if args.format == "jsonl" else PromptMarkdown()
    if args.format == "jsonl":
        return SessionLines() if several else MessageLines()
    if args.format in ("md", "qmd"):
        return Markdown(front_matter=args.format == "qmd", exported_at=time.time())
    # Imported here: every other command loads this module.
    if args.format == "html":
        from hermes.cli.transcript_html import HtmlPage

        return HtmlPage()
    from hermes.cli.transcript_trace import Trace

    return Trace()


def _target(args: argparse.Namespace, *, several: bool) -> _Target:
    """Where ``-o`` sends the export: a file a session into a directory for Markdown (and
    for a trace of several sessions, or of one with ``-o DIR``), else stdout or one file."""
    output: str | None = args.output
    in_files = args.format in _FILE_KINDS and not args.only and not args.upload
    if in_files and (several or args.format != "trace" and output is None):
        if output == "-":
            raise UsageError(f"{args.format} of several sessions is a file each; name a "
                             "directory with -o (or export one session to stdout with -o -)")
        return _Target(Path(output) if output else hermes_home() / "session-exports",
                       directory=True)
    if output is None or output == "-":
        return _Target(None)
    if in_files and (output.endswith("/") or Path(output).is_dir()):
        return _Target(Path(output), directory=True)
    return _Target(Path(output))


def _check_actions(args: argparse.Namespace, *, several: bool, target: _Target) -> None:
    """A ``UsageError`` for ``--force``, ``--upload`` and ``--delete-after-verified`` where
    they do not apply."""
    if args.force and not target.directory:
        raise UsageError("--force replaces files in an export directory (md, qmd, or a trace "
                         "of several sessions); a single output file is always replaced")
    if args.public and not args.upload:
        raise UsageError("--public is for --upload (an uploaded trace is private otherwise)")
    if args.upload:
        if args.format != "trace" or args.only:
            raise UsageError("--upload sends a session's trace; add --format trace")
        if several:
            raise UsageError("--upload sends one session's trace: name it with ID, or give "
                             "no filters for the latest session")
        if args.output is not None:
            raise UsageError("--upload sends the trace instead of writing it; drop -o")
    if args.delete_after_verified:
        if args.format not in ("md", "qmd") or args.only:
            raise UsageError("--delete-after-verified checks a Markdown export; use --format "
                             "md or qmd")
        if several:
            raise UsageError("--delete-after-verified deletes one session: name it with ID")
        if args.lineage == "logical":
            raise UsageError("--delete-after-verified deletes one session, and --lineage "
                             "logical exports its whole chain; drop --lineage logical")
        if target.path is None:
            raise UsageError("--delete-after-verified reads back the file it wrote; name a "
                             "file or directory with -o, not -")
        if not args.yes:
            raise UsageError("--delete-after-verified deletes the session once its export is "
                             "verified; add --yes to go ahead")


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
    messages = [message for segment in ids
                for message in db.get_messages_as_conversation(segment)]
    if logical:  # the chain's, as the store's export of a lineage counts them
        session.update(lineage_session_ids=ids, message_count=len(messages))
    return Transcript(session, messages)


def _export_to_file(db: SessionDB, args: argparse.Namespace, chosen: Format,
                    selection: list[dict[str, Any]], target: _Target, *,
                    several: bool) -> str | None:
    """Writes the export to stdout or the file; returns what to say of it (None for
    stdout)."""
    transcripts = _transcripts(db, args, chosen, selection)
    if several:
        total, unit = len(selection), "session"
    else:
        first = next(transcripts, None)
        if first is None:
            raise CommandError(f"session {selection[0]['id']} was deleted meanwhile; nothing "
                               "exported")
        selection, transcripts = [first.session], iter([first])
        total, unit = len(first.messages), "message"
    if target.path is None:
        # A bar on the terminal the export is printed to would be in its way.
        _write(sys.stdout, chosen, selection, transcripts, total, per_message=not several,
               show_progress=not sys.stdout.isatty())
        return None
    with private_file(target.path) as out:
        _write(out, chosen, selection, transcripts, total, per_message=not several,
               show_progress=True)
    return f"wrote {plural(total, unit)} to {target.path}"


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


def _document(chosen: Format, transcript: Transcript) -> Iterator[str]:
    """The pieces of one session's own document, as a file a session holds it."""
    yield chosen.begin([transcript.session])
    yield from chosen.session(transcript, 0)
    yield chosen.end()


def _export_to_directory(db: SessionDB, args: argparse.Namespace, chosen: Format,
                         selection: list[dict[str, Any]],
                         target: _Target) -> tuple[dict[str, Path], str]:
    """A file a session in the directory ``target`` names (Markdown: each with an entry in
    its ``manifest.jsonl``); returns the files written, by session id (a kept one is not),
    and what to say of them."""
    assert target.path is not None
    folder = target.path
    kind = _FILE_KINDS[args.format]
    if folder.exists() and not folder.is_dir():
        raise CommandError(f"{folder} is a file, and a {kind} a session is written into a "
                           "directory; name a directory with -o")
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(describe_os_error(exc, "create the directory")) from None
    written: dict[str, Path] = {}
    kept: list[Path] = []
    names: set[str] = set()
    with progress("exporting", total=len(selection)) as bar:
        for transcript in _transcripts(db, args, chosen, selection):
            session = transcript.session
            name = _file_name(session["id"])
            if args.format != "trace":
                name += f"-{_title_slug(session.get('title'))}"
            while name in names:  # two ids that differ only in characters made "_"
                name += "_"
            names.add(name)
            path = folder / (f"{name}.trace.jsonl" if args.format == "trace"
                             else f"{name}.{args.format}")
            if path.exists() and not args.force:
                kept.append(path)
            else:
                with private_file(path) as out:
                    out.writelines(_document(chosen, transcript))
                if isinstance(chosen, Markdown):
                    _add_to_manifest(folder, path, transcript, args.format,
                                     chosen.exported_at)
                written[session["id"]] = path
            bar.advance()
    where = f" ({next(iter(written.values())).name})" if len(written) == 1 else ""
    note = ""
    if len(kept) == 1 and not written:
        note = f"; kept {kept[0]}, already there (--force replaces it)"
    elif kept:
        note = f"; kept {plural(len(kept), 'file')} already there (--force replaces them)"
    return written, f"wrote {plural(len(written), kind)} to {folder}{where}{note}"


def _add_to_manifest(folder: Path, path: Path, transcript: Transcript, fmt: str,
                     exported_at: float) -> None:
    """An entry for ``path`` appended to the directory's ``manifest.jsonl``, in
    hermes-agent's fields, so a script that reads its manifest reads ours."""
    session_id = transcript.session["id"]
    try:
        checksum = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise CommandError(describe_os_error(exc, "read back")) from None
    entry = {"session_id": session_id,
             "lineage_session_ids": transcript.session.get("lineage_session_ids") or [session_id],
             "path": str(path), "format": fmt, "message_count": len(transcript.messages),
             "sha256": checksum, "exported_at": exported_at}
    with private_file(folder / _MANIFEST, append=True) as manifest:
        manifest.write(json_line(dict(sorted(entry.items()))))


def _delete_verified(db: SessionDB, args: argparse.Namespace, chosen: Format,
                     row: dict[str, Any], written: dict[str, Path]) -> str:
    """Session ``row``'s export (in ``written``, by session id) read back and checked
    against the session as stored now; only then the session deleted
    (``--delete-after-verified``). Returns what to say of it."""
    from hermes.cli.export_verification import NotVerified, read_back, verify_export
    from hermes.cli.pruning import transcript_files

    session_id = row["id"]
    path = written.get(session_id)
    if path is None:
        raise CommandError(f"not deleting session {session_id}: its export was kept, not "
                           "written; add --force to export it again and verify that")
    try:
        text = read_back(path)
        # The store read after the file: what is deleted is what was compared last.
        now = next(_transcripts(db, args, chosen, [row]), None)
        if now is None:
            raise CommandError(f"session {session_id} was deleted meanwhile; nothing to "
                               "delete")
        verify_export(text, path, session_id, len(now.messages),
                      "".join(_document(chosen, now)))
    except NotVerified as exc:
        raise CommandError(f"not deleting session {session_id}: {exc}; export it again to "
                           "retry") from None
    if db.delete_session(session_id, sessions_dir=transcript_files()):
        return f"verified {path} and deleted session {session_id}"
    return f"verified {path}; session {session_id} was already gone"


def _upload(db: SessionDB, args: argparse.Namespace, chosen: Format, row: dict[str, Any],
            token: str) -> None:
    from hermes.cli.trace_upload import upload_trace

    transcript = next(_transcripts(db, args, chosen, [row]), None)
    if transcript is None:
        raise CommandError(f"session {row['id']} was deleted meanwhile; nothing uploaded")
    trace = "".join(_document(chosen, transcript))
    if not trace:
        raise CommandError(f"session {row['id']} has no messages to trace; nothing uploaded")
    address = upload_trace(trace, file_name=_file_name(row["id"]), session_id=row["id"],
                           token=token, private=not args.public)
    visibility = "public" if args.public else "private"
    print(f"uploaded the trace of session {row['id']} to {address} (a {visibility} dataset)",
          file=sys.stderr)


def _file_name(session_id: str) -> str:
    """A session id as a file name: letters, digits, ``.``, ``-`` and ``_`` as they are,
    anything else (a ``/`` above all) as ``_``."""
    safe = "".join(char if char.isascii() and (char.isalnum() or char in "._-") else "_"
                   for char in session_id)
    return safe.lstrip(".") or "session"


def _title_slug(title: Any) -> str:
    """A title as a file name's second part, as hermes-agent names its Markdown exports:
    runs of anything but letters, digits, ``.``, ``_`` and ``-`` as one ``-``, lower case,
    60 characters at most."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", str(title or "session")).strip(".-_").lower()
    return slug[:60] or "session"
