"""Facts about the host, the code measured and each worker's interpreter,
recorded in every results file."""

from __future__ import annotations

import hashlib
import os
import platform
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from .paths import ROOT


def sh(*cmd: str) -> str:
    """A command's stdout in the repository ("" when it cannot run)."""
    try:
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(workdir: Path) -> dict[str, Any]:
    """CPU, memory, kernel, and the disk under ``workdir`` (where the files are written)."""
    cpu = ""
    for line in sh("lscpu").splitlines():
        if line.startswith("Model name:"):
            cpu = line.split(":", 1)[1].strip()
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    df = sh("df", "-T", "-h", str(workdir)).splitlines()
    disk = " ".join(df[-1].split()[:3]) if len(df) > 1 else ""
    device = df[-1].split()[0] if len(df) > 1 else ""
    lsblk = sh("lsblk", "-d", "-n", "-o", "NAME,ROTA,SIZE,MODEL", device) if device.startswith("/dev/") else ""
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "disk": disk,
        "disk_device": " ".join(lsblk.split()),
        "python": sys.version.split()[0],
    }


def code_identity(hermes_python: str) -> dict[str, Any]:
    """The commit, whether the measured sources differ from it, and a hash of the
    ``hermes._core`` that ``hermes_python`` imports (what was actually measured)."""
    so = sh(hermes_python, "-c", "import hermes._core as c; print(c.__file__)")
    digest = hashlib.sha256(Path(so).read_bytes()).hexdigest()[:16] if so and Path(so).exists() else ""
    dirty = sh("git", "status", "--porcelain", "--", "rust", "python", "Cargo.toml", "Cargo.lock")
    return {
        "commit": sh("git", "rev-parse", "--short", "HEAD"),
        "dirty": bool(dirty),
        "core_so": so,
        "core_sha256": digest,
    }


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


#: The distributions a peer's figures depend on, recorded with its worker's facts where installed.
PACKAGES = {
    "upstream": ["hermes-agent"],
    "openai": ["openai-agents", "sqlalchemy", "asyncpg"],
    "langgraph": ["langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres", "psycopg", "psycopg-pool"],
}


def interpreter(system: str) -> dict[str, Any]:
    """A worker's own facts: its Python, the SQLite the system runs on (ours bundles one), and
    the versions of the peer's packages."""
    from importlib import metadata

    info: dict[str, Any] = {"system": system, "python": sys.version.split()[0],
                            "python_sqlite": sqlite3.sqlite_version}
    packages = {}
    for name in PACKAGES.get(system, []):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    info["packages"] = packages
    if system == "hermes":
        import hermes._core as core

        info["sqlite_version"] = core.SQLITE_VERSION
    else:
        info["sqlite_version"] = sqlite3.sqlite_version
    return info
