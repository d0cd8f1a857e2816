"""Shared fixtures: an isolated ``$HERMES_HOME``, a real ``state.db``, agent shells.

Everything here works on real files under ``tmp_path``; nothing mocks storage.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest
from support import postgres
from support.agents import agent_shell

from hermes.state import SessionDB


@pytest.fixture(autouse=True)
def _titles_from_first_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """No title asked of the model (the gateway's default, ``auxiliary.title_generation``):
    tests that script a model's replies would get one request more than they script.
    ``gateway/test_books.py`` turns it on where it tests it; processes a test starts inherit
    the variable."""
    monkeypatch.setenv("HERMES_TITLE_GENERATION", "false")


@pytest.fixture(autouse=True)
def _stores_on_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``HERMES_TEST_STORE=postgresql`` (``support/postgres.py``), every store opened on
    a file path opens that path's own fresh database on the test server instead."""
    if not postgres.ENABLED:
        return
    from hermes.state import face

    monkeypatch.setattr(face.StoreFace, "__init__", postgres.opening_on_the_server())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On PostgreSQL, the tests that cannot pass there are expected to fail, with the reason."""
    if not postgres.ENABLED:
        return
    known = postgres.known_failures()
    for item in items:
        reason = known.get(item.nodeid.removeprefix("tests/"))
        if reason:
            item.add_marker(pytest.mark.xfail(reason=f"PostgreSQL: {reason}", strict=True))


@pytest.fixture
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$HERMES_HOME`` pointing at an empty directory of this test."""
    home = tmp_path / "hermes_home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def db(db_path: Path, hermes_home: Path) -> Iterator[SessionDB]:
    store = SessionDB(db_path)
    yield store
    store.close()


@pytest.fixture
def agent_factory(hermes_home: Path) -> Callable[..., Any]:
    return agent_shell


def _run(*cmd: str) -> bool:
    return subprocess.run(cmd, capture_output=True).returncode == 0


@pytest.fixture
def mount_tmpfs(tmp_path: Path) -> Iterator[Callable[[str, str], Path]]:
    """Mounts a real tmpfs (``size=...``) at a directory under tmp_path; skips
    the test when this machine does not allow mounting. Unmounted afterwards."""
    mounted: list[Path] = []

    def mount(name: str, size: str = "1m") -> Path:
        target = tmp_path / name
        target.mkdir()
        if os.geteuid() != 0 or not shutil.which("mount"):
            pytest.skip("needs root and mount(8) to create a small real filesystem")
        if not _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(target)):
            pytest.skip("mounting a tmpfs is not permitted here")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        if not _run("umount", str(target)):
            _run("umount", "-l", str(target))


# SQLite must only be touched through hermes inside the test process: the
# stdlib ``sqlite3`` is a second copy of SQLite, and two copies in one process
# do not see each other's POSIX locks (closing one's file descriptor even drops
# the other's locks). Independent looks at the file therefore run in a child
# (``sql`` reads, ``write_sql`` writes, ``hold_write_lock`` holds the lock), and
# ``_one_sqlite_per_process`` fails a test that connects in this process.

_HOLD_LOCK = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
con.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
con.execute("ROLLBACK")
con.close()
"""


@contextlib.contextmanager
def write_lock_held(path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holds ``BEGIN IMMEDIATE`` on ``path`` inside the block."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.write("\n")
            proc.stdin.flush()
        proc.wait(timeout=10)


def raw_sql(path: Path, sql: str) -> list[tuple[Any, ...]]:
    """Runs a read-only query on the file from another process: its rows, types kept."""
    script = ("import pickle, sqlite3, sys\n"
              "con = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)\n"
              "sys.stdout.buffer.write(pickle.dumps(con.execute(sys.argv[2]).fetchall()))\n")
    out = subprocess.run([sys.executable, "-c", script, str(path), sql], capture_output=True)
    if out.returncode != 0:
        raise AssertionError(f"reading {path} failed:\n{out.stderr.decode(errors='replace')}")
    rows: list[tuple[Any, ...]] = pickle.loads(out.stdout)
    return rows


_FOREIGN_SQL = """
import pickle, sqlite3, sys
sql, params = pickle.load(sys.stdin.buffer)
con = sqlite3.connect(sys.argv[1], timeout=10)
if params is None:
    con.executescript(sql)
else:
    con.execute(sql, params)
con.commit()
con.close()
"""


def foreign_sql(path: Path, sql: str, params: Sequence[Any] | None = None) -> None:
    """Writes the file from another process, as another program would (its own SQLite,
    triggers on, a 10 s busy timeout), and commits: ``sql`` as a script (``executescript``,
    each statement its own transaction unless the script says ``BEGIN``), or, given
    ``params``, the one statement ``sql`` bound to them."""
    done = subprocess.run([sys.executable, "-c", _FOREIGN_SQL, str(path)], capture_output=True,
                          input=pickle.dumps((sql, None if params is None else tuple(params))))
    if done.returncode != 0:
        raise AssertionError(f"writing {path} failed:\n{done.stderr.decode(errors='replace')}")


@pytest.fixture
def hold_write_lock() -> Callable[[Path], contextlib.AbstractContextManager[subprocess.Popen[str]]]:
    return write_lock_held


@pytest.fixture
def sql() -> Callable[[Path, str], list[tuple[Any, ...]]]:
    return raw_sql


@pytest.fixture
def write_sql() -> Callable[..., None]:
    """``foreign_sql``: ``write_sql(path, script)`` or ``write_sql(path, statement, params)``."""
    return foreign_sql


@pytest.fixture(autouse=True)
def _one_sqlite_per_process(request: pytest.FixtureRequest,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails a test that opens a stdlib ``sqlite3`` connection in the test process (see above)
    unless it is marked ``own_sqlite``: its point is a connection of its own, and it never
    opens a hermes store. Children (``raw_sql``, ``foreign_sql``, scripts run with
    ``sys.executable``) are separate processes and unaffected."""
    if request.node.get_closest_marker("own_sqlite") is not None:
        return

    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        pytest.fail(
            f"sqlite3.connect{args!r} in the test process: stdlib sqlite3 in the test process "
            "shares no locks with hermes' SQLite (a second copy of SQLite: POSIX locks are per "
            "process, so it can truncate the -shm hermes has mapped, SIGBUS, and closing it "
            "drops hermes' locks; README, \"One SQLite per process\"). Use the `sql` fixture "
            "(a read-only query) or `write_sql` (SQL that writes), which run it in a child "
            "process; a test whose point is a stdlib connection of its own and that never "
            "opens a hermes store can be marked @pytest.mark.own_sqlite.", pytrace=False)

    monkeypatch.setattr(sqlite3, "connect", refused)
    monkeypatch.setattr(sqlite3.dbapi2, "connect", refused)
