"""Print the figures the reliability trials recorded (``scripts/reliability`` calls this).

Usage: ``python tests/reliability/report.py [DIR]`` (default: ``target/reliability``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    directory = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "target" / "reliability"
    files = sorted(directory.glob("*.json"))
    if not files:
        print(f"no figures in {directory}")
        return 1
    for path in files:
        figures = json.loads(path.read_text())
        print(f"\n== {path.stem}  ({'full' if figures.pop('full_run') else 'normal'} run, "
              f"{figures.pop('recorded_at')})")
        for key, value in figures.items():
            print(f"  {key}: {json.dumps(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
