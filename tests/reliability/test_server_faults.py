"""The PostgreSQL counterparts of the storage faults (issue 23, item 6): what can go wrong with a
server rather than a file, under a running gateway process (real ``AIAgent``, scripted model).

* ``pg_ctl restart`` under load, twice, while three conversations send multi-round turns back
  to back: no turn lost (every turn answered with its scripted reply), none written twice,
  every message a flush reported durable stored once, counters exact.
* The server stopped (it refuses connections) in the middle of a turn, for longer than the
  busy budget, then started: the log names the store and the cause, nothing partial is
  committed, the rest of the turn is spooled (0600) and its answer still reaches the user,
  ``hermes sessions recover`` restores it once. A turn that starts while the server is down
  is refused (it cannot read the conversation), the user told.
* A role that loses its right to write (``REVOKE``) while the gateway runs: the same, the
  cause named as a refusal to write (``ReadOnlyDatabaseError``).
* The server's disk full: the store's tables in a tablespace on a small tmpfs, filled while
  the gateway runs: the cause named, a write is ``DiskFullError``, what the server took is a
  prefix of the turns and the spool holds the rest; ``recover`` restores them once.
* Another connection holding the store's tables locked (another host's long transaction),
  with the server's ``statement_timeout`` shorter than the busy budget or not: a write fails
  within the budget as ``DatabaseLockedError`` instead of waiting for ever.

They run on the PostgreSQL leg only (``HERMES_TEST_STORE=postgresql``); each server that is
stopped or restarted is a test's own (``support/pg_server.py``), never the shared one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
from hermes.errors import DatabaseLockedError, DiskFullError, ReadOnlyDatabaseError
from hermes.gateway.turn import FAILURE_NOTICE
from hermes.state import SessionDB
from support import postgres
from support.pg_server import postgres_server

from .harness import (
    consistency_problems,
    entry_for,
    hermes_cli,
    json_lines,
    launch,
    post,
    setting,
    store_of,
    wait_until_indexed,
    write_figures,
)
from .rounds_agent import marker, parse_command
from .test_kill9 import script
from .faults import fill, succeeds
from .test_sigterm import wait_for
from .test_storage_faults import (
    A,
    B,
    C,
    assert_kept,
    continue_without_duplicates,
    faulted_turns,
    recover_twice,
    spool_files,
    spooled,
    stored,
)

pytestmark = pytest.mark.skipif(
    not postgres.ENABLED, reason="PostgreSQL's faults: run with HERMES_TEST_STORE=postgresql "
                                 "under scripts/postgres")

CHATS = ("r0", "r1", "r2")


@pytest.mark.asyncio
async def test_a_server_restart_under_load_loses_and_duplicates_no_turn(tmp_path: Path) -> None:
    restarts = int(setting("restarts", 2, 6))
    home, state_db = tmp_path / "home", tmp_path / "state.db"
    commands: dict[str, str] = {}
    replies: dict[str, tuple[int, str | None]] = {}
    with postgres_server() as server:
        postgres.use_store(state_db, server.url)
        gateway = launch(home, state_db)
        restarted = asyncio.Event()
        after: dict[str, int] = {}  # chat -> its turn number when the restarts were over
        try:
            async def converse(http: aiohttp.ClientSession, chat: str) -> None:
                for n in itertools.count():
                    if restarted.is_set():
                        # A few more turns on the restarted server, then stop.
                        if n > after.setdefault(chat, n) + 3:
                            return
                    tag = f"{chat}x{n}"
                    commands[tag] = f"turn {tag} rounds={1 + n % 3} ms=5"
                    replies[tag] = await post(http, gateway, chat, commands[tag])

            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
                talks = [asyncio.ensure_future(converse(http, chat)) for chat in CHATS]
                started = time.monotonic()
                restart_seconds = []
                for _ in range(restarts):
                    await asyncio.sleep(0.7)
                    began = time.monotonic()
                    await asyncio.to_thread(server.restart)  # ends every connection, mid-turn
                    restart_seconds.append(round(time.monotonic() - began, 2))
                restarted.set()
                await asyncio.gather(*talks)
                seconds = time.monotonic() - started
            assert await asyncio.to_thread(gateway.stop) == 0, gateway.log()
        finally:
            gateway.kill()

        problems = [f"{tag}: {reply}" for tag, reply in replies.items()
                    if reply != (200, f"done {tag} | seen: {commands[tag]}")]
        durable = {m for r in json_lines(home / "durable.log") for m in r["markers"]}
        with SessionDB(state_db) as db:
            for chat in CHATS:
                entry = entry_for(db, chat)
                assert entry is not None
                names = [marker(r) for r in db.get_messages(entry.session_id)
                         if r["role"] != "session_meta"]
                expected = [m for tag in commands if tag.startswith(chat + "x")
                            for m in script(tag, int(parse_command(commands[tag])[1]["rounds"]))]  # type: ignore[index]
                if names != expected:
                    problems.append(f"{chat}: {Counter(names) - Counter(expected)} extra, "
                                    f"{Counter(expected) - Counter(names)} missing")
                durable -= set(names)
        if durable:
            problems.append(f"durable but not stored: {sorted(durable)}")
        problems += consistency_problems(state_db)
        write_figures("server_restart", {
            "restarts": restarts, "restart_seconds": restart_seconds, "problems": problems,
            "turns": len(commands), "seconds": round(seconds, 1),
            "messages_checked": sum(len(script(t, int(parse_command(c)[1]["rounds"])))  # type: ignore[index]
                                    for t, c in commands.items()),
        })
        assert not problems, "\n".join(problems)


@pytest.mark.asyncio
async def test_a_server_stopped_mid_turn_spools_the_rest_and_recover_restores_it(
        tmp_path: Path) -> None:
    home, state_db, release = tmp_path / "home", tmp_path / "state.db", tmp_path / "release"
    durable_b = ["user b", "call b r0"]  # committed before the server stops, in round 0's tool
    with postgres_server() as server:
        postgres.use_store(state_db, server.url)
        gateway = launch(home, state_db)
        try:
            async with aiohttp.ClientSession() as http:
                assert await post(http, gateway, "f", "turn a rounds=1") == (
                    200, "done a | seen: turn a rounds=1")
                command = f"turn b rounds=2 block={release}"
                in_flight = asyncio.ensure_future(post(http, gateway, "f", command))
                await wait_for(Path(f"{release}.started"))
                await asyncio.to_thread(server.stop)
                release.touch()
                # The model answered; the rest of the turn could not be stored, so it was
                # spooled, and the answer still reaches the user.
                assert await in_flight == (200, f"done b | seen: {command}")
                # A turn that starts while the server is down cannot read the conversation
                # (nor check that no other host wrote to it): it is refused, the user told.
                assert await post(http, gateway, "f", "turn c rounds=0") == (200, FAILURE_NOTICE)
            # Each shutdown phase that writes waits up to its 10 s cap for the server.
            assert await asyncio.to_thread(gateway.stop, 60) == 0, gateway.log()
        finally:
            release.touch()
            gateway.kill()
        log = gateway.log()
        errors = [line for line in log.splitlines() if store_of(state_db) in line]
        assert any("did not answer" in line for line in errors), log
        names, sessions = spooled(home)
        # Each once; their order is checked after the import (the spool may be split).
        assert sorted(names) == sorted(B[len(durable_b):]), names
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in spool_files(home))
        [session_id] = sessions
        server.start()
        assert stored(state_db, session_id) == A + durable_b  # nothing partial
        first = hermes_cli(home, "sessions", "recover", "--db", str(state_db))
        assert first.returncode == 0 and "4 messages recovered" in first.stdout, first
        assert stored(state_db, session_id) == A + B
        again = hermes_cli(home, "sessions", "recover", "--db", str(state_db))
        assert again.returncode == 0 and "nothing to recover" in again.stdout, again
        assert stored(state_db, session_id) == A + B
        assert consistency_problems(state_db) == []
        await continue_without_duplicates(home, state_db)


def store_of_a_role(name: str) -> str:
    """The URL of a new store owned by a new role ``name`` (no superuser), as that role."""
    postgres.psql(f"CREATE ROLE {name} LOGIN; CREATE SCHEMA {name} AUTHORIZATION {name}")
    scheme, rest = postgres.server_url().split("://", 1)
    return f"{scheme}://{name}@{rest.split('@', 1)[1]}?options=-csearch_path%3D{name}"


def set_writes(role: str, allowed: bool) -> None:
    """Gives ``role`` its right to write its own tables back, or takes it away."""
    change = "GRANT {} TO" if allowed else "REVOKE {} FROM"
    postgres.psql(change.format(f"INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {role}")
                  + f" {role}")


@pytest.mark.asyncio
async def test_a_role_that_loses_its_write_permission(tmp_path: Path) -> None:
    home, state_db = tmp_path / "home", tmp_path / "state.db"
    role = f"hermes_writer_{os.getpid()}"
    url = store_of_a_role(role)
    postgres.use_store(state_db, url)
    _, log = await faulted_turns(home, state_db, lambda: set_writes(role, False))
    session_id = assert_kept(home, log, state_db, cause=r"permission denied")
    refused = SessionDB(url)
    try:
        with pytest.raises(ReadOnlyDatabaseError, match="permission denied"):
            refused.append_message(session_id, "user", "refused")
    finally:
        refused.close()
    set_writes(role, True)
    assert stored(state_db, session_id) == A
    recover_twice(home, state_db, session_id, A)
    await continue_without_duplicates(home, state_db)


@contextlib.contextmanager
def tablespace_on_a_small_filesystem(size: str) -> Iterator[tuple[str, Path]]:
    """A tablespace of the test server on a tmpfs of ``size`` (which the server's user can
    reach, unlike pytest's own temp dirs): its name and directory. Skipped where mounting is
    not permitted; dropped and unmounted afterwards."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root and mount(8) to give the server a small real filesystem")
    directory = Path(tempfile.mkdtemp(prefix="hermes-pg-space-"))
    directory.chmod(0o755)
    if not succeeds("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                    str(directory)):
        directory.rmdir()
        pytest.skip("mounting a tmpfs is not permitted here")
    name = f"hermes_space_{os.getpid()}"
    try:
        shutil.chown(directory, "postgres", "postgres")
        postgres.psql(f"CREATE TABLESPACE {name} LOCATION '{directory}'")
        yield name, directory
    finally:
        with contextlib.suppress(RuntimeError):
            postgres.psql(f"DROP TABLESPACE IF EXISTS {name}")
        succeeds("umount", str(directory)) or succeeds("umount", "-l", str(directory))
        directory.rmdir()


_MOVE_TABLES = """DO $$ DECLARE t record; BEGIN
    FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() LOOP
        EXECUTE format('ALTER TABLE %I SET TABLESPACE {space}, SET (fillfactor = 10)',
                       t.tablename);
    END LOOP;
END $$"""


@pytest.mark.asyncio
async def test_a_full_disk_on_the_server(tmp_path: Path) -> None:
    home, state_db = tmp_path / "home", tmp_path / "state.db"
    with tablespace_on_a_small_filesystem("8m") as (space, directory):
        url = postgres.fresh_store()
        SessionDB(url).close()  # migrated, then its tables moved onto the small filesystem,
        # their pages filled to a tenth only
        postgres.psql(_MOVE_TABLES.format(space=space), url=url)
        postgres.use_store(state_db, url)
        filler: list[Path] = []

        def fill_up() -> None:
            # A row past the tenth of its page first, so the next message needs a new page.
            with SessionDB(url) as other:
                other.create_session("padding", "cli")
                other.append_message("padding", "user", os.urandom(750).hex())
                # A search indexes what is pending first; ``other``'s indexer may not have
                # run before it closes, and the gateway's runs only after its own commits.
                other.search_messages("padding")
            wait_until_indexed(state_db)
            filler.append(fill(directory))

        try:
            _, log = await faulted_turns(home, state_db, fill_up)
            errors = [line for line in log.splitlines() if store_of(state_db) in line]
            assert any("No space left on device" in line for line in errors), log
            # Unlike a file, the server may still take a write that fits in a page it has
            # (a spool imported by a later flush, say): what it took is whole transactions,
            # a prefix of the turns, and the spool holds exactly the rest.
            with SessionDB(state_db) as db:
                entry = entry_for(db, "f")
                assert entry is not None
                session_id = entry.session_id
                with pytest.raises(DiskFullError):
                    db.append_message(session_id, "user", "refused")
            whole = A + B + C
            kept = stored(state_db, session_id)
            assert kept == whole[:len(kept)] and len(kept) >= len(A), kept
            names, _ = spooled(home)
            assert sorted(names) == sorted(whole[len(kept):]), (kept, names)
            filler.pop().unlink()
            first = hermes_cli(home, "sessions", "recover", "--db", str(state_db))
            assert first.returncode == 0, first.stdout + first.stderr
            assert stored(state_db, session_id) == whole
            again = hermes_cli(home, "sessions", "recover", "--db", str(state_db))
            assert again.returncode == 0 and "nothing to recover" in again.stdout, again.stdout
            assert stored(state_db, session_id) == whole
            assert consistency_problems(state_db) == []
            await continue_without_duplicates(home, state_db)
        finally:
            for path in filler:
                path.unlink()
            postgres.psql(f"DROP SCHEMA {url.rsplit('%3D', 1)[1]} CASCADE")


@pytest.mark.parametrize("statement_timeout", [None, "100ms"])
def test_another_hosts_lock_fails_a_write_within_the_busy_budget(
        hermes_home: Path, statement_timeout: str | None) -> None:
    url = postgres.fresh_store()
    if statement_timeout is not None:  # set for the store's role at the server
        url += f"%20-cstatement_timeout%3D{statement_timeout}"
    with SessionDB(url, busy_budget=0.5) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "before")
        holder = postgres.TablesLocked(url)
        try:
            with pytest.raises(DatabaseLockedError):  # returning at all is the point
                db.append_message("s1", "user", "refused")
            assert [m["content"] for m in db.get_messages("s1")] == ["before"]  # reads go on
        finally:
            holder.release()
        db.append_message("s1", "user", "after")
        assert [m["content"] for m in db.get_messages("s1")] == ["before", "after"]
        assert db.get_session("s1")["message_count"] == 2  # type: ignore[index]


def test_a_search_meeting_a_stopped_server_is_not_a_bad_query(hermes_home: Path) -> None:
    with postgres_server() as server:
        db = SessionDB(server.url, busy_budget=0.3)
        try:
            db.create_session("s1", "cli")
            db.append_message("s1", "user", "hello")
            server.stop()
            with pytest.raises(DatabaseLockedError, match="did not answer"):
                db.search_messages("hello")
        finally:
            db.close()
