"""Running the ``hermes`` command as a real process in a test: its output, its ``--json``
parsed back, its one-line failures, and a pseudo-terminal for what asks or draws."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect

from support.processes import child_env

HERMES = [sys.executable, "-m", "hermes.cli"]


def hermes(home: Path, *argv: str, timeout: float = 120,
           **variables: str) -> subprocess.CompletedProcess[str]:
    """``hermes ARGV`` with ``HERMES_HOME=home`` and the environment ``variables``, stdin
    closed (nobody can answer)."""
    return subprocess.run([*HERMES, *argv], env=child_env(home, **variables),
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def one_line_failure(done: subprocess.CompletedProcess[str], status: int = 1) -> str:
    """The command failed with ``status`` and said why in one line, no traceback."""
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("hermes: "), done.stderr
    return done.stderr.strip()


def spawn(home: Path, *argv: str, timeout: float = 30) -> pexpect.spawn[str]:
    """``hermes ARGV`` on a pseudo-terminal of 40 x 200."""
    return pexpect.spawn(HERMES[0], [*HERMES[1:], *argv],
                         env=child_env(home, PROMPT_TOOLKIT_NO_CPR="1"), encoding="utf-8",
                         timeout=timeout, dimensions=(40, 200))
