"""The PostgreSQL server a benchmark runs on: a fresh database per workload, and the checks
every system's rows are counted by. Through ``psql`` (standard library only, so the same
module serves our interpreter and the peers' venv, whichever driver each system uses).

Durability is the database's default, set when it is created: ``synchronous_commit`` on for
FULL, off for NORMAL, so every connection of every system (a pool's too) commits at the level
under test without any system's code being changed. Ours sets the same level itself (``SET
LOCAL`` in every transaction, from ``SessionDB(url, synchronous=...)``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from urllib.parse import urlsplit, urlunsplit

#: ``synchronous_commit`` for each durability level.
SYNCHRONOUS_COMMIT = {"FULL": "on", "NORMAL": "off"}
_names = itertools.count(1)


def psql() -> str:
    found = shutil.which("psql") or "/usr/lib/postgresql/15/bin/psql"
    if not os.path.exists(found):
        raise RuntimeError("psql not found: install postgresql-client (apt-get install postgresql-15)")
    return found


def run(url: str, sql: str) -> str:
    """``sql`` on the database at ``url``; its output, unaligned, one value per line."""
    proc = subprocess.run([psql(), url, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-c", sql],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"psql on {with_database(url, '')}: {proc.stderr.strip()[:500]}")
    return proc.stdout.strip()


def scalar(url: str, sql: str) -> int:
    return int(run(url, sql) or 0)


def with_database(url: str, database: str) -> str:
    """``url`` naming ``database`` instead of its own."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


def fresh_database(admin_url: str, prefix: str, sync: str) -> str:
    """A new, empty database whose connections commit at ``sync``; its URL."""
    name = f"{prefix}_{os.getpid()}_{next(_names)}".lower().replace("-", "_")
    run(admin_url, f'CREATE DATABASE "{name}"')
    run(admin_url, f'ALTER DATABASE "{name}" SET synchronous_commit = {SYNCHRONOUS_COMMIT[sync]}')
    return with_database(admin_url, name)


def drop_database(admin_url: str, url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    run(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def rows(url: str, table: str, column: str, keys: list[str]) -> int:
    """Rows of ``table`` whose ``column`` is one of ``keys``."""
    if not keys:
        return 0
    quoted = ",".join("'" + k.replace("'", "''") + "'" for k in keys)
    return scalar(url, f"SELECT COUNT(*) FROM {table} WHERE {column} IN ({quoted})")
