"""hermes-agent 0.19.0's own SessionDB test file, read from its sdist on PyPI (cached, checked).

The file is never part of this repository: it is fetched with pip into a cache directory on
first use and read straight out of the tarball. The sdist's SHA-256 is pinned, so the suite
is always the same text.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

__all__ = ["REQUIREMENT", "TEST_FILE", "UpstreamUnavailable", "read_test_file", "sdist_path"]

REQUIREMENT = "hermes-agent==0.19.0"
SDIST_NAME = "hermes_agent-0.19.0.tar.gz"
SDIST_SHA256 = "ac986bede64a2785436676c0ea084ec586574f8cb00a9d047e095b435d3e21c0"
TEST_FILE = "hermes_agent-0.19.0/tests/test_hermes_state.py"


class UpstreamUnavailable(RuntimeError):
    """The sdist could not be downloaded (no network, PyPI unreachable)."""


def sdist_path(cache_dir: Path) -> Path:
    """The checked sdist in ``cache_dir``, downloaded with pip first if it is not there."""
    sdist = cache_dir / SDIST_NAME
    if not sdist.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir) as download:
            pip = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--dest",
                download,
                REQUIREMENT,
            ]
            result = subprocess.run(pip, check=False, capture_output=True, text=True)
            fetched = Path(download) / SDIST_NAME
            if result.returncode != 0 or not fetched.exists():
                raise UpstreamUnavailable(
                    f"`pip download {REQUIREMENT}` failed (is PyPI reachable?):\n"
                    + (result.stderr.strip() or result.stdout.strip())
                )
            _check(fetched)
            fetched.replace(sdist)  # only a checked, complete file ever has the cached name
    _check(sdist)
    return sdist


def read_test_file(cache_dir: Path) -> str:
    """The text of ``tests/test_hermes_state.py`` from the cached sdist."""
    with tarfile.open(sdist_path(cache_dir)) as tar:
        member = tar.extractfile(TEST_FILE)
        if member is None:
            raise FileNotFoundError(f"{TEST_FILE} is not a file in {SDIST_NAME}")
        return member.read().decode("utf-8")


def _check(sdist: Path) -> None:
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise RuntimeError(
            f"{sdist} has SHA-256 {digest}, not the pinned {SDIST_SHA256}: delete it and run "
            "again to download it anew"
        )
