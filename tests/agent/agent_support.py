"""Helpers of the agent tests: a scripted model backend that can look at the database at
the moment it is called, and builders for responses, tools and agents."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from hermes.agent import AIAgent
from hermes.agent.backends import ModelResponse
from hermes.agent.tools import Tool, ToolRegistry
from hermes.state import SessionDB

Step = ModelResponse | Callable[[list[dict[str, Any]]], ModelResponse]


class ScriptedBackend:
    """Returns the scripted responses in order; a callable step sees the request first."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.requests: list[list[dict[str, Any]]] = []
        self.tools_seen: list[list[dict[str, Any]]] = []

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, model: str
    ) -> ModelResponse:
        self.requests.append(messages)
        self.tools_seen.append(tools)
        if not self.steps:
            raise AssertionError("the agent called the model more often than scripted")
        step = self.steps.pop(0)
        return step(messages) if callable(step) else step


def tool_call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


def calls(*tool_calls: dict[str, Any], content: str | None = None) -> ModelResponse:
    return ModelResponse(content=content, tool_calls=list(tool_calls),
                         finish_reason="tool_calls", prompt_tokens=10, completion_tokens=5)


def answer(text: str) -> ModelResponse:
    return ModelResponse(content=text, finish_reason="stop", prompt_tokens=12,
                         completion_tokens=3)


def simple_tool(name: str, handler: Callable[[dict[str, Any]], str]) -> Tool:
    return Tool(name=name, description=f"test tool {name}",
                parameters={"type": "object", "properties": {}},
                handler=lambda args, _context: handler(args))


def make_agent(db: SessionDB | None, backend: ScriptedBackend,
               tools: list[Tool] | ToolRegistry | None = None, *,
               session_id: str = "sess-1", **kwargs: Any) -> AIAgent:
    return AIAgent("scripted-model", session_id=session_id, session_db=db, platform="local",
                   backend=backend, tools=tools if tools is not None else [], **kwargs)


def rows(db: SessionDB, session_id: str = "sess-1") -> list[tuple[str, Any]]:
    return [(m["role"], m.get("content")) for m in db.get_messages_as_conversation(session_id)]


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    event = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return True
        event.wait(0.02)
    return predicate()
