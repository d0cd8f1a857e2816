"""The benchmarks' shared rendering (benches/benchlib/render.py) and the before/after
judgement of two runs (benches/compare.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCHES = Path(__file__).resolve().parents[2] / "benches"
sys.path.insert(0, str(BENCHES))

import compare  # noqa: E402
from benchlib import paths, render  # noqa: E402
from benchlib.stats import summary  # noqa: E402


def test_numbers_render_in_the_unit_that_reads_best_and_missing_ones_as_a_dash() -> None:
    assert [render.ms(x) for x in (0.0123, 4.567, 1234.0)] == ["12.3 µs", "4.57 ms", "1,234 ms"]
    assert render.us(0.00177) == "1.77 µs"
    assert render.ratio(3.0, 1.5) == "2.0×" and render.ratio2(1.0, 3.0) == "0.33×"
    for missing in (None, float("nan"), "n/a"):
        assert render.ms(missing) == render.ratio(missing, 1.0) == render.rate(missing) == "—"
    assert render.ratio(1.0, 0) == "—"
    assert render.g({"a": [{"b": 1}]}, "a", -1, "b") == 1
    assert render.g({"a": []}, "a", -1, "b") is None


def test_a_table_has_its_rule_and_a_blank_line_after_it() -> None:
    assert render.table(["x", "n"], [["a", "1"]], right=(1,)) == ["| x | n |", "|---|---:|", "| a | 1 |", ""]


def test_paths_in_the_repository_are_shown_relative_to_it(tmp_path: Path) -> None:
    assert paths.shown(paths.PUBLISHED_RESULTS / "latest.json") == "benches/results/latest.json"
    assert paths.shown(tmp_path / "x.json") == str(tmp_path.resolve() / "x.json")
    assert paths.results_dir(False) != paths.results_dir(True) == paths.PUBLISHED_RESULTS


def run(probe_ms: tuple[float, float], ours_ns: list[int], peer_ns: list[int]) -> dict[str, Any]:
    """A results document of run.py's shape with one workload for us and one peer."""
    def growth(samples: list[int]) -> dict[str, Any]:
        return {**summary(samples), "msg_per_s": 1e9 / sum(samples)}

    return {
        "kind": "quick", "code": {"commit": "abc1234"},
        "probe_start": {"p50_ms": probe_ms[0]}, "probe_end": {"p50_ms": probe_ms[1]},
        "results": {"FULL": {"hermes": {"growth:20": growth(ours_ns)},
                             "openai": {"growth:20": growth(peer_ns)}}},
    }


def test_a_figure_of_ours_is_worse_only_beyond_the_larger_probe_spread() -> None:
    before = run((1.0, 1.1), [1_000_000] * 5, [2_000_000] * 5)  # spread ~10%
    within = run((1.0, 1.2), [1_150_000] * 5, [2_600_000] * 5)  # spread ~18%: +15% is noise
    lines, worse = compare.verdicts(before, within)
    assert worse == 0
    assert any("Host drift" in line and "median 1.30×" in line for line in lines)  # the peer moved 30%
    beyond = run((1.0, 1.05), [1_300_000] * 5, [2_000_000] * 5)  # +30% against a 10% spread
    lines, worse = compare.verdicts(before, beyond)
    assert worse == 2  # its p50 and its msg/s
    assert sum("**worse beyond the spread**" in line for line in lines) == 2
    lines, worse = compare.verdicts(beyond, before)
    assert worse == 0 and sum("better beyond the spread" in line for line in lines) == 2
