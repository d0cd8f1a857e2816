"""Shared pieces of the reliability trials: settings, real gateway processes, looks at state.db,
and the figures file.

Gateway processes are ``support.gateway_process.GatewayProcess`` (the loopback platform) with
the agent replaced by ``reliability.rounds_agent`` (the real ``AIAgent``, scripted model).

On the PostgreSQL leg (``HERMES_TEST_STORE=postgresql``, ``support/postgres.py``) a file path
stands for its store on the test server: the looks at the store are psql's on that store, and
the processes a trial starts (gateways, the CLI, workers) are given its URL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
from hermes.gateway.session import SessionEntry
from hermes.state import SessionDB
from support import postgres
from support.gateway_process import GatewayProcess
from support.processes import child_env

ROUNDS_AGENT = "reliability.rounds_agent:build_agent"
REPO = Path(__file__).resolve().parents[2]

#: ``HERMES_FULL=1`` (or ``scripts/reliability``) runs the long trials at full length.
FULL = os.environ.get("HERMES_FULL", "") not in ("", "0")


def setting(name: str, quick: float, full: float) -> float:
    """A trial size: ``$HERMES_<NAME>`` if set, else the full or the quick value."""
    configured = os.environ.get(f"HERMES_{name.upper()}")
    if configured:
        return float(configured)
    return full if FULL else quick


def figures_dir() -> Path:
    directory = Path(os.environ.get("HERMES_RELIABILITY_OUT") or REPO / "target" / "reliability")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def write_figures(name: str, figures: dict[str, Any]) -> Path:
    """Record a trial's figures (RELIABILITY.md quotes them; scripts/reliability prints them)."""
    path = figures_dir() / f"{name}.json"
    figures = {"full_run": FULL, "recorded_at": time.strftime("%Y-%m-%d %H:%M:%S"), **figures}
    path.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    return path


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def launch(home: Path, state_db: Path, **settings: Any) -> GatewayProcess:
    """A started gateway process running the real agent with the scripted model."""
    return GatewayProcess(home, state_db, **{"agent_factory": ROUNDS_AGENT, **settings}).start()


async def post(http: aiohttp.ClientSession, gateway: GatewayProcess, chat_id: str,
               text: str) -> tuple[int, str | None]:
    """One message through the loopback platform: ``(HTTP status, reply)``."""
    payload = {"chat_id": chat_id, "user_id": chat_id, "text": text}
    async with http.post(f"http://127.0.0.1:{gateway.port}/message", json=payload) as response:
        if response.status != 200:
            return response.status, await response.text()
        reply: str | None = (await response.json())["reply"]
        return 200, reply


def json_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The complete JSON lines of a log (a line torn by a kill is skipped)."""
    if not path.exists():
        return
    for line in path.read_text(errors="replace").splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


def routing(db: SessionDB) -> dict[str, SessionEntry]:
    return {k: SessionEntry.from_json(v) for k, v in db.load_gateway_routing_entries().items()}


def entry_for(db: SessionDB, chat_id: str) -> SessionEntry | None:
    return next((e for k, e in routing(db).items() if k.endswith(f":dm:{chat_id}")), None)


_RAW = """
import json, sqlite3, sys
con = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)
out = {}
for name, sql in json.loads(sys.argv[2]).items():
    out[name] = con.execute(sql).fetchall()
print(json.dumps(out))
"""


def raw_queries(path: Path, queries: dict[str, str]) -> dict[str, list[list[Any]]]:
    """Read-only queries on ``path`` run by another process's SQLite (never two copies of
    SQLite in this process: they would not see each other's POSIX locks)."""
    done = subprocess.run([sys.executable, "-c", _RAW, str(path), json.dumps(queries)],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"reading {path} failed:\n{done.stderr}")
    result: dict[str, list[list[Any]]] = json.loads(done.stdout)
    return result


def store_of(path: Path) -> str:
    """What a trial's store at ``path`` is called in messages: the file, or on the
    PostgreSQL leg the URL of the store that stands for it."""
    return postgres.store_url(path) if postgres.ENABLED else str(path)


def consistency_problems(path: Path, *, after_crash: bool = False) -> list[str]:
    """SQLite's integrity check, the counter invariant for every session, and the word index
    holding exactly one entry per message row. Rows a writer committed but had not indexed
    yet when it was killed (``after_crash``) may instead sit in a pending range, which the
    next opener indexes; after a clean close nothing is pending."""
    if postgres.ENABLED:
        return server_consistency_problems(postgres.store_url(path))
    found = raw_queries(path, {
        "integrity": "PRAGMA integrity_check",
        "counts": "SELECT s.id, s.message_count, (SELECT COUNT(*) FROM messages m "
                  "WHERE m.session_id = s.id AND m.active = 1) FROM sessions s",
        "unindexed": "SELECT COUNT(*) FROM messages m WHERE m.id NOT IN "
                     "(SELECT rowid FROM messages_fts) AND NOT EXISTS (SELECT 1 FROM "
                     "hermes_fts_pending p WHERE m.id BETWEEN p.first_id AND p.last_id)",
        "orphans": "SELECT COUNT(*) FROM messages_fts WHERE rowid NOT IN (SELECT id FROM messages)",
        "pending": "SELECT COUNT(*) FROM messages m WHERE EXISTS (SELECT 1 FROM "
                   "hermes_fts_pending p WHERE m.id BETWEEN p.first_id AND p.last_id)",
    })
    problems = []
    if found["integrity"] != [["ok"]]:
        problems.append(f"integrity_check: {found['integrity']}")
    for session_id, count, rows in found["counts"]:
        if count != rows:
            problems.append(f"session {session_id}: message_count {count} != {rows} active rows")
    [(unindexed,)], [(orphans,)], [(pending,)] = found["unindexed"], found["orphans"], found["pending"]
    if unindexed:
        problems.append(f"{unindexed} message rows neither in messages_fts nor pending")
    if orphans:
        problems.append(f"{orphans} messages_fts rows without a message row")
    if pending and not after_crash:
        problems.append(f"{pending} message rows still pending indexing after a clean close")
    return problems


def server_consistency_problems(url: str) -> list[str]:
    """:func:`consistency_problems` of a PostgreSQL store, read by psql: the counter invariant
    and the search side table holding one row per message that is not pending. The server
    has no integrity check to run; a store closed with rows pending leaves them to the next
    indexer or search by design (README), so pending rows are no problem there."""
    problems = [f"session {sid}: message_count {count} != {active} active rows"
                for sid, count, active in postgres.rows(
                    "SELECT s.id, s.message_count, (SELECT COUNT(*) FROM messages m "
                    "WHERE m.session_id = s.id AND m.active = 1) FROM sessions s", url=url)
                if count != active]
    [[unindexed]] = postgres.rows(
        "SELECT COUNT(*) FROM messages m WHERE NOT EXISTS (SELECT 1 FROM hermes_search h "
        "WHERE h.message_id = m.id) AND NOT EXISTS (SELECT 1 FROM hermes_search_pending p "
        "WHERE m.id BETWEEN p.first_id AND p.last_id)", url=url)
    [[orphans]] = postgres.rows(
        "SELECT COUNT(*) FROM hermes_search h WHERE NOT EXISTS "
        "(SELECT 1 FROM messages m WHERE m.id = h.message_id)", url=url)
    if unindexed != "0":
        problems.append(f"{unindexed} message rows neither in hermes_search nor pending")
    if orphans != "0":
        problems.append(f"{orphans} hermes_search rows without a message row")
    return problems


def pending_indexing(path: Path) -> int:
    """How many pending ranges the store at ``path`` has."""
    if postgres.ENABLED:
        [[count]] = postgres.rows("SELECT COUNT(*) FROM hermes_search_pending",
                                  url=postgres.store_url(path))
        return int(count)
    [[count]] = raw_queries(path, {"pending": "SELECT COUNT(*) FROM hermes_fts_pending"})["pending"]
    return int(count)


def wait_until_indexed(path: Path, timeout: float = 10.0) -> None:
    """Returns once nothing in ``path`` is pending indexing: a writer's indexer fills the
    search index a few milliseconds after each commit, off the caller's path."""
    deadline = time.monotonic() + timeout
    while pending_indexing(path):
        assert time.monotonic() < deadline, f"{path}: still pending indexing after {timeout} s"
        time.sleep(0.01)


def store_environment(home: Path, args: list[str]) -> tuple[list[str], dict[str, str]]:
    """On the PostgreSQL leg, the command line and environment that give a ``hermes``
    process the store standing for the file it names: ``--db PATH`` becomes
    ``--database-url URL``, and without one ``$HERMES_HOME/state.db``'s store comes through
    ``HERMES_DATABASE_URL``. Elsewhere both as they are."""
    if not postgres.ENABLED:
        return args, {}
    if "--db" not in args:
        return args, {"HERMES_DATABASE_URL": postgres.store_url(home / "state.db")}
    at = args.index("--db")
    return [*args[:at], "--database-url", postgres.store_url(args[at + 1]), *args[at + 2:]], {}


def hermes_cli(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``hermes ARGS`` as a user runs it (its own process), with ``HERMES_HOME=home`` (and
    on the PostgreSQL leg the store standing for its file: :func:`store_environment`)."""
    argv, store = store_environment(home, list(args))
    return subprocess.run([sys.executable, "-m", "hermes.cli", *argv],
                          env=child_env(home, COLUMNS="300", **store),
                          capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ApiGateway:
    """``hermes -v gateway run`` (the api_server platform) as a user starts it, on a free
    loopback port, with ``HERMES_HOME=home`` and extra environment ``variables``."""

    def __init__(self, home: Path, *args: str, **variables: str) -> None:
        self.home = home
        self.port = free_port()
        self.log_path = home / "gateway.log"
        argv, store = store_environment(home, list(args))
        self.args = ["-v", "gateway", "run", "--port", str(self.port), *argv]
        self.env = child_env(home, **store, **variables)
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ApiGateway:
        import urllib.request

        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "hermes.cli", *self.args],
                                            env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the gateway exited early:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"the gateway did not become healthy:\n{self.log()}")

    def __exit__(self, *exc: object) -> None:
        import signal

        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """One raw HTTP request: ``(status, headers, body)``."""
        import http.client

        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()
