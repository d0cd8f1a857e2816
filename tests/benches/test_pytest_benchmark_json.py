"""The benchmark runner's pytest-benchmark export (benches/pytest_benchmark_json.py): every
timed figure of a run becomes one benchmark whose statistics are those of its samples."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHES = Path(__file__).resolve().parents[2] / "benches"
sys.path.insert(0, str(BENCHES))

import pytest_benchmark_json  # noqa: E402
from benchlib.stats import summary  # noqa: E402

# pytest_benchmark.stats.Stats.fields, and what its compare command reads besides.
STATS_FIELDS = {"min", "max", "mean", "stddev", "rounds", "median", "iqr", "q1", "q3",
                "iqr_outliers", "stddev_outliers", "outliers", "ld15iqr", "hd15iqr", "ops",
                "total", "iterations"}


def run_doc(samples_ns: list[int]) -> dict[str, Any]:
    summ = summary(samples_ns)
    reads = {"messages": 3, "load": summ, "count": summ}
    point = {"size": 100, "flush": summ, "load": summ}
    hermes = {"growth:20": {**summ, "msg_per_s": 1.0}, "growth:20@rounds": [1.0], "reads": reads,
              "scaling": {"points": [point]}, "noop": {"n": 0}}
    return {"code": {"commit": "abc1234"}, "results": {"FULL": {"hermes": hermes}}}


def test_every_timed_figure_becomes_a_benchmark_with_its_samples_statistics() -> None:
    samples = [1_000_000 * k for k in (5, 1, 4, 2, 3, 100)]
    out = pytest_benchmark_json.convert(run_doc(samples))
    names = sorted(b["name"] for b in out["benchmarks"])
    assert names == ["growth:20[hermes-FULL]", "reads:count[hermes-FULL]", "reads:load[hermes-FULL]",
                     "scaling:flush@100[hermes-FULL]", "scaling:load@100[hermes-FULL]"]
    growth = next(b for b in out["benchmarks"] if b["name"].startswith("growth"))
    stats = growth["stats"]
    assert set(stats) == STATS_FIELDS
    seconds = [x / 1e9 for x in samples]
    assert stats["min"] == pytest.approx(min(seconds)) and stats["max"] == pytest.approx(max(seconds))
    assert stats["mean"] == pytest.approx(statistics.mean(seconds))
    assert stats["stddev"] == pytest.approx(statistics.stdev(seconds))
    assert stats["rounds"] == len(samples) and stats["total"] == pytest.approx(sum(seconds))
    # Nearest rank: the 3rd of 6 sorted samples is the median, the 2nd and 5th the quartiles.
    assert (stats["median"], stats["q1"], stats["q3"]) == pytest.approx((0.003, 0.002, 0.005))
    assert stats["iqr_outliers"] == 1 and stats["hd15iqr"] == pytest.approx(0.005)
    assert growth["group"] == "growth:20 FULL" and growth["extra_info"] == {"msg_per_s": 1.0}
    assert out["commit_info"]["id"] == "abc1234"


def test_a_run_recorded_without_quartiles_is_refused() -> None:
    doc = run_doc([1, 2, 3])
    for key in ("q1_ms", "q3_ms"):
        del doc["results"]["FULL"]["hermes"]["growth:20"][key]
    with pytest.raises(pytest_benchmark_json.NoQuartiles, match="re-run|quartiles"):
        pytest_benchmark_json.convert(doc)
