"""The Makefile's bench targets refuse to run without an interpreter that has hermes,
with a one-line message saying what to do (instead of `No module named 'hermes'`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
@pytest.mark.parametrize("python", ["", "/nonexistent/python"])
def test_without_hermes_the_bench_targets_say_run_scripts_setup(python: str) -> None:
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), "bench-quick", f"HERMES_PYTHON={python}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "run scripts/setup first" in proc.stderr
    assert "peers" not in proc.stdout  # it stopped before building anything
