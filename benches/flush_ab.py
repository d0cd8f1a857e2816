"""Our 20-message flush in two builds of hermes, side by side: for a change meant to leave it
alone, measured on a shared machine.

    python benches/flush_ab.py --a PYTHON_A --b PYTHON_B [--cycles 8] [--total 400] [--out PATH]

``PYTHON_A`` and ``PYTHON_B`` are interpreters with each build installed (for example a venv
with the base commit's wheel, and this worktree's ``.venv``). Each runs ``driver.py``'s growth
workload (20-message turns into a fresh file, ``--total`` messages, the agent's flush) in its
own serving process, in blocks ordered A B B A, ``--cycles`` times, at each synchronous level,
with ``sync(2)`` before every block, so that both builds meet the same host from moment to
moment. Prints, per level, each side's p50 and p90 over all its flushes and B ÷ A, and the
spread of B ÷ A between the cycles (each cycle's own two blocks of each side); writes them to
``flush_ab.json`` in ``target/bench/results/`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib

from benchlib import paths, protocol, record  # noqa: E402
from benchlib.machine import code_identity  # noqa: E402
from benchlib.stats import percentile, ranked, summary  # noqa: E402

ORDER = "ABBA"


def flushes(worker: protocol.Worker, sync: str, total: int) -> list[int]:
    raw = worker.call("run", workload="growth:20", sync=sync,
                      kwargs={"turn": 20, "total": total, "budget_s": 30})
    samples: list[int] = raw["flush_ns"]
    return samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="interpreter with build A (the base)")
    ap.add_argument("--b", required=True, help="interpreter with build B (the change)")
    ap.add_argument("--cycles", type=int, default=8, help="A B B A cycles per level")
    ap.add_argument("--total", type=int, default=400, help="messages per block (20 per flush)")
    ap.add_argument("--sync", default="FULL,NORMAL")
    ap.add_argument("--out", type=Path, default=None, help="the results file (default: flush_ab.json "
                    "in target/bench/results/)")
    args = ap.parse_args()

    started = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="hermes-flush-ab-")
    doc = record.start("flush_ab", False, Path(scratch))
    doc["code"] = {"A": code_identity(args.a), "B": code_identity(args.b)}
    doc["results"] = {}
    cfg = json.dumps({"pool": 2 * args.total + 200, "workdir": scratch})
    workers = {side: protocol.Worker(python, paths.BENCHES / "driver.py", "--serve", "hermes", cfg, name=side)
               for side, python in (("A", args.a), ("B", args.b))}
    try:
        for sync in [s.upper() for s in args.sync.split(",") if s]:
            pooled: dict[str, list[int]] = {"A": [], "B": []}
            cycle_ratios = []
            for _ in range(args.cycles):
                cycle: dict[str, list[int]] = {"A": [], "B": []}
                for side in ORDER:
                    os.sync()
                    cycle[side] += flushes(workers[side], sync, args.total)
                pooled["A"] += cycle["A"]
                pooled["B"] += cycle["B"]
                cycle_ratios.append(percentile(cycle["B"], 0.5) / percentile(cycle["A"], 0.5))
            a, b = summary(pooled["A"]), summary(pooled["B"])
            ordered = sorted(cycle_ratios)
            doc["results"][sync] = {"A": a, "B": b, "ratio_p50": b["p50_ms"] / a["p50_ms"],
                                    "cycle_ratios": cycle_ratios}
            print(f"{sync:6s} A p50 {a['p50_ms'] * 1e3:7.1f} µs p90 {a['p90_ms'] * 1e3:7.1f} µs | "
                  f"B p50 {b['p50_ms'] * 1e3:7.1f} µs p90 {b['p90_ms'] * 1e3:7.1f} µs | "
                  f"B ÷ A {b['p50_ms'] / a['p50_ms']:.2f} (cycles: median {ranked(ordered, 0.5):.2f}, "
                  f"quartiles {ranked(ordered, 0.25):.2f}-{ranked(ordered, 0.75):.2f}); {a['n']} flushes each")
    finally:
        for worker in workers.values():
            worker.close()
    path = record.finish(doc, started, quick=False, out=args.out, publish=False, stem="flush_ab")
    print(f"load average {doc['loadavg_start']} -> {doc['loadavg_end']}; results in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
