"""The gateway core does not import the adapter layer, and no module imports the runner (each
is typed against its host in ``seams``); the shared types are the same objects wherever
adapters, the seeds and the tests import them from."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

from hermes.gateway import events, session
from hermes.gateway.platforms import base

CORE = ("agent_cache", "agents", "busy", "client_turn", "commands", "config", "events",
        "executor", "hooks", "platform_env", "plugins", "redelivery", "resume", "seams",
        "session", "shutdown", "transcript", "turn")


def test_the_core_imports_no_platform_module() -> None:
    script = (
        "import importlib, sys\n"
        f"for name in {CORE!r}:\n"
        "    importlib.import_module('hermes.gateway.' + name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('hermes.gateway.platforms')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def _imported_modules(module_name: str) -> set[str]:
    """Every module ``module_name``'s source imports, at run time or for type checking."""
    source = Path(importlib.import_module(module_name).__file__ or "").read_text()
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
    return imported


def test_no_core_module_imports_the_runner() -> None:
    importers = [name for name in CORE
                 if "hermes.gateway.run" in _imported_modules(f"hermes.gateway.{name}")]
    assert importers == []


def test_shared_types_are_re_exported_not_copied() -> None:
    assert base.MessageEvent is events.MessageEvent
    assert base.SendResult is events.SendResult
    assert base.MessageHandler is events.MessageHandler
    assert session.SessionSource is events.SessionSource
