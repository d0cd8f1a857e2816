"""The benchmarks' one statistics module (benches/benchlib/stats.py): nearest-rank
percentiles, the one summary of samples, and how rounds are merged."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benches"))

from benchlib import stats  # noqa: E402


def test_percentiles_are_nearest_rank_so_always_one_of_the_samples() -> None:
    ordered = [10, 20, 30, 40]
    assert stats.ranked(ordered, 0.5) == 20  # the lower middle, not 25
    assert stats.ranked(ordered, 0.75) == 30
    assert stats.ranked(ordered, 0.76) == 40
    assert stats.ranked(ordered, 0.0) == 10 and stats.ranked(ordered, 1.0) == 40
    assert stats.percentile([40, 10, 30, 20], 0.5) == 20
    assert math.isnan(stats.ranked([], 0.5))


def test_a_summary_in_ms_and_in_us_holds_the_same_figures() -> None:
    samples = [3_000, 1_000, 2_000, 100_000, 4_000]
    in_ms, in_us = stats.summary(samples), stats.summary(samples, "us")
    assert in_ms["n"] == in_us["n"] == 5
    assert in_ms["p50_ms"] == pytest.approx(0.003) and in_us["p50_us"] == pytest.approx(3.0)
    assert in_ms["mean_ms"] == pytest.approx(statistics.mean(samples) / 1e6)
    assert in_ms["stddev_ms"] == pytest.approx(statistics.stdev(samples) / 1e6)
    assert in_us["max_us"] == pytest.approx(100.0) and in_us["total_us"] == pytest.approx(110.0)
    assert in_ms["iqr_outliers"] == 1  # 100 µs is far outside the quartiles
    for key, value in in_ms.items():
        if key.endswith("_ms"):
            assert in_us[key[:-3] + "_us"] == pytest.approx(value * 1000)
    assert stats.summary([]) == {"n": 0}


def test_rounds_merge_by_their_median_key_by_key() -> None:
    rounds = [{"p50_ms": 3.0, "n": 7, "ok": True, "xs": [1.0, 5.0]},
              {"p50_ms": 1.0, "n": 9, "ok": True, "xs": [2.0, 6.0]},
              {"p50_ms": 2.0, "n": 8, "ok": False, "xs": [3.0, 4.0]}]
    assert stats.merge(rounds) == {"p50_ms": 2.0, "n": 8, "ok": False, "xs": [2.0, 5.0]}
    # An even number of rounds: the same nearest-rank rule (the lower middle).
    assert stats.merge([4.0, 1.0, 3.0, 2.0]) == 2.0
    assert stats.merge([4, 1, 3, 2]) == 2
    assert stats.merge([float("nan"), 5.0]) == 5.0
    assert stats.merge([None, None]) is None


def test_a_series_keeps_short_runs_and_buckets_long_ones() -> None:
    assert stats.series([1_000_000, 2_000_000]) == [1.0, 2.0]
    long = [1_000_000 * (i % 10) for i in range(1000)]
    down = stats.series(long, points=10)
    assert len(down) == 10 and all(0.0 <= x <= 9.0 for x in down)


def test_the_probe_spread_is_the_difference_over_the_mean() -> None:
    assert stats.spread(0.6, 0.4) == pytest.approx(40.0)
    assert stats.spread(0.4, 0.6) == pytest.approx(40.0)
    assert math.isnan(stats.spread(None, 0.4))  # type: ignore[arg-type]
