"""A PostgreSQL 15 server of a test's own, for tests that restart or stop it (the shared
server of ``scripts/postgres`` serves every other test and must stay up).

Started as ``scripts/postgres`` starts its server: ``initdb`` and ``postgres`` as the
``postgres`` user when we are root (both refuse root), the data directory and the unix socket
in a temp dir, a free port on 127.0.0.1, fsync off (the tests check what a commit makes
visible, not power loss). Without the binaries the test skips, saying so.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

BIN = Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    def __init__(self) -> None:
        if not (BIN / "postgres").exists():
            pytest.skip(f"no PostgreSQL 15 in {BIN} (apt-get install postgresql-15)")
        self.root = Path(tempfile.mkdtemp(prefix="hermes-pg-test-"))
        self.root.chmod(0o755)
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "hermes", "-A", "trust", "-E", "UTF8",
                  "--locale=C", "--no-sync")
        (self.root / "sock").mkdir()
        if self._as_root:
            shutil.chown(self.root / "sock", "postgres", "postgres")

    @property
    def url(self) -> str:
        return f"postgresql://hermes@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str) -> None:
        command = [str(BIN / program), *args]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise RuntimeError(f"{program} failed: {done.stdout}{done.stderr}\n{log}")

    def _ctl(self, action: str, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                  action, *args)

    def start(self) -> None:
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root / 'sock'} "
                   "-c fsync=off -c full_page_writes=off -c max_connections=100")
        self._ctl("start", "-o", options)

    def restart(self) -> None:
        """A planned restart: ``pg_ctl restart -m fast`` ends every connection, rolling back
        what is in flight, and comes back on the same port."""
        self._ctl("restart", "-m", "fast")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._ctl("stop", "-m", "immediate")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A started server of this test's own, stopped and removed afterwards."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()
