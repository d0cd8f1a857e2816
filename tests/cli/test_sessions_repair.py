"""``hermes sessions repair`` run as a real process on a real ``state.db`` damaged by another
process the ways hermes-agent's repair knows: a schema that holds a definition twice (every
statement then fails), a search index definition no SQLite can read, a search index whose
data is broken; and damage beyond it (the sessions' own pages), which it must refuse in one
line, pointing at the copy it made first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import as_json, hermes, one_line_failure

from hermes.state import SessionDB


@pytest.fixture
def store(hermes_home: Path) -> Path:
    path = hermes_home / "state.db"
    with SessionDB(path) as db:
        for n in range(40):
            db.create_session(f"s{n:02d}", "cli", started_at=1000.0 + n, title=f"talk {n}")
            db.append_messages(f"s{n:02d}", [
                {"role": "user", "content": f"hello number {n} " + "padding " * 50},
                {"role": "assistant", "content": "hi"}])
    return path


def damage(path: Path, *statements: str) -> None:
    """Another program's SQLite (Python's), schema writes allowed, the WAL folded in."""
    script = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
              "c.execute('PRAGMA writable_schema=ON'); "
              "[c.execute(s) for s in sys.argv[2:]]; c.commit(); "
              "c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()")
    subprocess.run([sys.executable, "-c", script, str(path), *statements], check=True,
                   timeout=60)


DUPLICATE = ("INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) SELECT type, name, "
             "tbl_name, rootpage, sql FROM sqlite_master WHERE name = 'messages_fts'")
UNREADABLE = ("UPDATE sqlite_master SET sql = 'CREATE VIRTUAL TABLE messages_fts USING fts5(('"
              " WHERE name = 'messages_fts'")
BROKEN_DATA = "UPDATE messages_fts_data SET block = x'0000ffff' WHERE id > 10"


def searchable(home: Path) -> int:
    return len(as_json(hermes(home, "sessions", "search", "hello", "--limit", "100",
                              "--json")))


def listed(home: Path) -> int:
    return len(as_json(hermes(home, "sessions", "list", "--limit", "100", "--json")))


@pytest.mark.parametrize(("statement", "mended"), [
    (DUPLICATE, "duplicates_removed"),
    (UNREADABLE, "search_index_dropped"),
    (BROKEN_DATA, "search_index_rebuilt"),
])
def test_repair_mends_the_damage_and_keeps_every_session(hermes_home: Path, store: Path,
                                                         statement: str,
                                                         mended: str) -> None:
    damage(store, statement)
    check = hermes(hermes_home, "sessions", "repair", "--check-only", "--json")
    assert check.returncode == 1, check.stderr
    assert check.stderr == ""
    report = as_json(hermes(hermes_home, "sessions", "repair", "--json"))
    assert report["problems_before"] and report["mended"] == mended
    backup = Path(report["backup"])
    assert backup.exists() and backup.stat().st_mode & 0o777 == 0o600
    assert listed(hermes_home) == 40 and searchable(hermes_home) == 40
    assert as_json(hermes(hermes_home, "sessions", "repair", "--check-only", "--json"))[
        "healthy"] is True


def test_a_duplicate_definition_stops_every_other_command_until_repaired(
        hermes_home: Path, store: Path) -> None:
    damage(store, DUPLICATE)
    line = one_line_failure(hermes(hermes_home, "sessions", "list"))
    assert "malformed database schema" in line
    check = hermes(hermes_home, "sessions", "repair", "--check-only")
    assert check.returncode == 1
    assert "already exists" in check.stdout and "hermes sessions repair" in check.stdout
    done = hermes(hermes_home, "sessions", "repair")
    assert done.returncode == 0, done.stderr
    assert "removed the definitions the schema held twice" in done.stdout
    assert listed(hermes_home) == 40


def test_a_healthy_file_is_checked_copied_and_reindexed(hermes_home: Path, store: Path) -> None:
    check = hermes(hermes_home, "sessions", "repair", "--check-only")
    assert check.returncode == 0 and "check out" in check.stdout
    report = as_json(hermes(hermes_home, "sessions", "repair", "--json", "--no-backup"))
    assert report == {"database": str(store), "problems_before": [], "mended": "nothing",
                      "search_indexes_rebuilt": report["search_indexes_rebuilt"],
                      "backup": None}
    assert report["search_indexes_rebuilt"] >= 1
    assert not list(store.parent.glob("state.db.bak-*"))
    assert searchable(hermes_home) == 40


# Another program overwrites the first page of the sessions table with garbage.
CRUSH_SESSIONS = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
    "c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); "
    "root = c.execute(\"SELECT rootpage FROM sqlite_master WHERE name = 'sessions'\").fetchone()[0]; "
    "size = c.execute('PRAGMA page_size').fetchone()[0]; c.close(); "
    "f = open(sys.argv[1], 'r+b'); f.seek((root - 1) * size); f.write(b'\\xff' * size); f.close()")


def test_damage_to_the_sessions_themselves_is_refused_in_one_line(hermes_home: Path,
                                                                  store: Path) -> None:
    subprocess.run([sys.executable, "-c", CRUSH_SESSIONS, str(store)], check=True, timeout=60)
    line = one_line_failure(hermes(hermes_home, "sessions", "repair"))
    assert "restore the copy made first" in line
    backups = list(store.parent.glob("state.db.bak-*"))
    assert len(backups) == 1 and str(backups[0]) in line


def test_without_a_database_there_is_nothing_to_repair(hermes_home: Path) -> None:
    line = one_line_failure(hermes(hermes_home, "sessions", "repair"))
    assert "no session database" in line and "nothing to repair" in line


def test_a_file_that_is_no_database_is_one_line(hermes_home: Path) -> None:
    (hermes_home / "state.db").write_bytes(b"this is not a database" * 100)
    check = hermes(hermes_home, "sessions", "repair", "--check-only")
    assert check.returncode == 1 and "not a database" in check.stdout
    line = one_line_failure(hermes(hermes_home, "sessions", "repair"))
    assert "state.db" in line and "restore" in line
