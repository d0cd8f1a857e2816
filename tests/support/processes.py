"""The environment of a hermes child process started by a test."""

from __future__ import annotations

import os
from pathlib import Path

import hermes

#: The directory holding the ``hermes`` under test: the installed wheel in CI, the source
#: tree with an editable install.
PACKAGE_ROOT = str(Path(hermes.__file__).resolve().parent.parent)
#: ``tests/``, so children can import ``support.*`` (scripted agents, test adapters).
TESTS_DIR = str(Path(__file__).resolve().parents[1])


def child_env(home: Path, **variables: str) -> dict[str, str]:
    """This process's environment for a child, less model, server and Hugging Face settings
    (a test states its own; the title-generation switch is kept), with ``HERMES_HOME`` set and
    the same ``hermes`` importable."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HERMES_", "OPENAI_", "API_SERVER_", "HF_", "HUGGING"))
           or k == "HERMES_TITLE_GENERATION"}  # tests/conftest.py's choice, the child's too
    env.update({"HERMES_HOME": str(home), "PYTHONPATH": os.pathsep.join([PACKAGE_ROOT, TESTS_DIR]),
                "NO_COLOR": "1", "COLUMNS": "200"})
    env.update(variables)
    return env
