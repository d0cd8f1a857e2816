"""The conversation loop against a scripted backend and a real SessionDB.

The central property: the transcript is written after the user message, after every model
response and after every tool result — checked by looking at the database from inside the
model and tool calls, i.e. at the moment the next step starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_support import (
    ScriptedBackend,
    answer,
    calls,
    make_agent,
    rows,
    simple_tool,
    tool_call,
    wait_until,
)

from hermes.agent import AIAgent, model_metadata
from hermes.agent.backends import ModelError, ModelFailure, ModelResponse, OfflineBackend
from hermes.agent.conversation import reply_stream
from hermes.agent.tools import ToolRegistry, terminal_tool
from hermes.config import TerminalToolConfig
from hermes.errors import ConfigError
from hermes.state import SessionDB


def test_every_round_is_in_the_database_before_the_next_one_starts(db: SessionDB) -> None:
    seen_by_model: list[list[tuple[str, Any]]] = []
    seen_by_tool: list[list[tuple[str, Any]]] = []

    def first_round(request: list[dict[str, Any]]) -> ModelResponse:
        seen_by_model.append(rows(db))
        return calls(tool_call("c1", "probe", '{"q": 1}'), content="checking")

    def second_round(request: list[dict[str, Any]]) -> ModelResponse:
        seen_by_model.append(rows(db))
        return answer("all done")

    def probe(args: dict[str, Any]) -> str:
        seen_by_tool.append(rows(db))
        return f"probe saw {args['q']}"

    backend = ScriptedBackend(first_round, second_round)
    agent = make_agent(db, backend, [simple_tool("probe", probe)])

    result = agent.run_conversation("look around")

    # The model's first call: the user message is already stored.
    assert seen_by_model[0] == [("user", "look around")]
    # The tool runs after the assistant message that asked for it was stored.
    assert seen_by_tool[0] == [("user", "look around"), ("assistant", "checking")]
    # The second model call: the tool result is stored.
    assert seen_by_model[1][-1] == ("tool", "probe saw 1")
    stored = db.get_messages_as_conversation("sess-1")
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1]["tool_calls"][0]["function"]["name"] == "probe"
    assert stored[2]["tool_call_id"] == "c1"
    assert stored[2]["tool_name"] == "probe"
    assert db.get_session("sess-1")["message_count"] == 4  # type: ignore[index]

    assert result["final_response"] == "all done"
    assert result["completed"] is True
    assert result["interrupted"] is False
    assert result["api_calls"] == 2
    assert result["agent_persisted"] is True
    assert result["history_offset"] == 0
    assert result["last_prompt_tokens"] == 12
    assert result["session_id"] == "sess-1"
    assert [t["function"]["name"] for t in result["tools"]] == ["probe"]
    assert result["messages"] is agent._session_messages


def test_a_second_turn_writes_only_its_own_messages(db: SessionDB) -> None:
    backend = ScriptedBackend(answer("first answer"), answer("second answer"))
    agent = make_agent(db, backend)
    agent.run_conversation("first question")

    history = db.get_messages_as_conversation("sess-1")
    # A fresh agent, as after a gateway restart: history objects come from the database.
    fresh = make_agent(db, backend)
    result = fresh.run_conversation("second question", conversation_history=history)

    assert rows(db) == [("user", "first question"), ("assistant", "first answer"),
                        ("user", "second question"), ("assistant", "second answer")]
    assert result["history_offset"] == 2
    assert result["messages"][:2] == history
    assert all(a is b for a, b in zip(result["messages"], history))
    # The model saw the whole conversation.
    assert [m["content"] for m in backend.requests[1]] == [
        "first question", "first answer", "second question"]


def test_bookkeeping_rows_and_keys_are_not_sent_to_the_model(db: SessionDB) -> None:
    history: list[dict[str, Any]] = [
        {"role": "session_meta", "content": None, "tools": [], "model": "x"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "finish_reason": "tool_calls",
         "tool_calls": [tool_call("c0", "probe")]},
        {"role": "tool", "tool_call_id": "c0", "tool_name": "probe", "content": "ok",
         "timestamp": 1.0},
        {"role": "assistant", "content": "fine", "reasoning": "hmm"},
    ]
    backend = ScriptedBackend(answer("sure"))
    agent = make_agent(db, backend, system_prompt="be brief")
    agent.run_conversation("again", conversation_history=history)

    sent = backend.requests[0]
    assert sent[0] == {"role": "system", "content": "be brief"}
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant",
                                         "user"]
    assert sent[2] == {"role": "assistant", "content": None,
                       "tool_calls": [tool_call("c0", "probe")]}
    assert sent[3] == {"role": "tool", "tool_call_id": "c0", "content": "ok"}
    assert sent[4] == {"role": "assistant", "content": "fine"}


def test_the_iteration_cap_ends_the_turn_with_a_clear_answer(db: SessionDB) -> None:
    looping = [calls(tool_call(f"c{i}", "probe")) for i in range(3)]
    backend = ScriptedBackend(*looping)
    agent = make_agent(db, backend, [simple_tool("probe", lambda _a: "again")],
                       max_iterations=3)

    result = agent.run_conversation("never ends")

    assert result["completed"] is False
    assert result["api_calls"] == 3
    assert "3 model calls" in result["final_response"]
    assert "max_iterations" in result["final_response"]
    stored = rows(db)
    assert stored[-1] == ("assistant", result["final_response"])
    # 1 user + 3 × (assistant + tool) + the closing message.
    assert len(stored) == 8


def test_interrupt_kills_a_running_tool_and_stops_the_turn(
    db: SessionDB, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    command = f"echo $$ > {pid_file}; echo started; sleep 30"
    backend = ScriptedBackend(
        calls(tool_call("c1", "terminal", f'{{"command": "{command}"}}'),
              tool_call("c2", "terminal", '{"command": "echo never"}')),
    )
    terminal = terminal_tool(TerminalToolConfig(enabled=True, timeout=60))
    agent = make_agent(db, backend, [terminal])

    def interrupt_when_running() -> None:
        assert wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "")
        agent.interrupt("user pressed stop")

    threading.Thread(target=interrupt_when_running, daemon=True).start()
    started = time.monotonic()
    result = agent.run_conversation("run something slow")
    elapsed = time.monotonic() - started

    assert elapsed < 10, "the interrupted tool was waited for"
    assert result["interrupted"] is True
    assert result["completed"] is False
    assert result["api_calls"] == 1  # no model call after the interrupt
    shell_pid = int(pid_file.read_text())
    assert wait_until(lambda: not _alive(shell_pid)), "the tool's process survived"

    stored = db.get_messages_as_conversation("sess-1")
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "tool"]
    assert "started" in stored[2]["content"]
    assert "[process killed]" in stored[2]["content"]
    assert "[terminal interrupted]" in stored[2]["content"]
    # The second call is answered (endpoints reject unanswered tool calls) but never run.
    assert stored[3]["tool_call_id"] == "c2"
    assert "not run" in stored[3]["content"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_interrupt_during_a_round_stops_before_the_next_model_call(db: SessionDB) -> None:
    agent: AIAgent

    def stop_then_report(_args: dict[str, Any]) -> str:
        agent.interrupt("stop")
        return "finished anyway"

    backend = ScriptedBackend(calls(tool_call("c1", "probe")), answer("unreachable"))
    agent = make_agent(db, backend, [simple_tool("probe", stop_then_report)])

    result = agent.run_conversation("go")

    assert result["interrupted"] is True
    assert result["api_calls"] == 1
    assert rows(db)[-1] == ("tool", "finished anyway")
    assert len(backend.steps) == 1  # the scripted answer was never asked for


def test_a_failing_model_ends_the_turn_with_the_reason_and_keeps_the_user_message(
    db: SessionDB,
) -> None:
    def fail(_request: list[dict[str, Any]]) -> ModelResponse:
        raise ModelError("the model endpoint http://x/v1 failed (HTTP 500)")

    agent = make_agent(db, ScriptedBackend(fail))
    result = agent.run_conversation("hello?")

    assert result["failed"] is True
    assert result["completed"] is False
    assert "HTTP 500" in result["error"]
    assert "HTTP 500" in result["final_response"]
    assert result["failure"] == "model_failed"
    assert rows(db) == [("user", "hello?")]


def test_a_failure_says_which_way_the_model_call_failed(db: SessionDB) -> None:
    def refuse(_request: list[dict[str, Any]]) -> ModelResponse:
        raise ModelError("the model endpoint refused the key", ModelFailure.KEY_REFUSED)

    result = make_agent(db, ScriptedBackend(refuse)).run_conversation("hello?")
    assert (result["failed"], result["failure"]) == (True, "model_key_refused")


def test_usage_is_summed_over_the_turns_model_calls_and_the_last_finish_reason_kept(
    db: SessionDB,
) -> None:
    backend = ScriptedBackend(calls(tool_call("c1", "probe")), answer("done"))
    result = make_agent(db, backend, [simple_tool("probe", lambda _a: "ok")]).run_conversation(
        "go")
    assert (result["prompt_tokens"], result["completion_tokens"]) == (10 + 12, 5 + 3)
    assert result["finish_reason"] == "stop"
    assert result["failure"] is None


def test_the_iteration_cap_reports_length_as_its_finish_reason(db: SessionDB) -> None:
    backend = ScriptedBackend(calls(tool_call("c1", "probe")))
    agent = make_agent(db, backend, [simple_tool("probe", lambda _a: "again")],
                       max_iterations=1)
    assert agent.run_conversation("never ends")["finish_reason"] == "length"


def test_an_ephemeral_system_prompt_follows_the_configured_one(db: SessionDB) -> None:
    backend = ScriptedBackend(answer("bonjour"))
    agent = make_agent(db, backend, system_prompt="You are hermes.",
                       ephemeral_system_prompt="Answer in French.")
    agent.run_conversation("hello")
    assert backend.requests[0][0] == {"role": "system",
                                      "content": "You are hermes.\n\nAnswer in French."}
    alone = ScriptedBackend(answer("bonjour"))
    make_agent(db, alone, session_id="sess-2",
               ephemeral_system_prompt="Answer in French.").run_conversation("hello")
    assert alone.requests[0][0] == {"role": "system", "content": "Answer in French."}


def test_lone_surrogates_never_reach_the_model(db: SessionDB) -> None:
    backend = ScriptedBackend(answer("fine"))
    history = [{"role": "user", "content": "earlier \udfff"},
               {"role": "assistant", "content": None, "tool_calls": [
                   tool_call("c\ud800", "pro\ud800be", '{"q": "\ud800"}')]},
               {"role": "tool", "tool_call_id": "c\ud800", "content": "x\ud800"}]
    make_agent(db, backend).run_conversation("now \ud800", conversation_history=history)
    sent = repr(backend.requests[0])
    assert "\\ud8" not in sent and "\\udf" not in sent
    assert backend.requests[0][-1] == {"role": "user", "content": "now \ufffd"}
    assert backend.requests[0][1]["tool_calls"][0]["function"]["name"] == "pro\ufffdbe"
    # The caller's dicts are left as they were; the store cleans its own rows the same way.
    assert history[0]["content"] == "earlier \udfff"
    assert rows(db) == [("user", "now \ufffd"), ("assistant", "fine")]


def test_without_a_database_the_turn_runs_and_reports_persistence_off() -> None:
    agent = make_agent(None, ScriptedBackend(answer("hi")))
    result = agent.run_conversation("hello")
    assert result["agent_persisted"] is None
    assert result["final_response"] == "hi"


def test_old_turns_are_left_out_of_the_request_when_the_window_is_small(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model_metadata, "get_model_context_length", lambda *a, **k: 200)
    history: list[dict[str, Any]] = []
    for turn in range(5):
        history += [{"role": "user", "content": f"question {turn} " + "x" * 100},
                    {"role": "assistant", "content": f"answer {turn} " + "y" * 100}]
    backend = ScriptedBackend(answer("ok"))
    agent = make_agent(db, backend)
    assert agent.context_length == 200

    result = agent.run_conversation("latest", conversation_history=history)

    sent = backend.requests[0]
    assert sent[-1] == {"role": "user", "content": "latest"}
    assert sent[0]["role"] == "user"  # cut at a turn boundary
    assert len(sent) < len(history) + 1
    assert len(result["messages"]) == len(history) + 2  # the transcript keeps everything


def test_default_backend_is_offline_and_says_so(db: SessionDB) -> None:
    agent = AIAgent(session_id="sess-1", session_db=db)
    assert isinstance(agent.backend, OfflineBackend)
    assert agent.model == "offline"
    assert agent.tool_registry.names() == []  # the terminal tool is off by default

    result = agent.run_conversation("ping")

    assert "offline" in result["final_response"]
    assert "You said: ping" in result["final_response"]
    assert result["completed"] is True


def test_an_offline_agent_never_imports_the_openai_package(tmp_path: Path) -> None:
    # The package takes most of a second to import and to tear down at exit: a CLI or cron
    # process that never calls a model must not pay for it.
    script = (
        "import sys\n"
        "from hermes.agent import AIAgent\n"
        "from hermes.state import SessionDB\n"
        "db = SessionDB(sys.argv[1])\n"
        "AIAgent(session_id='s', session_db=db).run_conversation('ping')\n"
        "db.close()\n"
        "print('openai' in sys.modules)\n"
    )
    env = {**os.environ, "HERMES_HOME": str(tmp_path / "home")}
    for name in ("HERMES_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "state.db")],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_configured_endpoint_selects_the_openai_backend(
    hermes_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes.agent.openai_chat import OpenAIChatBackend

    (hermes_home / "config.yaml").write_text(
        "model: {name: cfg-model, base_url: 'http://127.0.0.1:9/v1'}\n"
        "tools: {terminal: {enabled: true}}\n")
    agent = AIAgent()
    assert isinstance(agent.backend, OpenAIChatBackend)
    assert agent.model == "cfg-model"
    assert agent.tool_registry.names() == ["terminal"]

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("HERMES_MODEL", "env-model")
    assert AIAgent().model == "env-model"
    assert AIAgent("arg-model").model == "arg-model"


def test_an_endpoint_without_a_model_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="model name"):
        AIAgent(base_url="http://127.0.0.1:9/v1")


def test_tools_can_be_given_as_a_registry(db: SessionDB) -> None:
    registry = ToolRegistry([simple_tool("probe", lambda _a: "x")])
    agent = make_agent(db, ScriptedBackend(answer("ok")), registry)
    assert agent.tool_registry is registry


class StreamingScripted(ScriptedBackend):
    """Streams each scripted reply's text word by word."""

    def stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
               model: str, on_delta: Callable[[str], None]) -> ModelResponse:
        response = self.complete(messages, tools, model=model)
        words = (response.content or "").split(" ")
        for index, word in enumerate(words if response.content else []):
            on_delta(word if index == 0 else " " + word)
        return response


def test_a_platform_that_streams_gets_every_rounds_text_as_it_comes(db: SessionDB) -> None:
    backend = StreamingScripted(
        calls(tool_call("c1", "probe"), content="Let me check."),
        calls(tool_call("c2", "probe")),  # a silent round: no text, no gap
        answer("All fine now."),
    )
    agent = make_agent(db, backend, [simple_tool("probe", lambda _a: "ok")])
    pieces: list[str] = []
    token = reply_stream.set(pieces.append)
    try:
        result = agent.run_conversation("check it")
    finally:
        reply_stream.reset(token)
    assert "".join(pieces) == "Let me check.\n\nAll fine now."
    assert pieces[:2] == ["Let", " me"]
    assert result["final_response"] == "All fine now."

    # Without a sink the same backend is asked plainly.
    plain = StreamingScripted(answer("quiet"))
    assert make_agent(db, plain).run_conversation("again")["final_response"] == "quiet"
