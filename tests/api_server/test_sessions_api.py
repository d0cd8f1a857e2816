"""hermes-agent's sessions REST API, ``curl``-style: raw HTTP (``urllib``) against a real
``hermes gateway run`` whose agent talks to a scripted model server on loopback.

Every route (list, create, get, patch, delete, messages paged, fork, chat, chat/stream), the
key (401 without it, 403 on a server without one) and who sees what: a caller sees its own
api_server sessions only, and another key's session id is the same 404 as an unknown one.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_process import GatewayProcess
from support.fake_openai import NumberedAnswers, Reply, tool_call

from hermes.gateway.platforms.api_auth import SESSION_HEADER
from hermes.state import SessionDB

KEY = "sessions-test-key"
OTHER_KEY = "sessions-test-other-key"


class Model(NumberedAnswers):
    def received(self, text: str) -> list[dict[str, Any]]:
        return [m for m in super().received(text) if m["role"] != "system"]


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    with Model() as server:
        yield server


def start(home: Path, model: Model, **variables: str) -> GatewayProcess:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("model: {max_retries: 0, timeout: 5}\n")
    return GatewayProcess(home, "--base-url", model.url, "--model", "fake-model",
                          OPENAI_API_KEY="sk-upstream", **variables).__enter__()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sessions") / "home"


@pytest.fixture(scope="module")
def gateway(home: Path, model: Model) -> Iterator[GatewayProcess]:
    served = start(home, model, API_SERVER_KEY=KEY)
    yield served
    served.__exit__()
    assert served.returncode == 0, served.output()
    assert "Traceback" not in served.output(), served.output()


class Answer:
    def __init__(self, status: int, headers: dict[str, str], raw: bytes) -> None:
        self.status = status
        self.headers = headers
        self.raw = raw

    @property
    def json(self) -> Any:
        return json.loads(self.raw)

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        """Server-sent events as ``(event name, data)``."""
        found = []
        for block in self.raw.decode().split("\n\n"):
            lines = dict(line.split(": ", 1) for line in block.splitlines()
                         if line and not line.startswith(":"))
            if "event" in lines:
                found.append((lines["event"], json.loads(lines["data"])))
        return found


def call(gateway: GatewayProcess, method: str, path: str, body: object | None = None,
         key: str | None = KEY) -> Answer:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(gateway.url.removesuffix("/v1") + path, data=data,
                                     method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return Answer(answer.status, dict(answer.headers), answer.read())
    except urllib.error.HTTPError as error:
        return Answer(error.code, dict(error.headers), error.read())


def create(gateway: GatewayProcess, body: dict[str, Any] | None = None,
           key: str = KEY) -> dict[str, Any]:
    answer = call(gateway, "POST", "/api/sessions", body or {}, key)
    assert answer.status == 201, answer.raw
    assert answer.json["object"] == "hermes.session"
    session: dict[str, Any] = answer.json["session"]
    return session


def test_create_get_list_and_page(gateway: GatewayProcess) -> None:
    session = create(gateway, {"title": "first one", "system_prompt": "secret prompt"})
    assert session["title"] == "first one" and session["source"] == "api_server"
    assert session["has_system_prompt"] is True and "system_prompt" not in session
    assert call(gateway, "GET", f"/api/sessions/{session['id']}").json["session"] == session

    more = [create(gateway)["id"] for _ in range(2)]
    listed = call(gateway, "GET", "/api/sessions?limit=2")
    assert listed.status == 200
    page = listed.json
    assert (page["object"], page["limit"], page["offset"], page["has_more"]) == (
        "list", 2, 0, True)
    assert [s["id"] for s in page["data"]] == more[::-1]  # newest first
    rest = call(gateway, "GET", "/api/sessions?limit=2&offset=2").json
    assert session["id"] in [s["id"] for s in rest["data"]]

    taken = call(gateway, "POST", "/api/sessions", {"id": session["id"]})
    assert (taken.status, taken.json["error"]["code"]) == (409, "session_exists")
    dup = call(gateway, "POST", "/api/sessions", {"title": "first one"})
    assert (dup.status, dup.json["error"]["param"]) == (409, "title")
    bad = call(gateway, "POST", "/api/sessions", {"id": "no spaces allowed"})
    assert (bad.status, bad.json["error"]["code"]) == (400, "invalid_session_id")
    assert call(gateway, "GET", "/api/sessions?limit=-1").status == 400


def test_chat_continues_the_stored_session_and_messages_are_paged(
    gateway: GatewayProcess, model: Model,
) -> None:
    session_id = create(gateway)["id"]
    first = call(gateway, "POST", f"/api/sessions/{session_id}/chat",
                 {"message": "hello there"})
    assert first.status == 200, first.raw
    assert first.headers[SESSION_HEADER] == session_id
    reply = first.json
    assert reply["object"] == "hermes.session.chat.completion"
    assert reply["session_id"] == session_id
    assert reply["message"]["content"].startswith("answer")
    assert reply["usage"] == {"input_tokens": 21, "output_tokens": 7, "total_tokens": 28}

    second = call(gateway, "POST", f"/api/sessions/{session_id}/chat",
                  {"input": "and then?"}).json
    assert model.received("and then?") == [
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": reply["message"]["content"]},
        {"role": "user", "content": "and then?"}]

    messages = call(gateway, "GET", f"/api/sessions/{session_id}/messages").json
    assert messages["session_id"] == session_id and messages["has_more"] is False
    assert [(m["role"], m["content"]) for m in messages["data"]] == [
        ("user", "hello there"), ("assistant", reply["message"]["content"]),
        ("user", "and then?"), ("assistant", second["message"]["content"])]
    page = call(gateway, "GET", f"/api/sessions/{session_id}/messages?limit=1&offset=1").json
    assert [m["content"] for m in page["data"]] == [reply["message"]["content"]]
    assert page["has_more"] is True

    missing = call(gateway, "POST", f"/api/sessions/{session_id}/chat", {"message": " "})
    assert (missing.status, missing.json["error"]["param"]) == (400, "message")


def test_chat_stream_sends_hermes_agents_events(gateway: GatewayProcess) -> None:
    session_id = create(gateway)["id"]
    answer = call(gateway, "POST", f"/api/sessions/{session_id}/chat/stream",
                  {"message": "stream please"})
    assert answer.status == 200, answer.raw
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    events = answer.events()
    names = [name for name, _ in events]
    assert names[:2] == ["run.started", "message.started"]
    assert names[-3:] == ["assistant.completed", "run.completed", "done"]
    deltas = [data["delta"] for name, data in events if name == "assistant.delta"]
    assert len(deltas) > 1
    completed = dict(events)["assistant.completed"]
    assert completed["content"] == "".join(deltas) and completed["content"].startswith("answer")
    assert dict(events)["run.completed"]["usage"]["total_tokens"] == 28
    assert [data["seq"] for _, data in events] == list(range(1, len(events) + 1))
    assert {data["session_id"] for _, data in events} == {session_id}


def test_a_failed_model_call_is_a_5xx_or_an_error_event(gateway: GatewayProcess,
                                                       model: Model) -> None:
    session_id = create(gateway)["id"]
    model.script.append(Reply(status=401, error="invalid key"))
    failed = call(gateway, "POST", f"/api/sessions/{session_id}/chat", {"message": "fail"})
    assert (failed.status, failed.json["error"]["code"]) == (502, "model_key_refused")

    model.script += [Reply(content="Let me check.", tool_calls=[tool_call("c1", "lookup", {})]),
                     Reply(status=500, error="kaput")]
    answer = call(gateway, "POST", f"/api/sessions/{session_id}/chat/stream",
                  {"message": "look it up"})
    assert answer.status == 200
    names = [name for name, _ in answer.events()]
    assert names[-2:] == ["error", "done"] and "run.completed" not in names
    assert dict(answer.events())["error"]["code"] == "model_failed"


def test_patch_fork_and_delete(gateway: GatewayProcess, home: Path) -> None:
    session_id = create(gateway, {"title": "to patch"})["id"]
    call(gateway, "POST", f"/api/sessions/{session_id}/chat", {"message": "remember 7"})
    renamed = call(gateway, "PATCH", f"/api/sessions/{session_id}", {"title": "renamed"})
    assert renamed.json["session"]["title"] == "renamed"
    refused = call(gateway, "PATCH", f"/api/sessions/{session_id}", {"model": "x"})
    assert (refused.status, refused.json["error"]["code"]) == (400,
                                                               "unsupported_session_field")

    fork = call(gateway, "POST", f"/api/sessions/{session_id}/fork", {"title": "the fork"})
    assert fork.status == 201, fork.raw
    forked = fork.json["session"]
    assert forked["parent_session_id"] == session_id and forked["title"] == "the fork"
    original = call(gateway, "GET", f"/api/sessions/{session_id}").json["session"]
    assert original["end_reason"] == "branched"

    def contents(sid: str) -> list[str]:
        page = call(gateway, "GET", f"/api/sessions/{sid}/messages").json
        return [m["content"] for m in page["data"]]

    assert contents(forked["id"]) == contents(session_id)
    call(gateway, "POST", f"/api/sessions/{forked['id']}/chat", {"message": "fork only"})
    assert "fork only" in contents(forked["id"]) and "fork only" not in contents(session_id)

    ended = call(gateway, "PATCH", f"/api/sessions/{forked['id']}", {"end_reason": "done"})
    assert ended.json["session"]["end_reason"] == "done"

    deleted = call(gateway, "DELETE", f"/api/sessions/{session_id}")
    assert deleted.json == {"object": "hermes.session.deleted", "id": session_id,
                            "deleted": True}
    for method, path, body in (("GET", "", None), ("GET", "/messages", None),
                               ("POST", "/chat", {"message": "still there?"}),
                               ("DELETE", "", None)):
        gone = call(gateway, method, f"/api/sessions/{session_id}{path}", body)
        assert (gone.status, gone.json["error"]["code"]) == (404, "session_not_found"), path
    with SessionDB(home / "state.db") as db:
        assert db.get_session(session_id) is None and not db.get_messages(session_id)
        assert (db.get_session(forked["id"]) or {}).get("parent_session_id") is None


def test_a_chat_completions_conversation_is_listed_for_its_caller(gateway: GatewayProcess) -> None:
    reply = call(gateway, "POST", "/v1/chat/completions",
                 {"messages": [{"role": "user", "content": "listed?"}]})
    session_id = reply.headers[SESSION_HEADER]
    listed = call(gateway, "GET", "/api/sessions?limit=200").json
    assert session_id in [s["id"] for s in listed["data"]]
    # The same key with a 'user' is another caller.
    assert call(gateway, "GET", f"/api/sessions/{session_id}?user=bob").status == 404
    bobs = call(gateway, "POST", "/api/sessions?user=bob", {})
    assert bobs.status == 201
    bob_id = bobs.json["session"]["id"]
    assert call(gateway, "GET", f"/api/sessions/{bob_id}").status == 404
    assert call(gateway, "GET", f"/api/sessions/{bob_id}?user=bob").status == 200


def test_a_deleted_conversation_resent_by_a_ui_is_stored_again_whole(
    gateway: GatewayProcess, home: Path,
) -> None:
    history = [{"role": "user", "content": "to be deleted"}]
    first = call(gateway, "POST", "/v1/chat/completions", {"messages": history})
    session_id = first.headers[SESSION_HEADER]
    history.append({"role": "assistant",
                    "content": first.json["choices"][0]["message"]["content"]})
    assert call(gateway, "DELETE", f"/api/sessions/{session_id}").status == 200

    history.append({"role": "user", "content": "after the deletion"})
    again = call(gateway, "POST", "/v1/chat/completions", {"messages": history})
    assert again.headers[SESSION_HEADER] == session_id  # the same fingerprint
    with SessionDB(home / "state.db") as db:
        rows = [(m["role"], m["content"]) for m in db.get_messages_as_conversation(session_id)
                if m["role"] != "session_meta"]
    assert rows == [(m["role"], m["content"]) for m in history] + [
        ("assistant", again.json["choices"][0]["message"]["content"])]


def test_keys_decide_who_sees_what(gateway: GatewayProcess, home: Path, model: Model,
                                   tmp_path: Path) -> None:
    mine = create(gateway)["id"]
    call(gateway, "POST", f"/api/sessions/{mine}/chat", {"message": "my password is hunter2"})
    assert call(gateway, "GET", "/api/sessions", key=None).status == 401
    assert call(gateway, "GET", "/api/sessions", key="wrong").status == 401

    # A second gateway on the same state.db with another key: none of the first key's
    # sessions exist for it.
    other = start(home, model, API_SERVER_KEY=OTHER_KEY)
    try:
        listed = call(other, "GET", "/api/sessions?limit=200", key=OTHER_KEY).json
        assert listed["data"] == []
        for method, path, body in (("GET", "", None), ("GET", "/messages", None),
                                   ("PATCH", "", {"title": "mine now"}),
                                   ("POST", "/fork", {}),
                                   ("POST", "/chat", {"message": "what was the password?"}),
                                   ("DELETE", "", None)):
            answer = call(other, method, f"/api/sessions/{mine}{path}", body, key=OTHER_KEY)
            assert (answer.status, answer.json["error"]["code"]) == (
                404, "session_not_found"), (method, path, answer.raw)
        assert not any("what was the password?" in json.dumps(r) for r in model.requests)
    finally:
        other.__exit__()
    assert call(gateway, "GET", f"/api/sessions/{mine}").status == 200

    # Without a key configured the API is refused: transcripts need an authenticated caller.
    keyless = start(tmp_path / "keyless", model)
    try:
        answer = call(keyless, "GET", "/api/sessions", key=None)
        assert answer.status == 403, answer.raw
        assert answer.json["error"]["type"] == "permission_error"
    finally:
        keyless.__exit__()
