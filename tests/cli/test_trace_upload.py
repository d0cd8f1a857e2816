"""``hermes sessions export --format trace --upload`` run as a real process with the real
``huggingface_hub`` client, against a Hugging Face Hub served on loopback by this test
(``HF_ENDPOINT``): just the endpoints the client calls to upload one small file to a dataset
(``whoami-v2``, ``repos/create``, the dataset's ``preupload`` and ``commit``), each recorded.
What arrives is the redacted trace, in the user's ``hermes-traces`` dataset, private unless
``--public``; and every way it can fail is one line."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.cli import hermes, one_line_failure

from hermes.state import SessionDB

SECRET = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX0123"
TOKEN = "hf_" + "t" * 34
USER = "alice"
DATASET = f"{USER}/hermes-traces"


class Hub(ThreadingHTTPServer):
    """The Hub's upload endpoints, answering as the Hub does; ``requests`` records each
    (method, path, JSON or NDJSON body), ``repos`` the datasets created (name -> private)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _HubHandler)
        self.requests: list[tuple[str, str, Any]] = []
        self.repos: dict[str, bool] = {}
        self.refuse_token = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def commits(self) -> list[list[dict[str, Any]]]:
        return [body for method, path, body in self.requests
                if path == f"/api/datasets/{DATASET}/commit/main"]

    def uploaded(self) -> dict[str, str]:
        """The files committed, by path in the dataset, as text."""
        files = {}
        for commit in self.commits():
            for item in commit:
                if item["key"] == "file":
                    value = item["value"]
                    assert value["encoding"] == "base64"
                    files[value["path"]] = base64.b64decode(value["content"]).decode("utf-8")
        return files


class _HubHandler(BaseHTTPRequestHandler):
    server: Hub

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._record(None)
        if self.path != "/api/whoami-v2":
            return self._answer(404, {"error": "not served here"})
        if self.server.refuse_token or self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._answer(401, {"error": "Invalid credentials in Authorization header"})
        self._answer(200, {"type": "user", "name": USER, "fullname": "Alice", "orgs": []})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Type", "").startswith("application/x-ndjson"):
            body: Any = [json.loads(line) for line in raw.splitlines() if line.strip()]
        else:
            body = json.loads(raw or b"null")
        self._record(body)
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._answer(401, {"error": "Invalid credentials in Authorization header"})
        if self.path == "/api/repos/create":
            name = f"{body['organization'] or USER}/{body['name']}"
            if body.get("type") != "dataset" or name != DATASET:
                return self._answer(400, {"error": f"unexpected repo {name} {body.get('type')}"})
            if name in self.server.repos:
                return self._answer(409, {"error": "You already created this dataset repo",
                                          "url": f"{self.server.endpoint}/datasets/{name}"})
            # Clients name it "private": bool, or (newer ones) "visibility".
            private = body.get("private", body.get("visibility") == "private")
            self.server.repos[name] = bool(private)
            return self._answer(200, {"url": f"{self.server.endpoint}/datasets/{name}",
                                      "name": name})
        if self.path == f"/api/datasets/{DATASET}/preupload/main":
            return self._answer(200, {"files": [
                {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                for f in body["files"]]})
        if self.path == f"/api/datasets/{DATASET}/commit/main":
            return self._answer(200, {
                "success": True, "commitOid": "0" * 40, "pullRequestUrl": None,
                "commitUrl": f"{self.server.endpoint}/datasets/{DATASET}/commit/{'0' * 40}"})
        self._answer(404, {"error": "not served here"})

    def _record(self, body: Any) -> None:
        self.server.requests.append((self.command, self.path, body))

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def hub() -> Iterator[Hub]:
    server = Hub()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def store(hermes_home: Path) -> Path:
    """``old`` (a secret in its first message, a tool round), and ``newer``, active later."""
    path = hermes_home / "state.db"
    now = time.time()
    with SessionDB(path) as db:
        db.create_session("old", "cli", started_at=now - 3600, model="model-a")
        db.append_messages("old", [
            {"role": "user", "content": f"my key is {SECRET}", "timestamp": now - 3600},
            {"role": "assistant", "content": None, "timestamp": now - 3599, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "terminal", "arguments": '{"command": "ls"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "file.txt",
             "timestamp": now - 3598},
            {"role": "assistant", "content": "It is file.txt", "timestamp": now - 3597},
        ])
        db.create_session("newer", "cli", started_at=now - 7200)
        db.append_message("newer", "user", "the latest words", timestamp=now - 60)
    return path


def upload(home: Path, hub: Hub, *argv: str, **variables: str) -> Any:
    env = {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": TOKEN, "HF_HOME": str(home / "hf"),
           "HF_HUB_DISABLE_TELEMETRY": "1", **variables}
    return hermes(home, "sessions", "export", "--format", "trace", "--upload", *argv, **env)


def local_trace(home: Path, *argv: str) -> str:
    done = hermes(home, "sessions", "export", "--format", "trace", *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_trace_goes_redacted_to_the_users_private_dataset(hermes_home: Path, store: Path,
                                                            hub: Hub) -> None:
    done = upload(hermes_home, hub, "old")
    assert done.returncode == 0, done.stderr
    address = f"{hub.endpoint}/datasets/{DATASET}/blob/main/sessions/old.jsonl"
    assert done.stderr == f"uploaded the trace of session old to {address} (a private dataset)\n"
    assert hub.repos == {DATASET: True}
    uploaded = hub.uploaded()
    assert list(uploaded) == ["sessions/old.jsonl"]
    # What a local export writes, redacted.
    assert uploaded["sessions/old.jsonl"] == local_trace(hermes_home, "old")
    assert SECRET not in uploaded["sessions/old.jsonl"]
    assert "sk-proj-[REDACTED]" in uploaded["sessions/old.jsonl"]
    turns = [json.loads(line) for line in uploaded["sessions/old.jsonl"].splitlines()]
    assert [t["type"] for t in turns] == ["user", "assistant", "user", "assistant"]
    assert [r[:2] for r in hub.requests] == [
        ("GET", "/api/whoami-v2"), ("POST", "/api/repos/create"),
        ("POST", f"/api/datasets/{DATASET}/preupload/main"),
        ("POST", f"/api/datasets/{DATASET}/commit/main")]


def test_public_makes_a_public_dataset_and_a_second_upload_reuses_it(
        hermes_home: Path, store: Path, hub: Hub) -> None:
    done = upload(hermes_home, hub, "old", "--public")
    assert done.returncode == 0, done.stderr
    assert "(a public dataset)" in done.stderr and hub.repos == {DATASET: False}
    # Exists already (409): the client goes on and commits; --no-redact keeps the secret.
    done = upload(hermes_home, hub, "old", "--no-redact")
    assert done.returncode == 0, done.stderr
    assert len(hub.commits()) == 2 and SECRET in hub.uploaded()["sessions/old.jsonl"]


def test_a_bare_upload_sends_the_latest_session(hermes_home: Path, store: Path,
                                                hub: Hub) -> None:
    done = upload(hermes_home, hub)
    assert done.returncode == 0, done.stderr
    assert "exporting session newer, the latest by last activity" in done.stderr
    assert list(hub.uploaded()) == ["sessions/newer.jsonl"]
    assert "the latest words" in hub.uploaded()["sessions/newer.jsonl"]


def test_without_a_token_it_says_how_to_set_one(hermes_home: Path, store: Path,
                                                hub: Hub) -> None:
    line = one_line_failure(upload(hermes_home, hub, "old", HF_TOKEN=""))
    assert "no Hugging Face token" in line and "set HF_TOKEN" in line
    assert hub.requests == []
    # hermes-agent's other names for it are read too.
    done = upload(hermes_home, hub, "old", HF_TOKEN="", HUGGINGFACE_HUB_TOKEN=TOKEN)
    assert done.returncode == 0, done.stderr


def test_a_refused_token_uploads_nothing(hermes_home: Path, store: Path, hub: Hub) -> None:
    hub.refuse_token = True
    line = one_line_failure(upload(hermes_home, hub, "old"))
    assert "cannot check the token: the Hugging Face Hub answered 401" in line
    assert "HF_TOKEN" in line and hub.commits() == [] and hub.repos == {}


def test_a_hub_out_of_reach_is_one_line(hermes_home: Path, store: Path, hub: Hub) -> None:
    closed = Hub()  # bound, then closed: nothing listens on its port
    closed.server_close()
    line = one_line_failure(upload(hermes_home, hub, "old", HF_ENDPOINT=closed.endpoint))
    assert f"the Hugging Face Hub at {closed.endpoint} is out of reach" in line
    assert "HF_ENDPOINT" in line


def test_without_huggingface_hub_it_names_the_extra(hermes_home: Path, store: Path, hub: Hub,
                                                    tmp_path: Path) -> None:
    # A module of that name that fails to import, first on the path: as if not installed.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "huggingface_hub.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'huggingface_hub'\")\n")
    from support.processes import child_env

    path = f"{shadow}:{child_env(hermes_home)['PYTHONPATH']}"
    line = one_line_failure(upload(hermes_home, hub, "old", PYTHONPATH=path))
    assert "pip install 'hermes-gateway[upload]'" in line
    assert hub.requests == []


@pytest.mark.parametrize(("argv", "words"), [
    (["--format", "md", "--upload"], "--upload sends a session's trace"),
    (["--format", "trace", "--upload", "--source", "cli"], "sends one session's trace"),
    (["old", "--format", "trace", "--upload", "-o", "x.jsonl"], "drop -o"),
    (["old", "--format", "trace", "--public"], "--public is for --upload"),
])
def test_upload_flags_that_do_not_go_together(hermes_home: Path, store: Path,
                                              argv: list[str], words: str) -> None:
    line = one_line_failure(hermes(hermes_home, "sessions", "export", *argv), status=2)
    assert words in line
