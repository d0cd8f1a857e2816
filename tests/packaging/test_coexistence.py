"""Beside hermes-agent 0.19.0 in one venv: both packages declare a ``hermes`` console script,
and whichever was installed last owns ``bin/hermes``. Ours says which is which instead of
shadowing silently, and stays reachable as ``hermes-gateway``.

Real pip, real venvs, real processes. The venv gets this package's wheel (``dist/``, built by
``scripts/setup``) and hermes-agent's wheel without their dependencies; a ``.pth`` file lends
it this test venv's site-packages for ours (hermes-agent's code is never run).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# This interpreter's wheel: dist/ may hold one per CPython version (the release workflow's).
WHEELS = sorted((ROOT / "dist").glob(
    f"hermes_gateway-*-cp{sys.version_info.major}{sys.version_info.minor}-*.whl"))

pytestmark = pytest.mark.skipif(not WHEELS, reason="no wheel in dist/: run scripts/setup")


def pip(venv: Path, *args: str) -> None:
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check",
                           "--quiet", *args], capture_output=True, text=True, timeout=600,
                          check=False)
    if done.returncode != 0 and "hermes-agent" in args[-1]:
        pytest.skip(f"hermes-agent 0.19.0 could not be installed: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr


def run(venv: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "PYTHON"))}
    env.update({"HERMES_HOME": str(home), "PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin:/bin",
                "NO_COLOR": "1", "COLUMNS": "200"})
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("coexist") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    site = Path(subprocess.run(
        [str(where / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    (site / "lend_test_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return where


def test_each_package_installed_last_is_named_by_ours(venv: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    wheel = str(WHEELS[-1])  # the newest build, if several

    # Ours alone: no note.
    pip(venv, "install", "--no-deps", "--force-reinstall", wheel)
    alone = run(venv, home, "hermes", "--version")
    assert alone.returncode == 0, alone.stderr
    assert alone.stderr == ""

    # hermes-agent installed after ours: bin/hermes is now its; ours says so, by its other name.
    pip(venv, "install", "--no-deps", "hermes-agent==0.19.0")
    assert "hermes_cli" in (venv / "bin" / "hermes").read_text()
    shadowed = run(venv, home, "hermes-gateway", "sessions", "list")
    assert shadowed.returncode == 0, shadowed.stderr
    assert shadowed.stderr.count("\n") == 1
    assert (f"`hermes` on PATH ({venv / 'bin' / 'hermes'}) runs hermes-agent 0.19.0, "
            "not hermes-gateway; run this package as `hermes-gateway`") in shadowed.stderr
    doctor = run(venv, home, "hermes-gateway", "doctor")
    assert doctor.returncode == 0, doctor.stderr
    assert "(hermes-agent 0.19.0)" in doctor.stdout
    assert "also here  hermes-agent 0.19.0" in doctor.stdout

    # Ours installed again, after hermes-agent: bin/hermes is ours, and it says whose it replaced.
    pip(venv, "install", "--no-deps", "--force-reinstall", wheel)
    ours = run(venv, home, "hermes", "--version")
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.startswith("hermes-gateway ")
    assert ("hermes-agent 0.19.0 is installed here too and its `hermes` command is replaced "
            "by hermes-gateway's") in ours.stderr
