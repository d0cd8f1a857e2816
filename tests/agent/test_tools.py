"""The tool registry (errors as results, timeouts, interrupts) and the terminal tool."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agent_support import simple_tool

from hermes.agent.tools import Tool, ToolContext, ToolRegistry, default_registry, terminal_tool
from hermes.config import TerminalToolConfig, ToolsConfig, load_config


def test_schemas_are_in_openai_shape() -> None:
    registry = ToolRegistry([simple_tool("probe", lambda _a: "")])
    assert registry.schemas() == [{
        "type": "function",
        "function": {"name": "probe", "description": "test tool probe",
                     "parameters": {"type": "object", "properties": {}}},
    }]
    assert len(registry) == 1


def test_a_name_can_be_registered_once() -> None:
    registry = ToolRegistry([simple_tool("probe", lambda _a: "")])
    with pytest.raises(ValueError, match="already registered"):
        registry.register(simple_tool("probe", lambda _a: ""))


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("missing", "{}", "no tool named 'missing' (available: echo)"),
        ("echo", "{not json", "not a JSON object"),
        ("echo", "[1, 2]", "not a JSON object: got list"),
        ("echo", '{"say": "hi"}', "hi"),
        ("echo", {"say": "mapping"}, "mapping"),
        ("echo", "", "nothing"),
    ],
)
def test_model_mistakes_come_back_as_the_result(name: str, arguments: Any, expected: str) -> None:
    registry = ToolRegistry([simple_tool("echo", lambda a: str(a.get("say", "nothing")))])
    assert expected in registry.call(name, arguments)


def test_a_failing_handler_is_reported_not_raised() -> None:
    def boom(_args: dict[str, Any]) -> str:
        raise RuntimeError("disk on fire")

    result = ToolRegistry([simple_tool("boom", boom)]).call("boom", "{}")
    assert result == "error: boom failed: RuntimeError: disk on fire"


def test_a_handler_that_ignores_stop_is_abandoned_at_its_timeout() -> None:
    release = threading.Event()
    tool = Tool("stuck", "never returns", {"type": "object"},
                lambda _a, _c: (release.wait(30), "late")[1], timeout=0.2)
    started = time.monotonic()
    result = ToolRegistry([tool]).call("stuck", "{}")
    release.set()
    assert "[stuck timed out after 0.2s]" in result
    assert time.monotonic() - started < 5


def test_an_interrupt_sets_the_handlers_stop_event() -> None:
    interrupt = threading.Event()
    stopped = threading.Event()

    def cooperative(_args: dict[str, Any], context: ToolContext) -> str:
        interrupt.set()  # as if the user pressed stop right now
        context.stop.wait(10)
        stopped.set()
        return "partial work"

    tool = Tool("slow", "", {"type": "object"}, cooperative)
    result = ToolRegistry([tool]).call("slow", "{}", interrupt=interrupt)
    assert stopped.is_set()
    assert result == "partial work\n[slow interrupted]"


def _context(timeout: float = 10) -> ToolContext:
    return ToolContext(stop=threading.Event(), deadline=time.monotonic() + timeout)


def test_terminal_runs_a_command_and_reports_its_exit_code(tmp_path: Path) -> None:
    tool = terminal_tool(TerminalToolConfig(enabled=True, cwd=str(tmp_path)))
    result = tool.handler({"command": "pwd; echo oops >&2; exit 3"}, _context())
    assert result.splitlines() == ["exit code 3", str(tmp_path), "oops"]


def test_terminal_caps_its_output_but_drains_the_rest() -> None:
    tool = terminal_tool(TerminalToolConfig(enabled=True, max_output_bytes=100))
    result = tool.handler({"command": "head -c 1000000 /dev/zero | tr '\\0' a"}, _context())
    lines = result.splitlines()
    assert lines[0] == "exit code 0"
    assert lines[1] == "a" * 100
    assert lines[2] == "[output truncated: 999900 more bytes]"


def test_terminal_kills_the_command_at_its_deadline() -> None:
    tool = terminal_tool(TerminalToolConfig(enabled=True))
    started = time.monotonic()
    result = tool.handler({"command": "echo begun; sleep 30"}, _context(timeout=0.3))
    assert time.monotonic() - started < 5
    assert "begun" in result
    assert result.endswith("[process killed]")


def test_terminal_needs_a_command() -> None:
    tool = terminal_tool(TerminalToolConfig(enabled=True))
    assert tool.handler({}, _context()).startswith("error: terminal needs")


def test_terminal_is_off_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_registry(ToolsConfig()).names() == []
    monkeypatch.setenv("HERMES_TERMINAL_TOOL", "1")
    assert default_registry(load_config().tools).names() == ["terminal"]
