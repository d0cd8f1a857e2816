"""Runs every system on the same workloads, side by side, in one run.

    python benches/run.py [--quick] [--sync FULL,NORMAL] [--systems ...]

1. makes sure the peer venv exists (``benches/setup_peers.sh``);
2. builds the floor (``cargo bench --bench floor --no-run``, cached by the
   hash of ``benches/rust/floor.rs`` and ``Cargo.lock``);
3. for each ``synchronous`` level, runs each system in its own process
   (``benches/driver.py``; ours in this interpreter, the peers in the peer
   venv) and the floor binary, on fresh files in one scratch directory;
4. writes ``benches/results/<utc>-<commit>[-quick].json`` (summaries, plus
   down-sampled series for the plots) and ``benches/results/latest[-quick].json``,
   and the same figures as pytest-benchmark JSON in
   ``benches/results/pytest-benchmark/`` (``make bench-compare`` compares commits);
5. renders the report (``benches/report.py``, in the peer venv, which has
   matplotlib): ``BENCHMARKS.md`` and ``benches/plots/*.png`` for a full run,
   ``benches/results/latest-quick.md`` for a quick one.

A noise probe (our 20-message flush at FULL) runs first and last; the report
states how far apart the two were, with the load average.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import pytest_benchmark_json  # noqa: E402
import workload  # noqa: E402

SYSTEMS = ["hermes", "upstream", "openai", "langgraph"]
PEERS = {"upstream", "openai", "langgraph"}


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


# -- statistics (the same for every system) ----------------------------------


def pct(samples: list[int], q: float) -> float:
    """Nearest-rank percentile of nanosecond samples, in nanoseconds."""
    return ranked(sorted(samples), q)


def ranked(ordered: list[int], q: float) -> float:
    """Nearest-rank percentile of samples already sorted."""
    if not ordered:
        return math.nan
    return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))])


def summary(samples: list[int]) -> dict[str, float]:
    """Percentiles and moments of nanosecond samples, in ms; the quartile and
    outlier fields are those pytest-benchmark keeps (pytest_benchmark_json.py)."""
    if not samples:
        return {"n": 0}
    samples = sorted(samples)  # once, for every percentile below
    n, mean = len(samples), sum(samples) / len(samples)
    stddev = math.sqrt(sum((x - mean) ** 2 for x in samples) / (n - 1)) if n > 1 else 0.0
    q1, q3 = ranked(samples, 0.25), ranked(samples, 0.75)
    low, high = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return {
        "n": n,
        "p50_ms": ranked(samples, 0.50) / 1e6,
        "p90_ms": ranked(samples, 0.90) / 1e6,
        "p99_ms": ranked(samples, 0.99) / 1e6,
        "mean_ms": mean / 1e6,
        "min_ms": min(samples) / 1e6,
        "max_ms": max(samples) / 1e6,
        "stddev_ms": stddev / 1e6,
        "q1_ms": q1 / 1e6,
        "q3_ms": q3 / 1e6,
        "ld15iqr_ms": min(x for x in samples if x >= low) / 1e6,
        "hd15iqr_ms": max(x for x in samples if x <= high) / 1e6,
        "iqr_outliers": sum(1 for x in samples if not low <= x <= high),
        "stddev_outliers": sum(1 for x in samples if abs(x - mean) > stddev),
        "total_ms": sum(samples) / 1e6,
    }


def series(samples: list[int], points: int = 200) -> list[float]:
    """Per-flush latency (ms) down-sampled to at most ``points`` bucket medians."""
    if len(samples) <= points:
        return [x / 1e6 for x in samples]
    step = len(samples) / points
    out = []
    for i in range(points):
        bucket = samples[int(i * step) : int((i + 1) * step)] or samples[-1:]
        out.append(pct(bucket, 0.5) / 1e6)
    return out


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
        out[f"growth:{turn}" + ("" if variant == "setbased" else f":{variant}")] = {
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


# -- environment -------------------------------------------------------------


def sh(*cmd: str, cwd: Path = ROOT) -> str:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(workdir: Path) -> dict[str, Any]:
    cpu = ""
    for line in sh("lscpu").splitlines():
        if line.startswith("Model name:"):
            cpu = line.split(":", 1)[1].strip()
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    df = sh("df", "-T", "-h", str(workdir)).splitlines()
    disk = " ".join(df[-1].split()[:3]) if len(df) > 1 else ""
    device = df[-1].split()[0] if len(df) > 1 else ""
    lsblk = sh("lsblk", "-d", "-n", "-o", "NAME,ROTA,SIZE,MODEL", device) if device.startswith("/dev/") else ""
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "disk": disk,
        "disk_device": " ".join(lsblk.split()),
        "python": sys.version.split()[0],
    }


def code_identity(hermes_python: str) -> dict[str, Any]:
    so = sh(hermes_python, "-c", "import hermes._core as c; print(c.__file__)")
    digest = hashlib.sha256(Path(so).read_bytes()).hexdigest()[:16] if so and Path(so).exists() else ""
    dirty = sh("git", "status", "--porcelain", "--", "rust", "python", "Cargo.toml", "Cargo.lock")
    return {
        "commit": sh("git", "rev-parse", "--short", "HEAD"),
        "dirty": bool(dirty),
        "core_so": so,
        "core_sha256": digest,
    }


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


# -- the floor ---------------------------------------------------------------


def floor_binary(rebuild: str) -> Path | None:
    """The floor executable, built with cargo (cached on the inputs' hash)."""
    target = Path(os.environ.get("HERMES_FLOOR_TARGET", ROOT / "target" / "bench"))
    key = hashlib.sha256(
        (ROOT / "benches/rust/floor.rs").read_bytes() + (ROOT / "Cargo.lock").read_bytes()
    ).hexdigest()[:16]
    cached = target / f"floor-{key}"
    if cached.exists() and rebuild != "always":
        return cached
    if rebuild == "never":
        return None
    print("floor: building (cargo bench --bench floor --no-run) ...", file=sys.stderr, flush=True)
    env = {**os.environ, "CARGO_TARGET_DIR": str(target)}
    proc = subprocess.run(
        ["cargo", "bench", "--bench", "floor", "--no-run", "--message-format=json-render-diagnostics"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    exe = None
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["target"]["name"] == "floor":
            exe = msg["executable"]
    if proc.returncode != 0 or not exe:
        print(f"floor: build failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
        older = sorted(target.glob("floor-*"), key=lambda p: p.stat().st_mtime)
        if older:
            print(f"floor: using the previous build {older[-1]}", file=sys.stderr)
            return older[-1]
        return None
    shutil.copy2(exe, cached)
    return cached


# -- running -----------------------------------------------------------------


class Worker:
    """A serving ``driver.py`` process for one system (imports paid once)."""

    def __init__(self, python: str, system: str, config: dict[str, Any], scratch: Path) -> None:
        self.system = system
        cfg = {"pool": config["pool"], "workdir": str(scratch)}
        self.proc = subprocess.Popen(
            [python, str(HERE / "driver.py"), "--serve", system, json.dumps(cfg)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.info = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.system}: the driver exited ({self.proc.wait()})")
        return json.loads(line)  # type: ignore[no-any-return]

    def run(self, workload: str, sync: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"workload": workload, "sync": sync, "kwargs": kwargs}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


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


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def merge(values: list[Any]) -> Any:
    """Combines the summaries of several rounds: numbers by their median,
    dicts key by key, equal-length lists element by element."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    if all(isinstance(v, bool) for v in values):
        return all(values)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return sorted(values)[len(values) // 2]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        nums = [float(v) for v in values if not math.isnan(float(v))]
        return median(nums) if nums else math.nan
    if all(isinstance(v, dict) for v in values):
        keys = list(dict.fromkeys(k for v in values for k in v))
        return {k: merge([v.get(k) for v in values]) for k in keys}
    if all(isinstance(v, list) for v in values) and len({len(v) for v in values}) == 1:
        return [merge([v[i] for v in values]) for i in range(len(values[0]))]
    return values[len(values) // 2]


def workers_hermes(workers: dict[str, Any]) -> Worker:
    w = workers.get("hermes")
    if not isinstance(w, Worker):
        raise SystemExit("the hermes system is required (the noise probe runs on it)")
    return w


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
        return g2(summ, "load", "p50_ms")
    if kind == "fsync":
        return g2(summ, "commit_full", "p50_ms")
    if kind == "scaling":
        pts = summ.get("points") or []
        return g2(pts[-1], "flush", "p50_ms") if pts else None
    return None


def g2(d: Any, a: str, b: str) -> Any:
    return d.get(a, {}).get(b) if isinstance(d, dict) and isinstance(d.get(a), dict) else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (< 3 minutes)")
    ap.add_argument("--sync", default="FULL,NORMAL", help="synchronous levels (default FULL,NORMAL)")
    ap.add_argument("--systems", default=",".join([*SYSTEMS, "floor"]))
    ap.add_argument("--workloads", default="", help="only these workloads (growth,noop,concurrent,reads,scaling)")
    ap.add_argument("--peers-python", default=os.environ.get("HERMES_PEERS_PYTHON", ""))
    ap.add_argument("--hermes-python", default=sys.executable, help="interpreter with hermes installed")
    ap.add_argument("--floor-build", choices=["auto", "always", "never"], default="auto")
    ap.add_argument("--rounds", type=int, default=0, help="rounds (default: 3, quick: 1)")
    ap.add_argument("--no-report", action="store_true")
    ap.add_argument("--out", default="", help="results file (default benches/results/<utc>-<commit>.json); its pytest-benchmark JSON goes to pytest-benchmark/ beside it")
    args = ap.parse_args()

    started = time.monotonic()
    systems = [s for s in args.systems.split(",") if s]
    syncs = [s.upper() for s in args.sync.split(",") if s]
    config = plan(args.quick)
    if args.workloads:
        config["workloads"] = args.workloads.split(",")

    peers_python = args.peers_python
    if PEERS & set(systems) and not peers_python:
        proc = subprocess.run(["bash", str(HERE / "setup_peers.sh")], capture_output=True, text=True)
        if proc.returncode == 0:
            peers_python = proc.stdout.strip().splitlines()[-1]
        else:
            print(f"peers: setup failed, peers skipped:\n{proc.stderr[-2000:]}", file=sys.stderr)
    if not peers_python:
        systems = [s for s in systems if s not in PEERS]

    exe = floor_binary(args.floor_build) if "floor" in systems else None
    if exe is None:
        systems = [s for s in systems if s != "floor"]

    scratch = Path(tempfile.mkdtemp(prefix="hermes-bench-"))
    rounds = args.rounds or (1 if args.quick else 3)
    doc: dict[str, Any] = {
        "kind": "quick" if args.quick else "full",
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
                workers[system] = Floor(exe, config["floor"], scratch)
            else:
                python = args.hermes_python if system == "hermes" else peers_python
                workers[system] = Worker(python, system, config, scratch)
        probe = config["probe"]
        doc["probe_start"] = summarize_driver({"growth:20": workers_hermes(workers).run("growth:20", "FULL", probe)})[
            "growth:20"
        ]
        only = set(config.get("workloads") or [])
        for rnd in range(rounds):
            order = systems[rnd % len(systems):] + systems[: rnd % len(systems)]
            for sync in syncs:
                if "floor" in systems:
                    raw = workers["floor"].run("fsync", sync)
                    per_round[sync]["floor"].setdefault("fsync", []).append(summarize_floor(raw).get("fsync"))
                for name, kwargs in config["plan"]:
                    if only and name.split(":")[0] not in only:
                        continue
                    for system in order:
                        # No system is measured while the kernel writes back
                        # the files another one just wrote (at NORMAL they
                        # are not fsynced): that write-back takes a core.
                        os.sync()
                        t0 = time.monotonic()
                        if system == "floor":
                            part = name.split(":")[0]
                            if part not in ("growth", "reads", "scaling"):
                                continue
                            raw = workers["floor"].run(part, sync, turns=str(kwargs.get("turn", "")))
                            got = summarize_floor(raw) if "error" not in raw else {name: raw}
                            for key, value in got.items():
                                if key.split(":")[0] == part:
                                    per_round[sync]["floor"].setdefault(key, []).append(value)
                        else:
                            raw = workers[system].run(name, sync, kwargs)
                            per_round[sync][system].setdefault(name, []).append(summarize_driver({name: raw})[name])
                        print(
                            f"  round {rnd + 1}/{rounds} {sync:6s} {name:12s} {system:9s} {time.monotonic() - t0:6.1f}s",
                            file=sys.stderr, flush=True,
                        )
        doc["probe_end"] = summarize_driver({"growth:20": workers_hermes(workers).run("growth:20", "FULL", probe)})[
            "growth:20"
        ]
    finally:
        for w in workers.values():
            if isinstance(w, Worker):
                w.close()
        shutil.rmtree(scratch, ignore_errors=True)
    for sync in syncs:
        doc["results"][sync] = {}
        for system in systems:
            info = dict(workers[system].info) if system in workers else {}
            merged: dict[str, Any] = {k: v for k, v in info.items() if k in ("system", "python", "sqlite_version")}
            for name, rounds_of in per_round[sync][system].items():
                merged[name] = merge(rounds_of)
                merged[name + "@rounds"] = [primary(name, r) for r in rounds_of]
            doc["results"][sync][system] = merged
    doc["loadavg_end"] = loadavg()
    doc["code"]["core_sha256_end"] = code_identity(args.hermes_python)["core_sha256"]
    doc["seconds"] = round(time.monotonic() - started, 1)

    results = HERE / "results"
    results.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    suffix = "-quick" if args.quick else ""
    out = Path(args.out) if args.out else results / f"{stamp}-{doc['code']['commit']}{suffix}.json"
    out.write_text(json.dumps(doc, indent=1))
    # Beside the results file: a run with --out writes nothing into the repository.
    pytest_benchmark_json.write(doc, out.parent / "pytest-benchmark" / out.name)
    partial = bool(args.workloads or args.out) or set(systems) != {*SYSTEMS, "floor"}
    if not partial:  # latest*.json always holds a complete run
        (results / f"latest{suffix}.json").write_text(json.dumps(doc, indent=1))
    print(f"bench: results in {out} ({doc['seconds']}s)", file=sys.stderr)

    if not args.no_report:
        python = peers_python or sys.executable
        report = [python, str(HERE / "report.py"), str(out)]
        if args.quick or partial:
            report += ["--markdown", str(out.with_suffix(".md") if partial else results / "latest-quick.md"), "--plots", ""]
        subprocess.run(report, cwd=ROOT, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
