"""The local platform: a conversation in this terminal (``hermes chat``).

Each line typed is one ``MessageEvent`` through the gateway runner, so a terminal chat is
stored, cached and resumed exactly like a chat from any other platform: the conversation is
keyed by its name (``PlatformConfig.extra["chat"]``, ``hermes chat --session NAME``), and
starting the same name again continues it.

Input is read by a daemon thread that only prompts when the previous reply has been printed,
so the prompt never interleaves with output, and a thread blocked in ``input()`` never holds up
the process's exit. ``/exit``, ``/quit`` or end of input (Ctrl-D) end the chat.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import threading
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.platforms.base import BasePlatformAdapter, MessageEvent, SendResult
from hermes.gateway.session import SessionSource

logger = logging.getLogger(__name__)

DEFAULT_CHAT = "default"
_EXIT_COMMANDS = {"/exit", "/quit"}
PROMPT = "you> "


def chat_source(name: str) -> SessionSource:
    """Where a terminal chat's messages come from: the conversation ``name``, this OS user."""
    user = getpass.getuser()
    return SessionSource(platform=Platform.LOCAL, chat_id=name or DEFAULT_CHAT,
                         chat_type="dm", user_id=user, user_name=user)


def message_line(speaker: str, content: str, *, earlier: bool = False) -> Text:
    """One message as printed; ``earlier`` ones (a resumed conversation's) are dimmed and
    written ``speaker:`` so they cannot be mistaken for the live prompt."""
    # Text, not markup: a reply containing "[...]" must print as it is.
    if earlier:
        return Text(f"{speaker}: {content}", style="dim")
    style = "bold cyan" if speaker == "hermes" else "bold green"
    return Text.assemble((f"{speaker}> ", style), content)


class LocalAdapter(BasePlatformAdapter):
    def __init__(self, config: PlatformConfig, platform: Platform = Platform.LOCAL) -> None:
        super().__init__(config, platform)
        self.source = chat_source(str(config.extra.get("chat") or DEFAULT_CHAT))
        self.console = Console(highlight=False)
        self._want_line = threading.Event()
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._session: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()

    async def connect(self) -> bool:
        loop = asyncio.get_running_loop()
        threading.Thread(
            target=self._read_lines, args=(loop,), name="hermes-local-input", daemon=True
        ).start()
        self._session = asyncio.create_task(self._converse())
        return True

    async def disconnect(self) -> None:
        if self._session is not None and not self._session.done():
            self._session.cancel()
        self._closed.set()

    async def wait_closed(self) -> None:
        """Return when the person has ended the chat (or the adapter was disconnected)."""
        await self._closed.wait()

    async def send(
        self,
        chat_id: str,
        content: str,
        reply_to: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SendResult:
        self.console.print(message_line("hermes", content))
        return SendResult(success=True)

    async def _converse(self) -> None:
        try:
            while True:
                self._want_line.set()
                line = await self._lines.get()
                if line is None or line.strip() in _EXIT_COMMANDS:
                    return
                if not line.strip():
                    continue
                try:
                    reply = await self.dispatch(MessageEvent(text=line, source=self.source))
                except Exception as exc:  # one failed turn should not end the chat
                    logger.exception("the gateway failed to answer")
                    reply = f"(no answer: {exc})"
                if reply:
                    self.console.print(message_line("hermes", reply))
        finally:
            self._closed.set()

    def _read_lines(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            self._want_line.wait()
            self._want_line.clear()
            try:
                line: str | None = input(PROMPT)
            except EOFError:
                line = None
            try:
                loop.call_soon_threadsafe(self._lines.put_nowait, line)
            except RuntimeError:  # the loop has closed: the chat is over
                return
            if line is None:
                return
