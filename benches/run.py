"""Runs every system on the same workloads, side by side, in one run.

    python benches/run.py [--quick] [--publish | --out PATH] [--sync FULL,NORMAL] [--systems ...]

1. makes sure the peer venv exists (``benches/setup_peers.sh``);
2. builds the floor (``cargo bench --bench floor --no-run``, cached by the
   hash of ``benches/rust/floor.rs`` and ``Cargo.lock``);
3. for each ``synchronous`` level, runs each system in its own process
   (``benches/driver.py`` behind ``benchlib.protocol``; ours in this
   interpreter, the peers in the peer venv) and the floor binary, on fresh
   files in one scratch directory;
4. writes ``<utc>-<commit>[-quick].json`` (summaries, plus down-sampled series
   for the plots) and, for a complete run, ``latest[-quick].json``, with the same
   figures as pytest-benchmark JSON in ``pytest-benchmark/`` beside them
   (``make bench-compare`` compares runs), into ``target/bench/results/``
   (untracked), or ``benches/results/`` with ``--publish``;
5. renders the report (``benches/report.py``, in the peer venv, which has
   matplotlib) beside the results file as ``.md`` (a full run's plots in
   ``target/bench/plots/``); published, ``BENCHMARKS.md`` and
   ``benches/plots/*.png`` for a full run, ``benches/results/latest-quick.md``
   for a quick one.

A noise probe (our 20-message flush at FULL) runs first and last; the report
states how far apart the two were, with the load average.

``--postgres [URL]`` runs the same workloads on a PostgreSQL server instead
(URL, else ``$HERMES_TEST_POSTGRES_URL``, which ``scripts/postgres`` sets;
``make bench-postgres`` starts a throwaway one with fsync on): ours, the OpenAI
Agents SDK's ``SQLAlchemySession`` (asyncpg) and LangGraph's ``PostgresSaver``
(psycopg) from the PostgreSQL peer venv (``setup_peers.sh postgres``), and the
one-statement floor (``benches/rust/floor_postgres.rs``); each workload on a
fresh database of that server; the systems in the order A B C D, then D C B A
(interleaved, so drift on a shared machine falls on every system alike). It
writes ``postgres[-quick].json`` and its section of BENCHMARKS.md
(``render_postgres`` in ``report.py``) beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib and the other benches

import pytest_benchmark_json  # noqa: E402
import workload  # noqa: E402
from benchlib import paths, protocol  # noqa: E402
from benchlib.machine import code_identity, loadavg, machine  # noqa: E402
from benchlib.paths import BENCHES, ROOT  # noqa: E402
from benchlib.render import g  # noqa: E402
from benchlib.stats import merge, series, summary  # noqa: E402

SYSTEMS = ["hermes", "upstream", "openai", "langgraph"]
PEERS = {"upstream", "openai", "langgraph"}
#: On PostgreSQL: hermes-agent has no PostgreSQL store.
SYSTEMS_POSTGRES = ["hermes", "openai", "langgraph"]
#: Workloads only ours can run (the peers have no search): measured in the first round only.
FIRST_ROUND_ONLY = {"search"}


def plan(quick: bool) -> dict[str, Any]:
    """The workload sizes. Quick keeps the shapes, shrinks the sizes."""
    if quick:
        total, sizes, threads_turns = 3000, [100, 1000, 3000], 3
        return {
            "pool": 10_200,
            "plan": [
                ["growth:1", {"turn": 1, "total": 1000, "budget_s": 3}],
                ["growth:20", {"turn": 20, "total": total, "budget_s": 3}],
                ["growth:1000", {"turn": 1000, "total": total, "budget_s": 4}],
                ["growth:1000:paced", {"turn": 1000, "total": total, "budget_s": 4, "pause_s": 0.1}],
                ["growth:20:large", {"turn": 20, "total": 2 * total, "budget_s": 4}],
                ["noop", {"size": 10_000, "reps": 100}],
                ["concurrent", {"threads": 50, "turns": threads_turns, "turn": 20, "budget_s": 4}],
                ["reads", {"size": 10_000, "loads": 5, "counts": 2000}],
                ["multiproc", {"procs": 4, "turns": 10, "turn": 20}],
                ["scaling", {"sizes": sizes, "flushes": 5, "loads": 3, "budget_s": 6}],
            ],
            "floor": {"turns": "1,20,1000", "total": total, "scaling": ",".join(map(str, sizes)), "reads": 5},
            "probe": {"turn": 20, "total": 1000, "budget_s": 3},
        }
    sizes = [100, 1000, 10_000, 100_000]
    return {
        "pool": 20_200,
        "plan": [
            ["growth:1", {"turn": 1, "total": 10_000, "budget_s": 30}],
            ["growth:20", {"turn": 20, "total": 10_000, "budget_s": 30}],
            ["growth:1000", {"turn": 1000, "total": 10_000, "budget_s": 30}],
            ["growth:1000:paced", {"turn": 1000, "total": 10_000, "budget_s": 30, "pause_s": 0.1}],
            # To 100k: every turn size again, each with a budget (stores whose flush grows
            # with the transcript stop short of it, marked capped).
            ["growth:1:large", {"turn": 1, "total": 100_000, "budget_s": 40}],
            ["growth:20:large", {"turn": 20, "total": 100_000, "budget_s": 20}],
            ["growth:1000:large", {"turn": 1000, "total": 100_000, "budget_s": 20}],
            ["noop", {"size": 10_000, "reps": 300}],
            ["concurrent", {"threads": 50, "turns": 20, "turn": 20, "budget_s": 30}],
            ["reads", {"size": 10_000, "loads": 20, "counts": 10_000}],
            ["multiproc", {"procs": 4, "turns": 50, "turn": 20}],
            ["scaling", {"sizes": sizes, "flushes": 10, "loads": 11, "budget_s": 90}],
        ],
        "floor": {"turns": "1,20,1000", "total": 10_000, "scaling": ",".join(map(str, sizes)), "reads": 20},
        "probe": {"turn": 20, "total": 2000, "budget_s": 5},
    }


def plan_postgres(quick: bool) -> dict[str, Any]:
    """The PostgreSQL run's workloads: the flushes, 50 conversations, the reads and search."""
    import scale  # its query set, the same as the SQLite search benchmark's

    total = 2000 if quick else 10_000
    search = {"messages": 100_000, "sessions": 100} if quick else {"messages": 1_000_000, "sessions": 1000}
    budget = 4 if quick else 30
    return {
        "pool": total + 200,
        "plan": [
            ["growth:1", {"turn": 1, "total": total // 2 if quick else total, "budget_s": budget}],
            ["growth:20", {"turn": 20, "total": total, "budget_s": budget}],
            ["growth:1000", {"turn": 1000, "total": total, "budget_s": budget}],
            ["concurrent", {"threads": 50, "turns": 3 if quick else 20, "turn": 20, "budget_s": budget}],
            ["reads", {"size": total, "loads": 5 if quick else 20, "counts": 1000 if quick else 10_000}],
            ["search", {**search, "budget_s": 3 if quick else 15, "least": 2,
                        "queries": scale.search_queries(search["messages"])}],
        ],
        "floor": {"turns": "1,20,1000", "total": total, "reads": 5 if quick else 20},
        "probe": {"turn": 20, "total": 1000, "budget_s": 3},
    }


def summarize_driver(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: raw[k] for k in ("system", "sync", "python", "sqlite_version") if k in raw}
    for key, value in raw.items():
        if not isinstance(value, (dict, list)):
            continue
        if isinstance(value, dict) and ("unsupported" in value or "error" in value):
            out[key] = value
            continue
        name = key.split(":")[0]
        if name == "growth":
            s = summary(value["flush_ns"])
            total_s = sum(value["flush_ns"]) / 1e9
            settle_s = value.get("settle_ns", 0) / 1e9
            out[key] = {
                **s,
                "settle_ms": settle_s * 1e3,
                # Deferred work (our search index) charged: flushes plus the wait for it.
                "msg_per_s_settled": value["messages"] / (total_s + settle_s) if total_s else math.nan,
                "pause_s": value.get("pause_s", 0.0),
                "turn": value["turn"],
                "messages": value["messages"],
                "target": value["target"],
                "capped": value["capped"],
                "rows_ok": value["rows"] == value["messages"],
                "msg_per_s": value["messages"] / total_s if total_s else math.nan,
                "series_ms": series(value["flush_ns"]),
            }
        elif name == "noop":
            s = summary(value["flush_ns"])
            out[key] = {**s, "messages": value["messages"], "rows_ok": value["rows"] == value["messages"]}
        elif name in ("concurrent", "multiproc"):
            s = summary(value["flush_ns"])
            wall_s = value["wall_ns"] / 1e9
            out[key] = {
                **s,
                **{k: value[k] for k in ("threads", "procs", "counts_ok") if k in value},
                "turn": value["turn"],
                "messages": value["messages"],
                "rows_ok": value["rows"] == value["messages"],
                "msg_per_s": value["messages"] / wall_s,
                "wall_s": wall_s,
                # Until every turn was durable, before the deferred work was waited for.
                **({"msg_per_s_flushed": value["messages"] / (value["flushed_ns"] / 1e9)}
                   if value.get("flushed_ns") else {}),
                "error_count": value["error_count"],
                "errors": value["errors"],
            }
        elif name == "reads":
            out[key] = {
                "messages": value["messages"],
                "loaded": value["loaded"],
                "load": summary(value["load_ns"]),
                "count": summary(value["count_ns"]) if value["count_ns"] else None,
                "count_ok": value["count_value"] in (None, value["messages"]),
            }
        elif name == "search":
            out[key] = {
                "messages": value["messages"],
                "rows_ok": value["rows"] == value["messages"],
                "seed_s": value["seed_ns"] / 1e9,
                "settle_s": value["settle_ns"] / 1e9,
                "kinds": {
                    kind: {**summary(k["ns"]), "hits": k["hits"], "queries": k["queries"]}
                    for kind, k in value["kinds"].items()
                },
            }
        elif name == "scaling":
            points = [p for p in value if "size" in p]
            tail = value[-1]
            out[key] = {
                "points": [
                    {
                        "size": p["size"],
                        "flush": summary(p["flush_ns"]),
                        "load": summary(p["load_ns"]),
                        "capped": p.get("capped", False),
                    }
                    for p in points
                ],
                "rows_ok": tail.get("rows") == tail.get("messages"),
            }
    return out


def summarize_floor(raw: dict[str, Any]) -> dict[str, Any]:
    """The floor's raw output (any subset of its parts) as summaries.
    ``growth:N`` is the set-based variant (the floor used for ratios),
    ``growth:N:trigger`` the plain per-row-trigger program, ``growth:N:nofts``
    the same rows without any search index."""
    out: dict[str, Any] = {}
    for key, value in (raw.get("flush") or {}).items():
        turn, variant = key.split("/")
        total_s = sum(value["flush_ns"]) / 1e9
        # The floor used for ratios: SQLite's set-based one, PostgreSQL's one statement.
        main_variant = variant in ("setbased", "statement")
        out[f"growth:{turn}" + ("" if main_variant else f":{variant}")] = {
            **summary(value["flush_ns"]),
            "turn": int(turn),
            "messages": value["messages"],
            "msg_per_s": value["messages"] / total_s,
            "series_ms": series(value["flush_ns"]),
            "variant": variant,
        }
    reads = raw.get("reads")
    if reads:
        out["reads"] = {
            "messages": reads["messages"],
            "loaded": reads["messages"],
            "load": summary(reads["load_ns"]),
            "count": summary(reads["count_ns"]),
        }
    if raw.get("scaling"):
        out["scaling"] = {
            "points": [
                {"size": p["size"], "flush": summary(p["flush_ns"]), "load": summary(p["load_ns"])}
                for p in raw["scaling"]
            ]
        }
    if raw.get("fsync"):
        out["fsync"] = {
            "commit_full": summary(raw["fsync"]["commit_full_ns"]),
            "fdatasync": summary(raw["fsync"]["fdatasync_ns"]),
        }
    return out


# -- the floor ---------------------------------------------------------------


def floor_binary(rebuild: str, name: str = "floor") -> Path | None:
    """The floor executable ``name`` (``floor``, or ``floor_postgres``), built with cargo
    (cached on the inputs' hash)."""
    target = Path(os.environ.get("HERMES_FLOOR_TARGET", ROOT / "target" / "bench"))
    sources = [ROOT / f"benches/rust/{name}.rs", ROOT / "benches/rust/workload_rows.rs", ROOT / "Cargo.lock"]
    key = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    cached = target / f"{name}-{key}"
    if cached.exists() and rebuild != "always":
        return cached
    if rebuild == "never":
        return None
    print(f"floor: building (cargo bench --bench {name} --no-run) ...", file=sys.stderr, flush=True)
    env = {**os.environ, "CARGO_TARGET_DIR": str(target)}
    proc = subprocess.run(
        ["cargo", "bench", "--bench", name, "--no-run", "--message-format=json-render-diagnostics"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    exe = None
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["target"]["name"] == name:
            exe = msg["executable"]
    if proc.returncode != 0 or not exe:
        print(f"floor: build failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
        older = sorted(target.glob(f"{name}-*"), key=lambda p: p.stat().st_mtime)
        if older:
            print(f"floor: using the previous build {older[-1]}", file=sys.stderr)
            return older[-1]
        return None
    shutil.copy2(exe, cached)
    return cached


# -- running -----------------------------------------------------------------


class Floor:
    """The floor binary, one workload per invocation."""

    def __init__(self, exe: Path, cfg: dict[str, Any], scratch: Path) -> None:
        from hermes.state import SessionDB

        self.exe, self.cfg, self.scratch = exe, cfg, scratch
        self.template = scratch / "floor-template.db"
        db = SessionDB(self.template)
        db.create_session("bench", "cli")
        db.close()
        self.small = scratch / "floor-messages-small.json"
        self.small.write_text(json.dumps(workload.messages(0, cfg["total"] + 400)))
        scaling = [int(x) for x in cfg["scaling"].split(",") if x]
        self.big = scratch / "floor-messages-big.json"
        self.big.write_text(json.dumps(workload.messages(0, max([cfg["total"], *scaling]) + 400)))
        self.info = {"system": "floor"}

    def run(self, part: str, sync: str, turns: str = "") -> dict[str, Any]:
        out = self.scratch / "floor-out.json"
        msgs = self.big if part == "scaling" else self.small
        cmd = [
            str(self.exe), "--template", str(self.template), "--messages", str(msgs), "--sync", sync,
            "--only", part, "--turns", turns or self.cfg["turns"], "--total", str(self.cfg["total"]),
            "--scaling", self.cfg["scaling"], "--reads", str(self.cfg["reads"]),
            "--workdir", str(self.scratch / "floor-work"), "--out", str(out),
        ]
        proc = subprocess.run(cmd, cwd=ROOT)
        if proc.returncode != 0:
            return {"error": f"floor exited {proc.returncode}"}
        raw = json.loads(out.read_text())
        out.unlink()
        self.info["sqlite_version"] = raw["sqlite_version"]
        return raw


class PostgresFloor:
    """The PostgreSQL floor binary, one workload per invocation, each on a fresh database
    of the server with hermes' schema (made by opening it with ``SessionDB``)."""

    def __init__(self, exe: Path, cfg: dict[str, Any], scratch: Path, server: str) -> None:
        self.exe, self.cfg, self.scratch, self.server = exe, cfg, scratch, server
        self.messages = scratch / "floor-messages.json"
        self.messages.write_text(json.dumps(workload.messages(0, cfg["total"] + 400)))
        self.info = {"system": "floor"}

    def run(self, part: str, sync: str, turns: str = "") -> dict[str, Any]:
        from hermes.state import SessionDB

        from benchlib import postgres

        url = postgres.fresh_database(self.server, "bench_floor", sync)
        try:
            SessionDB(url).close()
            out = self.scratch / "floor-out.json"
            cmd = [
                str(self.exe), "--url", url, "--messages", str(self.messages), "--sync", sync, "--only", part,
                "--turns", turns or self.cfg["turns"], "--total", str(self.cfg["total"]),
                "--reads", str(self.cfg["reads"]), "--out", str(out),
            ]
            proc = subprocess.run(cmd, cwd=ROOT)
            if proc.returncode != 0:
                return {"error": f"floor_postgres exited {proc.returncode}"}
            raw = json.loads(out.read_text())
            out.unlink()
            return raw  # type: ignore[no-any-return]
        finally:
            postgres.drop_database(self.server, url)


def workers_hermes(workers: dict[str, Any]) -> protocol.Worker:
    w = workers.get("hermes")
    if not isinstance(w, protocol.Worker):
        raise SystemExit("the hermes system is required (the noise probe runs on it)")
    return w


def run_probe(hermes: protocol.Worker, probe: dict[str, Any]) -> Any:
    """The noise probe: our 20-message flush at FULL, summarized as the growth workload is."""
    raw = hermes.call("run", workload="growth:20", sync="FULL", kwargs=probe)
    return summarize_driver({"growth:20": raw})["growth:20"]


def primary(name: str, summ: Any) -> Any:
    """The one figure per round that the report shows the spread of."""
    if not isinstance(summ, dict):
        return None
    kind = name.split(":")[0]
    if kind in ("growth", "noop"):
        return summ.get("p50_ms")
    if kind in ("concurrent", "multiproc"):
        return summ.get("msg_per_s")
    if kind == "reads":
        return g(summ, "load", "p50_ms")
    if kind == "fsync":
        return g(summ, "commit_full", "p50_ms")
    if kind == "scaling":
        return g(summ, "points", -1, "flush", "p50_ms")
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (< 3 minutes)")
    ap.add_argument("--postgres", nargs="?", const=os.environ.get("HERMES_TEST_POSTGRES_URL", ""), default=None,
                    metavar="URL", help="on this PostgreSQL server (default: $HERMES_TEST_POSTGRES_URL)")
    ap.add_argument("--sync", default="", help="synchronous levels (default FULL,NORMAL; FULL on PostgreSQL)")
    ap.add_argument("--systems", default="", help="default: every system of the run, and the floor")
    ap.add_argument("--workloads", default="", help="only these workloads (growth,noop,concurrent,reads,scaling)")
    protocol.add_peers_argument(ap)
    ap.add_argument("--hermes-python", default=sys.executable, help="interpreter with hermes installed")
    ap.add_argument("--floor-build", choices=["auto", "always", "never"], default="auto")
    ap.add_argument("--rounds", type=int, default=0, help="rounds (default: 3, quick: 1)")
    ap.add_argument("--no-report", action="store_true")
    paths.add_output_arguments(ap, "benches/results/<utc>-<commit>[-quick].json, and BENCHMARKS.md with "
                                   "benches/plots/ (full run) or benches/results/latest-quick.md (quick run)")
    args = ap.parse_args()

    started = time.monotonic()
    on_server = args.postgres is not None
    if on_server and not args.postgres:
        raise SystemExit("run.py --postgres: no URL given and no $HERMES_TEST_POSTGRES_URL "
                         "(run it inside scripts/postgres, or use make bench-postgres)")
    every = SYSTEMS_POSTGRES if on_server else SYSTEMS
    systems = [s for s in (args.systems or ",".join([*every, "floor"])).split(",") if s]
    syncs = [s.upper() for s in (args.sync or ("FULL" if on_server else "FULL,NORMAL")).split(",") if s]
    config = plan_postgres(args.quick) if on_server else plan(args.quick)
    if args.workloads:
        config["workloads"] = args.workloads.split(",")

    peers_python = protocol.peers_python(args.peers_python) if PEERS & set(systems) else ""
    if not peers_python:
        systems = [s for s in systems if s not in PEERS]

    exe = floor_binary(args.floor_build, "floor_postgres" if on_server else "floor") if "floor" in systems else None
    if exe is None:
        systems = [s for s in systems if s != "floor"]

    scratch = Path(tempfile.mkdtemp(prefix="hermes-bench-"))
    # On PostgreSQL: A B C D D C B A.
    rounds = args.rounds or (1 if args.quick else 2 if on_server else 3)
    doc: dict[str, Any] = {
        "kind": "quick" if args.quick else "full",
        "backend": "postgres" if on_server else "sqlite",
        "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", "benches/run.py", *sys.argv[1:]]),
        "machine": machine(scratch),
        "code": code_identity(args.hermes_python),
        "config": config,
        "rounds": rounds,
        "synced_between_systems": True,
        "synced_after_seeding": True,
        "loadavg_start": loadavg(),
        "results": {},
    }
    if on_server:
        from benchlib import postgres

        doc["order"] = systems
        doc["server"] = postgres.run(args.postgres, "SELECT version()")
        doc["server_settings"] = dict(
            line.split("|", 1) for line in postgres.run(
                args.postgres, "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', "
                "'full_page_writes', 'wal_sync_method', 'shared_buffers', 'max_connections') ORDER BY name"
            ).splitlines()
        )
    print(
        f"bench: {doc['kind']} run, {rounds} round(s), systems {systems}, sync {syncs}, scratch {scratch}",
        file=sys.stderr,
    )
    workers: dict[str, Any] = {}
    per_round: dict[str, dict[str, dict[str, list[Any]]]] = {
        sync: {s: {} for s in systems} for sync in syncs
    }
    try:
        for system in systems:
            if system == "floor":
                assert exe is not None
                workers[system] = (PostgresFloor(exe, config["floor"], scratch, args.postgres) if on_server
                                   else Floor(exe, config["floor"], scratch))
            else:
                python = args.hermes_python if system == "hermes" else peers_python
                cfg = {"pool": config["pool"], "workdir": str(scratch)}
                if on_server:
                    cfg["postgres"] = args.postgres
                workers[system] = protocol.Worker(
                    python, BENCHES / "driver.py", "--serve", system, json.dumps(cfg), name=system
                )
        probe = config["probe"]
        doc["probe_start"] = run_probe(workers_hermes(workers), probe)
        only = set(config.get("workloads") or [])
        for rnd in range(rounds):
            if on_server:  # A B C D, then D C B A
                order = systems if rnd % 2 == 0 else systems[::-1]
            else:
                order = systems[rnd % len(systems):] + systems[: rnd % len(systems)]
            for sync in syncs:
                if "floor" in systems and not on_server:
                    raw = workers["floor"].run("fsync", sync)
                    per_round[sync]["floor"].setdefault("fsync", []).append(summarize_floor(raw).get("fsync"))
                for name, kwargs in config["plan"]:
                    if only and name.split(":")[0] not in only:
                        continue
                    if rnd and name in FIRST_ROUND_ONLY:
                        continue
                    for system in order:
                        # No system is measured while the kernel writes back
                        # the files another one just wrote (at NORMAL they
                        # are not fsynced): that write-back takes a core.
                        os.sync()
                        t0 = time.monotonic()
                        if system == "floor":
                            part = name.split(":")[0]
                            if part not in ("growth", "reads", "scaling") or (on_server and part == "scaling"):
                                continue
                            raw = workers["floor"].run(part, sync, turns=str(kwargs.get("turn", "")))
                            got = summarize_floor(raw) if "error" not in raw else {name: raw}
                            for key, value in got.items():
                                if key.split(":")[0] == part:
                                    per_round[sync]["floor"].setdefault(key, []).append(value)
                        else:
                            raw = workers[system].call("run", workload=name, sync=sync, kwargs=kwargs)
                            per_round[sync][system].setdefault(name, []).append(summarize_driver({name: raw})[name])
                        print(
                            f"  round {rnd + 1}/{rounds} {sync:6s} {name:12s} {system:9s} {time.monotonic() - t0:6.1f}s",
                            file=sys.stderr, flush=True,
                        )
        doc["probe_end"] = run_probe(workers_hermes(workers), probe)
    finally:
        for w in workers.values():
            if isinstance(w, protocol.Worker):
                w.close()
        shutil.rmtree(scratch, ignore_errors=True)
    for sync in syncs:
        doc["results"][sync] = {}
        for system in systems:
            info = dict(workers[system].info) if system in workers else {}
            merged: dict[str, Any] = {k: v for k, v in info.items()
                                      if k in ("system", "python", "sqlite_version", "packages")}
            for name, rounds_of in per_round[sync][system].items():
                merged[name] = merge(rounds_of)
                merged[name + "@rounds"] = [primary(name, r) for r in rounds_of]
            doc["results"][sync][system] = merged
    doc["loadavg_end"] = loadavg()
    doc["code"]["core_sha256_end"] = code_identity(args.hermes_python)["core_sha256"]
    doc["seconds"] = round(time.monotonic() - started, 1)

    # Only a published run writes tracked files; any other run writes into
    # target/bench/ (or exactly where --out says).
    results = paths.results_dir(args.publish)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    suffix = "-quick" if args.quick else ""
    out = args.out or results / f"{stamp}-{doc['code']['commit']}{suffix}.json"
    if on_server:
        out = args.out or results / f"postgres{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    if on_server:  # its section of BENCHMARKS.md beside it (make bench-report puts it in)
        import report

        out.with_suffix(".md").write_text(report.render_postgres(doc))
        print(f"bench: results in {out}, its section in {out.with_suffix('.md')} ({doc['seconds']}s)",
              file=sys.stderr)
        return 0
    pytest_benchmark_json.write(doc, out.parent / "pytest-benchmark" / out.name)
    partial = bool(args.workloads or args.out) or set(systems) != {*SYSTEMS, "floor"}
    if not partial:  # latest*.json always holds a complete run
        (results / f"latest{suffix}.json").write_text(json.dumps(doc, indent=1))
    print(f"bench: results in {out} ({doc['seconds']}s)", file=sys.stderr)

    if not args.no_report:
        if args.publish and not partial:
            markdown = ROOT / "BENCHMARKS.md" if not args.quick else results / "latest-quick.md"
        else:
            markdown = out.with_suffix(".md")
        plots = paths.plots_dir(args.publish) if not (args.quick or partial) else ""
        python = peers_python or sys.executable
        report = [python, str(BENCHES / "report.py"), str(out), "--markdown", str(markdown), "--plots", str(plots)]
        subprocess.run(report, cwd=ROOT, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
