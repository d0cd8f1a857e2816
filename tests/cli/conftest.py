"""Fixtures of the CLI tests: an isolated HERMES_HOME with a wide, colourless terminal."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    # rich reads these: no colour codes, and no wrapping of long lines in assertions.
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    # Set (empty counts as unset) rather than deleted: `--model`/`--base-url` are exported
    # into this process's environment by the CLI, and monkeypatch then undoes that too.
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HERMES_BASE_URL", "HERMES_MODEL",
                     "HERMES_TERMINAL_TOOL", "API_SERVER_KEY", "API_SERVER_HOST",
                     "API_SERVER_PORT"):
        monkeypatch.setenv(variable, "")
    return home
