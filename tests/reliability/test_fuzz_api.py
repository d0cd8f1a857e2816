"""Fuzzing the api_server over real HTTP, with the real model path (issue 7 item 5; issue J).

One ``hermes gateway run`` process with a key, its agent's OpenAI backend pointed at a fake
model server on loopback (``support.fake_openai``: the ``openai`` client really encodes and
sends every request; an offline backend would not), which answers every request, now and
then with a tool call first. Hypothesis sends it chat bodies with every field mistyped in
turn, arbitrary JSON documents, raw bytes, odd headers (session ids, keys, content types),
and other routes and methods. Held for every request:

* never a 5xx;
* every 4xx is OpenAI's error shape, ``{"error": {"message", "type", "param", "code"}}``;
* a 200 is a chat completion with ``usage`` (or, streamed, chunks ending in ``[DONE]``)
  carrying the model's answer, never a gateway notice or an error event;
* the model never received a string that is not valid UTF-8, and the gateway logged no
  traceback.

60 examples per strategy in the normal run, 400 with ``HERMES_FULL=1``
(``HERMES_API_EXAMPLES``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hermes.gateway.platforms.api_auth import SESSION_HEADER
from hermes.gateway.turn import FAILURE_NOTICE, STOPPING_NOTICE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fake_openai import FakeOpenAI, Reply, tool_call

from .harness import ApiGateway, setting

EXAMPLES = int(setting("api_examples", 60, 400))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
KEY = "fuzz-key"
AUTHORIZED = {"Authorization": f"Bearer {KEY}"}


class Model(FakeOpenAI):
    """Answers everything; every third request that ends in a user message first asks for a
    tool (one the agent does not have, so it records the error as the result and asks
    again)."""

    def next_reply(self, body: dict[str, Any]) -> Reply:
        count = len(self.requests)
        if count % 3 == 0 and body["messages"][-1].get("role") == "user":
            return Reply(content="checking", tool_calls=[tool_call(f"c{count}", "lookup", {})])
        return Reply(content=f"answer {count}")


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    with Model() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, model: Model) -> Iterator[ApiGateway]:
    home = tmp_path_factory.mktemp("api") / "home"
    home.mkdir()
    (home / "config.yaml").write_text("model: {max_retries: 0}\n")
    with ApiGateway(home, "--base-url", model.url, "--model", "fake-model",
                    API_SERVER_KEY=KEY, OPENAI_API_KEY="sk-fuzz") as served:
        yield served
    log = served.log()
    assert "Traceback" not in log, log[-5000:]
    # The accepting paths ran, and what reached the model was valid text, whatever the
    # clients sent.
    assert model.requests
    for request in model.requests:
        json.dumps(request, ensure_ascii=False).encode("utf-8")


# Text with the characters that break encoders: lone surrogates (valid in JSON as "\ud800"),
# NUL, line separators, a BOM.
SPECIAL = ["\ud800", "\udfff", "\x00", "\u2028", "\ufeff", "\U0001f600"]
chars = st.characters() | st.sampled_from(SPECIAL)


def texts(max_size: int, *, surrogates: bool = True) -> st.SearchStrategy[str]:
    strategy = st.text(chars, max_size=max_size)
    if surrogates:
        return strategy
    return strategy.map(lambda t: "".join(c for c in t if not 0xD800 <= ord(c) <= 0xDFFF))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts(20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts(8), inner,
                                                                 max_size=4),
    max_leaves=10,
)
roles = st.sampled_from(["user", "system", "developer", "assistant", "tool"]) | json_values
parts = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url", "input_audio"]) | json_values},
    optional={"text": texts(30) | json_values, "image_url": json_values})
contents = (texts(60) | st.none() | st.lists(parts | json_values, max_size=3)
            | json_values)
messages = st.fixed_dictionaries(
    {}, optional={"role": roles, "content": contents, "name": texts(10),
                  "tool_calls": json_values, "tool_call_id": json_values}) | json_values
# Texts a user could type; the assertions are about the parser, not about these words.
user_text = texts(60).filter(lambda t: t.strip())
user_field = texts(30)
non_strings = json_values.filter(lambda v: not isinstance(v, str))
chat_bodies = st.fixed_dictionaries(
    {"messages": st.lists(messages, max_size=4).map(list) | json_values},
    optional={"model": st.sampled_from(["hermes-agent", "gpt-4o"]) | json_values,
              "stream": st.booleans() | json_values, "user": user_field | non_strings,
              "stream_options": json_values, "temperature": json_values, "n": json_values,
              "tools": json_values})
# Mostly-valid bodies, so that the parser's accepting paths (and the turn) run too.
good_bodies = st.fixed_dictionaries(
    {"messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(
        ["user", "assistant", "system"]), "content": user_text}), max_size=3).map(
            lambda history: history + [{"role": "user", "content": "the new input"}])},
    optional={"model": st.just("hermes-agent"), "stream": st.booleans() | st.none(),
              "stream_options": st.fixed_dictionaries({}, optional={
                  "include_usage": st.booleans() | st.none()}),
              "user": user_field})
latin1 = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                               exclude_characters="\x7f"), max_size=140)
# Ids that pass the format check, so continuity's lookup runs too (they name nobody's session).
session_ids = latin1 | st.from_regex(r"(api-)?[A-Za-z0-9._:@-]{1,140}", fullmatch=True)
headers = st.fixed_dictionaries({}, optional={
    SESSION_HEADER: session_ids,
    "Content-Type": st.sampled_from(["application/json", "text/plain", "", "x/y; charset=nope"]),
    "Authorization": st.just(AUTHORIZED["Authorization"]) | latin1,
    "X-Request-Id": latin1,
})


NOTICES = (FAILURE_NOTICE, STOPPING_NOTICE, "The model call failed")


def check(status: int, response_headers: dict[str, str], body: bytes) -> None:
    assert status < 500, (status, body[:500])
    if status >= 400:
        document = json.loads(body)
        error = document["error"]
        assert set(error) == {"message", "type", "param", "code"}, document
        assert isinstance(error["message"], str) and error["message"], document
        assert isinstance(error["type"], str), document
        assert error["param"] is None or isinstance(error["param"], str), document
        assert error["code"] is None or isinstance(error["code"], str), document
        return
    if response_headers.get("Content-Type", "").startswith("text/event-stream"):
        events = [line[len("data: "):] for line in body.decode().splitlines()
                  if line.startswith("data: ")]
        assert events and events[-1] == "[DONE]", body[-300:]
        chunks = [json.loads(e) for e in events[:-1]]
        assert not any("error" in c for c in chunks), chunks
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                       if c.get("choices"))
        assert "answer" in text and not any(n in text for n in NOTICES), text
        return
    document = json.loads(body)
    if document.get("object") == "chat.completion":
        content = document["choices"][0]["message"]["content"]
        assert isinstance(content, str) and content.startswith("answer"), content
        assert document["usage"]["total_tokens"] > 0, document
        assert response_headers.get(SESSION_HEADER, "").startswith("api-"), response_headers


def post(gateway: ApiGateway, body: bytes, extra: dict[str, str]) -> None:
    sent = {"Content-Type": "application/json", **AUTHORIZED, **extra}
    check(*gateway.request("POST", "/v1/chat/completions", body, sent))


@FUZZ
@given(body=chat_bodies, extra=headers)
def test_chat_bodies_with_mistyped_fields(gateway: ApiGateway, body: dict[str, Any],
                                          extra: dict[str, str]) -> None:
    post(gateway, json.dumps(body).encode(), extra)


@FUZZ
@given(body=good_bodies, extra=headers)
def test_valid_requests_with_odd_headers(gateway: ApiGateway, body: dict[str, Any],
                                         extra: dict[str, str]) -> None:
    post(gateway, json.dumps(body).encode(), extra)


@FUZZ
@given(document=json_values)
def test_any_json_document(gateway: ApiGateway, document: Any) -> None:
    post(gateway, json.dumps(document).encode(), {})


@FUZZ
@given(raw=st.binary(max_size=300) | st.text(max_size=300).map(
    lambda t: t.encode("utf-8", "surrogatepass")))
def test_raw_bytes(gateway: ApiGateway, raw: bytes) -> None:
    post(gateway, raw, {})


@FUZZ
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
       path=st.sampled_from(["/v1/chat/completions", "/v1/models", "/health", "/v1/", "/",
                             "/v1/completions", "/v1/chat/completions/../models"])
       | st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30).map(
           lambda p: "/" + p),
       body=st.none() | st.binary(max_size=50))
def test_other_routes_and_methods(gateway: ApiGateway, method: str, path: str,
                                  body: bytes | None) -> None:
    check(*gateway.request(method, path, body, AUTHORIZED))


def test_a_body_over_the_limit_is_413_in_openai_shape(gateway: ApiGateway) -> None:
    huge = json.dumps({"messages": [{"role": "user", "content": "x" * (2 << 20)}]}).encode()
    status, _, body = gateway.request("POST", "/v1/chat/completions", huge,
                                      {"Content-Type": "application/json", **AUTHORIZED})
    assert status == 413
    check(status, {}, body)


# -- regressions: found by fuzzing and probing ---------------------------------------------


def test_a_lone_surrogate_in_user_gets_an_answer(gateway: ApiGateway) -> None:
    body = b'{"messages": [{"role": "user", "content": "hi"}], "user": "\\ud800"}'
    status, headers, reply = gateway.request("POST", "/v1/chat/completions", body,
                                             {"Content-Type": "application/json", **AUTHORIZED})
    assert status == 200, reply
    check(status, headers, reply)


def test_a_lone_surrogate_in_content_reaches_the_model_as_valid_text(
    gateway: ApiGateway, model: Model,
) -> None:
    body = b'{"messages": [{"role": "user", "content": "broken \\ud83d string"}]}'
    status, headers, reply = gateway.request("POST", "/v1/chat/completions", body,
                                             {"Content-Type": "application/json", **AUTHORIZED})
    assert status == 200, reply
    check(status, headers, reply)
    assert any(r["messages"][-1].get("content") == "broken \ufffd string"
               for r in model.requests)


def test_deeply_nested_json_is_a_client_error(gateway: ApiGateway) -> None:
    body = b"[" * 100_000 + b"]" * 100_000
    status, headers, reply = gateway.request("POST", "/v1/chat/completions", body,
                                             {"Content-Type": "application/json", **AUTHORIZED})
    check(status, headers, reply)
    assert status == 400


def test_the_gateway_survived(gateway: ApiGateway, tmp_path: Path) -> None:
    status, headers, body = gateway.request("POST", "/v1/chat/completions", json.dumps(
        {"messages": [{"role": "user", "content": "still there?"}]}).encode(),
        {"Content-Type": "application/json", **AUTHORIZED})
    assert status == 200, body
    check(status, headers, body)
