"""Scale workloads (SPEC §9, issue [E]): full-text search over 1M messages, and
a database growing from 1 to 100,000 sessions. Ours vs hermes-agent 0.19.0,
side by side in one run.

    python benches/scale.py [--quick] [--sync FULL] [--parts search,growth] [--per-session N]

1. **search**: one ``state.db`` of 1,000,000 messages (``benches/workload.py``,
   ~600 B each) over 1,000 sessions, written by our ``SessionDB.append_messages``
   (one call of 1,000 messages per session, ``synchronous=NORMAL``). Closing it
   indexes the rows our deferred indexer has not reached yet; the file is then
   checked complete (rows in ``messages_fts`` = rows in ``messages``, nothing in
   ``hermes_fts_pending``) and copied for hermes-agent, so both search the same
   bytes. 200 queries of five kinds, ``limit=20``: ours
   ``SessionDB.search_messages(q)``, hermes-agent's
   ``hermes_state.SessionDB(path).search_messages(q)`` in the peer venv.
   The OpenAI Agents SDK session and LangGraph's checkpointer have no search.
2. **growth**: two files grown to 1, 100, 1k, 10k, 100k sessions (a 100-message
   probe session, then sessions of 5 messages), ours and one created by
   hermes-agent (so it carries its own schema: trigram index and triggers).
   Both are grown by OUR bulk writer (hermes-agent writes ~1k msg/s: 500k rows
   of its own would take ~8 minutes; the rows are the same either way), and
   checked fully indexed before each checkpoint. At each checkpoint each system
   opens its file and measures p50 of: a 20-message flush into a fresh session
   (``AIAgent._flush_messages_to_session_db`` as ``benches/driver.py`` drives
   it), loading the 100-message transcript, the live ``message_count`` read,
   and the first page of the session list.

Every system runs in its own process (ours in this interpreter, hermes-agent in
the peer venv), a worker of ``benchlib.protocol``; timing is ``perf_counter_ns``
inside that process. Writes ``scale.json`` (``scale-quick.json`` with
``--quick``) and draws ``scale_vs_sessions[-quick].png`` with the peer venv's
matplotlib, into ``target/bench/results/`` and ``target/bench/plots/``; with
``--publish`` into ``benches/results/`` and ``benches/plots/``, where
``benches/report.py`` finds them for BENCHMARKS.md (``--out PATH``: the results
file there, its plot in ``plots/`` beside it). Prints the Markdown section. A
full run takes ~8 minutes here; ``--quick`` (100k messages, up to 10k
sessions) ~1 minute.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib and the other benches

import workload  # noqa: E402
from benchlib import paths, record, protocol, stats  # noqa: E402
from benchlib.indexes import index_state  # noqa: E402
from benchlib.machine import code_identity, loadavg  # noqa: E402
from benchlib.render import g, ms, ratio, table  # noqa: E402

ns = time.perf_counter_ns
#: The published results file and plot (``--publish``; BENCHMARKS.md shows them).
RESULTS = paths.PUBLISHED_RESULTS / "scale.json"
PLOT = paths.PUBLISHED_PLOTS / "scale_vs_sessions.png"

#: The query kinds, in report order, with the number of queries of each (200 in all).
KINDS = {"common": 45, "rare": 45, "phrase": 45, "prefix": 45, "cjk": 20}
KIND_LABEL = {
    "common": "common word",
    "rare": "rare token (one tool-call id)",
    "phrase": "two-word phrase",
    "prefix": "prefix (3 letters + *)",
    "cjk": "CJK word (2 characters)",
}
#: Growth measurements, in report order.
OPS = {
    "flush": "20-message flush into a fresh session",
    "settle": "index work left after the flushes (hermes only)",
    "load": "load the 100-message transcript",
    "count": "live message_count read",
    "list": "session list, first page (20)",
    "list_active": "session list by last activity (hermes-agent only)",
}
NAME = {"hermes": "hermes", "upstream": "hermes-agent"}
PROBE = "probe"  # the 100-message session every checkpoint loads
#: Busy budget of the bulk writers' stores. Our store indexes rows after the
#: commit and a close indexes what is still pending, bounded by the busy
#: budget; the bulk phases give it all the time it needs, so a file is fully
#: indexed (for hermes-agent too, which knows nothing of the pending table)
#: before anything is timed on it.
DRAIN_BUDGET = 3600.0


def plan(quick: bool) -> dict[str, Any]:
    """Sizes and per-measurement time budgets. Quick keeps the shapes.

    5 messages per growth session: filling hermes-agent's trigram index is
    most of a full run's time (~4 ms a session of 10 messages), and what the
    growth part measures depends on the number of sessions, not on their
    length (the search part has the 1M messages)."""
    if quick:
        return {
            "search": {"messages": 100_000, "sessions": 100, "budget_s": 8},
            "growth": {
                "checkpoints": [1, 100, 1000, 10_000], "per_session": 5, "probe": 100,
                "flushes": 10, "loads": 20, "counts": 500, "lists": 20, "budget_s": 2, "rounds": 2,
            },
        }
    return {
        "search": {"messages": 1_000_000, "sessions": 1000, "budget_s": 15},
        "growth": {
            "checkpoints": [1, 100, 1000, 10_000, 100_000], "per_session": 5, "probe": 100,
            "flushes": 15, "loads": 30, "counts": 1000, "lists": 30, "budget_s": 4, "rounds": 2,
        },
    }


# -- the queries (the same list for both systems) ----------------------------


def search_queries(total: int, seed: int = 7) -> dict[str, list[str]]:
    """Deterministic queries over the workload's text, ``KINDS[k]`` of each kind.

    Words come from the transcript's own texts, so every query has matches.
    The rare token is the number in a tool-call id (``call_00012345``): the
    tokenizer splits it off, and it occurs in exactly one message."""
    rng = random.Random(seed)
    texts = [workload.message(i)["content"] for i in range(workload.PERIOD)]
    words = [[w for w in t.split() if w.isascii() and w.isalpha()] for t in texts]
    freq = Counter(w for ws in words for w in ws)
    pairs = Counter(p for ws in words for p in set(zip(ws, ws[1:])))
    common = [w for w, _ in freq.most_common(KINDS["common"])]
    phrases = sorted(p for p, n in pairs.items() if n >= 3)
    prefixes = sorted({w[:3] for w in freq if len(w) >= 5})
    return {
        "common": common,
        "rare": [f"{k:08d}" for k in rng.sample(range(total // 3), KINDS["rare"])],
        "phrase": [f'"{a} {b}"' for a, b in rng.sample(phrases, KINDS["phrase"])],
        "prefix": [f"{p}*" for p in cycle(prefixes, KINDS["prefix"], rng)],
        "cjk": cycle(["北京", "東京", "서울"], KINDS["cjk"], rng),
    }


def cycle(items: list[str], n: int, rng: random.Random) -> list[str]:
    out = (items * (n // len(items) + 1))[:n]
    rng.shuffle(out)
    return out


# -- worker side: runs in the measured system's own interpreter ---------------


def timed(fn: Callable[[int], Any], n: int, budget_s: float, least: int = 3) -> dict[str, Any]:
    """Calls ``fn(i)`` up to ``n`` times (at least ``least``, then until the
    budget runs out); returns the nanosecond samples and the last value."""
    gc.collect()
    samples: list[int] = []
    value = None
    start = time.monotonic()
    for i in range(n):
        t0 = ns()
        value = fn(i)
        samples.append(ns() - t0)
        if i + 1 >= least and time.monotonic() - start > budget_s:
            break
    return {"ns": samples, "capped": len(samples) < n, "value": value}


class Server:
    """One system's side of ``benchlib.protocol``: each request names one of these methods."""

    def __init__(self, system: str, home: str) -> None:
        os.environ["HERMES_HOME"] = home  # either program may write config or logs there
        self.system = system

    # ours only: the bulk writer
    def build(self, path: str, messages: int, sessions: int) -> dict[str, Any]:
        """Writes ``messages`` rows over ``sessions`` sessions, one
        ``append_messages`` call per session. Only the store calls are timed
        (generating the dicts is the workload's cost, not the store's)."""
        from hermes.state import SessionDB

        db = SessionDB(path, synchronous="NORMAL", busy_budget=DRAIN_BUDGET)
        per = messages // sessions
        spent = 0
        wall = ns()
        for s in range(sessions):
            batch = workload.messages(s * per, (s + 1) * per)
            t0 = ns()
            db.create_session(f"s{s:05d}", "cli")
            db.append_messages(f"s{s:05d}", batch)
            spent += ns() - t0
        t0 = ns()
        db.close()  # indexes whatever the background indexer has not yet
        close = ns() - t0
        return {"messages": per * sessions, "append_s": spent / 1e9, "close_s": close / 1e9,
                "store_s": (spent + close) / 1e9, "wall_s": (ns() - wall) / 1e9, "bytes": Path(path).stat().st_size}

    def grow(self, path: str, have: int, want: int, per_session: int, probe: int) -> dict[str, Any]:
        """Grows the file from ``have`` to ``want`` sessions: first the probe
        session, then sessions of ``per_session`` messages."""
        from hermes.state import SessionDB

        db = SessionDB(path, synchronous="NORMAL", busy_budget=DRAIN_BUDGET)
        t0 = ns()
        written = 0
        for n in range(have, want):
            sid, msgs = (PROBE, workload.messages(0, probe)) if n == 0 else (
                f"grow-{n:06d}", workload.messages(n * per_session, (n + 1) * per_session))
            db.create_session(sid, "cli")
            db.append_messages(sid, msgs)
            written += len(msgs)
        db.close()
        return {"messages": written, "seconds": (ns() - t0) / 1e9}

    def drain(self, path: str) -> dict[str, Any]:
        """Opens and closes the file, which indexes the rows still pending."""
        from hermes.state import SessionDB

        t0 = ns()
        SessionDB(path, busy_budget=DRAIN_BUDGET).close()
        return {"seconds": (ns() - t0) / 1e9}

    # hermes-agent only: a file with its own schema, for the growth part
    def create(self, path: str) -> dict[str, Any]:
        import hermes_state

        hermes_state.SessionDB(Path(path)).close()
        return {}

    # both systems
    def open_search(self, path: str, mode: str) -> tuple[Any, int]:
        """The store to search, and how long opening it took (ns)."""
        t0 = ns()
        if self.system == "hermes":
            from hermes.state import SessionDB

            return SessionDB(path), ns() - t0
        import hermes_state

        if mode == "migrate":
            # Its real first open of our file: rebuilds messages_fts and builds
            # its trigram index over every row before returning.
            return hermes_state.SessionDB(Path(path)), ns() - t0
        db = hermes_state.SessionDB(Path(path), read_only=True)
        # The read-only open skips its schema probe, which is what turns
        # search on; the word index it would find is this file's. Our queries
        # never take its trigram path (CJK runs of 3+ characters only).
        db._fts_enabled = True
        return db, ns() - t0

    def search(self, path: str, queries: dict[str, list[str]], budget_s: float, mode: str) -> dict[str, Any]:
        db, open_ns = self.open_search(path, mode)
        out: dict[str, Any] = {"open_s": open_ns / 1e9, "kinds": {}}
        try:
            for kind, qs in queries.items():
                db.search_messages(qs[0], limit=20)  # warm-up, untimed
                ids: list[list[Any]] = []

                def one(i: int, qs: list[str] = qs, ids: list[list[Any]] = ids) -> None:
                    # Keeping the 20 ids (for the comparison) costs a microsecond.
                    ids.append([hit["id"] for hit in db.search_messages(qs[i], limit=20)])

                got = timed(one, len(qs), budget_s)
                out["kinds"][kind] = {"ns": got["ns"], "capped": got["capped"], "ids": ids}
        finally:
            db.close()
        return out

    def checkpoint(self, path: str, sync: str, tag: str, probe: int, flushes: int, loads: int,
                   counts: int, lists: int, budget_s: float) -> dict[str, Any]:
        """One checkpoint of the growth part on this system's file."""
        import driver

        t0 = ns()
        store = driver.SYSTEMS[self.system](Path(path), sync)
        out: dict[str, Any] = {"open_s": (ns() - t0) / 1e9}
        try:
            sids = [f"flush-{tag}-{i}" for i in range(flushes)]
            convs = [store.conversation(sid) for sid in sids]  # session rows beforehand, untimed
            batches = [workload.messages(i * 20, i * 20 + 20) for i in range(flushes + 1)]
            # Untimed warm-up of every call below: first-use imports and statements.
            store.conversation(f"warm-{tag}").flush(batches[-1], batches[-1])
            store.load(PROBE)
            store.count(PROBE)
            for fn in self.listings(store).values():
                fn(0)

            def flush(i: int) -> None:
                convs[i].flush(batches[i], batches[i])

            got = timed(flush, flushes, budget_s)
            out["flush"] = got["ns"]
            if self.system == "hermes":
                out["settle"] = [self.settle(store)]
            out["flush_ok"] = all(store.count(sid) == 20 for sid in sids[: len(got["ns"])])
            got = timed(lambda i: len(store.load(PROBE)), loads, budget_s)
            out["load"], out["load_ok"] = got["ns"], got["value"] == probe
            got = timed(lambda i: store.count(PROBE), counts, budget_s)
            out["count"], out["count_ok"] = got["ns"], got["value"] == probe
            for op, fn in self.listings(store).items():
                got = timed(fn, lists, budget_s)
                out[op], out[op + "_rows"] = got["ns"], got["value"]
        finally:
            store.close()
        return out

    @staticmethod
    def settle(store: Any) -> int:
        """Nanoseconds until the search index holds every flushed row. Ours
        indexes after the commit, in the background (hermes-agent inside
        its flush); a search first catches up with what is still pending."""
        t0 = ns()
        store.db.search_messages('"scale settle probe"', limit=1)
        return ns() - t0

    def listings(self, store: Any) -> dict[str, Callable[[int], int]]:
        """The session list a UI shows first: ours ``list_sessions``; hermes-agent's
        ``list_sessions_rich`` (its only listing), by start time as ours, and by
        last activity as its TUI and desktop pickers ask for it."""
        if self.system == "hermes":
            return {"list": lambda i: len(store.db.list_sessions(limit=20))}
        return {
            "list": lambda i: len(store.db.list_sessions_rich(limit=20)),
            "list_active": lambda i: len(store.db.list_sessions_rich(limit=20, order_by_last_active=True)),
        }


# -- orchestrator side --------------------------------------------------------


def serving(python: str, system: str, home: Path) -> protocol.Worker:
    """A worker of ``Server`` for ``system`` in ``python``, its ``HERMES_HOME`` at ``home``."""
    return protocol.Worker(python, Path(__file__).resolve(), "--serve", system, str(home), name=system)


def log(msg: str, started: float) -> None:
    print(f"scale [{time.monotonic() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)


def ensure_indexed(path: Path, proc: protocol.Worker, tables: tuple[str, ...] = ("messages_fts",),
                   token: str = "") -> dict[str, Any]:
    """The file's index state, after letting our store finish indexing it
    (open and close) if anything was left: nothing is timed on a file that is
    still being indexed."""
    state = index_state(path, tables, token)
    for _ in range(3):
        if state["complete"]:
            break
        state["drain_s"] = state.get("drain_s", 0) + proc.call("drain", path=str(path))["seconds"]
        state.update(index_state(path, tables, token))
    return state


def fts_matches(path: Path, queries: dict[str, list[str]]) -> dict[str, int]:
    """How many messages the first query of each kind matches in the word index."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {
            kind: conn.execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH ?", (qs[0],)).fetchone()[0]
            for kind, qs in queries.items()
        }
    finally:
        conn.close()


def quiet_disk() -> None:
    """Lets the disk write back what a bulk phase left dirty, so that a
    measured fsync does not wait for the unmeasured writes before it."""
    os.sync()
    time.sleep(1)


def copy_db(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal"):
        if Path(f"{src}{suffix}").exists():
            shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")


def run_search(cfg: dict[str, Any], ours: protocol.Worker, peer: protocol.Worker | None, scratch: Path, mode: str,
               started: float) -> dict[str, Any]:
    path = scratch / "search" / "state.db"
    path.parent.mkdir()
    log(f"search: building {cfg['messages']:,} messages over {cfg['sessions']:,} sessions (ours)", started)
    build = ours.call("build", path=str(path), messages=cfg["messages"], sessions=cfg["sessions"])
    last = f"{(cfg['messages'] - 2) // 3:08d}"  # the call id of the last assistant message
    check = ensure_indexed(path, ours, token=last)
    log(f"search: built in {build['store_s']:.1f}s, index {check}", started)
    queries = search_queries(cfg["messages"])
    out: dict[str, Any] = {
        "config": cfg, "build": build, "index": check, "queries": queries,
        "fts_matches": fts_matches(path, queries), "upstream_open": mode, "systems": {},
    }
    runs = {"hermes": (ours, path)}
    if peer is not None:
        copy = scratch / "search-upstream" / "state.db"
        copy_db(path, copy)
        runs["upstream"] = (peer, copy)
    quiet_disk()
    # One kind at a time, both systems back to back, who goes first alternating.
    for k, (kind, qs) in enumerate(queries.items()):
        order = list(runs) if k % 2 == 0 else list(reversed(runs))
        for system in order:
            proc, p = runs[system]
            got = proc.call("search", path=str(p), queries={kind: qs}, budget_s=cfg["budget_s"], mode=mode)
            sys_out = out["systems"].setdefault(system, {"open_s": got["open_s"], "kinds": {}})
            sys_out["kinds"][kind] = got["kinds"][kind]
            log(f"search: {kind:7s} {system:9s} {len(got['kinds'][kind]['ns'])} queries", started)
    return summarize_search(out)


def summarize_search(out: dict[str, Any]) -> dict[str, Any]:
    """Per kind: latency summaries, hits per query, and how often both systems
    returned the same 20 message ids (raw ids dropped)."""
    systems = out["systems"]
    for kind in out["queries"]:
        ours_ids = g(systems, "hermes", "kinds", kind, "ids") or []
        for system, s in systems.items():
            k = s["kinds"][kind]
            ids = k.pop("ids")
            k.update(stats.summary(k.pop("ns")))
            k["hits_mean"] = sum(map(len, ids)) / len(ids) if ids else 0
            if system != "hermes":
                pairs = list(zip(ours_ids, ids))
                k["same_ids"] = sum(set(a) == set(b) for a, b in pairs)
                k["compared"] = len(pairs)
    return out


def run_growth(cfg: dict[str, Any], sync: str, ours: protocol.Worker, grower: protocol.Worker, peer: protocol.Worker | None,
               scratch: Path, started: float) -> dict[str, Any]:
    files = {"hermes": scratch / "growth" / "state.db", "upstream": scratch / "growth-upstream" / "state.db"}
    for p in files.values():
        p.parent.mkdir()
    workers = {"hermes": ours}
    if peer is not None:
        peer.call("create", path=str(files["upstream"]))
        workers["upstream"] = peer
    out: dict[str, Any] = {"config": cfg, "sync": sync, "points": [], "grow_s": {}}
    have = 0
    for c, want in enumerate(cfg["checkpoints"]):
        # Grow both files at once, each by its own process of ours (unmeasured).
        growers = {"hermes": ours, "upstream": grower}
        args = {"have": have, "want": want, "per_session": cfg["per_session"], "probe": cfg["probe"]}
        for system in workers:
            growers[system].send("grow", path=str(files[system]), **args)
        for system in workers:
            got = growers[system].receive()
            out["grow_s"][system] = out["grow_s"].get(system, 0) + got["seconds"]
        have = want
        tables = {"hermes": ("messages_fts",), "upstream": ("messages_fts", "messages_fts_trigram")}
        index = {s: ensure_indexed(files[s], growers[s], tables[s]) for s in workers}
        quiet_disk()
        log(f"growth: {want:,} sessions, grown ({ {k: round(v, 1) for k, v in out['grow_s'].items()} } s so far)", started)
        point: dict[str, Any] = {"sessions": want, "loadavg": loadavg(), "index": index}
        raws: dict[str, list[dict[str, Any]]] = {s: [] for s in workers}
        # Rounds in A B B A order, samples pooled: a noisy moment (2 shared
        # cores) then weighs on both systems alike.
        for r in range(cfg["rounds"]):
            order = list(workers) if (c + r) % 2 == 0 else list(reversed(workers))
            for system in order:
                raws[system].append(workers[system].call(
                    "checkpoint", path=str(files[system]), sync=sync, tag=f"{want}-{r}", probe=cfg["probe"],
                    flushes=cfg["flushes"], loads=cfg["loads"], counts=cfg["counts"], lists=cfg["lists"],
                    budget_s=cfg["budget_s"],
                ))
        for system, rounds in raws.items():
            point[system] = summarize_point(rounds)
        log(f"growth: {want:,} sessions, measured", started)
        out["points"].append(point)
    out["bytes"] = {s: p.stat().st_size for s, p in files.items() if s in workers}
    return out


def summarize_point(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One system at one checkpoint: the rounds' samples pooled per operation."""
    out: dict[str, Any] = {"open_s": min(r["open_s"] for r in rounds)}
    for op in OPS:
        if op in rounds[0]:
            out[op] = stats.summary([x for r in rounds for x in r[op]])
    out["ok"] = {k: all(r[k] for r in rounds) for k in ("flush_ok", "load_ok", "count_ok")}
    out["list_rows"] = rounds[-1].get("list_rows")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100k messages, up to 10k sessions")
    ap.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL"], help="synchronous for the growth part")
    ap.add_argument("--parts", default="search,growth")
    ap.add_argument("--per-session", type=int, default=0,
                    help="messages per growth session (default 5; 10 adds ~3 minutes to a full run)")
    ap.add_argument("--upstream-open", default="readonly", choices=["readonly", "migrate"],
                    help="how hermes-agent opens the search file (migrate: its real first open, "
                         "which rebuilds both FTS indexes, ~2 min at 1M messages)")
    protocol.add_peers_argument(ap)
    paths.add_output_arguments(ap, "benches/results/scale[-quick].json and benches/plots/")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--serve", nargs=2, metavar=("SYSTEM", "HOME"), help=argparse.SUPPRESS)
    ap.add_argument("--plot", nargs=2, metavar=("JSON", "PNG"), help="only draw the plot of a results file")
    args = ap.parse_args()
    if args.serve:
        system, home = args.serve
        protocol.serve(Server(system, home), system)
        return 0
    if args.plot:
        plot(json.loads(Path(args.plot[0]).read_text()), Path(args.plot[1]))
        return 0

    started = time.monotonic()
    cfg = plan(args.quick)
    if args.per_session:
        cfg["growth"]["per_session"] = args.per_session
    parts = [p for p in args.parts.split(",") if p]
    peers = protocol.peers_python(args.peers_python)
    scratch = Path(tempfile.mkdtemp(prefix="hermes-scale-"))
    doc = record.start("scale", args.quick, scratch)
    procs: list[protocol.Worker] = []
    try:
        ours = serving(sys.executable, "hermes", scratch / "home-hermes")
        procs.append(ours)
        peer = serving(peers, "upstream", scratch / "home-upstream") if peers else None
        if peer:
            procs.append(peer)
        doc["workers"] = {p.name: p.info for p in procs}
        if "search" in parts:
            doc["search"] = run_search(cfg["search"], ours, peer, scratch, args.upstream_open, started)
            if not args.keep:  # 3 GB the growth part does not need
                for d in ("search", "search-upstream"):
                    shutil.rmtree(scratch / d, ignore_errors=True)
        if "growth" in parts:
            grower = serving(sys.executable, "hermes", scratch / "home-grower")
            procs.append(grower)
            doc["growth"] = run_growth(cfg["growth"], args.sync, ours, grower, peer, scratch, started)
    finally:
        for p in procs:
            p.close()
        if args.keep:
            print(f"scale: scratch kept in {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    doc["code"]["core_sha256_end"] = code_identity(sys.executable)["core_sha256"]
    out = record.finish(doc, started, quick=args.quick, out=args.out, publish=args.publish,
                        stem=RESULTS.stem)
    png = (out.parent / "plots" if args.out else paths.plots_dir(args.publish)) / f"{PLOT.stem}{'-quick' if args.quick else ''}.png"
    if "growth" in doc and peers:
        subprocess.run([peers, str(Path(__file__).resolve()), "--plot", str(out), str(png)], check=False)
    print(render(doc, paths.shown(png) if png.exists() else None))
    print(f"\nscale: wrote {out} ({doc['wall_s']} s)", file=sys.stderr)
    return 0


# -- rendering (stdlib only: benches/report.py imports this module) ------------


def shape(sessions: list[int], values: list[Any]) -> str:
    """Flat or growing, from two slopes of log p50 against log sessions
    (0: independent of the database, O(new); 1: proportional, O(total)):
    the least-squares fit over all checkpoints, which one noisy point does
    not decide, and the last step, where a cost proportional to the database
    shows plainly (fixed costs hide it while the database is small)."""
    raw = [(s, v) for s, v in zip(sessions, values) if isinstance(v, (int, float)) and v > 0]
    if len(raw) < 2:
        return "—"
    pts = [(math.log(s), math.log(v)) for s, v in raw]
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    fit = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    (s0, v0), (s1, v1) = raw[-2:]
    last = math.log(v1 / v0) / math.log(s1 / s0)
    if last >= 0.6:
        kind = "**O(total)**"
    elif fit < 0.05 and last < 0.18:
        kind = "flat: O(new)"
    else:
        kind = "grows slowly"
    return f"{kind} (fit slope {fit:.2f}; ×{v1 / v0:.1f} from {s0:,} to {s1:,})"


def render(doc: dict[str, Any], plot_path: str | None = None) -> str:
    """The Markdown section for BENCHMARKS.md (``plot_path`` relative to it)."""
    m = doc.get("machine", {})
    code = doc.get("code", {})
    title = []
    if "search" in doc:
        title.append(f"search over {g(doc, 'search', 'index', 'messages') or 0:,} messages")
    if "growth" in doc:
        n = [p["sessions"] for p in doc["growth"]["points"]] or [0]
        title.append(f"{n[0]:,} → {n[-1]:,} sessions")
    lines = [
        f"## Scale: {', '.join(title)} (issue [E])",
        "",
        f"A separate run: `{doc['command']}` ({doc['kind']}) at {doc['utc']}, {doc['wall_s']:.0f} s wall, "
        f"commit `{code.get('commit', '?')}`{' (uncommitted changes)' if code.get('dirty') else ''}, "
        f"{m.get('nproc', '?')} cores, load average {g(doc, 'loadavg_start') or ['?']} → "
        f"{g(doc, 'loadavg_end') or ['?']} (1, 5, 15 min). Results file: `{doc.get('results_file', 'benches/results/scale.json')}`. "
        "Ours and hermes-agent 0.19.0 each in its own process, "
        f"{versions(doc)}; ratios are hermes-agent ÷ hermes (> 1: we are faster).",
        "",
    ]
    if code.get("core_sha256_end") and code.get("core_sha256") != code.get("core_sha256_end"):
        lines += [
            f"**Caution: `hermes._core` was rebuilt during this run** (sha256 `{code['core_sha256']}` at the "
            f"start, `{code['core_sha256_end']}` at the end); the workers loaded it when they started.",
            "",
        ]
    if "search" in doc:
        lines += render_search(doc["search"])
    if "growth" in doc:
        lines += render_growth(doc["growth"], plot_path)
    return "\n".join(lines)


def versions(doc: dict[str, Any]) -> str:
    """Which SQLite each system ran: ours bundles its own, hermes-agent uses
    its Python's, and FTS5 speed is part of what differs."""
    w = doc.get("workers", {})
    return ", ".join(f"{NAME[s]} on SQLite {g(w, s, 'sqlite_version')}" for s in NAME if s in w)


def render_search(s: dict[str, Any]) -> list[str]:
    cfg, b, idx = s["config"], s["build"], s["index"]
    ours, up = g(s, "systems", "hermes") or {}, g(s, "systems", "upstream") or {}
    open_note = (
        "opened read-only with its search flag set (its read-write first open of a file we wrote would "
        "rebuild `messages_fts` and build its trigram index over every row, a one-off migration)"
        if s["upstream_open"] == "readonly"
        else f"opened read-write, its real first open, which rebuilt both FTS indexes: {g(up, 'open_s') or 0:.0f} s"
    )
    lines = [
        f"### Full-text search over {idx['messages']:,} messages",
        "",
        f"One file: {idx['messages']:,} messages (~600 B each, `benches/workload.py`) over "
        f"{cfg['sessions']:,} sessions, {b['bytes'] / 1e9:.2f} GB, written by our `append_messages` "
        f"(one call per session, `synchronous=NORMAL`): {b.get('append_s', b['store_s']):.1f} s in the calls, "
        f"plus {b.get('close_s', 0):.1f} s for `close()` to index the rows still pending, "
        f"**{b['messages'] / b['store_s']:,.0f} msg/s** written and indexed (informative). Then, closed, its "
        f"word index holds {idx.get('messages_fts', idx.get('indexed', 0)):,} rows for {idx['messages']:,} "
        f"messages, {idx.get('pending_ranges', 0)} ranges pending "
        f"({'complete' if idx['complete'] else '**INCOMPLETE**'}). hermes-agent searches a byte copy, "
        f"{open_note}. Queries of each kind differ (the table shows one); `limit=20`; one "
        "untimed warm-up query per kind; both files sit in the page cache.",
        "",
    ]
    rows = []
    for kind, qs in s["queries"].items():
        h, u = g(ours, "kinds", kind) or {}, g(up, "kinds", kind) or {}
        same = f"{u['same_ids']}/{u['compared']}" if "compared" in u else "—"
        rows.append([
            KIND_LABEL[kind], f"`{qs[0]}`", f"{s['fts_matches'].get(kind, 0):,}",
            f"{ms(h.get('p50_ms'))} / {ms(h.get('p90_ms'))} ({h.get('n', 0)})",
            f"{ms(u.get('p50_ms'))} / {ms(u.get('p90_ms'))} ({u.get('n', 0)})",
            ratio(u.get("p50_ms"), h.get("p50_ms")), same, "n/a", "n/a",
        ])
    lines += table(
        ["query kind", "e.g.", "FTS matches", "hermes p50 / p90 (n)", "hermes-agent p50 / p90 (n)",
         "hermes-agent ÷ hermes", "same 20 ids", "OpenAI SQLiteSession", "LangGraph"],
        rows,
    )
    lines += [
        "*Same 20 ids*: queries for which both returned the same set of message ids. What differs "
        "between the two `search_messages`:",
        "",
        "* Both run `messages_fts MATCH ? ORDER BY rank LIMIT 20` on the same word index (unicode61: "
        "content, tool name and tool-call JSON). Ours passes FTS5 syntax through and raises `ValueError` "
        "on a malformed query; hermes-agent first rewrites the query (drops unmatched `\"(){}:^+`, quotes "
        "dotted or hyphenated terms, strips dangling AND/OR/NOT), so some inputs mean different things.",
        "* hermes-agent returns a 40-token snippet plus one message of context before and after each hit "
        "(two more queries per hit) and drops the content; ours returns the row with its content, session "
        "source and title, and a 12-token snippet. It also keeps compaction-archived rows "
        "(`active = 1 OR compacted = 1`); ours searches active rows.",
        "* CJK: hermes-agent sends any query with CJK characters elsewhere: 3+ characters per token to its "
        "trigram table (`messages_fts_trigram`, which our files lack until it opens them read-write once), "
        "shorter ones to `LIKE '%…%'` over content, tool name and tool calls, ordered by timestamp (a scan, "
        "no rank, rewound rows included). Ours matches unicode61 tokens: `北京` finds the token `北京`, "
        "not the substring of `北京市`.",
        "",
    ]
    return lines


def render_growth(gr: dict[str, Any], plot_path: str | None) -> list[str]:
    cfg, pts = gr["config"], gr["points"]
    sessions = [p["sessions"] for p in pts]
    has_up = any("upstream" in p for p in pts)
    grow = ", ".join(f"{NAME[k]}'s {v:.0f} s" for k, v in gr.get("grow_s", {}).items())
    lines = [
        f"### Database growth: {sessions[0]:,} → {sessions[-1]:,} sessions (synchronous={gr['sync']})",
        "",
        f"Two files, each grown to each checkpoint by our bulk writer ({cfg['per_session']} messages per "
        f"session, plus the {cfg['probe']}-message probe session; unmeasured, {grow}): ours, and one "
        "created by hermes-agent so it has its own schema (its trigram index is filled too). hermes-agent "
        f"writes ~1k msg/s, so growing its file to {cfg['per_session'] * sessions[-1]:,} messages itself "
        f"would take ~{cfg['per_session'] * sessions[-1] / 60_000:.0f} minutes; the rows are the same. "
        f"At a checkpoint each system opens its file and measures, in {cfg.get('rounds', 1)} rounds "
        f"(order A B B A, samples pooled), p50 of: {cfg['flushes']} 20-message flushes per round, back to "
        "back, each into a fresh session (`AIAgent._flush_messages_to_session_db`, session row created "
        "beforehand; ours commits the rows and indexes them after the commit, in the background, so the "
        "index work still left after the last flush is timed too, as a search that first catches up; "
        "hermes-agent indexes inside its flush), loading the probe transcript (`get_messages_as_conversation`), the live "
        "count (ours `message_count`, hermes-agent `get_session()['message_count']`, what its gateway "
        "reads), and the first page of 20 sessions (ours `list_sessions`, hermes-agent `list_sessions_rich`, "
        "newest first; it adds a preview and last activity per row). *Shape*, from slopes of log p50 against "
        "log sessions (0: the cost does not depend on the database; 1: proportional to it): O(total) when the "
        "last step (×10 sessions) multiplies p50 by 10^0.6 ≈ 4 or more; flat, O(new), when the least-squares "
        "slope over all checkpoints is under 0.05 and the last step multiplies p50 by less than 10^0.18 ≈ 1.5; "
        "\"grows slowly\" otherwise. Each call is warmed up once, untimed. "
        "The measurement's own flush sessions add a few sessions per checkpoint.",
        "",
    ]
    header = ["operation", "system"] + [f"{n:,}" for n in sessions] + ["shape"]
    rows = []
    for op, label in OPS.items():
        for system in ("hermes", "upstream"):
            vals = [g(p, system, op, "p50_ms") for p in pts]
            if not any(isinstance(v, (int, float)) for v in vals):
                continue
            rows.append([label, NAME[system]] + [ms(v) for v in vals] + [shape(sessions, vals)])
    lines += ["p50 at each number of sessions:", ""] + table(header, rows)
    if has_up:
        rows = []
        for op in ("flush", "load", "count", "list"):
            rows.append([OPS[op]] + [ratio(g(p, "upstream", op, "p50_ms"), g(p, "hermes", op, "p50_ms")) for p in pts])
        lines += ["hermes-agent ÷ hermes:", ""] + table(["operation"] + [f"{n:,}" for n in sessions], rows)
    bad = [f"{p['sessions']:,} {s}: {k}" for p in pts for s in ("hermes", "upstream")
           for k, v in (g(p, s, "ok") or {}).items() if v is False]
    unindexed = [f"{p['sessions']:,} {NAME[s]}" for p in pts for s, i in (p.get("index") or {}).items()
                 if not i.get("complete")]
    loads = ", ".join(f"{p['loadavg'][0]:.1f}" for p in pts if p.get("loadavg"))
    opens = ", ".join(f"{ms(1000 * g(p, 'upstream', 'open_s'))}" for p in pts if g(p, "upstream", "open_s"))
    lines += [
        f"Checks (flushed rows counted, loaded length, count value): {'all ok' if not bad else 'FAILED: ' + '; '.join(bad)}. "
        "Before each checkpoint's measurements, every row of both files was in their search indexes "
        "(hermes-agent's: both), nothing pending: "
        f"{'yes' if not unindexed else '**NO** at ' + ', '.join(unindexed)}. "
        f"File sizes at the end: {', '.join(f'{NAME[k]} {v / 1e9:.2f} GB' for k, v in gr.get('bytes', {}).items())}. "
        + (f"hermes-agent's open (untimed above) at each checkpoint: {opens}. " if opens else "")
        + (f"1-minute load average at each checkpoint: {loads} (2 cores, shared)." if loads else ""),
        "",
    ]
    if plot_path:
        lines += [f"![scale_vs_sessions]({plot_path})", ""]
    return lines


def plot(doc: dict[str, Any], out: Path) -> None:
    """p50 of each growth measurement against the number of sessions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = doc["growth"]["points"]
    fig, ax = plt.subplots(figsize=(11, 5))
    for c, op in enumerate(OPS):
        for system, style, name in (("hermes", "-o", "hermes"), ("upstream", "--s", "hermes-agent")):
            xy = [(p["sessions"], g(p, system, op, "p50_ms")) for p in pts if g(p, system, op, "p50_ms")]
            if xy:
                ax.plot(*zip(*xy), style, color=f"C{c}", label=f"{name}: {OPS[op]}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("sessions in state.db")
    ax.set_ylabel("p50 (ms)")
    ax.set_title(f"Latency vs number of sessions, synchronous={doc['growth']['sync']} "
                 "(solid: hermes, dashed: hermes-agent 0.19.0)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
