"""The local platform: a conversation in this terminal (``hermes chat``).

Each line typed is one ``MessageEvent`` through the gateway runner, so a terminal chat is
stored, cached and resumed exactly like a chat from any other platform: the conversation is
keyed by its name (``PlatformConfig.extra["chat"]``, ``hermes chat --session NAME``), and
starting the same name again continues it.

Lines are read by ``terminal_input`` (line editing and history on a terminal). On a terminal
each line is answered while the next can already be typed, so ``/stop`` reaches a running
reply (Ctrl-C does the same, at the prompt or between two); piped lines are answered one
after the other.
The gateway's commands (``hermes.gateway.commands``) are answered by the gateway without a
model turn; ``/help``, ``/exit`` and ``/quit`` are answered here, and any other ``/word`` is
refused here, never sent to the model. ``/exit``, ``/quit`` or the end of input (Ctrl-D) end
the chat once the replies still on their way have been printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import re
import signal
from collections.abc import Iterator, Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

from hermes.gateway import commands
from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.platforms.base import BasePlatformAdapter, MessageEvent, SendResult
from hermes.gateway.platforms.terminal_input import LineReader, open_reader
from hermes.gateway.session import SessionSource
from hermes.paths import chat_history_path

logger = logging.getLogger(__name__)

DEFAULT_CHAT = "default"
_EXIT_COMMANDS = ("/exit", "/quit")
#: The commands this adapter answers itself, as ``/help`` lists them.
LOCAL_USAGE = {"/exit, /quit": "end the chat (Ctrl-D too)"}
PROMPT = "you> "
# A line starting with a slash word ("/xyz", not "/etc/hosts") is a command.
_COMMAND_WORD = re.compile(r"/[A-Za-z][\w-]*(@\S+)?")


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
        self._session: asyncio.Task[None] | None = None
        self._replies: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()

    async def connect(self) -> bool:
        self._session = asyncio.create_task(self._converse(open_reader(PROMPT,
                                                                       chat_history_path())))
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

    async def _converse(self, reader: LineReader) -> None:
        try:
            with reader.output_above_prompt(), self._ctrl_c_stops_replies(reader):
                while (line := await self._next_line(reader)) is not None:
                    words = line.split(maxsplit=1)
                    if not words or self._answered_here(words[0]):
                        continue
                    if words[0].lower() in _EXIT_COMMANDS:
                        break
                    reply = asyncio.create_task(self._answer(line))
                    if not reader.interactive:
                        await reply
                        continue
                    self._track(reply)
                if self._replies:
                    self.console.print(Text("waiting for the reply (Ctrl-C stops it)",
                                            style="dim"))
                    await asyncio.gather(*self._replies)
        finally:
            self._closed.set()

    async def _next_line(self, reader: LineReader) -> str | None:
        """The next line typed; Ctrl-C at the prompt stops a running reply instead."""
        while True:
            try:
                return await reader.read()
            except KeyboardInterrupt:
                self._ctrl_c()

    @contextlib.contextmanager
    def _ctrl_c_stops_replies(self, reader: LineReader) -> Iterator[None]:
        """On a terminal, Ctrl-C between two prompts (a SIGINT: only the prompt reads it as a
        key) does what it does at the prompt. Piped, Ctrl-C ends the chat as usual."""
        if not reader.interactive:
            yield
            return
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self._ctrl_c)
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    def _ctrl_c(self) -> None:
        if self._replies:
            self._track(asyncio.create_task(self._answer("/stop")))
        else:
            self.console.print(Text("(/exit or Ctrl-D ends the chat)", style="dim"))

    def _track(self, reply: asyncio.Task[None]) -> None:
        """Count ``reply`` among those on their way until it is printed."""
        self._replies.add(reply)
        reply.add_done_callback(self._replies.discard)

    def _answered_here(self, word: str) -> bool:
        """Answer ``/help`` and refuse unknown commands, by the line's first ``word``;
        ``False`` for lines to dispatch (and for ``/exit``)."""
        if not _COMMAND_WORD.fullmatch(word):
            return False
        name = word.lower().split("@", 1)[0]
        if name == "/help":
            self.console.print(Text(commands.help_text(LOCAL_USAGE)))
            return True
        if name in (*commands.NAMES, *_EXIT_COMMANDS):
            return False
        known = ", ".join((*commands.NAMES, *_EXIT_COMMANDS))
        self.console.print(Text(f"unknown command {word}; the commands are {known} "
                                "(/help says what each does)", style="red"))
        return True

    async def _answer(self, line: str) -> None:
        try:
            reply = await self.dispatch(MessageEvent(text=line, source=self.source))
        except Exception as exc:  # one failed turn should not end the chat
            logger.exception("the gateway failed to answer")
            reply = f"(no answer: {exc})"
        if reply:
            self.console.print(message_line("hermes", reply))
