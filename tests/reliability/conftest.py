"""Fixtures of the reliability trials: a small real filesystem to fill (see ``faults``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def small_filesystem(mount_tmpfs: Callable[[str, str], Path]) -> Callable[[str], Path]:
    """``make(size)`` mounts a tmpfs of that size under tmp_path (the shared ``mount_tmpfs``
    of ``tests/conftest.py``: skipped where mounting is not permitted, unmounted afterwards)."""
    names = (f"fs{n}" for n in itertools.count())
    return lambda size: mount_tmpfs(next(names), size)
