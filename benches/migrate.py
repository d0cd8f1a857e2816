"""``hermes migrate`` on 100,000 messages (issue [K]): a ``state.db`` into a new file, into a
PostgreSQL database, and back from it; each a second time (nothing new to copy); and beside
them the floor: the same rows and index entries written by bare SQL in one transaction.

    python benches/migrate.py [--quick] [--postgres-url URL] [--rounds N] [--publish | --out PATH]

The source: 1,000 sessions of 100 messages (``benches/workload.py``, ~600 bytes each), written
by our ``SessionDB``. Each measurement is one whole ``hermes migrate SOURCE TARGET --json`` in
a fresh process into a fresh target (a new file, or a new database on the server), at the
command's own durability (``synchronous=FULL``; on the server, its ``synchronous_commit``):
its wall time, and the command's own figures: copying, then filling the target's search
index (SQLite's word and trigram FTS5 indexes; PostgreSQL's side table `hermes_search`, filled
by its indexer). The floor (file to
file only) is one transaction of ``INSERT INTO ... SELECT`` from the ATTACHed source and a
set-based insert into each search index, in Python's ``sqlite3`` (no per-row triggers). Rounds
alternate which of ours and the floor runs first (A B B A), since the machine is shared.

``--postgres-url`` (default ``$HERMES_TEST_POSTGRES_URL``; run under ``scripts/postgres``)
names a server whose user may create databases; without one the PostgreSQL rows are left
out. Writes ``migrate.json`` (``migrate-quick.json``) into ``target/bench/results/``
(``--publish``: ``benches/results/``, which ``benches/report.py`` renders into BENCHMARKS.md)
and prints the Markdown section. A full run takes ~10 minutes here; ``--quick`` (10,000
messages, one round) about one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib and the workload

from benchlib import paths, postgres, record  # noqa: E402
from benchlib.render import table  # noqa: E402
from benchlib.stats import merge  # noqa: E402

RESULTS = paths.PUBLISHED_RESULTS / "migrate.json"


def log(message: str, started: float) -> None:
    print(f"migrate [{time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)


def build(path: Path, sessions: int, per_session: int) -> dict[str, Any]:
    import workload

    from hermes.state import SessionDB

    t0 = time.perf_counter()
    with SessionDB(path, synchronous="NORMAL", busy_budget=600) as db:
        for n in range(sessions):
            db.create_session(f"s{n:05d}", "cli", started_at=1.7e9 + n, model="bench-model")
            db.append_messages(f"s{n:05d}", workload.messages(n * per_session,
                                                              (n + 1) * per_session))
    return {"sessions": sessions, "messages": sessions * per_session,
            "bytes": path.stat().st_size, "seconds": round(time.perf_counter() - t0, 1)}


def ours(source: str, target: str) -> dict[str, Any]:
    """One ``hermes migrate`` in a fresh process: wall time and its own figures."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hermes.cli", "migrate", source, target,
                           "--json"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"hermes migrate failed: {done.stderr}")
    summary = json.loads(done.stdout)
    return {"wall_s": round(wall, 3), "seconds": summary["seconds"],
            "index_s": summary["search_index_seconds"], "copied": summary["copied"]}


_FLOOR = """
import sqlite3, sys, time
source, target = sys.argv[1], sys.argv[2]
conn = sqlite3.connect(target, isolation_level=None)
conn.execute("PRAGMA synchronous = FULL")
conn.execute("ATTACH ? AS src", (source,))
t0 = time.perf_counter()
conn.execute("BEGIN IMMEDIATE")
for trigger in ("messages_fts_insert", "messages_fts_trigram_insert"):
    conn.execute(f"DROP TRIGGER {trigger}")
for table in ("sessions", "messages"):
    conn.execute(f"INSERT INTO main.{table} SELECT * FROM src.{table}")
text = "COALESCE(content, '') || ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')"
for index in ("messages_fts", "messages_fts_trigram"):
    conn.execute(f"INSERT INTO {index}(rowid, content) SELECT id, {text} FROM main.messages")
conn.execute("COMMIT")
print(time.perf_counter() - t0)
"""


def floor(source: Path, target: Path) -> dict[str, Any]:
    """The same rows and index entries by bare SQL, in one transaction of a fresh process."""
    from hermes.state import SessionDB

    SessionDB(target).close()  # our schema, empty
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _FLOOR, str(source), str(target)],
                          capture_output=True, text=True, check=True)
    return {"wall_s": round(time.perf_counter() - t0, 3),
            "seconds": round(float(done.stdout), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10,000 messages, one round")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    ap.add_argument("--postgres-url", default=os.environ.get("HERMES_TEST_POSTGRES_URL", ""))
    paths.add_output_arguments(ap, "benches/results/migrate.json")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="hermes-bench-migrate-"))
    doc = record.start("migrate", args.quick, scratch)
    doc["rounds"] = rounds
    try:
        source = scratch / "source.db"
        doc["store"] = build(source, 100 if args.quick else 1000, 100)
        log(f"source: {doc['store']}", started)
        if args.postgres_url:
            doc["server"] = {setting: postgres.run(args.postgres_url, f"SHOW {setting}")
                             for setting in ("server_version", "fsync", "synchronous_commit")}
        samples: dict[str, list[dict[str, Any]]] = {}
        for n in range(rounds):
            files = [scratch / f"round{n}-{name}.db" for name in ("ours", "floor", "back")]
            steps = [("file → new file", lambda: ours(str(source), str(files[0]))),
                     ("floor: file → new file (bare SQL)", lambda: floor(source, files[1]))]
            if n % 2:
                steps.reverse()
            steps.append(("file → file again (nothing new)",
                          lambda: ours(str(source), str(files[0]))))
            if args.postgres_url:
                server = postgres.fresh_database(args.postgres_url, "bench_migrate", "FULL")
                steps += [("file → PostgreSQL", lambda: ours(str(source), server)),
                          ("file → PostgreSQL again (nothing new)",
                           lambda: ours(str(source), server)),
                          ("PostgreSQL → new file", lambda: ours(server, str(files[2])))]
            for name, run in steps:
                sample = run()
                samples.setdefault(name, []).append(sample)
                log(f"round {n}: {name}: {sample}", started)
            for file in files:
                for path in file.parent.glob(file.name + "*"):
                    path.unlink()
            if args.postgres_url:
                postgres.drop_database(args.postgres_url, server)
        doc["results"] = {name: merge([{key: value for key, value in s.items() if key != "copied"}
                                       for s in runs])
                          for name, runs in samples.items()}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return record.conclude(doc, started, args, "migrate", render)


def render(doc: dict[str, Any]) -> str:
    store, results = doc["store"], doc["results"]
    floor_s = results.get("floor: file → new file (bare SQL)", {}).get("seconds")
    rows = []
    for name, row in results.items():
        index = row.get("index_s")
        copy = row["seconds"] - index if index is not None else row["seconds"]
        per_s = store["messages"] / row["seconds"] if "again" not in name else None
        rows.append([name, f"{row['wall_s']:.2f} s", f"{copy:.2f} s",
                     "—" if index is None else f"{index:.2f} s",
                     f"{row['seconds']:.2f} s", "—" if per_s is None else f"{per_s:,.0f}",
                     f"{row['seconds'] / floor_s:.2f}×" if floor_s and name.startswith("file → new")
                     else "—"])
    server = doc.get("server")
    on_server = (f"The server: PostgreSQL {server['server_version']}, fsync {server['fsync']}, "
                 f"synchronous_commit {server['synchronous_commit']}, on this machine over "
                 "loopback. " if server else "No PostgreSQL server was given: no rows for it. ")
    lines = [
        f"## Migrating a store: {store['messages']:,} messages (issue [K])",
        "",
        f"A separate run: `{doc['command']}` at {doc['utc']} ({doc['wall_s']} s; load "
        f"{doc['loadavg_start']} -> {doc['loadavg_end']}; the machine was shared with other "
        f"work). The source: {store['sessions']:,} sessions of "
        f"{store['messages'] // store['sessions']} messages ({store['messages']:,} messages, "
        f"{store['bytes'] / 1e6:.0f} MB with its search indexes). Each row is the median of "
        f"{doc['rounds']} runs of `hermes migrate SOURCE TARGET --json` in a fresh process into a "
        "fresh target: `wall` is the whole command (interpreter start included), `copying` and "
        "`search index` the command's own split of its work (the target's search index filled "
        "from the copied rows before it returns: SQLite's word and trigram FTS5 indexes, "
        "PostgreSQL's side table `hermes_search`), `msg/s` "
        "messages over the command's own time. `again` is a second run onto the same target: "
        "every row read, none written. The floor writes the same rows and index entries by bare "
        "SQL in one transaction (`INSERT INTO ... SELECT` from the ATTACHed file, set-based "
        f"index inserts); `× floor` is ours over it, by the command's own time. {on_server}"
        "Script: `benches/migrate.py` (`make bench-migrate`).",
        "",
        *table(["run", "wall", "copying", "search index", "command's own time", "msg/s",
                "× floor"], rows, right=(1, 2, 3, 4, 5, 6)),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
