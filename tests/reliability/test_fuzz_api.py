"""Fuzzing the api_server over real HTTP, with the real model path (issue 7 item 5; issue J).

One ``hermes gateway run`` process with a key, its agent's OpenAI backend pointed at a fake
model server on loopback (``support.fake_openai``: the ``openai`` client really encodes and
sends every request; an offline backend would not), which answers every request, now and
then with a tool call first. Hypothesis sends it chat bodies with every field mistyped in
turn, arbitrary JSON documents, raw bytes, odd headers (session ids, keys, content types),
``/v1/responses`` bodies (mistyped, and valid ones chaining from stored responses), the
sessions API's routes with odd ids, query strings and bodies, and other routes and methods.
Held for every request:

* never a 5xx;
* every 4xx is OpenAI's error shape, ``{"error": {"message", "type", "param", "code"}}``;
* a 200 is a chat completion or a response with ``usage``, or a session chat's answer (or,
  streamed, chunks ending in ``[DONE]``, or named events without an ``error``) carrying the
  model's answer, never a gateway notice or an error event;
* the model never received a string that is not valid UTF-8, and the gateway logged no
  traceback.

60 examples per strategy in the normal run, 400 with ``HERMES_FULL=1``
(``HERMES_API_EXAMPLES``).
"""

from __future__ import annotations

import json
import urllib.parse
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
        if body.startswith(b"event: "):
            check_named_events(body)
            return
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
    elif document.get("object") == "response" and "deleted" not in document:
        assert response_text(document).startswith("answer"), document
        assert document["usage"]["total_tokens"] > 0, document
    elif document.get("object") == "hermes.session.chat.completion":
        assert document["message"]["content"].startswith("answer"), document
        assert document["usage"]["total_tokens"] > 0, document


def response_text(document: dict[str, Any]) -> str:
    return "".join(part["text"] for item in document["output"] for part in item["content"])


def check_named_events(body: bytes) -> None:
    """A ``/v1/responses`` or session chat stream: events named by ``event:`` lines."""
    events = []
    for block in body.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines()
                      if line and not line.startswith(":"))
        if fields:
            events.append((fields["event"], json.loads(fields["data"])))
    names = [name for name, _ in events]
    assert "error" not in names, events
    if "response.completed" in names:
        document = dict(events)["response.completed"]["response"]
        # Streamed, the text is all the model said, the words before a tool call included.
        assert "answer" in response_text(document), document
        assert document["usage"]["total_tokens"] > 0, document
    else:
        assert names[-1] == "done", names
        assert "answer" in dict(events)["assistant.completed"]["content"], events


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
                             "/v1/completions", "/v1/chat/completions/../models",
                             "/health/detailed", "/v1/responses", "/v1/responses/resp_x",
                             "/api/sessions", "/api/sessions/x", "/api/sessions/x/messages",
                             "/api/sessions/x/fork", "/api/sessions/x/chat",
                             "/api/sessions/x/chat/stream"])
       | st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30).map(
           lambda p: "/" + p),
       body=st.none() | st.binary(max_size=50))
def test_other_routes_and_methods(gateway: ApiGateway, method: str, path: str,
                                  body: bytes | None) -> None:
    check(*gateway.request(method, path, body, AUTHORIZED))


# -- /v1/responses ---------------------------------------------------------------------------

items = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["message", "function_call_output"]) | json_values,
    "role": roles, "content": contents | st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["input_text", "output_text", "input_image"]) | json_values},
        optional={"text": texts(30) | json_values}), max_size=3)}) | json_values
responses_bodies = st.fixed_dictionaries(
    {"input": texts(60) | st.lists(items, max_size=4).map(list) | json_values},
    optional={"model": st.sampled_from(["hermes-agent", "gpt-4o"]) | json_values,
              "instructions": texts(40) | json_values, "stream": st.booleans() | json_values,
              "store": st.booleans() | json_values, "user": user_field | non_strings,
              "previous_response_id": texts(40) | json_values})
good_responses = st.fixed_dictionaries(
    {"input": user_text | st.lists(st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system"]), "content": user_text}),
        max_size=3).map(lambda history: history + [{"role": "user", "content": "new input"}])},
    optional={"instructions": texts(40) | st.none(), "stream": st.booleans() | st.none(),
              "store": st.booleans(), "user": user_field, "chain": st.booleans()})


@pytest.fixture(scope="module")
def stored_response(gateway: ApiGateway) -> str:
    status, _, body = gateway.request(
        "POST", "/v1/responses", json.dumps({"input": "the first of a chain"}).encode(),
        {"Content-Type": "application/json", **AUTHORIZED})
    assert status == 200, body
    response_id: str = json.loads(body)["id"]
    return response_id


@FUZZ
@given(body=responses_bodies, extra=headers)
def test_responses_bodies_with_mistyped_fields(gateway: ApiGateway, body: dict[str, Any],
                                               extra: dict[str, str]) -> None:
    check(*gateway.request("POST", "/v1/responses", json.dumps(body).encode(),
                           {"Content-Type": "application/json", **AUTHORIZED, **extra}))


@FUZZ
@given(body=good_responses)
def test_valid_responses_plain_streamed_and_chained(gateway: ApiGateway, stored_response: str,
                                                    body: dict[str, Any]) -> None:
    if body.pop("chain", False):
        body["previous_response_id"] = stored_response
    check(*gateway.request("POST", "/v1/responses", json.dumps(body).encode(),
                           {"Content-Type": "application/json", **AUTHORIZED}))


@FUZZ
@given(response_id=session_ids, method=st.sampled_from(["GET", "DELETE"]))
def test_retrieving_and_deleting_odd_response_ids(gateway: ApiGateway, response_id: str,
                                                  method: str) -> None:
    path = "/v1/responses/" + urllib.parse.quote(response_id, safe="")
    check(*gateway.request(method, path, None, AUTHORIZED))


# -- the sessions API --------------------------------------------------------------------------

session_routes = st.sampled_from([
    ("GET", ""), ("PATCH", ""), ("GET", "/messages"), ("POST", "/fork"), ("POST", "/chat"),
    ("POST", "/chat/stream")])
queries = st.fixed_dictionaries({}, optional={
    "limit": st.integers(-3, 300).map(str) | latin1, "offset": st.integers(-3, 10).map(str)
    | latin1, "user": latin1})
session_bodies = st.fixed_dictionaries({}, optional={
    "message": user_text | json_values, "input": texts(30) | json_values,
    "system_message": texts(30) | json_values, "instructions": json_values,
    "title": texts(40) | json_values, "end_reason": texts(20) | json_values,
    "id": session_ids | json_values, "system_prompt": json_values, "model": json_values,
}) | json_values


@pytest.fixture(scope="module")
def owned_session(gateway: ApiGateway) -> str:
    status, _, body = gateway.request("POST", "/api/sessions", b"{}",
                                      {"Content-Type": "application/json", **AUTHORIZED})
    assert status == 201, body
    session_id: str = json.loads(body)["session"]["id"]
    return session_id


@FUZZ
@given(route=session_routes, own=st.booleans(), other_id=session_ids, query=queries,
       body=session_bodies)
def test_session_routes_with_odd_ids_queries_and_bodies(
    gateway: ApiGateway, owned_session: str, route: tuple[str, str], own: bool, other_id: str,
    query: dict[str, str], body: Any,
) -> None:
    method, tail = route
    session_id = owned_session if own else urllib.parse.quote(other_id, safe="")
    path = f"/api/sessions/{session_id}{tail}"
    if query:
        path += "?" + urllib.parse.urlencode(query)
    check(*gateway.request(method, path, json.dumps(body).encode(),
                           {"Content-Type": "application/json", **AUTHORIZED}))


@FUZZ
@given(body=session_bodies, query=queries)
def test_creating_and_listing_sessions(gateway: ApiGateway, body: Any,
                                       query: dict[str, str]) -> None:
    sent = {"Content-Type": "application/json", **AUTHORIZED}
    check(*gateway.request("POST", "/api/sessions", json.dumps(body).encode(), sent))
    check(*gateway.request("GET", "/api/sessions?" + urllib.parse.urlencode(query), None,
                           AUTHORIZED))


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
