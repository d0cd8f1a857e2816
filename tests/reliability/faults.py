"""OS-level fault injection that works for root: an immutable file (``chattr +i``: the kernel
refuses writes even to root, for whom file modes refuse nothing) and a full filesystem."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def succeeds(*cmd: str) -> bool:
    """Whether the command ran and exited 0."""
    return subprocess.run(cmd, capture_output=True).returncode == 0


@contextlib.contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    """The kernel refuses every write to ``paths`` inside the block, even root's."""
    if not shutil.which("chattr"):
        pytest.skip("chattr(1) is missing: cannot make a file read-only for root")
    existing = [p for p in paths if p.exists()]
    if not all(succeeds("chattr", "+i", str(p)) for p in existing):
        for p in existing:
            succeeds("chattr", "-i", str(p))
        pytest.skip("this filesystem does not support the immutable attribute (chattr +i)")
    try:
        yield
    finally:
        for p in existing:
            succeeds("chattr", "-i", str(p))


def fill(directory: Path) -> Path:
    """Fills the filesystem of ``directory`` to the last byte; returns the filler file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (65536, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler
