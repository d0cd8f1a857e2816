"""Storage faults under a running gateway (issue 7, item 4).

Each fault is made real at the OS level while a gateway process (real ``AIAgent``, scripted
model) holds state.db open: an immutable file (``chattr +i``: read-only even for root), a full
filesystem (a 2 MiB tmpfs holding only state.db), the file deleted, the file replaced by another
database or by something that is not a database, the WAL truncated. Then two turns are sent: a
two-round one and a zero-round one (two flushes only). Held, for each fault:

* the gateway's log names the file and the cause;
* nothing partial is committed (the file holds what it held before the fault);
* the turns are kept: every message of both turns is in the spool under
  ``$HERMES_HOME/sessions/`` (mode 0600);
* once the fault is lifted, ``hermes sessions recover`` restores them — whole, once, in order,
  ``message_count`` equal to the rows — and a second run writes nothing;
* the conversation then goes on without duplicates.

The file-level classification of each failure (which exception, which words) is tested on
``SessionDB`` by tests/flush and tests/state; here it is what an operator sees from a gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import stat
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from hermes.errors import StateDbError
from hermes.state import SessionDB

from .faults import fill, immutable
from .harness import (
    consistency_problems,
    entry_for,
    hermes_cli,
    launch,
    post,
    store_of,
    wait_until_indexed,
)
from .rounds_agent import marker

A = ["user a", "call a r0", "result a r0", "done a"]
B = ["user b", "call b r0", "result b r0", "call b r1", "result b r1", "done b"]
C = ["user c", "done c"]


def spool_files(home: Path) -> list[Path]:
    directory = home / "sessions"
    return sorted(p for p in directory.iterdir() if ".recovery.jsonl" in p.name
                  and not p.name.endswith(".rejected")) if directory.is_dir() else []


def spooled(home: Path) -> tuple[list[str], set[str]]:
    """The markers of every spooled message, in file order, and the session ids they name."""
    names: list[str] = []
    sessions: set[str] = set()
    for path in spool_files(home):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            sessions.add(record["session_id"])
            name = marker(record["message"])
            if name is not None:
                names.append(name)
    return names, sessions


def stored(db_path: Path, session_id: str) -> list[str]:
    with SessionDB(db_path) as db:
        rows = db.get_messages(session_id)
        session = db.get_session(session_id)
    assert session is not None and session["message_count"] == len(rows)
    return [n for n in (marker(r) for r in rows) if n is not None]


async def faulted_turns(home: Path, db_path: Path, inject: Callable[[], None]) -> tuple[
        list[tuple[int, str | None]], str]:
    """Turn a on a healthy file, ``inject()``, turns b and c, SIGTERM. Returns the replies
    to b and c and the gateway's log."""
    gateway = launch(home, db_path)
    try:
        async with aiohttp.ClientSession() as http:
            assert await post(http, gateway, "f", "turn a rounds=1") == (
                200, "done a | seen: turn a rounds=1")
            inject()
            replies = [await post(http, gateway, "f", "turn b rounds=2"),
                       await post(http, gateway, "f", "turn c rounds=0")]
        assert gateway.stop() == 0, gateway.log()
        return replies, gateway.log()
    finally:
        gateway.kill()


def assert_kept(home: Path, log: str, db_path: Path, cause: str) -> str:
    """The log names the file and the cause; the spool holds turns b and c whole, 0600.
    Returns the spooled session id."""
    errors = [line for line in log.splitlines() if store_of(db_path) in line]
    assert errors, f"no log line names {store_of(db_path)}:\n{log}"
    assert any(re.search(cause, line, re.IGNORECASE) for line in errors), (cause, errors)
    names, sessions = spooled(home)
    # Every message once; their order is checked after the import (a spool may be split
    # in a claimed, older part and a newer one).
    assert sorted(names) == sorted(B + C), names
    for path in spool_files(home):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert len(sessions) == 1
    return sessions.pop()


def recover_twice(home: Path, db_path: Path, session_id: str, before: list[str]) -> None:
    first = hermes_cli(home, "sessions", "recover", "--db", str(db_path))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "8 messages recovered" in first.stdout, first.stdout
    assert stored(db_path, session_id) == before + B + C
    assert spool_files(home) == []
    again = hermes_cli(home, "sessions", "recover", "--db", str(db_path))
    assert again.returncode == 0 and "nothing to recover" in again.stdout, again.stdout
    assert stored(db_path, session_id) == before + B + C
    assert consistency_problems(db_path) == []


async def continue_without_duplicates(home: Path, db_path: Path, chat: str = "f") -> None:
    gateway = launch(home, db_path)
    try:
        async with aiohttp.ClientSession() as http:
            assert (await post(http, gateway, chat, "turn d rounds=1"))[1] is not None
        assert gateway.stop() == 0
    finally:
        gateway.kill()
    with SessionDB(db_path) as db:
        entry = entry_for(db, chat)
        assert entry is not None
        names = [n for n in (marker(r) for r in db.get_messages(entry.session_id)) if n]
    assert len(names) == len(set(names)), names
    assert names[-4:] == ["user d", "call d r0", "result d r0", "done d"]
    assert consistency_problems(db_path) == []


def sidecars(db_path: Path) -> list[Path]:
    return [db_path.with_name(db_path.name + suffix) for suffix in ("-wal", "-shm")]


@pytest.mark.asyncio
async def test_read_only_file(tmp_path: Path) -> None:
    home, db_path = tmp_path / "home", tmp_path / "state.db"
    with contextlib.ExitStack() as fault:
        # Not the -shm: SQLite maps it, and a refused page fault would be SIGBUS.
        _, log = await faulted_turns(home, db_path, lambda: fault.enter_context(
            immutable(db_path, sidecars(db_path)[0])))
        # The cause's wording: test_read_only_file_error_names_the_cause.
        session_id = assert_kept(home, log, db_path,
                                 cause=r"refuses writes|read-?only|not writable|permission")
        refused = hermes_cli(home, "sessions", "recover", "--db", str(db_path))
        assert refused.returncode == 1 and str(db_path) in refused.stdout + refused.stderr
        assert sorted(spooled(home)[0]) == sorted(B + C)  # a refused recover keeps the spool
    assert stored(db_path, session_id) == A  # nothing partial
    recover_twice(home, db_path, session_id, A)
    await continue_without_duplicates(home, db_path)


def test_read_only_file_error_names_the_cause(tmp_path: Path) -> None:
    """(Was a bug until the core looked at the errno: EPERM came out as a generic
    'disk I/O error ... check that the file still exists'.)"""
    db_path = tmp_path / "state.db"
    db = SessionDB(db_path)
    db.create_session("s", "cli")
    try:
        with immutable(db_path, sidecars(db_path)[0]):
            with pytest.raises(StateDbError) as refused:
                db.append_message("s", "user", "refused")
    finally:
        db.close()
    assert re.search(r"read-only|not writable|permission", str(refused.value), re.IGNORECASE), (
        str(refused.value))


@pytest.mark.asyncio
async def test_full_disk(tmp_path: Path, small_filesystem: Callable[[str], Path]) -> None:
    home = tmp_path / "home"
    db_path = small_filesystem("2m") / "state.db"
    filler: list[Path] = []
    _, log = await faulted_turns(
        home, db_path, lambda: filler.append(fill(db_path.parent)))
    session_id = assert_kept(home, log, db_path, cause=r"full")
    assert stored(db_path, session_id) == A
    filler[0].unlink()
    recover_twice(home, db_path, session_id, A)
    await continue_without_duplicates(home, db_path)


@pytest.mark.asyncio
async def test_file_deleted_under_the_gateway(tmp_path: Path) -> None:
    home, db_path = tmp_path / "home", tmp_path / "state.db"

    def delete() -> None:
        for path in [db_path, *sidecars(db_path)]:
            path.unlink()

    _, log = await faulted_turns(home, db_path, delete)
    session_id = assert_kept(home, log, db_path, cause=r"deleted or replaced")
    assert not db_path.exists(), "a store recreated the deleted file behind the user's back"
    # "Restore the file (or restart to start a new one)": a restart starts a new one.
    gateway = launch(home, db_path)
    assert gateway.stop() == 0
    recover_twice(home, db_path, session_id, [])
    await continue_without_duplicates(home, db_path)


@pytest.mark.asyncio
async def test_file_replaced_under_the_gateway(tmp_path: Path) -> None:
    home, db_path = tmp_path / "home", tmp_path / "state.db"
    backup = tmp_path / "backup.db"
    with SessionDB(backup) as other:
        other.create_session("restored", "cli")
        other.append_message("restored", "user", "from the backup")

    def replace() -> None:  # e.g. a restore from backup: a new file renamed over the old
        for path in sidecars(db_path):
            path.unlink(missing_ok=True)
        os.replace(backup, db_path)

    _, log = await faulted_turns(home, db_path, replace)
    session_id = assert_kept(home, log, db_path, cause=r"deleted or replaced")
    with SessionDB(db_path) as db:  # the replacement got nothing from the old gateway
        assert [s["id"] for s in db.list_sessions()] == ["restored"]
        assert [m["content"] for m in db.get_messages("restored")] == ["from the backup"]
    recover_twice(home, db_path, session_id, [])
    with SessionDB(db_path) as db:
        assert [m["content"] for m in db.get_messages("restored")] == ["from the backup"]
    await continue_without_duplicates(home, db_path)


@pytest.mark.asyncio
async def test_replaced_by_something_that_is_not_a_database(tmp_path: Path) -> None:
    home, db_path = tmp_path / "home", tmp_path / "state.db"
    junk = b"this is a spreadsheet, not a database\n" * 200
    (tmp_path / "junk").write_bytes(junk)

    def replace() -> None:
        for path in sidecars(db_path):
            path.unlink(missing_ok=True)
        os.replace(tmp_path / "junk", db_path)

    _, log = await faulted_turns(home, db_path, replace)
    session_id = assert_kept(home, log, db_path, cause=r"deleted or replaced")
    # A gateway started on it refuses, names the file and the cause, and leaves it untouched.
    refused = hermes_cli(home, "sessions", "list", "--db", str(db_path))
    assert refused.returncode == 1
    assert f"{db_path}: not a SQLite database" in refused.stderr.replace("\n", ""), refused.stderr
    with pytest.raises(RuntimeError, match="not a SQLite database"):
        launch(home, db_path)
    assert db_path.read_bytes() == junk
    # The user moves it away; the next start makes a new database; recover fills it.
    os.replace(db_path, tmp_path / "junk.saved")
    gateway_process = launch(home, db_path)
    assert gateway_process.stop() == 0
    recover_twice(home, db_path, session_id, [])
    await continue_without_duplicates(home, db_path)


@pytest.mark.asyncio
async def test_wal_truncated_after_a_crash(tmp_path: Path) -> None:
    """kill -9, then the WAL loses its tail (a torn write): the transactions in the lost tail
    vanish whole, everything before them stays, and the counters agree with the rows.

    The cut lands inside the last turn's first transactions: the WAL's very end may hold
    only the indexer's commits (search index pages, written just after the turn's)."""
    home, db_path = tmp_path / "home", tmp_path / "state.db"
    wal = sidecars(db_path)[0]
    gateway = launch(home, db_path)
    try:
        async with aiohttp.ClientSession() as http:
            for n in range(3):
                if n == 2:
                    await asyncio.to_thread(wait_until_indexed, db_path)
                    last_turn_starts = wal.stat().st_size
                await post(http, gateway, "w", f"turn w{n} rounds=2")
        assert gateway.process is not None
        gateway.process.send_signal(signal.SIGKILL)
        gateway.process.wait()
    finally:
        gateway.kill()
    size = wal.stat().st_size
    assert size > last_turn_starts + 10_000, "the WAL was checkpointed away; nothing to truncate"
    os.truncate(wal, last_turn_starts + 6000)  # mid-frame, inside the last turn's transactions
    problems = consistency_problems(db_path, after_crash=True)
    assert problems == [], problems
    with SessionDB(db_path) as db:
        entry = entry_for(db, "w")
        assert entry is not None
        names = [n for n in (marker(r) for r in db.get_messages(entry.session_id)) if n]
    full = [m for n in range(3) for m in
            [f"user w{n}", f"call w{n} r0", f"result w{n} r0", f"call w{n} r1",
             f"result w{n} r1", f"done w{n}"]]
    assert 0 < len(names) < len(full) and names == full[:len(names)], names
    await continue_without_duplicates(home, db_path, chat="w")


@pytest.mark.asyncio
async def test_wal_truncated_under_a_running_gateway(tmp_path: Path) -> None:
    """The WAL cut while the gateway has it open and idle. What was only in the WAL is gone
    (that is the fault); held: the reads fail with an error naming the file, the user is told,
    the gateway stops cleanly, and the next start has a consistent database to go on with.

    Idle includes its indexer, which writes a few milliseconds after each turn's commits: a
    write into a WAL cut under it (ours or any other program's) leaves frames behind a hole
    that the next checkpoint copies into the file, so no writer survives that cut."""
    home, db_path = tmp_path / "home", tmp_path / "state.db"
    wal = sidecars(db_path)[0]

    def cut_when_idle() -> None:
        wait_until_indexed(db_path)
        os.truncate(wal, 1000)

    replies, log = await faulted_turns(home, db_path, cut_when_idle)
    assert all(status == 200 for status, _ in replies)
    assert not any(reply and reply.startswith("done ") for _, reply in replies), replies
    assert any(str(db_path) in line and "error" in line.lower() for line in log.splitlines())
    await continue_without_duplicates(home, db_path)
