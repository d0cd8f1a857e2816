"""Search on PostgreSQL beside SQLite (issue [K]): the same messages in a ``state.db`` and in a
PostgreSQL database, the same queries, our ``SessionDB.search_messages`` on each.

    python benches/pg_search.py [--quick] [--postgres-url URL] [--publish | --out PATH]

The messages: ``benches/workload.py``'s transcript (~600 bytes each), 100,000 of them over 100
sessions (``--quick``: 20,000 over 20), written by ``append_messages`` (one call per session,
``synchronous=NORMAL``) into each store. On PostgreSQL a trigger marks every inserted range
pending and the store's background indexer fills the side table ``hermes_search``; the time
from the last append until nothing is pending is measured (``index_s``), and the rows it
indexed per second over the appends and that wait. The queries are ``benches/scale.py``'s
(common word, rare token, phrase, prefix, CJK), ``limit=20``, one untimed warm-up each; every
kind runs on both stores back to back, who goes first alternating (A B B A), since the machine
is shared. ``same ids`` counts queries whose 20 hits are the same messages on both (the same
rows have the same ids in both stores). The peers with a PostgreSQL store (LangGraph's
``PostgresSaver``, OpenAI Agents' ``SQLAlchemySession``) have no search.

``--postgres-url`` (default ``$HERMES_TEST_POSTGRES_URL``; run under ``scripts/postgres``) names
a server whose user may create databases. Writes ``pg_search.json`` (``pg_search-quick.json``)
into ``target/bench/results/`` (``--publish``: ``benches/results/``, which ``benches/report.py``
renders into BENCHMARKS.md) and prints the Markdown section. A full run takes ~5 minutes here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib and the other benches

from benchlib import paths, postgres, record, stats  # noqa: E402
from benchlib.render import ms, ratio, table  # noqa: E402

RESULTS = paths.PUBLISHED_RESULTS / "pg_search.json"


def log(message: str, started: float) -> None:
    print(f"pg_search [{time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)


def build(where: str, messages: int, sessions: int) -> dict[str, Any]:
    """Writes the transcript into the store at ``where``; the appends' time."""
    import workload

    from hermes.state import SessionDB

    per = messages // sessions
    spent = 0.0
    with SessionDB(where, synchronous="NORMAL", busy_budget=600) as db:
        for s in range(sessions):
            batch = workload.messages(s * per, (s + 1) * per)
            t0 = time.perf_counter()
            db.create_session(f"s{s:05d}", "cli", started_at=1.7e9 + s)
            db.append_messages(f"s{s:05d}", batch)
            spent += time.perf_counter() - t0
        appended = time.perf_counter()
    return {"messages": per * sessions, "append_s": round(spent, 2), "appended": appended}


def wait_indexed(url: str, appended: float) -> float:
    """Seconds from ``appended`` (the last append's end, ``perf_counter``) until the server has
    nothing pending for search. A store is kept open meanwhile: a closed one leaves its pending
    rows to the next indexer or search, and its own indexer stopped at ``build``'s close."""
    from hermes.state import SessionDB

    with SessionDB(url):
        while postgres.run(url, "SELECT COUNT(*) FROM hermes_search_pending") != "0":
            time.sleep(0.1)
    return time.perf_counter() - appended


def search(where: str, queries: list[str], budget_s: float) -> dict[str, Any]:
    """Times each query (until the budget is spent, at least three); the hit ids."""
    from hermes.state import SessionDB

    with SessionDB(where) as db:
        db.search_messages(queries[0], limit=20)  # warm-up, untimed
        samples, ids = [], []
        start = time.monotonic()
        for i, query in enumerate(queries):
            t0 = time.perf_counter_ns()
            hits = db.search_messages(query, limit=20)
            samples.append(time.perf_counter_ns() - t0)
            ids.append(sorted(h["id"] for h in hits))
            if i >= 2 and time.monotonic() - start > budget_s:
                break
    return {"ns": samples, "ids": ids}


def main() -> int:
    import scale

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20,000 messages")
    ap.add_argument("--postgres-url", default=os.environ.get("HERMES_TEST_POSTGRES_URL", ""))
    paths.add_output_arguments(ap, "benches/results/pg_search.json")
    args = ap.parse_args()
    if not args.postgres_url:
        print("pg_search: no server (--postgres-url, or run under scripts/postgres)", file=sys.stderr)
        return 2
    messages, sessions, budget_s = (20_000, 20, 3.0) if args.quick else (100_000, 100, 8.0)
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="hermes-bench-pg-search-"))
    doc = record.start("pg_search", args.quick, scratch)
    doc["server"] = postgres.run(args.postgres_url, "SELECT version()").split(" on ")[0]
    stores = {"sqlite": str(scratch / "state.db"), "postgresql": postgres.fresh_database(
        args.postgres_url, "bench_pg_search", "NORMAL")}
    try:
        doc["build"] = {}
        for system, where in stores.items():
            log(f"building {messages:,} messages in {system}", started)
            doc["build"][system] = build(where, messages, sessions)
        log("waiting for PostgreSQL's indexer", started)
        pg = doc["build"]["postgresql"]
        index_s = wait_indexed(stores["postgresql"], pg.pop("appended"))
        doc["build"]["sqlite"].pop("appended")
        pg["index_s"] = round(index_s, 2)
        pg["indexed_per_s"] = round(messages / (pg["append_s"] + index_s))
        # What autovacuum does within a minute of such a load: without statistics the planner
        # hashes every message to join a handful of hits.
        postgres.run(stores["postgresql"], "ANALYZE")
        queries = scale.search_queries(messages)
        doc["queries"] = queries
        doc["kinds"] = {}
        for k, (kind, qs) in enumerate(queries.items()):
            order = list(stores) if k % 2 == 0 else list(reversed(stores))
            got = {system: search(stores[system], qs, budget_s) for system in order}
            pairs = list(zip(got["sqlite"]["ids"], got["postgresql"]["ids"]))
            doc["kinds"][kind] = {
                **{system: stats.summary(got[system]["ns"]) for system in stores},
                "same_ids": sum(a == b for a, b in pairs), "compared": len(pairs),
            }
            log(f"{kind}: done", started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        postgres.drop_database(args.postgres_url, stores["postgresql"])
    return record.conclude(doc, started, args, RESULTS.stem, render)


# -- rendering (stdlib only: benches/report.py imports this module) ------------


def render(doc: dict[str, Any]) -> str:
    from scale import KIND_LABEL

    lite, pg = doc["build"]["sqlite"], doc["build"]["postgresql"]
    load = f"load {doc['loadavg_start']} -> {doc['loadavg_end']}"
    lines = [
        "## Search on PostgreSQL beside SQLite (issue [K])",
        "",
        f"A separate run: `{doc['command']}` at {doc['utc']} ({doc['wall_s']} s; {load}; the "
        "machine was shared with other work). The same "
        f"{pg['messages']:,} messages (`benches/workload.py`, ~600 B each) in a `state.db` and in a "
        f"PostgreSQL database ({doc['server']}, fsync off, on this machine over loopback), written by "
        f"`append_messages` at `synchronous=NORMAL`: {lite['append_s']} s into the file (its indexer "
        f"keeps up inside the calls' pauses), {pg['append_s']} s into the server, whose background "
        f"indexer had nothing pending {pg['index_s']} s after the last append (its store closed, a "
        f"new one open meanwhile) "
        f"(**{pg['indexed_per_s']:,} msg/s** written and indexed), then `ANALYZE`d (what autovacuum does "
        "within a minute of such a load; before it, a search's plan can read every message). Each kind's queries run on "
        "both stores back to back, who goes first alternating; `limit=20`, one untimed warm-up. "
        "*Same ids*: queries whose 20 hits are the same messages on both; both find the same matches "
        "(the conformance suite compares them whole), but rank them differently (bm25, `ts_rank`), so "
        "where many match equally well the two pick different 20. The peers with a "
        "PostgreSQL store (LangGraph's `PostgresSaver`, OpenAI Agents' `SQLAlchemySession`) have no "
        "search. Script: `benches/pg_search.py` (`scripts/postgres make bench-pg-search`).",
        "",
    ]
    rows = []
    for kind, k in doc["kinds"].items():
        s, p = k["sqlite"], k["postgresql"]
        rows.append([
            KIND_LABEL[kind], f"`{doc['queries'][kind][0]}`",
            f"{ms(s.get('p50_ms'))} / {ms(s.get('p90_ms'))} ({s.get('n', 0)})",
            f"{ms(p.get('p50_ms'))} / {ms(p.get('p90_ms'))} ({p.get('n', 0)})",
            ratio(p.get("p50_ms"), s.get("p50_ms")), f"{k['same_ids']}/{k['compared']}",
        ])
    lines += table(["query kind", "e.g.", "SQLite p50 / p90 (n)", "PostgreSQL p50 / p90 (n)",
                    "PostgreSQL ÷ SQLite", "same ids"], rows)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
