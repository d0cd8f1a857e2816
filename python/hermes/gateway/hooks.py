"""Lifecycle hooks: code an embedder registers to observe turns without patching the runner.

The runner emits ``session:start`` (first turn of a conversation), ``agent:start`` and
``agent:end`` (around every turn). A hook that fails is logged and skipped: observers must
never break the conversation they observe.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

logger = logging.getLogger(__name__)

HookCallback = Callable[[str, Mapping[str, Any]], "Awaitable[None] | None"]


class HookRegistry:
    def __init__(self) -> None:
        self._hooks: dict[str, list[HookCallback]] = {}

    def register(self, event_type: str, callback: HookCallback) -> None:
        """Call ``callback(event_type, context)`` (sync or async) on every ``event_type``."""
        self._hooks.setdefault(event_type, []).append(callback)

    async def emit(self, event_type: str, context: Mapping[str, Any]) -> None:
        for callback in self._hooks.get(event_type, ()):
            try:
                outcome = callback(event_type, context)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                logger.exception("hook %r for %s failed; continuing", callback, event_type)
