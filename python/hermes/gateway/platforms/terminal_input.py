"""Reading what a person types into ``hermes chat``.

On a terminal, prompt_toolkit edits the line (arrows, Home/End, Ctrl-A/E/K/W, ...) and keeps
a history that the Up arrow recalls, across chats: ``$HERMES_HOME/chat_history``, mode 0600
(it holds what was said). While it prompts, output printed elsewhere appears above the
prompt line, so replies and the prompt never mix. Ctrl-C at the prompt raises
``KeyboardInterrupt`` from ``read``; Ctrl-D (or the end of piped input) reads ``None``.

Without a terminal (``echo hi | hermes chat``) lines are read as they come, no editing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol


class LineReader(Protocol):
    #: Whether a person types at a terminal (and may type while a reply is on its way).
    interactive: bool

    async def read(self) -> str | None:
        """The next line, or ``None`` at the end of input."""
        ...

    def output_above_prompt(self) -> contextlib.AbstractContextManager[None]:
        """A context in which printing leaves the prompt intact."""
        ...


def open_reader(prompt: str, history: Path) -> LineReader:
    if sys.stdin.isatty() and sys.stdout.isatty():
        return PromptReader(prompt, history)
    return PipedLines()


class PromptReader:
    interactive = True

    def __init__(self, prompt: str, history: Path) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory

        history.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(history, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        self._prompt = prompt
        self._session: PromptSession[str] = PromptSession(history=FileHistory(str(history)))

    async def read(self) -> str | None:
        try:
            # The history loads in a task of its own; started before the keys are read, so
            # an Up arrow typed at once finds it.
            return await self._session.prompt_async(
                self._prompt, pre_run=self._session.default_buffer.load_history_if_not_yet_loaded)
        except EOFError:
            return None

    @contextlib.contextmanager
    def output_above_prompt(self) -> Iterator[None]:
        from prompt_toolkit.patch_stdout import patch_stdout

        with patch_stdout(raw=True):  # raw: rich's colours pass through
            yield


class PipedLines:
    interactive = False

    def __init__(self) -> None:
        self._lines: asyncio.Queue[str | None] | None = None

    async def read(self) -> str | None:
        if self._lines is None:
            self._lines = asyncio.Queue()
            # A daemon thread: one blocked reading stdin never holds up the process's exit.
            threading.Thread(target=self._pump, args=(asyncio.get_running_loop(), self._lines),
                             name="hermes-chat-input", daemon=True).start()
        return await self._lines.get()

    @staticmethod
    def _pump(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]) -> None:
        for line in sys.stdin:
            try:
                loop.call_soon_threadsafe(lines.put_nowait, line.rstrip("\n"))
            except RuntimeError:  # the loop has closed: the chat is over
                return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(lines.put_nowait, None)

    def output_above_prompt(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()
