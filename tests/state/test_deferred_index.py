"""The search index is filled right after a commit, off the writer's path.

A write records the id range of its new rows in ``hermes_fts_pending`` (same transaction);
the store's indexer moves pending ranges into ``messages_fts`` a few milliseconds later. Held
here, on real files: a search finds rows the moment their write returned; ranges a crashed
writer left are indexed at the next open, or by a search; a closed file is fully indexed for
programs that know nothing of the pending table (hermes-agent); a row another program indexed
meanwhile is not indexed twice; the indexer's commits are not "foreign" to its own store.

Other programs' SQLite runs in child processes (see tests/conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hermes.state import SessionDB

# What a hermes writer killed between its commit and its indexer leaves: rows, their pending
# range, and no index entries (the insert trigger's entries are removed again: our writer runs
# with triggers off). Then, optionally, the lock is held until stdin closes.
_CRASHED_WRITER = r"""
import json, sqlite3, sys
path, session, texts, hold = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4] == "hold"
con = sqlite3.connect(path, isolation_level=None, timeout=10)
con.execute("BEGIN IMMEDIATE")
con.execute("INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?, 'cli', 1)", (session,))
first = con.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM messages").fetchone()[0]
con.executemany("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, 1)",
                [(session, t) for t in texts])
last = first + len(texts) - 1
con.execute("UPDATE sessions SET message_count = message_count + ? WHERE id = ?", (len(texts), session))
con.execute("DELETE FROM messages_fts WHERE rowid BETWEEN ? AND ?", (first, last))
con.execute("INSERT INTO hermes_fts_pending (first_id, last_id) VALUES (?, ?)", (first, last))
con.execute("COMMIT")
if hold:
    con.execute("BEGIN IMMEDIATE")
print("done", flush=True)
sys.stdin.readline()
con.close()
"""


@contextmanager
def crashed_writer(path: Path, session: str, texts: list[str], *, hold_lock: bool = False
                   ) -> Iterator[None]:
    """Inside the block, ``texts`` are rows of ``path`` that only a pending range points at
    (and, with ``hold_lock``, another process holds the write lock)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _CRASHED_WRITER, str(path), session, json.dumps(texts),
         "hold" if hold_lock else "no"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
        yield
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0


def counts(sql: Any, path: Path) -> tuple[int, int, int]:
    """(message rows, messages_fts rows, pending ranges), read by another process."""
    [row] = sql(path, "SELECT (SELECT COUNT(*) FROM messages), (SELECT COUNT(*) FROM messages_fts),"
                      " (SELECT COUNT(*) FROM hermes_fts_pending)")
    return row  # type: ignore[no-any-return]


def wait_for_index(sql: Any, path: Path) -> None:
    deadline = time.monotonic() + 10
    while (found := counts(sql, path))[2] or found[0] != found[1]:
        assert time.monotonic() < deadline, f"not indexed: {found}"
        time.sleep(0.02)


def test_a_search_right_after_a_write_finds_every_row(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    for turn in range(3):
        ids = db.append_messages("s1", [{"role": "user", "content": f"quetzal {turn} {i}"}
                                        for i in range(1000)])
        hits = db.search_messages("quetzal", limit=5000)
        assert len(hits) == 1000 * (turn + 1)
        assert {h["id"] for h in hits} >= set(ids)


def test_a_crashed_writers_ranges_are_indexed_at_the_next_open(db_path: Path, sql: Any) -> None:
    SessionDB(db_path).close()
    with crashed_writer(db_path, "lost", ["left behind", "also left behind"]):
        pass
    assert counts(sql, db_path) == (2, 0, 1)
    db = SessionDB(db_path)
    wait_for_index(sql, db_path)  # no search, no write: the indexer started at open
    assert [h["content"] for h in db.search_messages("behind")] == ["left behind", "also left behind"]
    db.close()


def test_a_search_indexes_pending_ranges_first(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "ours")
    # Left while we have the file open: nothing wakes our indexer, the search must catch up.
    with crashed_writer(db.db_path, "lost", [f"orphaned {i}" for i in range(700)]):
        assert len(db.search_messages("orphaned", limit=1000)) == 700


def test_a_search_answers_from_the_index_as_it_is_when_it_cannot_catch_up(
        db_path: Path) -> None:
    db = SessionDB(db_path, busy_budget=0.3)
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "alpaca one")
    assert len(db.search_messages("alpaca")) == 1
    with crashed_writer(db_path, "lost", ["alpaca two"], hold_lock=True):
        # Indexing needs the write lock another process holds: the search still answers,
        # from the index as it is, after the busy budget.
        started = time.monotonic()
        assert [h["content"] for h in db.search_messages("alpaca")] == ["alpaca one"]
        assert time.monotonic() - started < 5
    assert len(db.search_messages("alpaca")) == 2
    db.close()


def test_a_closed_file_is_fully_indexed_for_other_programs(db_path: Path, sql: Any) -> None:
    db = SessionDB(db_path)
    db.create_session("s1", "cli")
    for _ in range(5):
        db.append_messages("s1", [{"role": "user", "content": f"zeppelin {i}"} for i in range(600)])
    db.close()
    assert counts(sql, db_path) == (3000, 3000, 0)
    # As hermes-agent searches: plain SQLite, the index alone.
    hits = sql(db_path, "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'zeppelin'")
    assert hits == [(3000,)]


def test_close_gives_up_on_a_locked_file_and_leaves_the_rows_pending(db_path: Path, sql: Any
                                                                    ) -> None:
    db = SessionDB(db_path, busy_budget=0.3)
    with crashed_writer(db_path, "lost", ["stuck"], hold_lock=True):
        started = time.monotonic()
        db.close()
        assert time.monotonic() - started < 5
    assert counts(sql, db_path) == (1, 0, 1)  # durable, waiting for the next opener
    SessionDB(db_path).close()
    assert counts(sql, db_path) == (1, 1, 0)


def test_a_row_another_program_indexed_is_not_indexed_twice(db_path: Path, sql: Any,
                                                            write_sql: Any) -> None:
    SessionDB(db_path).close()
    with crashed_writer(db_path, "lost", ["first draft", "second draft", "third draft"]):
        pass
    # hermes-agent edits a pending row before we open the file: its update trigger indexes it.
    write_sql(db_path, "UPDATE messages SET content = 'final text' WHERE content = 'second draft'")
    assert counts(sql, db_path) == (3, 1, 1)
    db = SessionDB(db_path)
    assert [h["content"] for h in db.search_messages("final")] == ["final text"]
    assert [h["content"] for h in db.search_messages("draft")] == ["first draft", "third draft"]
    db.close()
    assert counts(sql, db_path) == (3, 3, 0)


def test_the_stores_own_index_commits_are_not_foreign(db_path: Path, sql: Any) -> None:
    db = SessionDB(db_path)
    db.create_session("s1", "cli")
    db.foreign_commit_since_last_look()
    db.append_messages("s1", [{"role": "user", "content": f"row {i}"} for i in range(1500)])
    wait_for_index(sql, db_path)
    assert db.foreign_commit_since_last_look() is False
    assert db.own_appends("s1") == db.live_message_count("s1") == 1500
    db.close()
