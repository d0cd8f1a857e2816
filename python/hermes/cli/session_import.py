"""``hermes sessions import FILE``: sessions back from the JSONL that ``export`` writes of
several sessions (hermes-agent's export form, one session a line), through
``SessionDB.import_sessions``.

Every line is read and parsed before anything is written: a line that is not a JSON object
imports nothing. The sessions then go in batches within ``import_sessions``' limits (500
sessions, 50,000 messages, 25 MiB a call), each batch in one transaction, parents before their
children (an export lists the newest first), with a progress bar by sessions. A session whose
id the store has already is skipped, so running the import again after a failed batch brings
only what is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hermes.cli.arguments import Commands, add_db_flag, add_json_flag
from hermes.cli.configuration import store_location
from hermes.cli.failures import CommandError, describe_os_error
from hermes.cli.output import plural, print_json, progress

# import_sessions' limits per call (hermes.state.export), kept a little under.
_BATCH_SESSIONS = 500
_BATCH_MESSAGES = 50_000
_BATCH_BYTES = 24 * 1024 * 1024


def add_commands(commands: Commands) -> None:
    imports = commands.add_parser(
        "import", help="import sessions from the JSONL that export writes of several sessions",
        description="One session a line, as `hermes sessions export -o FILE` (every session "
                    "or filtered) and hermes-agent's export write them. Sessions the store "
                    "has already are skipped; nothing is imported when a line is not a JSON "
                    "object.")
    imports.add_argument("file", type=Path, help="the JSONL file (- for standard input)")
    add_json_flag(imports)
    add_db_flag(imports)
    imports.set_defaults(handler=import_sessions)


def import_sessions(args: argparse.Namespace) -> int:
    sessions = _read(args.file)
    if not sessions:
        raise CommandError(f"{args.file} holds no sessions; nothing imported")
    ordered = _parents_first(sessions)
    imported: list[str] = []
    skipped: list[str] = []
    detached = 0
    from hermes.state import SessionDB

    # Unlike the reading commands, an import may start a store: its sessions are its content.
    with SessionDB(store_location(args)) as db, progress("importing", total=len(ordered)) as bar:
        for batch in _batches(ordered):
            result = db.import_sessions([session for _, session in batch])
            if not result.get("ok"):
                raise CommandError(_failure(args.file, batch, result, len(imported)))
            imported += result.get("imported_ids") or []
            skipped += result.get("skipped_ids") or []
            detached += int(result.get("detached") or 0)
            bar.advance(len(batch))
    if args.json:
        print_json({"imported": len(imported), "skipped": len(skipped), "detached": detached,
                    "imported_ids": imported, "skipped_ids": skipped})
    else:
        note = f", {plural(detached, 'parent')} not found (those sessions are roots now)" \
            if detached else ""
        print(f"imported {plural(len(imported), 'session')}; skipped "
              f"{len(skipped)} the store has already{note}")
    return 0


def _read(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Each session of the file with its line number; a ``CommandError`` naming the line
    that is not a JSON object."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(describe_os_error(exc, "read the sessions from")) from None
    except UnicodeDecodeError as exc:
        raise CommandError(f"{path} is not UTF-8 text ({exc.reason}); import reads the JSONL "
                           "that export writes") from None
    sessions = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            session = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path}:{number}: not JSON ({exc.msg}); nothing imported") from None
        if not isinstance(session, dict):
            raise CommandError(f"{path}:{number}: a {type(session).__name__}, not a session "
                               "(one JSON object a line, as export writes); nothing imported")
        sessions.append((number, session))
    return sessions


def _parents_first(sessions: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    """The sessions with every parent in the file before its children, otherwise in file
    order (a parent in a later batch would be missing when its child is imported)."""
    by_id = {session.get("id"): (number, session) for number, session in sessions}
    ordered: list[tuple[int, dict[str, Any]]] = []
    placed: set[int] = set()
    for entry in sessions:
        chain = []
        while entry[0] not in placed and entry not in chain:
            chain.append(entry)
            parent = by_id.get(entry[1].get("parent_session_id"))
            if parent is None:
                break
            entry = parent
        for number, session in reversed(chain):
            if number not in placed:
                placed.add(number)
                ordered.append((number, session))
    return ordered


def _batches(sessions: list[tuple[int, dict[str, Any]]]) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    batch: list[tuple[int, dict[str, Any]]] = []
    messages = size = 0
    for entry in sessions:
        count = len(entry[1].get("messages") or [])
        weight = len(json.dumps(entry[1], ensure_ascii=False, default=str))
        if batch and (len(batch) == _BATCH_SESSIONS or messages + count > _BATCH_MESSAGES
                      or size + weight > _BATCH_BYTES):
            yield batch
            batch, messages, size = [], 0, 0
        batch.append(entry)
        messages += count
        size += weight
    if batch:
        yield batch


def _failure(path: Path, batch: list[tuple[int, dict[str, Any]]], result: dict[str, Any],
             done: int) -> str:
    """One line: the first entry the store refused, by its line, and what was kept."""
    errors = result.get("errors") or [{}]
    first = errors[0]
    index = first.get("index")
    line = batch[index][0] if isinstance(index, int) and 0 <= index < len(batch) else "?"
    kept = (f"the {plural(done, 'session')} imported before it are kept; fix the line and run "
            "the import again (they are skipped)") if done else "nothing imported"
    return f"{path}:{line}: {first.get('error', 'refused')}; {kept}"
