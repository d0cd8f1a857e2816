"""The gateway core does not import the adapter layer; the shared types are the same objects
wherever adapters, the seeds and the tests import them from."""

from __future__ import annotations

import subprocess
import sys

from hermes.gateway import events, session
from hermes.gateway.platforms import base

CORE = ("agent_cache", "agents", "busy", "commands", "config", "events", "executor", "hooks",
        "plugins", "resume", "session", "shutdown", "transcript", "turn")


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


def test_shared_types_are_re_exported_not_copied() -> None:
    assert base.MessageEvent is events.MessageEvent
    assert base.SendResult is events.SendResult
    assert base.MessageHandler is events.MessageHandler
    assert session.SessionSource is events.SessionSource
