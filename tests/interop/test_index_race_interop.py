"""Our writer and the real hermes-agent 0.19.0 rewriting the same messages within milliseconds
(issue [H], the search indexes): whatever hermes-agent updates or deletes right after our
commit, while our background indexer has not reached those rows yet, leaves both search
indexes whole and every hit exact, for both programs.

hermes-agent stays up in its own venv (``peer_driver.py``'s ``serve``), so its writes land
inside the few milliseconds our indexer waits for quiet; the test counts how often they did
and fails if the race was not run. The last test does the same on a file whose word index is
laid out as hermes-agent's was before its schema 11 (external content, whose triggers take a
row's text out with FTS5's 'delete'), which hermes-agent 0.19.0 then migrates.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_hermes_agent_interop import DRIVER, PEER_PYTHON, SKIP_REASON

from hermes.state import SessionDB

pytestmark = pytest.mark.skipif(PEER_PYTHON is None, reason=SKIP_REASON)

ROUNDS = 240

INDEXED_TEXT = ("COALESCE(content, '') || ' ' || COALESCE(tool_name, '') || ' ' "
                "|| COALESCE(tool_calls, '')")

#: How many of a session's rows sit in our pending ranges (read in hermes-agent's transaction).
PENDING = ("SELECT COUNT(*) FROM messages m JOIN hermes_fts_pending p "
           "ON m.id BETWEEN p.first_id AND p.last_id WHERE m.session_id = ?")


class Peer:
    """hermes-agent 0.19.0 up on the file: each ``ask`` is one line to it and its answer."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "hermes-agent stopped answering"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def sql(self, *statements: tuple[str, list[Any]]) -> list[list[list[Any]]]:
        answer = self.ask(sql=statements)
        assert "error" not in answer, answer["error"]
        rows: list[list[list[Any]]] = answer["rows"]
        return rows

    def calls(self, *calls: tuple[str, list[Any]]) -> list[Any]:
        results = self.ask(calls=[[method, args, {}] for method, args in calls])["results"]
        assert all("ok" in r for r in results), results
        return [r["ok"] for r in results]


@contextmanager
def hermes_agent(path: Path, home: Path) -> Iterator[Peer]:
    assert PEER_PYTHON is not None
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen(
            [PEER_PYTHON, str(DRIVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=errors, text=True, env={**os.environ, "HERMES_HOME": str(home)},
        )
        try:
            peer = Peer(proc)
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"op": "serve", "db": str(path), "session_id": ""}) + "\n")
            yield peer
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            code = proc.wait(timeout=60)
            errors.seek(0)
            assert code == 0, f"hermes-agent failed:\n{errors.read()[-3000:]}"


def turn(n: int) -> list[dict[str, Any]]:
    """Six messages with words of their own (``w<n>a<i>``), CJK for the trigram index."""
    return [{"role": ("user", "assistant")[i % 2], "content": f"w{n}a{i} 会话记录{n} plain",
             **({"tool_name": "terminal"} if i == 3 else {})} for i in range(6)]


#: hermes-agent's rewrites, one per round in turn: its own SQL, then its ``SessionDB`` methods.
REWRITES = ["update", "delete", "replace_messages", "rewind_to_message", "archive_and_compact",
            "delete_session", "clear_messages", "set_latest_user_api_content", "restore_rewound",
            "rebuild_fts", "optimize_fts"]


def their_rewrite(peer: Peer, n: int, session_id: str, ids: list[int]) -> bool:
    """Round ``n``'s rewrite by hermes-agent of the rows we just wrote. Returns whether any row
    of the session was still waiting for our indexer as it began."""
    target = random.Random(n).choice(ids)
    rewrite = REWRITES[n % len(REWRITES)]
    probe = (PENDING, [session_id])
    if rewrite == "update":
        [[(pending,)], _] = peer.sql(probe, ("UPDATE messages SET content = ? WHERE id = ?",
                                             [f"edited w{n}e", target]))
    elif rewrite == "delete":
        [[(pending,)], _] = peer.sql(probe, ("DELETE FROM messages WHERE id = ?", [target]))
    else:
        args = {
            "replace_messages": [session_id, [{"role": "user", "content": f"replaced w{n}r"}]],
            "rewind_to_message": [session_id, ids[2]],
            "archive_and_compact": [session_id, [{"role": "user", "content": f"summary w{n}s"}]],
            "delete_session": [session_id],
            "clear_messages": [session_id],
            "set_latest_user_api_content": [session_id, turn(n)[4]["content"], "sidecar"],
            "restore_rewound": [session_id, ids[0]],
            "rebuild_fts": [],
            "optimize_fts": [],
        }[rewrite]
        answer = peer.ask(sql=[probe], calls=[[rewrite, args, {}]])
        assert "error" not in answer and "ok" in answer["results"][0], answer
        [[(pending,)]] = answer["rows"]
    return pending > 0


@pytest.mark.parametrize("made_by", ["us", "hermes-agent"])
def test_hermes_agent_rewriting_rows_our_indexer_has_not_reached_leaves_every_hit_exact(
    tmp_path: Path, hermes_home: Path, made_by: str
) -> None:
    path = tmp_path / "state.db"
    if made_by == "us":
        SessionDB(path).close()
    # else hermes-agent creates it, triggers and indexes by its own DDL, as it starts.
    raced = 0
    words: list[str] = []
    with hermes_agent(path, hermes_home) as peer:
        assert peer.calls(("session_count", [])) == [0]  # up, its schema in the file
        with SessionDB(path) as db:
            for n in range(ROUNDS):
                session_id = f"r{n}"
                db.create_session(session_id, "cli")
                rewrite = REWRITES[n % len(REWRITES)]
                if rewrite == "restore_rewound":  # something to restore: rows our rewind took back
                    first = db.append_messages(session_id, turn(n)[:3])
                    db.rewind_to_message(session_id, first[2])
                    ids = first + db.append_messages(session_id, turn(n)[3:])
                else:
                    ids = db.append_messages(session_id, turn(n))
                raced += their_rewrite(peer, n, session_id, ids)
                if rewrite != "delete_session":  # and we write on after it
                    db.append_message(session_id, "assistant", f"after w{n}t")
                words += [f"w{n}a{i}" for i in range(6)] + [f"w{n}{tag}" for tag in "erst"]
                if n % 30 == 29:  # the next search of either side must not fail
                    ours = sorted(h["id"] for h in db.search_messages(f"w{n}a1 OR w{n - 1}a1"))
                    [theirs] = peer.calls(("search_messages", [f"w{n}a1 OR w{n - 1}a1"]))
                    assert sorted(h["id"] for h in theirs) == ours
    # The race ran: most of its rewrites met rows our indexer had not reached yet (and our
    # writer did defer its indexing, whichever program's DDL made the indexes).
    assert raced >= ROUNDS // 4, f"only {raced} of {ROUNDS} rewrites met unindexed rows"

    with hermes_agent(path, hermes_home) as peer:
        # FTS5's own check of each index against the text it holds, in hermes-agent's SQLite.
        for table in ("messages_fts", "messages_fts_trigram"):
            peer.sql((f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)", []))
        # Each index holds exactly one entry per message, with the text its triggers give it.
        [want, *held] = peer.sql(
            (f"SELECT id, {INDEXED_TEXT} FROM messages ORDER BY id", []),
            ("SELECT rowid, content FROM messages_fts ORDER BY rowid", []),
            ("SELECT rowid, content FROM messages_fts_trigram ORDER BY rowid", []),
        )
        assert held == [want, want]
        # Every word is found exactly where it is, by both programs.
        [visible] = peer.sql(("SELECT id, ' ' || content || ' ' FROM messages "
                              "WHERE active = 1 OR compacted = 1", []))
        expected = {w: sorted(i for i, text in visible if f" {w} " in text) for w in words}
        theirs = peer.calls(*[("search_messages", [w, None, None, None, 50]) for w in words])
        found_by_them = {w: sorted(h["id"] for h in hits) for w, hits in zip(words, theirs, strict=True)}
    with SessionDB(path) as db:
        found_by_us = {w: sorted(h["id"] for h in db.search_messages(w, limit=50)) for w in words}
    assert found_by_them == expected
    assert found_by_us == expected
    assert sum(map(bool, expected.values())) > len(words) // 3  # most of ours are still there


#: A word index laid out as hermes-agent laid it out before its schema 11 (and as other
#: programs still do): external content, whose triggers take a row's old text out with FTS5's
#: 'delete' command, which must name exactly the text the index holds.
OLDER_LAYOUT = """
DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;
DROP TABLE messages_fts;
CREATE VIRTUAL TABLE messages_fts USING fts5(content, content=messages, content_rowid=id);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
UPDATE schema_version SET version = 10;
"""


def other_program(path: Path, script: str) -> None:
    """``script`` run by another program's ``sqlite3`` (hermes-agent's venv, not its
    ``SessionDB``, which would migrate the file first)."""
    assert PEER_PYTHON is not None
    run = subprocess.run(
        [PEER_PYTHON, "-c", "import sqlite3, sys; sqlite3.connect(sys.argv[1], timeout=30, "
                            "isolation_level=None).executescript(sys.argv[2])", str(path), script],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, run.stderr[-2000:]


def test_an_index_of_an_older_layout_stays_whole_under_both_writers_and_then_migrates(
    tmp_path: Path, hermes_home: Path
) -> None:
    path = tmp_path / "state.db"
    SessionDB(path).close()
    other_program(path, OLDER_LAYOUT)
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        ids = db.append_messages("s", turn(0))
        # Right after our commit the other program rewrites two of our rows with its triggers.
        other_program(path, f"UPDATE messages SET content = 'edited w0e' WHERE id = {ids[1]};"
                            f"DELETE FROM messages WHERE id = {ids[2]};")
        other_program(path, "INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
        ours = {w: [h["id"] for h in db.search_messages(w)] for w in ("w0a0", "w0e", "w0a1", "w0a2")}
    assert ours == {"w0a0": [ids[0]], "w0e": [ids[1]], "w0a1": [], "w0a2": []}
    # hermes-agent 0.19.0 opens the file: its schema 11 step lays the indexes out its way and
    # fills them from the messages; it finds what we found.
    with hermes_agent(path, hermes_home) as peer:
        [[(version,)]] = peer.sql(("SELECT version FROM schema_version", []))
        theirs = peer.calls(*[("search_messages", [w]) for w in ours])
    assert version == 22
    assert {w: [h["id"] for h in hits] for w, hits in zip(ours, theirs, strict=True)} == ours
