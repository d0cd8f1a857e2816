"""The real ``hermes.agent.AIAgent`` with a scripted model, for real gateway processes.

Injected with ``GatewayConfig.agent_factory = "reliability.rounds_agent:build_agent"``. Unlike
``support.scripted_agent`` (which flushes only at turn end, like the upstream agent), this is the
package's own conversation loop, which flushes after the user message, after every model
response and after every tool result; only the model is a script.

The script is the last line of the user message::

    turn <tag> rounds=<n> [ms=<tool milliseconds>] [block=<path>] [big=<bytes>]

It asks for ``n`` rounds of one ``step`` tool call each, then answers. Every message is
recognisable in ``state.db`` by its content:

==========  ==================================================================
user        the command line itself
assistant   ``call <tag> r<k>``, with one tool call ``c_<tag>_<k>`` to ``step``
tool        ``result <tag> r<k>``
assistant   ``done <tag> | seen: <the user message exactly as the model got it>``
==========  ==================================================================

``block=<path>``: round 0's tool writes ``<path>.started`` and then waits, deaf to interrupts,
until ``<path>`` exists (the worst case for a shutdown). ``big=<bytes>``: tool results carry
that much filler (to fill a disk). Any other user message is answered ``echo: <message>``.

Instrumentation, all under ``$HERMES_HOME``, appended with ``O_APPEND`` (so a ``kill -9`` of
the process loses nothing already written):

``durable.log``
    after every flush that returned True, one JSON line ``{"pid", "markers"}`` naming the
    current turn's messages (see ``marker``), **fsync'd**: these are on disk in state.db.
``requests.log``
    one JSON line per model call: the turn's tag, the round, the user message as sent, and any
    way the request breaks the chat-completions rules an OpenAI endpoint enforces (a tool call
    without its result, a result without its call).
``flush_ms.log``
    the wall time of every flush in milliseconds, for latency figures.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from hermes.agent import AIAgent
from hermes.agent.backends import ModelResponse
from hermes.agent.tools import Tool, ToolContext
from hermes.paths import hermes_home
from hermes.state import SessionDB

_COMMAND = re.compile(r"turn (?P<tag>\S+)(?P<options>(?: \w+=\S+)*)\s*$")
_log_lock = threading.Lock()


def parse_command(text: str | None) -> tuple[str, dict[str, str]] | None:
    """``(tag, options)`` of the script line ending ``text``; None for other messages."""
    lines = (text or "").strip().splitlines()
    match = _COMMAND.fullmatch(lines[-1].strip()) if lines else None
    if match is None:
        return None
    options = dict(part.split("=", 1) for part in match["options"].split())
    return match["tag"], options


def marker(message: dict[str, Any]) -> str | None:
    """A short name for a scripted message: ``user t``, ``call t r0``, ``result t r0``,
    ``done t``; None for anything else (session_meta rows, other tools' results)."""
    role = message.get("role")
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    if role == "user":
        parsed = parse_command(text)
        return f"user {parsed[0]}" if parsed else None
    first = text.split("\n", 1)[0]
    if role == "assistant" and first.startswith("call "):
        return first
    if role == "assistant" and first.startswith("done "):
        return first.split(" | ", 1)[0]
    if role == "tool" and first.startswith("result "):
        return " ".join(first.split(" ")[:3])  # without " (stopped)" / " (released)"
    return None


def _append(name: str, record: object, *, fsync: bool) -> None:
    data = (json.dumps(record) + "\n").encode()
    with _log_lock:
        fd = os.open(hermes_home() / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)


def openai_violations(messages: list[dict[str, Any]]) -> list[str]:
    """How a chat-completions request breaks the rule real endpoints enforce: an assistant
    message's tool calls must be answered, each by one tool message, before anything else."""
    problems: list[str] = []
    waiting: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in waiting:
                waiting.remove(call_id)
            else:
                problems.append(f"messages[{index}]: tool result {call_id!r} answers no pending call")
            continue
        if waiting:
            problems.append(f"messages[{index}] ({role}) follows unanswered tool calls {waiting}")
            waiting = []
        if role == "assistant":
            waiting = [str(c.get("id")) for c in message.get("tool_calls") or []]
    if waiting:
        problems.append(f"the request ends with unanswered tool calls {waiting}")
    return problems


class RoundsBackend:
    """The scripted model (see the module docstring)."""

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                 model: str) -> ModelResponse:
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"),
                        default=-1)
        sent = messages[last_user].get("content") if last_user >= 0 else None
        sent_text = sent if isinstance(sent, str) else json.dumps(sent)
        parsed = parse_command(sent_text)
        done_rounds = sum(1 for m in messages[last_user + 1:] if m.get("role") == "tool")
        _append("requests.log", {
            "pid": os.getpid(), "tag": parsed[0] if parsed else None, "round": done_rounds,
            "sent": sent_text, "violations": openai_violations(messages),
        }, fsync=False)
        if parsed is None:
            return ModelResponse(content=f"echo: {sent_text}", finish_reason="stop")
        tag, options = parsed
        if done_rounds < int(options.get("rounds", "1")):
            arguments = {"tag": tag, "round": done_rounds, **options}
            return ModelResponse(
                content=f"call {tag} r{done_rounds}",
                tool_calls=[{"id": f"c_{tag}_{done_rounds}", "type": "function",
                             "function": {"name": "step", "arguments": json.dumps(arguments)}}],
                finish_reason="tool_calls", prompt_tokens=len(messages), completion_tokens=1)
        return ModelResponse(content=f"done {tag} | seen: {sent_text}", finish_reason="stop",
                             prompt_tokens=len(messages), completion_tokens=1)


def _step(args: dict[str, Any], context: ToolContext) -> str:
    result = f"result {args.get('tag')} r{args.get('round')}"
    block = args.get("block")
    if block and args.get("round") == 0:
        Path(f"{block}.started").touch()
        while not Path(block).exists():  # deliberately deaf to interrupts
            time.sleep(0.02)
        return result + " (released)"
    milliseconds = float(args.get("ms", 0))
    if milliseconds and context.stop.wait(milliseconds / 1000):
        return result + " (stopped)"
    big = int(args.get("big", 0))
    return result + ("\n" + "x" * big if big else "")


STEP_TOOL = Tool(name="step", description="one scripted step",
                 parameters={"type": "object", "properties": {}}, handler=_step, timeout=600)


class RoundsAgent(AIAgent):
    """``AIAgent`` plus the durable log of what each successful flush made durable."""

    def _flush_messages_to_session_db(self, messages: Any,
                                      conversation_history: Any = None) -> bool | None:
        started = time.perf_counter()
        result = super()._flush_messages_to_session_db(messages, conversation_history)
        elapsed = (time.perf_counter() - started) * 1000
        _append("flush_ms.log", round(elapsed, 3), fsync=False)
        if result is True:
            turn: list[str] = []
            for message in reversed(list(messages)):
                if not isinstance(message, dict):
                    continue
                name = marker(message)
                if name is not None:
                    turn.append(name)
                if message.get("role") == "user":
                    break
            _append("durable.log", {"pid": os.getpid(), "markers": turn[::-1]}, fsync=True)
        return result


def build_agent(*, session_id: str, session_db: SessionDB | None, platform: str,
                **runtime: Any) -> RoundsAgent:
    return RoundsAgent(runtime.get("model") or "scripted-rounds", session_id=session_id,
                       session_db=session_db, platform=platform, backend=RoundsBackend(),
                       tools=[STEP_TOOL], config=runtime.get("config"))
