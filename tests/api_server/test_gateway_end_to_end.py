"""End to end over HTTP on loopback, with real processes and real clients:

the ``openai`` client → our api_server (``hermes gateway run``) → the agent, whose backend is
the ``openai`` client → a scripted OpenAI-compatible server that asks for a tool call → the
terminal tool runs → the final answer streams back → ``hermes sessions show`` prints the whole
transcript → a second request continues the same conversation from state.db. And the books
the gateway keeps in state.db: the model's usage after each call, a title from the first
exchange.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from support.fake_openai import FakeOpenAI, Reply, tool_call
from gateway_process import GatewayProcess, request, run_cli

from hermes.gateway.platforms.api_auth import SESSION_HEADER
from hermes.state import SessionDB

KEY = "test-key-e2e"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("tools:\n  terminal:\n    enabled: true\n")
    return home


def test_a_tool_using_conversation_over_http(home: Path) -> None:
    script = [
        Reply(tool_calls=[tool_call("call_1", "terminal", {"command": "echo hermes-tool-ran"})]),
        Reply(content="The tool printed hermes-tool-ran."),
        Reply(content="Earlier the tool printed hermes-tool-ran."),
    ]
    with FakeOpenAI(*script) as model_server, GatewayProcess(
        home, "--base-url", model_server.url, "--model", "fake-model",
        API_SERVER_KEY=KEY, OPENAI_API_KEY="sk-upstream",
    ) as gateway:
        client = openai.OpenAI(base_url=gateway.url, api_key=KEY, max_retries=0)
        assert {m.id for m in client.models.list()} == {"hermes-agent", "fake-model"}

        # Turn 1, streamed: a tool round, then the answer. The response names the session
        # the turn is stored in.
        raw_stream = client.chat.completions.with_raw_response.create(
            model="hermes-agent",
            messages=[{"role": "user", "content": "Run echo for me"}],
            stream=True,
        )
        session_id = raw_stream.headers[SESSION_HEADER]
        pieces = [chunk.choices[0].delta.content for chunk in raw_stream.parse()
                  if chunk.choices and chunk.choices[0].delta.content]
        assert "".join(pieces) == "The tool printed hermes-tool-ran."
        assert len(pieces) > 1, "the answer arrived in one piece, not streamed"

        # The gateway's model backend got the tool's real output in the second round.
        second_round = model_server.requests[1]["messages"]
        assert second_round[-1]["role"] == "tool"
        assert second_round[-1]["tool_call_id"] == "call_1"
        assert "hermes-tool-ran" in second_round[-1]["content"]
        assert "exit code 0" in second_round[-1]["content"]
        assert model_server.requests[0]["tools"][0]["function"]["name"] == "terminal"
        assert model_server.auth_headers[0] == "Bearer sk-upstream"
        assert model_server.requests[0]["model"] == "fake-model"

        # Turn 2, plain: the same conversation continues from state.db.
        raw = client.chat.completions.with_raw_response.create(
            model="hermes-agent",
            messages=[{"role": "user", "content": "What did it print?"}],
            extra_headers={SESSION_HEADER: session_id},
        )
        assert raw.headers[SESSION_HEADER] == session_id
        completion = raw.parse()
        assert completion.choices[0].message.content == (
            "Earlier the tool printed hermes-tool-ran.")
        history = model_server.requests[2]["messages"]
        assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant", "user"]
        assert history[0]["content"] == "Run echo for me"
        assert history[-1]["content"] == "What did it print?"

        # The whole transcript, as the CLI shows it (while the gateway is still running).
        shown = run_cli(home, "sessions", "show", session_id)
        assert shown.returncode == 0, shown.stderr
        for expected in ("Run echo for me", "terminal", "echo hermes-tool-ran", "exit code 0",
                         "The tool printed hermes-tool-ran.", "What did it print?",
                         "Earlier the tool printed hermes-tool-ran.", "session_meta"):
            assert expected in shown.stdout, (expected, shown.stdout)
        order = [shown.stdout.index(s) for s in ("Run echo for me", "exit code 0",
                                                 "What did it print?")]
        assert order == sorted(order)

    assert gateway.returncode == 0, gateway.output()
    db = SessionDB(home / "state.db")
    try:
        (session,) = db.list_sessions(source="api_server")
        roles = [m["role"] for m in db.get_messages_as_conversation(session["id"])]
        # The gateway's first-turn marker row sits among the agent's rows.
        assert roles.count("session_meta") == 1
        assert [r for r in roles if r != "session_meta"] == [
            "user", "assistant", "tool", "assistant", "user", "assistant"]
        assert session["message_count"] == len(roles)
        assert session["id"] == session_id
        assert session["chat_id"].startswith("caller-")  # the caller's tag, not the key
        assert KEY not in json.dumps(session)
    finally:
        db.close()


def _session(home: Path, session_id: str, until: str) -> dict[str, Any]:
    """The session row once ``until`` is set (titles are written in the background)."""
    deadline = time.monotonic() + 10
    with SessionDB(home / "state.db") as db:
        while True:
            row = db.get_session(session_id)
            assert row is not None
            if row.get(until) is not None or time.monotonic() > deadline:
                return row
            time.sleep(0.05)


def test_token_counts_and_title_land_in_state_db(home: Path) -> None:
    # Each model call reports 21 prompt and 7 completion tokens. Turn 1 makes two calls (a
    # tool round, then the answer), turn 2 one.
    script = [Reply(tool_calls=[tool_call("call_1", "terminal", {"command": "echo hi"})]),
              Reply(content="It printed hi."),
              Reply(content="Still hi.")]
    with FakeOpenAI(*script) as model_server, GatewayProcess(
        home, "--base-url", model_server.url, "--model", "fake-model",
        API_SERVER_KEY=KEY, OPENAI_API_KEY="sk-upstream",
    ) as gateway:
        client = openai.OpenAI(base_url=gateway.url, api_key=KEY, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="hermes-agent",
            messages=[{"role": "user", "content": "Run echo hi for me\nand tell me what it says"}])
        session_id = raw.headers[SESSION_HEADER]
        books = _session(home, session_id, until="title")
        assert books["title"] == "Run echo hi for me"
        assert (books["input_tokens"], books["output_tokens"]) == (42, 14)
        assert books["api_call_count"] == 2 and books["model"] == "fake-model"

        client.chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": "again?"}],
            extra_headers={SESSION_HEADER: session_id})
        books = _session(home, session_id, until="title")
        assert (books["input_tokens"], books["output_tokens"]) == (63, 21)
        assert books["api_call_count"] == 3
        assert books["title"] == "Run echo hi for me"  # the first exchange's, kept
    assert gateway.returncode == 0, gateway.output()


def _post(port: int, body: bytes, key: str | None = KEY,
          content_type: str = "application/json") -> tuple[int, dict[str, dict[str, object]]]:
    headers = {"Content-Type": content_type}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return request(port, "POST", "/v1/chat/completions", body, headers)


GOOD = json.dumps({"model": "hermes-agent",
                   "messages": [{"role": "user", "content": "still there?"}]}).encode()


@pytest.mark.parametrize(
    ("body", "key", "status", "param", "says"),
    [
        (GOOD, None, 401, None, "missing or invalid API key"),
        (GOOD, "wrong-key", 401, None, "missing or invalid API key"),
        (b"{not json", KEY, 400, None, "not valid JSON"),
        (b"[1, 2]", KEY, 400, None, "must be a JSON object"),
        (json.dumps({"model": "hermes-agent"}).encode(), KEY, 400, "messages",
         "'messages' is required"),
        (json.dumps({"messages": "hello"}).encode(), KEY, 400, "messages",
         "must be a non-empty list"),
        (json.dumps({"messages": [{"role": "user", "content": 42}]}).encode(), KEY, 400,
         "messages[0].content", "must be a string, a list of parts or null"),
        (json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}).encode(), KEY, 400,
         "messages[0].role", "must be one of"),
        (json.dumps({"messages": [{"role": "user", "content": "hi"}],
                     "stream": "yes"}).encode(), KEY, 400, "stream", "true, false or null"),
        (json.dumps({"messages": [{"role": "assistant", "content": "hi"}]}).encode(), KEY,
         400, "messages[0]", "last message must be a user message"),
        (json.dumps({"model": "gpt-nonexistent",
                     "messages": [{"role": "user", "content": "hi"}]}).encode(), KEY, 404,
         "model", "does not exist"),
        (b"{" + b" " * (10 * 1024 * 1024) + b"}", KEY, 413, None, "larger than"),
    ],
    ids=["no-key", "wrong-key", "bad-json", "not-object", "missing-messages",
         "messages-not-list", "content-wrong-type", "unknown-role", "stream-wrong-type",
         "last-not-user", "unknown-model", "10MB-body"],
)
def test_bad_requests_get_openai_shaped_4xx_and_the_gateway_keeps_serving(
    served: GatewayProcess, body: bytes, key: str | None, status: int, param: str | None,
    says: str,
) -> None:
    got_status, payload = _post(served.port, body, key)
    assert got_status == status, payload
    error = payload["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert says in str(error["message"])
    assert error["param"] == param
    # Still serving, and still answering properly.
    ok_status, ok = _post(served.port, GOOD)
    assert ok_status == 200, ok
    assert "still there?" in str(ok["choices"][0]["message"]["content"])  # type: ignore[index]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    home = tmp_path_factory.mktemp("bad-requests")
    with GatewayProcess(home, API_SERVER_KEY=KEY) as gateway:  # offline model
        yield gateway
    assert gateway.returncode == 0, gateway.output()


def test_the_openai_client_gets_its_usual_exceptions(served: GatewayProcess) -> None:
    client = openai.OpenAI(base_url=served.url, api_key=KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="gpt-nope",
                                       messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=served.url, api_key="wrong", max_retries=0).models.list()
    status, health = request(served.port, "GET", "/health")
    assert (status, health["status"]) == (200, "ok")
    status, missing = request(served.port, "GET", "/v1/nothing-here",
                              headers={"Authorization": f"Bearer {KEY}"})
    assert status == 404
    assert missing["error"]["code"] == "not_found"


def test_without_a_key_the_gateway_refuses_a_public_address(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "gateway", "run", "--host", "0.0.0.0", "--port", "1")
    assert result.returncode == 1
    assert "refusing to serve the api_server on 0.0.0.0:1 without a key" in result.stderr
    assert "API_SERVER_KEY" in result.stderr
