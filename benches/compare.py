"""Two runs of ``benches/run.py``, figure by figure: is the second one worse
beyond its own noise?

    python benches/compare.py BEFORE.json AFTER.json

Every timed figure both runs have (the p50 of each operation, system and
``synchronous`` level, median over the rounds; and msg/s where the workload
has one) as ``after ÷ before`` (for msg/s ``before ÷ after``, so that > 1 is
worse everywhere). Each run's noise probe (our 20-message flush at FULL, run
first and last) moved by some spread; a figure of ours (``hermes``) counts as
worse when its ratio exceeds 1 + the larger of the two runs' spreads. The
peers' and the floor's code is the same in both runs: how far their figures
moved shows the host's drift between them.

Then pytest-benchmark's own table of the two (``pytest-benchmark compare``),
when this interpreter has pytest-benchmark (the peer venv has; ``make
bench-check`` runs this there). Exits 1 when a figure of ours is worse beyond
the spread.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib and the other benches

import pytest_benchmark_json  # noqa: E402
from benchlib.render import g, ms, ok, table  # noqa: E402
from benchlib.stats import percentile, spread  # noqa: E402

#: The system whose figures are judged; the others show the host's drift.
OURS = "hermes"


def figures(doc: dict[str, Any]) -> dict[tuple[str, str, str, str], float]:
    """(operation, system, sync, measure) -> value, where a larger value is worse:
    p50 in ms, and msg/s inverted (s per message)."""
    out = {}
    for sync, system, operation, summ in pytest_benchmark_json.timed(doc["results"]):
        if ok(summ.get("p50_ms")):
            out[operation, system, sync, "p50"] = summ["p50_ms"]
        if ok(summ.get("msg_per_s")) and summ["msg_per_s"] > 0:
            out[operation, system, sync, "msg/s"] = 1 / summ["msg_per_s"]
    return out


def probe_spread(doc: dict[str, Any]) -> float:
    return spread(g(doc, "probe_start", "p50_ms"), g(doc, "probe_end", "p50_ms"))


def describe(label: str, path: Path, doc: dict[str, Any]) -> str:
    code = doc.get("code", {})
    la, lb = doc.get("loadavg_start") or ["?"], doc.get("loadavg_end") or ["?"]
    return (
        f"{label}: {path} ({doc.get('kind')} run, commit {code.get('commit', '?')}"
        f"{' + uncommitted changes' if code.get('dirty') else ''}, started {doc.get('started_utc')}): probe "
        f"{ms(g(doc, 'probe_start', 'p50_ms'))} then {ms(g(doc, 'probe_end', 'p50_ms'))}, spread "
        f"{probe_spread(doc):.0f}%; load average {la[0]} -> {lb[0]}"
    )


def shown(measure: str, value: float) -> str:
    return ms(value) if measure == "p50" else f"{1 / value:,.0f} msg/s"


def verdicts(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[str], int]:
    """The report's lines, and how many figures of ours are worse beyond the noise."""
    threshold = max(probe_spread(before), probe_spread(after))
    old, new = figures(before), figures(after)
    common = sorted(set(old) & set(new))
    rows, drift, worse = [], [], 0
    for key in common:
        operation, system, sync, measure = key
        r = new[key] / old[key]
        if system != OURS:
            drift.append(r)
            continue
        beyond = (r - 1) * 100 > threshold
        better = (1 / r - 1) * 100 > threshold
        worse += beyond
        rows.append([f"{operation} ({sync}) {measure}", shown(measure, old[key]), shown(measure, new[key]),
                     f"{r:.2f}×", "**worse beyond the spread**" if beyond else ("better beyond the spread" if better else "")])
    lines = [
        f"Threshold: {threshold:.0f}% (the larger probe spread). Ratio: after ÷ before for p50, "
        "before ÷ after for msg/s; > 1 is worse.",
        "",
        *table(["figure of ours", "before", "after", "ratio", "verdict"], rows),
    ]
    ours = [new[k] / old[k] for k in common if k[1] == OURS]
    for what, ratios in (("Ours", ours), ("Host drift, from the peers and the floor (code unchanged between runs)", drift)):
        if ratios:
            lines += [
                f"{what}: {len(ratios)} figures, ratio median {percentile(ratios, 0.5):.2f}×, middle 80% "
                f"{percentile(ratios, 0.1):.2f}×–{percentile(ratios, 0.9):.2f}×.",
                "",
            ]
    only = sorted(set(old) ^ set(new))
    if only:
        lines += [f"In one run only (not compared): {len(only)} figures, e.g. {' '.join(map(str, only[:3]))}.", ""]
    lines.append(f"{len(rows)} figures of ours compared: {worse} worse beyond the spread.")
    return lines, worse


def pytest_benchmark_table(docs: list[dict[str, Any]]) -> None:
    """pytest-benchmark's compare of the two runs, if it is installed here."""
    try:
        import pytest_benchmark  # noqa: F401
    except ImportError:
        print("\n(pytest-benchmark is not installed in this interpreter: its table is skipped; "
              "the peer venv has it)")
        return
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        files = []
        for i, doc in enumerate(docs):
            out = Path(tmp) / f"{i + 1:04d}_{'before' if i == 0 else 'after'}.json"
            pytest_benchmark_json.write(doc, out)
            files.append(str(out))
        # From the scratch directory: pytest-benchmark would otherwise load this project's pytest setup.
        subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", "--group-by=group", "--sort=name",
                        "--columns=median,iqr,min,max,rounds", *files], cwd=tmp, check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    args = ap.parse_args()
    docs = [json.loads(p.read_text()) for p in (args.before, args.after)]
    print(describe("before", args.before, docs[0]))
    print(describe("after ", args.after, docs[1]))
    print()
    lines, worse = verdicts(*docs)
    print("\n".join(lines))
    pytest_benchmark_table(docs)
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
