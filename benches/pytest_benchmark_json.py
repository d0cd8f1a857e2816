"""A results file of ``benches/run.py`` as pytest-benchmark JSON, so that runs
at different commits compare with pytest-benchmark's own tool:

    python benches/pytest_benchmark_json.py benches/results/<run>.json [OUT]
    make bench-compare   # pytest-benchmark compare over benches/results/pytest-benchmark/

One benchmark per timed operation, system and ``synchronous`` level, grouped
by operation: ``growth:20 FULL`` holds the 20-message flush of every system.
Its statistics are the run's (median over the rounds of each round's
figure), in seconds; the quartiles are nearest-rank. Runs written before
the quartiles were recorded (before 2026-12-01) have none and are refused.
Standard library only: ``run.py`` calls it in our interpreter.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator

# pytest-benchmark's statistics (pytest_benchmark.stats.Stats.fields) from
# run.py's summary fields, in ms.
_SECONDS = {"min": "min_ms", "max": "max_ms", "mean": "mean_ms", "stddev": "stddev_ms",
            "median": "p50_ms", "q1": "q1_ms", "q3": "q3_ms", "ld15iqr": "ld15iqr_ms",
            "hd15iqr": "hd15iqr_ms", "total": "total_ms"}


class NoQuartiles(ValueError):
    """The results file predates the fields pytest-benchmark needs."""


def stats(summ: dict[str, Any]) -> dict[str, Any]:
    """One run.py summary as pytest-benchmark's ``stats``."""
    if "q1_ms" not in summ:
        raise NoQuartiles("this results file has no quartiles (written before 2026-12-01)")
    out: dict[str, Any] = {k: summ[field] / 1e3 for k, field in _SECONDS.items()}
    out["rounds"] = summ["n"]
    out["iqr"] = out["q3"] - out["q1"]
    out["iqr_outliers"] = summ["iqr_outliers"]
    out["stddev_outliers"] = summ["stddev_outliers"]
    out["outliers"] = f"{summ['stddev_outliers']};{summ['iqr_outliers']}"
    out["ops"] = 1 / out["mean"] if out["mean"] else 0.0
    out["iterations"] = 1  # every sample timed one call
    return out


def timed(results: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(sync, system, operation, summary) for every timed operation in a run."""
    for sync, systems in results.items():
        for system, workloads in systems.items():
            for name, value in workloads.items():
                if not isinstance(value, dict) or "@" in name:
                    continue
                if "p50_ms" in value:
                    yield sync, system, name, value
                for part in ("load", "count"):  # reads
                    if isinstance(value.get(part), dict) and "p50_ms" in value[part]:
                        yield sync, system, f"{name}:{part}", value[part]
                for point in value.get("points", []):  # scaling
                    for part in ("flush", "load"):
                        if point.get(part, {}).get("p50_ms") is not None:
                            yield sync, system, f"{name}:{part}@{point['size']}", point[part]


def convert(doc: dict[str, Any]) -> dict[str, Any]:
    code = doc.get("code", {})
    machine = doc.get("machine", {})
    benchmarks = []
    for sync, system, operation, summ in timed(doc["results"]):
        if not summ.get("n"):
            continue
        extra = {k: summ[k] for k in ("msg_per_s", "msg_per_s_settled", "messages") if k in summ}
        benchmarks.append({
            "group": f"{operation} {sync}",
            "name": f"{operation}[{system}-{sync}]",
            "fullname": f"benches/run.py::{operation}[{system}-{sync}]",
            "params": {"system": system, "sync": sync},
            "param": f"{system}-{sync}",
            "extra_info": extra,
            "options": {"timer": "time.perf_counter_ns", "disable_gc": False, "warmup": False},
            "stats": stats(summ),
        })
    return {
        "machine_info": {
            "processor": machine.get("cpu", ""),
            "system": machine.get("kernel", ""),
            "python_implementation": "CPython",
            "python_version": machine.get("python", ""),
            "cpu": {"count": machine.get("nproc"), "brand_raw": machine.get("cpu", "")},
        },
        "commit_info": {"id": code.get("commit", ""), "dirty": code.get("dirty", False),
                        "project": "hermes", "branch": "main", "time": doc.get("started_utc", "")},
        "benchmarks": benchmarks,
        "datetime": doc.get("started_utc", ""),
        "version": "5.3.1",
    }


def write(doc: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(convert(doc), indent=1))


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    source = Path(argv[1])
    out = Path(argv[2]) if len(argv) == 3 else source.parent / "pytest-benchmark" / source.name
    try:
        write(json.loads(source.read_text()), out)
    except NoQuartiles as e:
        print(f"{source}: {e}; re-run benches/run.py to get a convertible file", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
