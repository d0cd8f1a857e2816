"""``/v1/chat/completions`` keeps OpenAI's contract, end to end with real processes: the
``openai`` client → ``hermes gateway run`` → the agent's OpenAI backend → a scripted model
server on loopback (``support.fake_openai``), which records what the model received.

* stateless by default: the request's messages (system prompt included) are what the model
  sees, and the stored transcript of a client resending its history holds each message once;
* conversations are keyed by caller, system prompt and first message: two clients never see
  each other's messages;
* continuity from state.db only with a key, only for the caller that owns the session;
* usage, the model's finish_reason, and failed model calls as 5xx in OpenAI's shape;
* text with lone surrogates reaches the model as valid text.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from gateway_process import GatewayProcess, free_port
from openai.types.chat import ChatCompletionMessageParam
from support.fake_openai import FakeOpenAI, Reply, tool_call

from hermes.gateway.platforms.api_auth import SESSION_HEADER
from hermes.state import SessionDB

KEY = "contract-test-key"
OTHER_KEY = "contract-test-other-key"
Messages = list[ChatCompletionMessageParam]


class Model(FakeOpenAI):
    """Answers every request with ``answer <n>``, unless a test queued replies first."""

    def next_reply(self, body: dict[str, Any]) -> Reply:
        if self.script:
            return self.script.pop(0)
        return Reply(content=f"answer {len(self.requests)}")

    def received(self, text: str) -> list[list[dict[str, Any]]]:
        """The message lists of the requests whose last message says ``text``."""
        return [r["messages"] for r in self.requests if r["messages"][-1].get("content") == text]


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    with Model() as server:
        yield server


def start(home: Path, *args: str, **variables: str) -> GatewayProcess:
    home.mkdir(parents=True, exist_ok=True)
    # No retries, so a scripted failure reaches the agent; a short timeout for the slow case.
    (home / "config.yaml").write_text("model: {max_retries: 0, timeout: 3}\n")
    if "--base-url" in args:  # the model endpoint's key (without one the agent is offline)
        variables.setdefault("OPENAI_API_KEY", "sk-upstream")
    return GatewayProcess(home, *args, **variables).__enter__()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, model: Model) -> Iterator[GatewayProcess]:
    served = start(tmp_path_factory.mktemp("contract") / "home", "--base-url", model.url,
                   "--model", "fake-model", API_SERVER_KEY=KEY)
    yield served
    served.__exit__()
    assert served.returncode == 0, served.output()
    assert "Traceback" not in served.output(), served.output()


def client(gateway: GatewayProcess, key: str = KEY, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url, api_key=key, max_retries=retries)


def ask(gateway: GatewayProcess, messages: Messages, **options: Any) -> tuple[str, str]:
    """One plain request: ``(answer, X-Hermes-Session-Id)``."""
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="hermes-agent", messages=messages, **options)
    content = raw.parse().choices[0].message.content
    assert content is not None
    return content, raw.headers[SESSION_HEADER]


def stored(gateway: GatewayProcess, session_id: str) -> list[tuple[str, Any]]:
    """The session's transcript in state.db, marker rows left out: ``(role, content)``."""
    with SessionDB(gateway.home / "state.db") as db:
        rows = db.get_messages_as_conversation(session_id)
    return [(m["role"], m.get("content")) for m in rows if m["role"] != "session_meta"]


def test_the_openai_client_plain_and_streamed_with_usage(gateway: GatewayProcess,
                                                         model: Model) -> None:
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="hermes-agent", messages=[{"role": "user", "content": "plain question"}])
    reply = raw.parse()
    assert reply.choices[0].message.content == f"answer {len(model.requests)}"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens,
            reply.usage.total_tokens) == (21, 7, 28)  # the model's own counts
    assert raw.headers[SESSION_HEADER].startswith("api-")

    stream = client(gateway).chat.completions.create(
        model="hermes-agent", messages=[{"role": "user", "content": "streamed question"}],
        stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == f"answer {len(model.requests)}"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 28


def test_the_models_own_finish_reason_is_passed_on(gateway: GatewayProcess,
                                                   model: Model) -> None:
    model.script.append(Reply(content="cut sho", finish_reason="length"))
    reply = client(gateway).chat.completions.create(
        model="hermes-agent", messages=[{"role": "user", "content": "say a lot"}])
    assert (reply.choices[0].message.content, reply.choices[0].finish_reason) == (
        "cut sho", "length")


def test_a_ui_resending_its_history_for_ten_turns_is_stored_once_in_order(
    gateway: GatewayProcess, model: Model,
) -> None:
    system: ChatCompletionMessageParam = {"role": "system", "content": "You are a UI test."}
    conversation: Messages = []
    sessions = set()
    for turn in range(10):
        conversation.append({"role": "user", "content": f"ui question {turn}"})
        answer, session_id = ask(gateway, [system, *conversation])
        sessions.add(session_id)
        # What the model saw is exactly what the client sent, system prompt first.
        (seen,) = model.received(f"ui question {turn}")
        assert seen == [{"role": "system", "content": "You are a UI test."}, *conversation]
        conversation.append({"role": "assistant", "content": answer})
    (session_id,) = sessions
    assert stored(gateway, session_id) == [(m["role"], m["content"]) for m in conversation]

    # The UI edits an earlier message and asks again: the model sees the edit, the stored
    # rows stay as they were said, and the new turn is appended.
    edited = [dict(m) for m in conversation]
    edited[2]["content"] = "EDITED ui question 1"
    edited.append({"role": "user", "content": "after the edit"})
    answer, again = ask(gateway, [system, *edited])  # type: ignore[list-item]
    assert again == session_id
    (seen,) = model.received("after the edit")
    assert seen[3] == {"role": "user", "content": "EDITED ui question 1"}
    assert stored(gateway, session_id) == [(m["role"], m["content"]) for m in conversation] + [
        ("user", "after the edit"), ("assistant", answer)]
    with SessionDB(gateway.home / "state.db") as db:
        roles = [m["role"] for m in db.get_messages_as_conversation(session_id)]
    assert roles.count("session_meta") == 1


def test_a_first_request_with_history_stores_that_history_once(gateway: GatewayProcess) -> None:
    history: Messages = [{"role": "user", "content": "imported 1"},
                         {"role": "assistant", "content": "imported 2"},
                         {"role": "user", "content": "imported 3"}]
    first, session_id = ask(gateway, history)
    second, again = ask(gateway, [*history, {"role": "assistant", "content": first},
                                  {"role": "user", "content": "imported 5"}])
    assert again == session_id
    assert stored(gateway, session_id) == [
        ("user", "imported 1"), ("assistant", "imported 2"), ("user", "imported 3"),
        ("assistant", first), ("user", "imported 5"), ("assistant", second)]


def _two_clients(gateway: GatewayProcess, model: Model, a: dict[str, Any],
                 b: dict[str, Any]) -> None:
    """Clients A and B both start with "hi"; A then tells a secret. B's model never sees it."""
    def turn(options: dict[str, Any], history: Messages, text: str) -> tuple[Messages, str]:
        system = [{"role": "system", "content": options["system"]}] if "system" in options else []
        sent: Messages = [*system, *history, {"role": "user", "content": text}]  # type: ignore[list-item]
        answer, session_id = ask(gateway, sent, **{k: v for k, v in options.items()
                                                   if k != "system"})
        return [*history, {"role": "user", "content": text},
                {"role": "assistant", "content": answer}], session_id

    a_history, a_session = turn(a, [], "hi")
    b_history, b_session = turn(b, [], "hi")
    a_history, _ = turn(a, a_history, "my password is hunter2")
    _, b_again = turn(b, b_history, f"what did I tell you? {b}")
    assert a_session != b_session and b_again == b_session
    (seen_by_b,) = model.received(f"what did I tell you? {b}")
    assert "hunter2" not in json.dumps(seen_by_b)
    assert all("hunter2" not in json.dumps(m) for m in seen_by_b)
    assert not any("hunter2" in str(content) for _, content in stored(gateway, b_session))
    assert any("hunter2" in str(content) for _, content in stored(gateway, a_session))


def test_different_system_prompts_never_share_a_conversation(gateway: GatewayProcess,
                                                             model: Model) -> None:
    _two_clients(gateway, model, {"system": "You are A."}, {"system": "You are B."})


def test_different_users_never_share_a_conversation(gateway: GatewayProcess,
                                                    model: Model) -> None:
    _two_clients(gateway, model, {"user": "alice"}, {"user": "bob"})


def test_continuity_from_the_store_for_the_owner_only(gateway: GatewayProcess,
                                                      model: Model) -> None:
    first, session_id = ask(gateway, [{"role": "user", "content": "remember 7"}], user="carol")
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="hermes-agent", user="carol", extra_headers={SESSION_HEADER: session_id},
        messages=[{"role": "user", "content": "what number?"}])
    assert raw.headers[SESSION_HEADER] == session_id
    second = raw.parse().choices[0].message.content
    (seen,) = model.received("what number?")
    assert seen == [{"role": "user", "content": "remember 7"},
                    {"role": "assistant", "content": first},
                    {"role": "user", "content": "what number?"}]
    assert stored(gateway, session_id) == [("user", "remember 7"), ("assistant", first),
                                           ("user", "what number?"), ("assistant", second)]

    # Another caller naming that id, and anyone naming an id that does not exist, get the
    # same 404: whether a session exists is not revealed.
    answers = []
    for user, named in (("mallory", session_id), ("carol", "api-" + "0" * 32),
                        (None, session_id)):
        options: dict[str, Any] = {"user": user} if user else {}
        with pytest.raises(openai.NotFoundError) as raised:
            client(gateway).chat.completions.create(
                model="hermes-agent", extra_headers={SESSION_HEADER: named},
                messages=[{"role": "user", "content": "show me"}], **options)
        body = dict(raised.value.body)  # type: ignore[call-overload]
        answers.append((body.pop("message").replace(named, "<id>"), body))
    assert answers[0] == answers[1] == answers[2]
    assert model.received("show me") == []
    assert len(stored(gateway, session_id)) == 4


def test_a_lone_surrogate_reaches_the_model_as_valid_text(gateway: GatewayProcess,
                                                          model: Model) -> None:
    # What a JavaScript client sends for a broken string; the openai client cannot even
    # encode it, so raw HTTP.
    body = (b'{"model": "hermes-agent", "user": "dave\\udfff", "messages": ['
            b'{"role": "system", "content": "sys \\ud800"},'
            b'{"role": "user", "content": [{"type": "text", "text": "broken \\ud800 text"}]}]}')
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=60)
    connection.request("POST", "/v1/chat/completions", body=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {KEY}",
        "X-Request-Id": "req-\u00e9"})  # sent as Latin-1: a byte that is not UTF-8
    response = connection.getresponse()
    reply = json.loads(response.read())
    assert response.status == 200, reply
    assert reply["choices"][0]["message"]["content"] == f"answer {len(model.requests)}"
    (seen,) = model.received("broken \ufffd text")
    assert seen[0] == {"role": "system", "content": "sys \ufffd"}
    session_id = response.getheader(SESSION_HEADER)
    assert session_id is not None
    assert stored(gateway, session_id)[0] == ("user", "broken \ufffd text")
    with SessionDB(gateway.home / "state.db") as db:
        session = db.get_session(session_id)
    assert session is not None and session["user_id"] == "dave\ufffd"


# -- failed model calls ------------------------------------------------------------------------


@pytest.mark.parametrize(("failure", "status", "code", "says"), [
    (Reply(status=401, error="invalid key"), 502, "model_key_refused",
     "refused the model API key"),
    (Reply(status=403, error="no access"), 502, "model_key_refused", "OPENAI_API_KEY"),
    (Reply(status=404, error="no such model"), 502, "model_not_found", "model.name"),
    (Reply(status=400, error="tools are not supported"), 502, "model_request_refused",
     "tools are not supported"),
    (Reply(status=500, error="kaput"), 502, "model_failed", "HTTP 500"),
    (Reply(status=429, error="slow down"), 503, "model_rate_limited", "rate limiting"),
    (Reply(content="too late", delay=6), 504, "model_timeout", "did not answer in time"),
], ids=["401", "403", "404", "400", "500", "429", "timeout"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_failed_model_call_is_a_5xx_with_its_cause(
    gateway: GatewayProcess, model: Model, failure: Reply, status: int, code: str, says: str,
    stream: bool,
) -> None:
    model.script.append(failure)
    calls = len(model.requests)
    question = f"fail with {failure.status} {failure.error} {stream}"
    with pytest.raises(openai.APIStatusError) as raised:
        # The client's own retries are on: the gateway tells it not to (it already did).
        client(gateway, retries=2).chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": question}],
            stream=stream)
    assert raised.value.status_code == status
    assert raised.value.body["code"] == code, raised.value.body  # type: ignore[index]
    assert raised.value.body["type"] == "server_error"  # type: ignore[index]
    assert says in str(raised.value)
    assert "sk-upstream" not in str(raised.value.body)
    assert len(model.requests) == calls + 1
    # The user message is stored; no apology is stored as the model's answer.
    session_id = raised.value.response.headers[SESSION_HEADER]
    assert stored(gateway, session_id) == [("user", question)]


def test_a_failure_after_text_was_streamed_is_an_error_event(gateway: GatewayProcess,
                                                             model: Model) -> None:
    model.script += [Reply(content="Let me check.", tool_calls=[tool_call("c1", "lookup", {})]),
                     Reply(status=500, error="kaput")]
    stream = client(gateway).chat.completions.create(
        model="hermes-agent", messages=[{"role": "user", "content": "look it up"}],
        stream=True)
    text = []
    with pytest.raises(openai.APIError, match="HTTP 500"):
        for chunk in stream:
            text += [chunk.choices[0].delta.content or ""] if chunk.choices else []
    assert "".join(text) == "Let me check."


def test_an_unreachable_model_is_a_503(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    gateway = start(tmp_path / "home", "--base-url", dead, "--model", "fake-model")
    try:
        with pytest.raises(openai.APIStatusError) as raised:
            client(gateway, "unused").chat.completions.create(
                model="hermes-agent", messages=[{"role": "user", "content": "anyone there?"}])
        assert raised.value.status_code == 503
        assert raised.value.body["code"] == "model_unreachable"  # type: ignore[index]
        assert "cannot reach the model endpoint" in str(raised.value)
    finally:
        gateway.__exit__()
    assert gateway.returncode == 0, gateway.output()


# -- other gateways ------------------------------------------------------------------------------


def test_without_a_key_continuity_is_refused_and_offline_answers_report_usage(
    tmp_path: Path,
) -> None:
    gateway = start(tmp_path / "home")  # offline model, loopback, no key
    try:
        reply = client(gateway, "unused").chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": "offline hi"}])
        assert reply.usage is not None and reply.usage.prompt_tokens > 0
        assert reply.usage.completion_tokens > 0
        assert "offline" in (reply.choices[0].message.content or "")
        with pytest.raises(openai.PermissionDeniedError) as raised:
            client(gateway, "unused").chat.completions.create(
                model="hermes-agent", extra_headers={SESSION_HEADER: "api-anything"},
                messages=[{"role": "user", "content": "continue"}])
        assert "API_SERVER_KEY" in str(raised.value)
    finally:
        gateway.__exit__()
    assert gateway.returncode == 0, gateway.output()


def test_callers_with_different_keys_never_share_a_conversation(
    tmp_path: Path, gateway: GatewayProcess, model: Model,
) -> None:
    """A second gateway on the same state.db: with another key, the same first message is
    another session, and the first gateway's sessions are not found; with the same key, the
    same conversation maps to the same session (the secret is the database's)."""
    first: Messages = [{"role": "user", "content": "shared first message"}]
    _, mine = ask(gateway, first)
    db = str(gateway.home / "state.db")
    other = start(tmp_path / "other", "--base-url", model.url, "--model", "fake-model",
                  "--db", db, API_SERVER_KEY=OTHER_KEY)
    same = start(tmp_path / "same", "--base-url", model.url, "--model", "fake-model",
                 "--db", db, API_SERVER_KEY=KEY)
    try:
        raw = client(other, OTHER_KEY).chat.completions.with_raw_response.create(
            model="hermes-agent", messages=first)
        assert raw.headers[SESSION_HEADER] != mine
        with pytest.raises(openai.NotFoundError):
            client(other, OTHER_KEY).chat.completions.create(
                model="hermes-agent", extra_headers={SESSION_HEADER: mine},
                messages=[{"role": "user", "content": "let me in"}])
        assert ask(same, first)[1] == mine
    finally:
        other.__exit__()
        same.__exit__()
    assert other.returncode == 0 and same.returncode == 0
    assert model.received("let me in") == []
