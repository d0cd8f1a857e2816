"""The session store's listing, export and deletion (issue [H]): ours vs hermes-agent 0.19.0,
side by side on the same files.

    python benches/store_ops.py [--quick] [--publish | --out PATH]

Every file is created by hermes-agent (so it carries its own schema: both search indexes and
their triggers) and filled by OUR bulk writer (``create_session`` + ``append_messages``; the
rows are the same either way, and its own writer would take minutes), then both systems open
the same bytes:

1. **list**: ``list_sessions_rich(limit=50)``, by start time and with
   ``order_by_last_active=True``, at 1, 10,000 and 100,000 sessions of 2 messages.
2. **export**: ``export_session`` of one 10,000-message session (in a file of 100 more).
3. **delete**: ``delete_session`` of that session, on a fresh copy of the file each time.
4. **prune**: ``prune_sessions(older_than_days=90)`` deleting 10,000 ended sessions of 5
   messages (1,000 recent ones stay), on a fresh copy each time.
5. **search**: ``search_messages(query, source_filter=[one platform], role_filter=[one role])``
   over 1,000,000 messages in 1,000 sessions (250 each of ``cli``, ``telegram``, ``discord``,
   ``slack``): ASCII words, phrases and tool-call ids through the word index, a
   three-character CJK word through the trigram index, two-character ones by substring; the
   hits of both systems compared id for id.

Each system runs in its own process (``benchlib.protocol``), timing with
``perf_counter_ns`` around the one call; copying a file is not timed. Writes
``store_ops.json`` (``store_ops-quick.json``) into ``target/bench/results/``, or
``benches/results/`` with ``--publish``, and prints the Markdown section BENCHMARKS.md shows.
``--quick``: 1k-message session, 1k pruned, up to 10k listed sessions, 100k messages searched.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib and the workload

import workload  # noqa: E402
from benchlib import paths, record, protocol, stats  # noqa: E402
from benchlib.indexes import index_state  # noqa: E402
from benchlib.render import ms, ratio, table  # noqa: E402

ns = time.perf_counter_ns
RESULTS = paths.PUBLISHED_RESULTS / "store_ops.json"
BIG = "big-session"
DAY = 86400.0
#: The platforms the search file's sessions come from, in turn.
SOURCES = ["cli", "telegram", "discord", "slack"]
#: The filtered searches, per kind: its label and its (query, sources, roles); a tool-call id
#: (``rare``) is picked in ``search_cases`` for the file's size. The vocabulary of
#: ``benches/workload.py`` is small, so each of its words is in most messages: a common word is
#: the most work a search can be.
SEARCH_KINDS: dict[str, tuple[str, list[tuple[str, list[str], list[str] | None]]]] = {
    "common": ("common word", [
        ("files", ["telegram"], ["user"]), ("gateway", ["discord"], ["assistant"]),
        ("lock", ["slack"], ["tool"]),
    ]),
    "common_source": ("common word, source only", [
        ("files", ["telegram"], None), ("query", ["cli"], None),
    ]),
    "phrase": ("two-word phrase", [
        ('"user model"', ["telegram"], ["user"]), ('"config latency"', ["discord"], ["assistant"]),
        ('"prompt agent"', ["slack"], ["tool"]),
    ]),
    "rare": ("rare token (one tool-call id)", []),
    "cjk3": ("CJK, 3 characters (trigram index)", [
        ("数据库", ["telegram"], ["user"]), ("数据库", ["discord"], ["assistant"]),
        ("数据库", ["cli"], ["tool"]),
    ]),
    "cjk2": ("CJK, 2 characters (as a substring)", [
        ("北京", ["telegram"], ["user"]), ("東京", ["discord"], ["assistant"]),
        ("서울", ["cli"], ["tool"]),
    ]),
}


def plan(quick: bool) -> dict[str, Any]:
    if quick:
        return {"listed": [1, 1000, 10_000], "big": 1000, "pruned": 1000, "kept": 100,
                "lists": 20, "exports": 5, "copies": 2, "budget_s": 1, "rounds": 2,
                "search": {"messages": 100_000, "sessions": 100, "rounds": 2, "repeat": 2}}
    return {"listed": [1, 10_000, 100_000], "big": 10_000, "pruned": 10_000, "kept": 1000,
            "lists": 100, "exports": 10, "copies": 3, "budget_s": 2, "rounds": 6,
            "search": {"messages": 1_000_000, "sessions": 1000, "rounds": 2, "repeat": 3}}


def search_cases(cfg: dict[str, Any]) -> dict[str, list[tuple[str, list[str], list[str] | None]]]:
    """Every kind's searches; the rare tokens are the tool-call ids (in the assistant message's
    ``tool_calls``) of three messages of the file, each searched in its own session's source."""
    per = cfg["messages"] // cfg["sessions"]
    rare = []
    for session in (cfg["sessions"] // 7, cfg["sessions"] // 3, cfg["sessions"] - 2):
        message = session * per + 3 * (per // 6) + 1  # an assistant message (i % 3 == 1)
        rare.append((f"{message // 3:08d}", [SOURCES[session % len(SOURCES)]], ["assistant"]))
    cases = {kind: list(queries) for kind, (_, queries) in SEARCH_KINDS.items()}
    cases["rare"] = rare
    return cases


# -- worker side: runs in the measured system's own interpreter ---------------


class Server:
    """One system's side of ``benchlib.protocol``."""

    def __init__(self, system: str, home: str) -> None:
        os.environ["HERMES_HOME"] = home
        self.system = system

    def open(self, path: str) -> Any:
        if self.system == "hermes":
            from hermes.state import SessionDB

            return SessionDB(path)
        import hermes_state

        return hermes_state.SessionDB(Path(path))

    # hermes-agent only: a file with its own schema
    def create(self, path: str) -> dict[str, Any]:
        self.open(path).close()
        return {}

    # ours only: the bulk writer
    def fill(self, path: str, first: int, count: int, per_session: int, started_at: float,
             ended: bool, prefix: str, session_id: str = "", sources: list[str] | None = None,
             apart: float = 0.001) -> dict[str, Any]:
        """Adds ``count`` sessions of ``per_session`` messages (``session_id`` names a single
        one), ``apart`` seconds after each other, their sources ``sources`` in turn; a session's
        messages are 1 ms apart from its start. Its close indexes every row it wrote."""
        from hermes.state import SessionDB

        sources = sources or ["cli"]
        t0 = ns()
        with SessionDB(path, synchronous="NORMAL", busy_budget=3600.0) as db:
            for n in range(first, first + count):
                sid = session_id or f"{prefix}-{n:06d}"
                start = started_at + n * apart
                db.create_session(sid, sources[n % len(sources)], started_at=start)
                batch = workload.messages(n * per_session, (n + 1) * per_session)
                for k, message in enumerate(batch):
                    message["timestamp"] = start + k * 0.001
                db.append_messages(sid, batch)
                if ended:
                    db.end_session(sid, "done")
        return {"seconds": (ns() - t0) / 1e9}

    # both systems
    def repeat(self, path: str, what: str, n: int, budget_s: float) -> dict[str, Any]:
        """Times ``what`` up to ``n`` times on one open store (after an untimed warm-up)."""
        db = self.open(path)
        calls: dict[str, Callable[[], int]] = {
            "list": lambda: len(db.list_sessions_rich(limit=50)),
            "list_active": lambda: len(db.list_sessions_rich(limit=50, order_by_last_active=True)),
            "export": lambda: len(db.export_session(BIG)["messages"]),
        }
        call = calls[what]
        try:
            value = call()
            gc.collect()
            samples: list[int] = []
            start = time.monotonic()
            for i in range(n):
                t0 = ns()
                value = call()
                samples.append(ns() - t0)
                if i >= 2 and time.monotonic() - start > budget_s:
                    break
        finally:
            db.close()
        return {"ns": samples, "value": value}

    def search(self, path: str, cases: list[list[Any]], repeat: int, warm: bool) -> dict[str, Any]:
        """Times each ``[query, sources, roles]`` ``repeat`` times on one open store (after
        an untimed search of the first, when ``warm``); the ids each returned."""
        db = self.open(path)
        out: list[dict[str, Any]] = []
        try:
            if warm:
                query, sources, roles = cases[0]
                db.search_messages(query, source_filter=sources, role_filter=roles, limit=20)
            gc.collect()
            for query, sources, roles in cases:
                samples = []
                for _ in range(repeat):
                    t0 = ns()
                    hits = db.search_messages(query, source_filter=sources, role_filter=roles, limit=20)
                    samples.append(ns() - t0)
                out.append({"ns": samples, "ids": [hit["id"] for hit in hits]})
        finally:
            db.close()
        return {"cases": out}

    def once(self, path: str, what: str) -> dict[str, Any]:
        """Times one destructive ``what`` on a fresh copy of a file."""
        db = self.open(path)
        try:
            gc.collect()
            t0 = ns()
            value = db.delete_session(BIG) if what == "delete" else db.prune_sessions(older_than_days=90)
            spent = ns() - t0
        finally:
            db.close()
        return {"ns": [spent], "value": int(value)}


# -- orchestrator side --------------------------------------------------------


def serving(python: str, system: str, home: Path) -> protocol.Worker:
    return protocol.Worker(python, Path(__file__).resolve(), "--serve", system, str(home), name=system)


def log(msg: str, started: float) -> None:
    print(f"store_ops [{time.monotonic() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)


def copy_db(src: Path, dst: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        if Path(str(src) + suffix).exists():
            shutil.copyfile(str(src) + suffix, str(dst) + suffix)


def alternating(workers: dict[str, protocol.Worker], rounds: int, **kwargs: Any) -> dict[str, Any]:
    """``repeat`` on each system in ``rounds`` rounds whose order alternates (A B B A ...), its
    samples pooled: this host runs whole stretches of ~10-100 ms up to ~1.8x slower, for
    every process alike, so one window per system can land one in a slow stretch and the
    other in a fast one."""
    out: dict[str, Any] = {}
    for r in range(rounds):
        order = list(workers) if r % 2 == 0 else list(reversed(workers))
        for name in order:
            got = workers[name].call("repeat", **kwargs)
            out.setdefault(name, {"ns": []})["ns"] += got["ns"]
            out[name]["value"] = got["value"]
    return out


def summarize(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {name: {**stats.summary(r["ns"]), "value": r["value"]} for name, r in runs.items()}


def destructive(workers: dict[str, protocol.Worker], src: Path, scratch: Path, op: str,
                copies: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, worker in workers.items():
        samples: list[int] = []
        value = None
        for i in range(copies):
            copy = scratch / f"{op}-{name}-{i}.db"
            copy_db(src, copy)
            got = worker.call("once", path=str(copy), what=op)
            samples += got["ns"]
            value = got["value"]
            for suffix in ("", "-wal", "-shm"):
                Path(str(copy) + suffix).unlink(missing_ok=True)
        out[name] = {**stats.summary(samples), "value": value}
    return out


def run(cfg: dict[str, Any], ours: protocol.Worker, peer: protocol.Worker | None, scratch: Path,
        started: float) -> dict[str, Any]:
    workers = {"hermes": ours, **({"upstream": peer} if peer else {})}
    creator = peer or ours
    doc: dict[str, Any] = {"list": {}}

    listing = scratch / "listing.db"
    creator.call("create", path=str(listing))
    have = 0
    for want in cfg["listed"]:
        ours.call("fill", path=str(listing), first=have, count=want - have, per_session=2,
                  started_at=1.7e9, ended=False, prefix="list")
        have = want
        log(f"list at {want} sessions", started)
        doc["list"][str(want)] = {
            op: summarize(alternating(workers, cfg["rounds"], path=str(listing), what=op,
                                      n=cfg["lists"], budget_s=cfg["budget_s"]))
            for op in ("list", "list_active")
        }

    big = scratch / "big.db"
    creator.call("create", path=str(big))
    ours.call("fill", path=str(big), first=0, count=100, per_session=5, started_at=1.7e9,
              ended=True, prefix="other")
    ours.call("fill", path=str(big), first=0, count=1, per_session=cfg["big"], started_at=1.7e9,
              ended=True, prefix="", session_id=BIG)
    log("export", started)
    doc["export"] = summarize(alternating(workers, cfg["rounds"], path=str(big), what="export",
                                          n=cfg["exports"], budget_s=cfg["budget_s"]))
    log("delete", started)
    doc["delete"] = destructive(workers, big, scratch, "delete", cfg["copies"])

    prune = scratch / "prune.db"
    creator.call("create", path=str(prune))
    now = time.time()
    ours.call("fill", path=str(prune), first=0, count=cfg["pruned"], per_session=5,
              started_at=now - 200 * DAY, ended=True, prefix="old")
    ours.call("fill", path=str(prune), first=0, count=cfg["kept"], per_session=5,
              started_at=now - DAY, ended=True, prefix="new")
    log("prune", started)
    doc["prune"] = destructive(workers, prune, scratch, "prune", cfg["copies"])
    for suffix in ("", "-wal", "-shm"):  # GBs the search part needs on disk
        for done in (listing, big, prune):
            Path(str(done) + suffix).unlink(missing_ok=True)
    doc["search"] = run_search(cfg["search"], workers, creator, ours, scratch, started)
    return doc


def run_search(cfg: dict[str, Any], workers: dict[str, protocol.Worker], creator: protocol.Worker,
               ours: protocol.Worker, scratch: Path, started: float) -> dict[str, Any]:
    """The filtered searches on one file both systems open, kind by kind, in rounds whose
    order alternates (A B B A)."""
    path = scratch / "search.db"
    creator.call("create", path=str(path))
    per = cfg["messages"] // cfg["sessions"]
    log(f"search: writing {cfg['messages']:,} messages", started)
    built = ours.call("fill", path=str(path), first=0, count=cfg["sessions"], per_session=per,
                      started_at=1.7e9, ended=True, prefix="search", sources=SOURCES,
                      apart=per * 0.001 + 1.0)
    index = index_state(path, ("messages_fts", "messages_fts_trigram"))
    log(f"search: written in {built['seconds']:.0f} s, index {index}", started)
    cases = search_cases(cfg)
    out: dict[str, Any] = {"config": cfg, "build_s": built["seconds"], "index": index,
                           "cases": cases, "kinds": {}}
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {kind: {} for kind in cases}
    for r in range(cfg["rounds"]):
        for k, (kind, queries) in enumerate(cases.items()):
            order = list(workers) if (k + r) % 2 == 0 else list(reversed(workers))
            for name in order:
                got = workers[name].call("search", path=str(path), cases=[list(q) for q in queries],
                                         repeat=cfg["repeat"], warm=r == 0)
                raw[kind].setdefault(name, []).extend(got["cases"])
            log(f"search: round {r + 1}, {kind}", started)
    for kind, systems in raw.items():
        ours_hits = [c["ids"] for c in systems.get("hermes", [])]
        summary: dict[str, Any] = {}
        for name, runs in systems.items():
            summary[name] = {**stats.summary([x for c in runs for x in c["ns"]]),
                             "hits": sum(map(len, (c["ids"] for c in runs))) / max(len(runs), 1)}
            if name != "hermes":
                pairs = list(zip(ours_hits, (c["ids"] for c in runs)))
                summary[name]["same_ids"] = sum(a == b for a, b in pairs)
                summary[name]["compared"] = len(pairs)
        out["kinds"][kind] = summary
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller files (about a minute)")
    protocol.add_peers_argument(ap)
    paths.add_output_arguments(ap, "benches/results/store_ops[-quick].json")
    ap.add_argument("--serve", nargs=2, metavar=("SYSTEM", "HOME"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        protocol.serve(Server(*args.serve), args.serve[0])
        return 0
    started = time.monotonic()
    cfg = plan(args.quick)
    peers = protocol.peers_python(args.peers_python)
    scratch = Path(tempfile.mkdtemp(prefix="hermes-store-ops-"))
    doc = record.start("store_ops", args.quick, scratch)
    doc["plan"] = cfg
    procs: list[protocol.Worker] = []
    try:
        ours = serving(sys.executable, "hermes", scratch / "home-hermes")
        procs.append(ours)
        peer = serving(peers, "upstream", scratch / "home-upstream") if peers else None
        if peer:
            procs.append(peer)
        doc["workers"] = {p.name: p.info for p in procs}
        doc.update(run(cfg, ours, peer, scratch, started))
    finally:
        for p in procs:
            p.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return record.conclude(doc, started, args, RESULTS.stem, render)


# -- rendering (stdlib only) ---------------------------------------------------


def render(doc: dict[str, Any]) -> str:
    cfg = doc["plan"]
    rows: list[list[str]] = []

    missed: list[str] = []

    def row(what: str, got: dict[str, Any], target: float) -> None:
        ours, theirs = got.get("hermes", {}), got.get("upstream", {})
        a, b = ours.get("p50_ms"), theirs.get("p50_ms")
        rows.append([what, ms(a), ms(b), ratio(b, a), f"{ours.get('value')} / {theirs.get('value')}"])
        if a and b and b / a < target:
            missed.append(f"{what} ({ratio(b, a)}, target {target:g}×)")

    for n, ops in doc["list"].items():
        # The target is for a page that has 50 rows to show.
        target = 5.0 if int(n) >= 50 else 1.0
        row(f"`list_sessions_rich(limit=50)`, {int(n):,} sessions", ops["list"], target)
        row(f"… `order_by_last_active=True`, {int(n):,} sessions", ops["list_active"], target)
    row(f"`export_session`, {cfg['big']:,} messages", doc["export"], 1.0)
    row(f"`delete_session`, {cfg['big']:,} messages", doc["delete"], 1.0)
    row(f"`prune_sessions`, {cfg['pruned']:,} of {cfg['pruned'] + cfg['kept']:,} sessions", doc["prune"], 1.0)
    search = doc.get("search")
    search_rows: list[list[str]] = []
    if search:
        for kind, got in search["kinds"].items():
            ours, theirs = got.get("hermes", {}), got.get("upstream", {})
            a, b = ours.get("p50_ms"), theirs.get("p50_ms")
            query, sources, roles = search["cases"][kind][0]
            example = f"`{query}`, {sources[0]}" + (f", {roles[0]}" if roles else "")
            same = f"{theirs['same_ids']}/{theirs['compared']}" if "compared" in theirs else "—"
            search_rows.append([SEARCH_KINDS[kind][0], example, ms(a), ms(b), ratio(b, a), same,
                                f"{ours.get('hits', 0):.0f} / {theirs.get('hits', 0):.0f}"])
            if a and b and b / a < 5.0:
                missed.append(f"search, {SEARCH_KINDS[kind][0]} ({ratio(b, a)}, target 5×)")
    code = doc.get("code", {})
    lines = [
        "## Session store: listing, export, deletion, search (issue [H])",
        "",
        f"A separate run: `{doc['command']}` ({doc['kind']}) at {doc['utc']}, {doc['wall_s']:.0f} s wall, "
        f"commit `{code.get('commit', '?')}`{' (uncommitted changes)' if code.get('dirty') else ''}, "
        f"load average {doc['loadavg_start']} → {doc['loadavg_end']} on a machine shared with other "
        "work (2 cores): compare the ratios, the two systems running interleaved. Results file: "
        f"`{doc.get('results_file', 'benches/results/store_ops.json')}`. Each file is created by "
        "hermes-agent 0.19.0 (its schema, both search indexes and their triggers), filled by our bulk "
        "writer, and then opened by each system in its own process: the same bytes. p50 of each call; "
        f"listing and export in {cfg.get('rounds', 1)} rounds of up to {cfg['lists']} (listing) or "
        f"{cfg['exports']} (export) calls or {cfg['budget_s']} s, the two systems' order alternating "
        "(A B B A ...), samples pooled (this host runs stretches of ~10-100 ms up to ~1.8× slower, "
        "for every process alike: one window each could compare a slow stretch with a fast one); "
        f"delete and prune run on a fresh copy of the file each time ({cfg['copies']} copies each). "
        "Ratios are hermes-agent ÷ hermes (> 1: we are faster). Last column: what each returned "
        "(rows listed, messages exported, sessions deleted), which must agree.",
        "",
        *table(["operation", "hermes", "hermes-agent", "ahead ×", "rows (ours / theirs)"], rows,
               right=(1, 2, 3)),
    ]
    if search:
        cfg_s, index = search["config"], search["index"]
        lines += [
            f"**Filtered search** (`search_messages(query, source_filter=[...], role_filter=[...])`, "
            f"`limit=20`): one file, created by hermes-agent and filled by our writer with "
            f"{cfg_s['messages']:,} messages in {cfg_s['sessions']:,} sessions ({search['build_s']:.0f} s), "
            f"{cfg_s['sessions'] // len(SOURCES):,} each of {', '.join(f'`{x}`' for x in SOURCES)}, "
            f"a message's timestamp 1 ms after the one before it; both search indexes held every "
            f"message ({'yes' if index['complete'] else '**NO**'}). Each kind has a few searches, each "
            f"with one source and one role (the table shows the first), run {cfg_s['repeat']} times in "
            f"each of {cfg_s['rounds']} rounds (A B B A); p50 over all of a kind's runs. *Same hits*: "
            "runs where both returned the same message ids in the same order. Last column: hits per "
            "search (ours / theirs).",
            "",
            *table(["search", "e.g.", "hermes", "hermes-agent", "ahead ×", "same hits", "hits"],
                   search_rows, right=(2, 3, 4)),
        ]
    lines.append(
        "Targets (issue [H]): ahead on every operation, at least 5× on a page of the listing and on "
        "search. " + ("Missed: " + "; ".join(missed) + ". Why, and what would move them: README, "
                      "Limits, \"SessionDB: listing and counts\", \"SessionDB: search\" and "
                      "\"SessionDB: deletion and upkeep\"." if missed else "All met."))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
