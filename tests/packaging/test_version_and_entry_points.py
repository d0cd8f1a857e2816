"""One version, the command's three names, ``hermes doctor``, and what PyPI shows.

Run as real processes against the installed wheel (as a user runs them).
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from support.processes import child_env

import hermes

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(args: list[str], home: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=child_env(home, **variables), capture_output=True,
                          text=True, timeout=120, check=False)


def cargo_version() -> str:
    match = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.MULTILINE)
    assert match is not None
    return match.group(1)


def test_one_version_everywhere() -> None:
    assert hermes.__version__ == cargo_version()
    assert importlib.metadata.version("hermes-gateway") == hermes.__version__
    assert "version =" not in (ROOT / "pyproject.toml").read_text().split("[project.urls]")[0]


def test_version_flag_names_the_package(tmp_path: Path) -> None:
    for command in ([str(BIN / "hermes"), "--version"], [str(BIN / "hermes-gateway"), "--version"],
                    [sys.executable, "-m", "hermes", "--version"]):
        done = run(command, tmp_path)
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout.startswith(f"hermes-gateway {hermes.__version__} (SQLite "), command


def test_python_dash_m_hermes_lists_sessions_on_a_new_home(tmp_path: Path) -> None:
    home = tmp_path / "new-home"
    done = run([sys.executable, "-m", "hermes", "sessions", "list"], home)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_doctor_says_which_home_database_and_port(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = run([str(BIN / "hermes-gateway"), "doctor"], home, API_SERVER_PORT="9123")
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines()
                 if not line.startswith("also here"))
    assert lines["package"].startswith(f"hermes-gateway {hermes.__version__}")
    assert lines["home"] == f"{home} ($HERMES_HOME)"
    assert lines["database"] == f"{home / 'state.db'} (not created yet)"
    assert lines["gateway"] == "http://127.0.0.1:9123"
    assert "this package is also `hermes-gateway`" in lines["command"]


def test_doctor_names_a_config_it_cannot_read_and_fails(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    # hermes-agent's config.yaml has `model` as a string: not ours (README: Limits).
    (home / "config.yaml").write_text("model: anthropic/claude-sonnet-4\n")
    done = run([str(BIN / "hermes"), "doctor"], home)
    assert done.returncode == 1
    config_line = next(line for line in done.stdout.splitlines() if line.startswith("config"))
    assert str(home / "config.yaml") in config_line
    assert "model" in config_line


def test_readme_links_are_absolute_for_pypi() -> None:
    readme = (ROOT / "README.md").read_text()
    relative = [target for target in re.findall(r"\]\(([^)]+)\)", readme)
                if not target.startswith(("https://", "http://", "#", "mailto:"))]
    assert relative == []
