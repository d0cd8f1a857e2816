"""Statistics, the same for every system and every pipeline.

Samples are nanoseconds. Percentiles are nearest rank: the value at rank
ceil(q * n) of the sorted samples, always one of the samples (the median of an
even count is the lower middle one).
"""

from __future__ import annotations

import math
from typing import Any

#: Divisors from nanoseconds to each unit a summary can be given in.
UNITS = {"ms": 1e6, "us": 1e3}


def ranked(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..1) of samples already sorted; NaN when there are none."""
    if not ordered:
        return math.nan
    return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))])


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile of samples in any order."""
    return ranked(sorted(samples), q)


def summary(samples: list[int], unit: str = "ms") -> dict[str, float]:
    """Percentiles and moments of nanosecond samples, in ``unit`` (keys such as
    ``p50_ms``); the quartile and outlier fields are those pytest-benchmark keeps
    (``pytest_benchmark_json.py``)."""
    if not samples:
        return {"n": 0}
    div = UNITS[unit]
    samples = sorted(samples)  # once, for every percentile below
    n, mean = len(samples), sum(samples) / len(samples)
    stddev = math.sqrt(sum((x - mean) ** 2 for x in samples) / (n - 1)) if n > 1 else 0.0
    q1, q3 = ranked(samples, 0.25), ranked(samples, 0.75)
    low, high = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return {
        "n": n,
        f"p50_{unit}": ranked(samples, 0.50) / div,
        f"p90_{unit}": ranked(samples, 0.90) / div,
        f"p99_{unit}": ranked(samples, 0.99) / div,
        f"mean_{unit}": mean / div,
        f"min_{unit}": min(samples) / div,
        f"max_{unit}": max(samples) / div,
        f"stddev_{unit}": stddev / div,
        f"q1_{unit}": q1 / div,
        f"q3_{unit}": q3 / div,
        f"ld15iqr_{unit}": min(x for x in samples if x >= low) / div,
        f"hd15iqr_{unit}": max(x for x in samples if x <= high) / div,
        "iqr_outliers": sum(1 for x in samples if not low <= x <= high),
        "stddev_outliers": sum(1 for x in samples if abs(x - mean) > stddev),
        f"total_{unit}": sum(samples) / div,
    }


def series(samples: list[int], points: int = 200) -> list[float]:
    """Per-call latency (ms) down-sampled to at most ``points`` bucket medians."""
    if len(samples) <= points:
        return [x / 1e6 for x in samples]
    step = len(samples) / points
    out = []
    for i in range(points):
        bucket = samples[int(i * step) : int((i + 1) * step)] or samples[-1:]
        out.append(percentile(bucket, 0.5) / 1e6)
    return out


def merge(values: list[Any]) -> Any:
    """Combines the summaries of several rounds: numbers by their median,
    dicts key by key, equal-length lists element by element."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    if all(isinstance(v, bool) for v in values):
        return all(values)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return int(percentile(values, 0.5))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return percentile([float(v) for v in values if not math.isnan(float(v))], 0.5)
    if all(isinstance(v, dict) for v in values):
        keys = list(dict.fromkeys(k for v in values for k in v))
        return {k: merge([v.get(k) for v in values]) for k in keys}
    if all(isinstance(v, list) for v in values) and len({len(v) for v in values}) == 1:
        return [merge([v[i] for v in values]) for i in range(len(values[0]))]
    return values[len(values) // 2]


def spread(a: float, b: float) -> float:
    """How far apart two measurements of the same thing are, in percent of their mean
    (the noise probe's first and last run)."""
    if not (isinstance(a, (int, float)) and isinstance(b, (int, float))) or a + b <= 0:
        return math.nan
    return abs(a - b) / ((a + b) / 2) * 100
