"""Fixtures of the reliability trials: a small real filesystem to fill (see ``faults``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .faults import succeeds


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``make(size)`` mounts a tmpfs of that size under tmp_path; skipped where mounting is
    not permitted; unmounted (lazily if still busy) afterwards."""
    mounted: list[Path] = []

    def make(size: str) -> Path:
        target = tmp_path / f"fs{len(mounted)}"
        target.mkdir()
        if os.geteuid() != 0 or not shutil.which("mount"):
            pytest.skip("needs root and mount(8) to make a small filesystem")
        if not succeeds("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(target)):
            pytest.skip("mounting a tmpfs is not permitted here")
        mounted.append(target)
        return target

    yield make
    for target in reversed(mounted):
        if not succeeds("umount", str(target)):
            succeeds("umount", "-l", str(target))
