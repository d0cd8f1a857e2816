"""The webhook platform in a gateway runner: signed events in, replies to a callback server.

Real HTTP on loopback both ways; the agent is the scripted one (``echo: <prompt> ...``).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from support.events import SCRIPTED

from hermes.errors import ConfigError
from hermes.gateway.config import GatewayConfig, Platform, PlatformConfig
from hermes.gateway.platforms.webhook import WebhookAdapter, sign, signature_problem
from hermes.gateway.run import GatewayRunner
from hermes.state import SessionDB

pytestmark = pytest.mark.asyncio

SECRET = "route-secret-7c6b5a"


class Callback:
    """A callback receiver that fails its first ``failures`` calls with a 503."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[tuple[float, int, dict[str, str], bytes]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> Callback:
        app = web.Application()
        app.router.add_post("/reply", self._on_reply)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/reply"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def _on_reply(self, request: web.Request) -> web.Response:
        status = 503 if len(self.calls) < self.failures else 200
        self.calls.append((time.monotonic(), status, dict(request.headers), await request.read()))
        return web.json_response({}, status=status)


@pytest_asyncio.fixture
async def callback() -> AsyncIterator[Callback]:
    async with Callback(failures=2) as receiver:
        yield receiver


@pytest_asyncio.fixture
async def gateway(home: Path, callback: Callback) -> AsyncIterator[GatewayRunner]:
    extra = {"port": 0, "callback_backoff": 0.2, "routes": {"alerts": {
        "secret": SECRET, "prompt": "Alert {alert.name}: {alert.state}", "deliver": "callback",
        "deliver_extra": {"url": callback.url}}}}
    runner = GatewayRunner(GatewayConfig(
        platforms={Platform.WEBHOOK: PlatformConfig(enabled=True, extra=extra)},
        agent_factory=SCRIPTED))
    assert await runner.start()
    yield runner
    await runner.stop()


def _url(runner: GatewayRunner) -> str:
    adapter = runner.adapters[Platform.WEBHOOK]
    assert isinstance(adapter, WebhookAdapter)
    return f"http://127.0.0.1:{adapter.port}/webhooks/alerts"


def _db(runner: GatewayRunner) -> SessionDB:
    assert runner._session_db is not None
    return runner._session_db._db


async def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=body, headers={"Content-Type": "application/json",
                                                      **headers}) as answer:
            return answer.status, await answer.json()


async def test_bad_or_missing_signature_is_401_and_stores_nothing(gateway: GatewayRunner,
                                                                   callback: Callback) -> None:
    body = json.dumps({"alert": {"name": "disk", "state": "firing"}}).encode()
    stamp = str(int(time.time()))
    attempts = [
        {},
        {"X-Webhook-Signature-V2": sign("not-the-secret", body, stamp),
         "X-Webhook-Timestamp": stamp},
        {"X-Webhook-Signature-V2": sign(SECRET, body, "1000"), "X-Webhook-Timestamp": "1000"},
        {"X-Hub-Signature-256": "sha256=" + "0" * 64},
        {"X-Webhook-Signature": "é"},  # not even ASCII
    ]
    for headers in attempts:
        status, answer = await _post(_url(gateway), body, headers)
        assert status == 401, (headers, answer)
    await asyncio.sleep(0.3)  # give a wrongly started turn the time to show up
    assert _db(gateway).list_sessions() == [] and callback.calls == []


async def test_signed_event_runs_and_the_reply_survives_two_failed_callbacks(
        gateway: GatewayRunner, callback: Callback) -> None:
    body = json.dumps({"alert": {"name": "disk", "state": "firing"}}).encode()
    stamp = str(int(time.time()))
    status, answer = await _post(_url(gateway), body, {
        "X-Webhook-Signature-V2": sign(SECRET, body, stamp), "X-Webhook-Timestamp": stamp,
        "X-Request-ID": "delivery-1"})
    assert (status, answer["status"], answer["delivery_id"]) == (202, "accepted", "delivery-1")
    for _ in range(500):
        if any(code == 200 for _, code, _, _ in callback.calls):
            break
        await asyncio.sleep(0.02)
    assert [code for _, code, _, _ in callback.calls] == [503, 503, 200]
    times = [at for at, _, _, _ in callback.calls]
    assert times[2] - times[1] >= times[1] - times[0] >= 0.2  # backing off, doubling
    _, _, headers, reply = callback.calls[-1]
    assert signature_problem(headers, reply, SECRET) is None  # signed for the receiver
    assert json.loads(reply) == {"delivery_id": "delivery-1", "route": "alerts",
                                 "event_type": "unknown",
                                 "content": "echo: Alert disk: firing [history=0]"}
    [session] = _db(gateway).list_sessions()
    users = [m for m in _db(gateway).get_messages(session["id"]) if m["role"] == "user"]
    assert [(m["content"], m["platform_message_id"]) for m in users] == [
        ("Alert disk: firing", "delivery-1")]

    # The sender retries the same delivery: not run again.
    status, answer = await _post(_url(gateway), body, {
        "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET.encode(), body,
                                                    hashlib.sha256).hexdigest(),
        "X-Request-ID": "delivery-1"})
    assert (status, answer["status"]) == (200, "duplicate")
    assert len(callback.calls) == 3


async def test_routes_need_a_secret(home: Path) -> None:
    with pytest.raises(ConfigError, match="no HMAC secret"):
        WebhookAdapter(PlatformConfig(enabled=True, extra={"routes": {"a": {}}}),
                       Platform.WEBHOOK)
    with pytest.raises(ConfigError, match="non-loopback"):
        WebhookAdapter(PlatformConfig(enabled=True, extra={
            "host": "0.0.0.0", "routes": {"a": {"secret": "INSECURE_NO_AUTH"}}}),
            Platform.WEBHOOK)
    with pytest.raises(ConfigError, match="deliver_extra.url"):
        WebhookAdapter(PlatformConfig(enabled=True, extra={
            "secret": "s", "routes": {"a": {"deliver": "callback"}}}), Platform.WEBHOOK)
