"""Number formats and the Markdown table, the same in every report.

A missing figure (None, NaN, a string) renders as "—", never as a number.
"""

from __future__ import annotations

import math
from typing import Any


def g(d: Any, *keys: Any) -> Any:
    """``d[k1][k2]...`` through dicts and lists, or None where a step is missing."""
    for k in keys:
        if isinstance(d, dict):
            d = d.get(k)
        elif isinstance(d, list) and isinstance(k, int) and -len(d) <= k < len(d):
            d = d[k]
        else:
            return None
    return d


def ok(x: Any) -> bool:
    """Whether ``x`` is a number to show."""
    return isinstance(x, (int, float)) and not (isinstance(x, float) and math.isnan(x))


def ms(x: Any) -> str:
    """A duration given in ms, in the unit that reads best (``1.23 ms``, ``456.7 µs``)."""
    if not ok(x):
        return "—"
    if x >= 100:
        return f"{x:,.0f} ms"
    if x >= 1:
        return f"{x:.2f} ms"
    return f"{x * 1000:.1f} µs"


def us(x_ms: Any) -> str:
    """A duration given in ms, always in µs."""
    return f"{x_ms * 1000:.2f} µs" if ok(x_ms) else "—"


def rate(x: Any) -> str:
    return f"{x:,.0f}" if ok(x) else "—"


def ratio(a: Any, b: Any) -> str:
    """``a ÷ b`` to one decimal (``2.0×``)."""
    return f"{a / b:.1f}×" if ok(a) and ok(b) and b > 0 else "—"


def ratio2(a: Any, b: Any) -> str:
    """``a ÷ b`` to two decimals (``0.67×``)."""
    return f"{a / b:.2f}×" if ok(a) and ok(b) and b > 0 else "—"


def verdict(good: bool) -> str:
    return "**met**" if good else "**missed**"


def table(header: list[str], rows: list[list[str]], right: tuple[int, ...] = ()) -> list[str]:
    """A Markdown table and the blank line after it; columns in ``right`` right-aligned."""
    rule = "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"
    return ["| " + " | ".join(header) + " |", rule, *("| " + " | ".join(r) + " |" for r in rows), ""]
