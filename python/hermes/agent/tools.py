"""The tools an agent may call, and the one built-in tool: ``terminal``.

A tool is a name, a JSON-schema description for the model and a handler. The registry runs
each call in a worker thread so the agent stays responsive: when the agent is interrupted or
the call outlives its timeout, the registry sets the call's ``stop`` event, gives the handler a
short grace period to clean up (the terminal tool kills its process group) and returns what it
has. A handler that ignores ``stop`` is abandoned (its thread is a daemon), never waited on.

Every failure a model can cause (unknown tool, malformed arguments, a handler exception) comes
back as the tool's text result, so the model sees it and can correct itself, instead of ending
the turn with an exception.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from hermes.config import TerminalToolConfig, ToolsConfig

logger = logging.getLogger(__name__)

# How long a stopped handler gets to wind down before its result is given up on.
STOP_GRACE_SECONDS = 2.0
_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class ToolContext:
    """What a handler gets besides its arguments."""

    stop: threading.Event  # set on interrupt or timeout: stop working and return
    deadline: float  # time.monotonic() after which the registry sets ``stop``
    task_id: str | None = None


ToolHandler = Callable[[dict[str, Any], ToolContext], str]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler
    timeout: float = 60.0

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self._tools.values()]

    def __len__(self) -> int:
        return len(self._tools)

    def call(
        self,
        name: str,
        arguments: str | Mapping[str, Any] | None,
        *,
        interrupt: threading.Event | None = None,
        timeout: float | None = None,
        task_id: str | None = None,
    ) -> str:
        """Run one tool call and return its text result (errors included, see module doc)."""
        tool = self._tools.get(name)
        if tool is None:
            available = ", ".join(self._tools) or "none"
            return f"error: there is no tool named {name!r} (available: {available})"
        try:
            args = _parse_arguments(arguments)
        except ValueError as exc:
            return f"error: the arguments for {name} are not a JSON object: {exc}"

        limit = tool.timeout if timeout is None else timeout
        context = ToolContext(
            stop=threading.Event(), deadline=time.monotonic() + limit, task_id=task_id
        )
        results: list[str] = []

        def work() -> None:
            try:
                results.append(tool.handler(args, context))
            except Exception as exc:  # the model gets the failure as the tool's result
                logger.exception("tool %s failed", name)
                results.append(f"error: {name} failed: {type(exc).__name__}: {exc}")

        worker = threading.Thread(target=work, name=f"hermes-tool-{name}", daemon=True)
        worker.start()
        cut_short = _wait_for(worker, interrupt, context.deadline)
        if cut_short is None:
            return results[0]
        context.stop.set()
        worker.join(STOP_GRACE_SECONDS)
        partial = results[0] if results else ""
        note = "interrupted" if cut_short == "interrupt" else f"timed out after {limit:g}s"
        return f"{partial}\n[{name} {note}]".lstrip("\n")


def _parse_arguments(arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ValueError(str(exc)) from exc
    if not isinstance(parsed, dict):
        raise ValueError(f"got {type(parsed).__name__}")
    return parsed


def _wait_for(
    worker: threading.Thread, interrupt: threading.Event | None, deadline: float
) -> str | None:
    """Wait for ``worker``; return ``None`` when it finished, else why it was cut short."""
    while worker.is_alive():
        if interrupt is not None and interrupt.is_set():
            return "interrupt"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        worker.join(min(_POLL_SECONDS, remaining))
    return None


def default_registry(config: ToolsConfig) -> ToolRegistry:
    """The tools a configuration enables; the terminal tool only when asked for."""
    registry = ToolRegistry()
    if config.terminal.enabled:
        registry.register(terminal_tool(config.terminal))
    return registry


def terminal_tool(config: TerminalToolConfig) -> Tool:
    def handler(args: dict[str, Any], context: ToolContext) -> str:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return 'error: terminal needs {"command": "<shell command>"}'
        return run_command(
            command, context, cwd=config.cwd, max_output_bytes=config.max_output_bytes
        )

    return Tool(
        name="terminal",
        description=(
            "Run a shell command on the gateway's machine and return its exit code and "
            f"combined stdout/stderr (at most {config.max_output_bytes} bytes; "
            f"stopped after {config.timeout:g} seconds)."
        ),
        parameters={
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The shell command."}},
            "required": ["command"],
        },
        handler=handler,
        timeout=config.timeout,
    )


def run_command(
    command: str, context: ToolContext, *, cwd: str | None, max_output_bytes: int
) -> str:
    """Run ``command`` in its own process group; kill the group when ``context.stop`` is set.

    The output pipe is always drained (bytes past the cap are counted, not kept) so a chatty
    command cannot block on a full pipe.
    """
    process = subprocess.Popen(
        command,
        shell=True,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group, so the kill reaches the children too
    )
    assert process.stdout is not None
    kept = bytearray()
    dropped = [0]
    reader = threading.Thread(
        target=_drain, args=(process.stdout, kept, dropped, max_output_bytes), daemon=True
    )
    reader.start()
    killed = False
    while process.poll() is None:
        if context.stop.is_set() or time.monotonic() >= context.deadline:
            _kill_group(process)
            killed = True
            break
        context.stop.wait(_POLL_SECONDS)
    returncode = process.wait()
    # A grandchild that left the process group may hold the pipe open; do not wait for it.
    reader.join(STOP_GRACE_SECONDS)
    text = kept.decode("utf-8", errors="replace")
    parts = [f"exit code {returncode}", text.rstrip("\n")] if text else [f"exit code {returncode}"]
    if dropped[0]:
        parts.append(f"[output truncated: {dropped[0]} more bytes]")
    if killed:
        parts.append("[process killed]")
    return "\n".join(parts)


def _drain(stream: IO[bytes], kept: bytearray, dropped: list[int], cap: int) -> None:
    with stream:
        for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
            room = max(0, cap - len(kept))
            kept.extend(chunk[:room])
            dropped[0] += len(chunk) - min(room, len(chunk))


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # it exited between the poll and the kill
        pass
