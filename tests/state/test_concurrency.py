"""Concurrent writers on one ``state.db``: two real processes, and 50 threads
of one process merged by group commit."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from hermes.errors import SessionNotFoundError
from hermes.state import SessionDB


FTS_MISMATCHES = """
SELECT
  (SELECT COUNT(*) FROM messages m LEFT JOIN messages_fts f ON f.rowid = m.id WHERE f.rowid IS NULL),
  (SELECT COUNT(*) FROM messages_fts f LEFT JOIN messages m ON m.id = f.rowid WHERE m.id IS NULL),
  (SELECT COUNT(*) FROM messages m JOIN messages_fts f ON f.rowid = m.id
    WHERE f.content != COALESCE(m.content, '') || ' ' || COALESCE(m.tool_name, '') || ' '
                       || COALESCE(m.tool_calls, ''))
"""


def assert_fts_matches_messages(raw_sql: Any, path: Path) -> None:
    """Every message row is in the word index, exactly as the schema's trigger
    would have put it, and the index holds nothing else."""
    assert raw_sql(path, FTS_MISMATCHES) == [(0, 0, 0)]

WRITER = r"""
import json, os, sys, time
from hermes.state import SessionDB

path, name, go = sys.argv[1], sys.argv[2], sys.argv[3]
db = SessionDB(path)                       # both processes open (and create) the file at once
db.create_session("shared", "cli")
db.create_session("own-" + name, "cli")
with open(go + "." + name, "w"):
    pass
while not os.path.exists(go):
    time.sleep(0.001)
ids = []
i = 0
while i < 500:
    calls = [{"id": f"{name}-{i}-{k}", "type": "function", "function": {"name": "t", "arguments": "{}"}}
             for k in range(i % 3)] or None
    if (i // 10) % 2 == 0:                 # ten single appends ...
        ids.append(db.append_message("shared", "assistant", f"{name}-{i}", tool_calls=calls))
        i += 1
    else:                                  # ... then a batch of ten
        batch = [{"role": "user", "content": f"{name}-{j}",
                  "tool_calls": [{"id": f"{name}-{j}-{k}"} for k in range(j % 3)]}
                 for j in range(i, i + 10)]
        got = db.append_messages("shared", batch)
        assert got == list(range(got[0], got[0] + 10)), got   # one transaction: contiguous ids
        ids.extend(got)
        i += 10
    if i % 50 == 0:
        db.append_message("own-" + name, "user", str(i))
    if i == 250:                           # meet halfway, so the runs surely overlap
        open(go + ".half." + name, "w").close()
        other = "B" if name == "A" else "A"
        while not os.path.exists(go + ".half." + other):
            time.sleep(0.001)
db.close()
print(json.dumps(ids))
"""


def test_two_processes_append_to_one_file(tmp_path: Path, sql: Any) -> None:
    path = tmp_path / "state.db"
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("A", "B")
    ]
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"go.{n}").exists() for n in "AB"):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [
            p.communicate() for p in procs if p.poll() is not None]
        time.sleep(0.005)
    go.touch()
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "locked" not in err.lower(), err
    import json

    ids = {name: json.loads(out) for name, (out, _) in zip("AB", outs)}
    db = SessionDB(path)
    rows = db.get_messages("shared")
    assert len(rows) == 1000
    session = db.get_session("shared")
    assert session is not None
    assert session["message_count"] == 1000
    expected_calls = 2 * sum(i % 3 for i in range(500))
    assert session["tool_call_count"] == expected_calls == sum(len(r["tool_calls"] or []) for r in rows)
    by_id = {r["id"]: r["content"] for r in rows}
    for name in "AB":
        assert len(ids[name]) == 500 and ids[name] == sorted(ids[name])
        assert [by_id[i] for i in ids[name]] == [f"{name}-{i}" for i in range(500)]
        assert db.live_message_count(f"own-{name}") == 10
    # the writers really interleaved (otherwise this test proves little)
    owners = [r["content"][0] for r in rows]
    switches = sum(1 for a, b in zip(owners, owners[1:]) if a != b)
    assert switches >= 2, "the two processes never wrote concurrently"
    db.close()
    assert_fts_matches_messages(sql, path)


def test_group_commit_fifty_threads_each_get_their_own_result(tmp_path: Path, sql: Any) -> None:
    db = SessionDB(tmp_path / "state.db")
    n_threads, rounds = 50, 12
    for t in range(n_threads):
        db.create_session(f"conv-{t}", "gateway")
    barrier = threading.Barrier(n_threads + 1)
    errors: dict[str, BaseException] = {}
    ghost_errors: list[BaseException] = []
    returned: dict[int, list[int]] = {}

    def conversation(t: int) -> None:
        try:
            barrier.wait()
            ids: list[int] = []
            for r in range(rounds):
                if r % 3 == 2:
                    ids += db.append_messages(f"conv-{t}", [
                        {"role": "assistant", "content": f"{t}-{r}-a",
                         "tool_calls": [{"id": f"{t}-{r}"}]},
                        {"role": "tool", "content": f"{t}-{r}-b", "tool_call_id": f"{t}-{r}"},
                    ])
                else:
                    ids.append(db.append_message(f"conv-{t}", "user", f"{t}-{r}"))
            returned[t] = ids
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors[f"conv-{t}"] = exc

    def ghost() -> None:
        barrier.wait()
        for r in range(rounds):
            try:
                db.append_messages("no-such-session", [{"role": "user", "content": f"ghost-{r}"}])
            except SessionNotFoundError as exc:
                ghost_errors.append(exc)

    threads = [threading.Thread(target=conversation, args=(t,)) for t in range(n_threads)]
    threads.append(threading.Thread(target=ghost))
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not any(th.is_alive() for th in threads)
    assert errors == {}
    assert len(ghost_errors) == rounds and all("no-such-session" in str(e) for e in ghost_errors)
    per_conv = rounds + rounds // 3  # singles + 2 per batch
    for t in range(n_threads):
        rows = db.get_messages(f"conv-{t}")
        expected: list[Any] = []
        for r in range(rounds):
            expected += [f"{t}-{r}-a", f"{t}-{r}-b"] if r % 3 == 2 else [f"{t}-{r}"]
        assert [m["content"] for m in rows] == expected
        assert [m["id"] for m in rows] == returned[t]
        session = db.get_session(f"conv-{t}")
        assert session is not None
        assert session["message_count"] == per_conv and session["tool_call_count"] == rounds // 3
    assert db.get_session("no-such-session") is None
    assert db.get_messages("no-such-session") == []
    assert len(db.search_messages("a", limit=1000)) == n_threads * (rounds // 3)
    db.close()
    assert_fts_matches_messages(sql, tmp_path / "state.db")
