"""Malformed HTTP over raw sockets: whatever a client sends, the api_server answers with
OpenAI's error shape and a 4xx, logs at most one line for it (no traceback), and keeps
serving. Most of these never reach a route: aiohttp's parser refuses them, and aiohttp itself
would answer in plain text and log a traceback each time."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from hermes.gateway.config import PlatformConfig
from hermes.gateway.platforms.api_auth import SESSION_HEADER
from hermes.gateway.platforms.api_server import APIServerAdapter
from hermes.gateway.platforms.base import MessageEvent

GOOD_BODY = b'{"messages": [{"role": "user", "content": "hi"}]}'


@pytest_asyncio.fixture
async def port(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> AsyncIterator[int]:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    monkeypatch.delenv("API_SERVER_KEY", raising=False)
    adapter = APIServerAdapter(PlatformConfig(enabled=True, extra={"port": 0,
                                                                   "max_body_bytes": 4096}))

    async def never(event: MessageEvent) -> str | None:
        raise AssertionError(f"a malformed request reached the gateway: {event}")

    adapter.set_message_handler(never)
    assert await adapter.connect()
    assert adapter.port is not None
    try:
        yield adapter.port
    finally:
        await adapter.disconnect()


async def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` on a fresh connection; the status, headers and body of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (
            line.partition(":") for line in lines[1:] if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return status, headers, body
    finally:
        writer.close()


def server_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What the server logged: hermes's and aiohttp's loggers (not, say, a garbage-collected
    client of an earlier test complaining about its closed event loop)."""
    return [r for r in caplog.records if r.name.split(".")[0] in ("hermes", "aiohttp")]


def request(head: str, body: bytes = b"", method: str = "POST",
            path: str = "/v1/chat/completions") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: x\r\n{head}\r\n").encode("latin-1") + body


CASES = {
    "header line over 64 KiB": request("X-Big: " + "b" * 70_000 + "\r\n"),
    "header over 8 KiB, aiohttp's own limit": request("X-Big: " + "b" * 10_000 + "\r\n"
                                                      + "Content-Length: 3\r\n", b"{x}"),
    "session id header over 8 KiB": request(f"{SESSION_HEADER}: " + "s" * 10_000 + "\r\n"
                                            + f"Content-Length: {len(GOOD_BODY)}\r\n",
                                            GOOD_BODY),
    "bad request line": b"NOT AN HTTP REQUEST LINE\r\n\r\n",
    "bad method": b"G(E)T / HTTP/1.1\r\nHost: x\r\n\r\n",
    "bad version": b"GET / HTTP/7.3\r\nHost: x\r\n\r\n",
    "NUL in a header": request("X-A: a\x00b\r\n"),
    "CR in a header": request("X-A: a\rb\r\n"),
    "header without a colon": request("no colon here\r\n"),
    "negative Content-Length": request("Content-Length: -1\r\n"),
    "non-numeric Content-Length": request("Content-Length: ten\r\n"),
    "two Content-Lengths": request("Content-Length: 2\r\nContent-Length: 3\r\n", b"{}"),
    "declared body too large": request("Content-Length: 9999999\r\n", b"{"),
    "chunked body too large": request("Transfer-Encoding: chunked\r\n",
                                      b"1400\r\n" + b"x" * 0x1400 + b"\r\n0\r\n\r\n"),
    "bad chunk size": request("Transfer-Encoding: chunked\r\n", b"zz\r\nxx\r\n0\r\n\r\n"),
    "non-UTF-8 body": request("Content-Length: 4\r\n", b"\xff\xfe{}"),
}


@pytest.mark.parametrize("raw", CASES.values(), ids=CASES.keys())
@pytest.mark.asyncio
async def test_malformed_http_gets_an_openai_shaped_4xx_and_one_log_line(
    port: int, raw: bytes, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    status, headers, body = await exchange(port, raw)
    assert 400 <= status < 500, (status, body)
    assert headers["content-type"].startswith("application/json"), headers
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == "invalid_request_error"
    # At most one line from the server, at INFO or above, and never a traceback.
    logged = [r for r in server_records(caplog) if r.levelno >= logging.INFO]
    assert len(logged) <= 1, [r.getMessage() for r in logged]
    assert all(r.exc_info is None and "Traceback" not in r.getMessage()
               for r in server_records(caplog))
    # And the server goes on serving.
    status, _, body = await exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200 and json.loads(body)["status"] == "ok"


@pytest.mark.asyncio
async def test_a_parser_refusal_is_logged_as_one_warning_naming_the_client(
    port: int, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    status, _, body = await exchange(port, CASES["NUL in a header"])
    assert status == 400
    assert json.loads(body)["error"]["code"] == "malformed_request"
    (record,) = [r for r in server_records(caplog) if r.levelno >= logging.INFO]
    assert record.levelno == logging.WARNING
    assert "malformed HTTP from 127.0.0.1" in record.getMessage()
    assert "\n" not in record.getMessage()


@pytest.mark.asyncio
async def test_a_long_session_header_is_our_400_naming_the_header(port: int) -> None:
    status, _, body = await exchange(port, CASES["session id header over 8 KiB"])
    assert status == 400
    error = json.loads(body)["error"]
    assert error["param"] == SESSION_HEADER
    assert "too long (10000 characters; at most 128)" in error["message"]
