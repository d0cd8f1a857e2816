"""Where the benchmarks read and write.

A run writes into ``target/bench/`` (untracked) unless it is published:
``--publish`` (``make bench PUBLISH=1``) writes the tracked results under
``benches/results/``, ``benches/plots/`` and ``BENCHMARKS.md``; ``--out PATH``
writes exactly there.
"""

from __future__ import annotations

import argparse
from pathlib import Path

BENCHES = Path(__file__).resolve().parent.parent
ROOT = BENCHES.parent
#: Published (tracked) results and plots.
PUBLISHED_RESULTS = BENCHES / "results"
PUBLISHED_PLOTS = BENCHES / "plots"
#: Everything a run writes when it is not published.
UNPUBLISHED = ROOT / "target" / "bench"


def results_dir(publish: bool) -> Path:
    return PUBLISHED_RESULTS if publish else UNPUBLISHED / "results"


def plots_dir(publish: bool) -> Path:
    return PUBLISHED_PLOTS if publish else UNPUBLISHED / "plots"


def shown(path: Path) -> str:
    """``path`` as a report names it: relative to the repository when inside it."""
    path = path.resolve()
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def add_output_arguments(ap: argparse.ArgumentParser, published: str) -> None:
    """``--publish`` and ``--out``, one or the other; ``published`` says what ``--publish`` writes."""
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--publish", action="store_true", help=f"write the tracked results: {published}")
    where.add_argument("--out", type=Path, default=None,
                       help="the results file, exactly there (default: in target/bench/results/, "
                            "or in benches/results/ with --publish)")
