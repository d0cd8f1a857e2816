"""The PostgreSQL leg of the Python tests: with ``HERMES_TEST_STORE=postgresql`` every
``SessionDB`` a test opens on a file path opens a fresh store on the test server
(``HERMES_TEST_POSTGRES_URL``, started by ``scripts/postgres``) instead, one per path, so a
test that reopens its file reopens its store, and a gateway process the test starts on that
file (``support/gateway_process.py``) is given the same store's URL (:func:`store_url`). A
store is a schema of its own, named by the URL's ``options=-csearch_path=...`` (a schema costs
the server nothing like a database's files). Tests that look at the file itself cannot pass
there: ``postgres_known_failures.json`` names each with its reason.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ENABLED = os.environ.get("HERMES_TEST_STORE", "") == "postgresql"
KNOWN_FAILURES = Path(__file__).with_name("postgres_known_failures.json")
_PSQL = "/usr/lib/postgresql/15/bin/psql"
_names = itertools.count()


def server_url() -> str:
    url = os.environ.get("HERMES_TEST_POSTGRES_URL", "")
    if not url:
        raise RuntimeError("HERMES_TEST_STORE=postgresql needs HERMES_TEST_POSTGRES_URL: run the "
                           "tests under scripts/postgres")
    return url


def psql(sql: str, *, url: str | None = None) -> str:
    """Runs ``sql`` on the test server (or the server at ``url``); its output, unaligned. A
    failure raises, with psql's message."""
    program = _PSQL if os.path.exists(_PSQL) else shutil.which("psql") or "psql"
    done = subprocess.run([program, "-qAt", url or server_url(), "-c", sql],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"psql exited {done.returncode} on {sql!r}: {done.stderr.strip()}")
    return done.stdout


def rows(sql: str, *, url: str | None = None) -> list[list[str]]:
    """The rows ``sql`` returns on the test server (or at ``url``), each a list of its values
    as text (for counts and ids: psql separates values with ``|``)."""
    return [line.split("|") for line in psql(sql, url=url).splitlines()]


def store_text(url: str) -> str:
    """Every row of every table of the store at ``url``, as text (to look for what must
    never be stored)."""
    tables = [name for [name] in rows("SELECT tablename FROM pg_tables "
                                      "WHERE schemaname = current_schema()", url=url)]
    return "\n".join(psql(f'SELECT t::text FROM "{name}" t', url=url) for name in tables)


def fresh_store() -> str:
    """The URL of a new, empty store (a schema) on the test server."""
    name = f"hermes_pytest_{os.getpid()}_{next(_names)}"
    psql(f"CREATE SCHEMA {name}")
    return f"{server_url()}?options=-csearch_path%3D{name}"


def connections_named(application_name: str, *, settle_at_most: int | None = None) -> int:
    """How many connections to the test server give ``application_name``. With
    ``settle_at_most``, waits (up to 5 s) for there to be no more than that: a server process
    whose client has gone takes a moment to leave ``pg_stat_activity``."""
    deadline = time.monotonic() + 5
    while True:
        count = int(psql("SELECT count(*) FROM pg_stat_activity "
                         f"WHERE application_name = '{application_name}'"))
        if settle_at_most is None or count <= settle_at_most or time.monotonic() > deadline:
            return count
        time.sleep(0.05)


def known_failures() -> dict[str, str]:
    """Test id (relative to tests/) → why it cannot pass on PostgreSQL."""
    data: dict[str, str] = json.loads(KNOWN_FAILURES.read_text(encoding="utf-8"))
    return data


#: The current test's stores: a file path -> the URL of the store opened for it.
_stores: dict[str, str] = {}


def store_url(path: str | Path) -> str:
    """The URL of the store that stands for the file ``path`` (a fresh one the first time):
    what a test's own stores and the processes it starts on that file both open."""
    key = str(Path(path).resolve())
    if key not in _stores:
        _stores[key] = fresh_store()
    return _stores[key]


def use_store(path: str | Path, url: str) -> None:
    """From now on in this test, the store at ``url`` (a server of the test's own) stands for
    the file ``path``: the test's stores, the processes it starts and the checks all open it."""
    _stores[str(Path(path).resolve())] = url


class TablesLocked:
    """Another connection holds ``LOCK TABLE sessions, messages IN EXCLUSIVE MODE`` on the
    store at ``url`` until :meth:`release`: every write waits for it, reads do not. The
    counterpart of another process holding SQLite's write lock (another host's long
    transaction)."""

    def __init__(self, url: str) -> None:
        program = _PSQL if os.path.exists(_PSQL) else shutil.which("psql") or "psql"
        self._psql = subprocess.Popen([program, "-qAtX", "-v", "ON_ERROR_STOP=1", url],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._say("BEGIN; LOCK TABLE sessions, messages IN EXCLUSIVE MODE;", "locked")

    def _say(self, sql: str, answer: str) -> None:
        assert self._psql.stdin is not None and self._psql.stdout is not None
        self._psql.stdin.write(f"{sql}\n\\echo {answer}\n")
        self._psql.stdin.flush()
        heard = self._psql.stdout.readline().strip()
        if heard != answer:
            self._psql.kill()
            raise RuntimeError(f"psql said {heard!r} to {sql!r}")

    def release(self) -> None:
        if self._psql.poll() is None:
            self._say("ROLLBACK;", "released")
            assert self._psql.stdin is not None
            self._psql.stdin.close()
            self._psql.wait(10)


def opening_on_the_server() -> Callable[..., None]:
    """A ``StoreFace.__init__`` that opens, for each file path, its store on the test server
    (:func:`store_url`, so reopening a path reopens its store); a URL opens as given. The
    stores of an earlier test are forgotten."""
    from hermes.paths import is_database_url, state_db_path
    from hermes.state import face

    _stores.clear()
    opened_on_file = face.StoreFace.__init__

    def on_the_server(self: face.StoreFace, db_path: str | Path | None = None,
                      **options: Any) -> None:
        location = db_path if db_path is not None else state_db_path()
        if not is_database_url(location):
            location = store_url(location)
        opened_on_file(self, location, **options)

    return on_the_server


@contextlib.contextmanager
def stores_on_the_server() -> Iterator[None]:
    """Inside the block, every store opened on a file path opens on the test server instead."""
    from hermes.state import face

    opened_on_file = face.StoreFace.__init__
    setattr(face.StoreFace, "__init__", opening_on_the_server())
    try:
        yield
    finally:
        setattr(face.StoreFace, "__init__", opened_on_file)
