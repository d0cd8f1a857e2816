"""The agent tests' HERMES_HOME: isolated, and free of model settings from the environment
(the ``db`` fixture of ``tests/conftest.py`` opens a real SessionDB under it)."""

from __future__ import annotations

from pathlib import Path

import pytest

MODEL_ENVIRONMENT = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HERMES_BASE_URL", "HERMES_MODEL",
                     "HERMES_TERMINAL_TOOL", "API_SERVER_KEY", "API_SERVER_HOST",
                     "API_SERVER_PORT")


@pytest.fixture(autouse=True)
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    for variable in MODEL_ENVIRONMENT:
        monkeypatch.delenv(variable, raising=False)
    return home
