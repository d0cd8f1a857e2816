"""The OpenAI-compatible backend against a scripted server: replies, streamed tool calls,
retries, and errors that say what to do."""

from __future__ import annotations

import pytest
from support.fake_openai import FakeOpenAI, Reply, tool_call

from hermes.agent.backends import ModelError, ModelFailure, OfflineBackend
from hermes.agent.openai_chat import OpenAIChatBackend
from hermes.errors import ConfigError

QUESTION = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "terminal", "parameters": {}}}]


def backend(server: FakeOpenAI, retries: int = 0) -> OpenAIChatBackend:
    return OpenAIChatBackend(base_url=server.url, api_key="sk-fake", timeout=10,
                             max_retries=retries)


def test_a_plain_reply_with_usage() -> None:
    with FakeOpenAI(Reply(content="hello")) as server:
        response = backend(server).complete(QUESTION, [], model="m1")
    assert response.content == "hello"
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert (response.prompt_tokens, response.completion_tokens) == (21, 7)
    assert server.requests[0]["model"] == "m1"
    assert "tools" not in server.requests[0]  # an empty list is left out
    assert server.auth_headers[0] == "Bearer sk-fake"


def test_tool_calls_come_back_in_openai_shape() -> None:
    call = tool_call("call_1", "terminal", {"command": "ls"})
    with FakeOpenAI(Reply(tool_calls=[call])) as server:
        response = backend(server).complete(QUESTION, TOOLS, model="m1")
    assert response.tool_calls == [call]
    assert response.finish_reason == "tool_calls"
    assert server.requests[0]["tools"] == TOOLS


def test_streaming_hands_out_text_and_reassembles_tool_calls() -> None:
    calls = [tool_call("call_1", "terminal", {"command": "echo one"}),
             tool_call("call_2", "terminal", {"command": "echo two"})]
    pieces: list[str] = []
    with FakeOpenAI(Reply(content="Let me look at that.", tool_calls=calls)) as server:
        response = backend(server).stream(QUESTION, TOOLS, model="m1", on_delta=pieces.append)
    assert "".join(pieces) == "Let me look at that."
    assert len(pieces) > 1
    assert response.content == "Let me look at that."
    assert response.tool_calls == calls
    assert response.finish_reason == "tool_calls"
    assert response.prompt_tokens == 21
    assert server.requests[0]["stream"] is True


def test_server_errors_are_retried() -> None:
    with FakeOpenAI(Reply(status=503), Reply(status=429), Reply(content="third time")) as server:
        response = backend(server, retries=2).complete(QUESTION, [], model="m1")
    assert response.content == "third time"
    assert len(server.requests) == 3


def test_persistent_server_errors_become_a_model_error() -> None:
    with FakeOpenAI(Reply(status=500, error="kaput"), Reply(status=500)) as server:
        with pytest.raises(ModelError) as raised:
            backend(server, retries=1).complete(QUESTION, [], model="m1")
    assert server.url in str(raised.value)
    assert "HTTP 500" in str(raised.value)
    assert raised.value.failure is ModelFailure.FAILED


def test_a_rejected_key_is_a_config_error_saying_where_to_set_it() -> None:
    with FakeOpenAI(Reply(status=401, error="bad key")) as server:
        with pytest.raises(ConfigError) as raised:
            backend(server, retries=3).complete(QUESTION, [], model="m1")
    assert len(server.requests) == 1  # 401 is not retried
    assert server.url in str(raised.value)
    assert "OPENAI_API_KEY" in str(raised.value)
    assert isinstance(raised.value, ModelError)
    assert raised.value.failure is ModelFailure.KEY_REFUSED


def test_a_refused_request_is_a_model_error_with_the_servers_reason() -> None:
    with FakeOpenAI(Reply(status=400, error="tools are not supported")) as server:
        with pytest.raises(ModelError, match="tools are not supported") as raised:
            backend(server).complete(QUESTION, TOOLS, model="m1")
    assert raised.value.failure is ModelFailure.REQUEST_REFUSED


def test_an_unknown_model_is_a_config_error() -> None:
    with FakeOpenAI(Reply(status=404, error="no such model")) as server:
        with pytest.raises(ConfigError, match="model.name"):
            backend(server).complete(QUESTION, [], model="nope")


def test_an_unreachable_endpoint_is_a_model_error() -> None:
    with FakeOpenAI() as server:
        url = server.url
    dead = OpenAIChatBackend(base_url=url, api_key=None, timeout=2, max_retries=0)
    with pytest.raises(ModelError, match="cannot reach") as raised:
        dead.complete(QUESTION, [], model="m1")
    assert raised.value.failure is ModelFailure.UNREACHABLE


def test_offline_backend_needs_no_network_and_says_it_is_offline() -> None:
    response = OfflineBackend().complete(
        [{"role": "user", "content": "first"}, {"role": "assistant", "content": "x"},
         {"role": "user", "content": "second"}], [], model="offline")
    assert response.content is not None
    assert "offline" in response.content
    assert "You said: second" in response.content
    assert response.tool_calls == []
