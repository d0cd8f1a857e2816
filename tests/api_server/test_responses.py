"""``/v1/responses`` end to end with real processes: the ``openai`` client's
``client.responses`` → ``hermes gateway run`` → the agent's OpenAI backend → a scripted model
server on loopback that records what the model received.

* create (plain and streamed, the SDK parsing every event), ``usage`` present, retrieve,
  delete, ``store: false``;
* ``previous_response_id`` chains stored in state.db, surviving a gateway restart;
* a response belongs to the key that created it: another key's reads, deletes and chains
  get the same 404 as for an unknown id;
* ``/health/detailed`` with the store's counts.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from gateway_process import GatewayProcess
from support.fake_openai import NumberedAnswers as Model
from support.fake_openai import Reply, tool_call

from hermes.gateway.platforms.api_auth import SESSION_HEADER
from hermes.state import SessionDB

KEY = "responses-test-key"
OTHER_KEY = "responses-test-other-key"


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    with Model() as server:
        yield server


def start(home: Path, model: Model, key: str = KEY) -> GatewayProcess:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("model: {max_retries: 0, timeout: 5}\n")
    return GatewayProcess(home, "--base-url", model.url, "--model", "fake-model",
                          API_SERVER_KEY=key, OPENAI_API_KEY="sk-upstream").__enter__()


def stop(gateway: GatewayProcess) -> None:
    gateway.__exit__()
    assert gateway.returncode == 0, gateway.output()
    assert "Traceback" not in gateway.output(), gateway.output()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, model: Model) -> Iterator[GatewayProcess]:
    served = start(tmp_path_factory.mktemp("responses") / "home", model)
    yield served
    stop(served)


def client(gateway: GatewayProcess, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url, api_key=key, max_retries=0)


def test_create_retrieve_and_delete_with_the_openai_client(gateway: GatewayProcess,
                                                           model: Model) -> None:
    raw = client(gateway).responses.with_raw_response.create(
        model="hermes-agent", input="plain question", instructions="Answer briefly.")
    response = raw.parse()
    assert response.status == "completed"
    assert response.output_text == f"answer {len(model.requests)}"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.total_tokens) == (21, 7, 28)  # the model's own counts
    assert raw.headers[SESSION_HEADER].startswith("api-")
    seen = model.received("plain question")
    assert seen[0]["role"] == "system" and "Answer briefly." in seen[0]["content"]

    again = client(gateway).responses.retrieve(response.id)
    assert (again.id, again.output_text) == (response.id, response.output_text)
    client(gateway).responses.delete(response.id)
    with pytest.raises(openai.NotFoundError) as gone:
        client(gateway).responses.retrieve(response.id)
    assert gone.value.code == "response_not_found"
    with pytest.raises(openai.NotFoundError):
        client(gateway).responses.delete(response.id)


def test_streamed_events_parse_with_the_openai_client(gateway: GatewayProcess,
                                                      model: Model) -> None:
    events = list(client(gateway).responses.create(
        model="hermes-agent", input=[{"role": "user", "content": "streamed question"}],
        stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1  # the model's pieces, as they came
    assert [e.sequence_number for e in events] == list(range(len(events)))
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "".join(deltas) == f"answer {len(model.requests)}"
    assert completed.response.usage is not None and completed.response.usage.total_tokens == 28
    # A streamed response is stored as well.
    stored = client(gateway).responses.retrieve(completed.response.id)
    assert stored.output_text == completed.response.output_text


def test_an_answer_cut_at_the_length_limit_is_incomplete(gateway: GatewayProcess,
                                                         model: Model) -> None:
    model.script.append(Reply(content="cut sho", finish_reason="length"))
    response = client(gateway).responses.create(model="hermes-agent", input="say a lot")
    assert (response.status, response.output_text) == ("incomplete", "cut sho")
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


def test_store_false_is_neither_retrievable_nor_chainable(gateway: GatewayProcess) -> None:
    response = client(gateway).responses.create(model="hermes-agent", input="unstored",
                                                store=False)
    assert response.output_text.startswith("answer")
    with pytest.raises(openai.NotFoundError):
        client(gateway).responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError) as refused:
        client(gateway).responses.create(model="hermes-agent", input="next",
                                         previous_response_id=response.id)
    assert refused.value.param == "previous_response_id"


def test_a_chain_survives_a_restart_and_belongs_to_its_key(tmp_path: Path,
                                                           model: Model) -> None:
    home = tmp_path / "home"
    gateway = start(home, model)
    raw_first = client(gateway).responses.with_raw_response.create(model="hermes-agent",
                                                                   input="chain start: 41")
    raw_second = client(gateway).responses.with_raw_response.create(
        model="hermes-agent", input="plus one?", previous_response_id=raw_first.parse().id)
    first, second = raw_first.parse(), raw_second.parse()
    # The chain's turns are stored in one session, each message once.
    session_id = raw_first.headers[SESSION_HEADER]
    assert raw_second.headers[SESSION_HEADER] == session_id
    with SessionDB(home / "state.db") as db:
        rows = [(m["role"], m["content"]) for m in db.get_messages_as_conversation(session_id)
                if m["role"] != "session_meta"]
    assert rows == [("user", "chain start: 41"), ("assistant", first.output_text),
                    ("user", "plus one?"), ("assistant", second.output_text)]
    assert model.received("plus one?") == [
        {"role": "user", "content": "chain start: 41"},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "plus one?"}]
    stop(gateway)

    # Another key on the same state.db: every id of the first key is unknown to it.
    other = start(home, model, OTHER_KEY)
    try:
        for call in (lambda: client(other, OTHER_KEY).responses.retrieve(second.id),
                     lambda: client(other, OTHER_KEY).responses.delete(second.id),
                     lambda: client(other, OTHER_KEY).responses.create(
                         model="hermes-agent", input="steal", previous_response_id=second.id)):
            with pytest.raises(openai.NotFoundError) as refused:
                call()
            assert refused.value.code == "response_not_found"
    finally:
        stop(other)

    # The first key, after the restart, goes on with the chain from state.db.
    again = start(home, model)
    try:
        third = client(again).responses.create(model="hermes-agent", input="and again?",
                                               previous_response_id=second.id)
        assert third.previous_response_id == second.id
        assert model.received("and again?") == [
            {"role": "user", "content": "chain start: 41"},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "plus one?"},
            {"role": "assistant", "content": second.output_text},
            {"role": "user", "content": "and again?"}]
        assert client(again).responses.retrieve(second.id).output_text == second.output_text
    finally:
        stop(again)
    with SessionDB(home / "state.db") as db:
        assert db.get_response(third.id, "nobody") is None


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_failed_model_call_is_a_5xx_with_its_cause(gateway: GatewayProcess,
                                                            model: Model, stream: bool) -> None:
    model.script.append(Reply(status=401, error="invalid key"))
    responses = client(gateway).responses
    with pytest.raises(openai.APIStatusError) as raised:
        if stream:  # the failure comes before any text: a status, not an event
            list(responses.create(model="hermes-agent", input="fail streamed", stream=True))
        else:
            responses.create(model="hermes-agent", input="fail plain")
    assert raised.value.status_code == 502
    assert raised.value.body["code"] == "model_key_refused"  # type: ignore[index]
    assert "sk-upstream" not in str(raised.value.body)


def test_a_failure_after_text_was_streamed_is_an_error_event(gateway: GatewayProcess,
                                                             model: Model) -> None:
    model.script += [Reply(content="Let me check.", tool_calls=[tool_call("c1", "lookup", {})]),
                     Reply(status=500, error="kaput")]
    events = list(client(gateway).responses.create(model="hermes-agent", input="look it up",
                                                   stream=True))
    kinds = [e.type for e in events]
    assert kinds[-1] == "error" and "response.completed" not in kinds
    last = events[-1]
    assert last.type == "error" and last.code == "model_failed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == (
        "Let me check.")
    created = events[0]
    assert created.type == "response.created"
    with pytest.raises(openai.NotFoundError):  # a failed response is not stored
        client(gateway).responses.retrieve(created.response.id)


def test_bad_input_health_and_models(tmp_path: Path, model: Model) -> None:
    served = start(tmp_path / "home", model)
    try:
        for body, param in (({"input": []}, "input"), ({"input": 3}, "input"),
                            ({"input": [{"type": "function_call_output", "output": "x"}]},
                             "input[0].type"),
                            ({"input": "x", "instructions": 5}, "instructions"),
                            ({"input": [{"role": "assistant", "content": "last"}]}, "input")):
            status, answer = _post(served, "/v1/responses", body)
            assert status == 400, answer
            assert answer["error"]["param"] == param, answer
        status, answer = _post(served, "/v1/responses", {"input": "x", "model": "gpt-x"})
        assert (status, answer["error"]["code"]) == (404, "model_not_found")
        status, answer = _post(served, "/v1/responses", {"input": "x"}, key=None)
        assert status == 401, answer

        status, health = _get(served, "/health/detailed")
        assert status == 200, health
        assert health["status"] == "ok" and health["store"]["reachable"] is True
        assert health["store"]["sessions"] == 0 and health["store"]["responses"] == 0
        assert health["version"] and health["pid"] > 0
        assert _get(served, "/health/detailed", key=None)[0] == 401
        for open_path in ("/health", "/v1/health"):
            assert _get(served, open_path, key=None)[1]["version"] == health["version"]
        models = client(served).models.list().data
        assert [(m.id, m.root, m.parent) for m in models] == [  # type: ignore[attr-defined]
            ("hermes-agent", "hermes-agent", None), ("fake-model", "fake-model", None)]
    finally:
        stop(served)


def _request(gateway: GatewayProcess, method: str, path: str, body: object | None,
             key: str | None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = None if body is None else json.dumps(body).encode()
    url = gateway.url.removesuffix("/v1") + path
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _post(gateway: GatewayProcess, path: str, body: object,
          key: str | None = KEY) -> tuple[int, Any]:
    return _request(gateway, "POST", path, body, key)


def _get(gateway: GatewayProcess, path: str, key: str | None = KEY) -> tuple[int, Any]:
    return _request(gateway, "GET", path, None, key)
