"""A scripted OpenAI-compatible chat-completions server on loopback, for tests.

It answers ``POST /v1/chat/completions`` with the next scripted reply, plain or as
server-sent events when the request asks to stream (tool calls then arrive in fragments,
as real servers send them). It runs its own event loop in a daemon thread so that
synchronous code under test (the ``openai`` client inside the agent) can call it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200  # anything else: an OpenAI-shaped error with ``error``
    error: str = "scripted failure"
    finish_reason: str | None = None  # default: "tool_calls" with tool calls, else "stop"
    delay: float = 0.0  # seconds to wait before answering (a slow model)

    @property
    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


class FakeOpenAI:
    def __init__(self, *script: Reply) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.auth_headers: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeOpenAI:
        threading.Thread(target=self._loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def next_reply(self, body: dict[str, Any]) -> Reply:
        """The reply to the request ``body`` (already recorded in ``requests``): the next
        scripted one. Subclasses may answer by a rule instead."""
        if not self.script:
            return Reply(status=500, error="the fake server's script is exhausted")
        return self.script.pop(0)

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.auth_headers.append(request.headers.get("Authorization", ""))
        reply = self.next_reply(body)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            return _error(reply.status, reply.error)
        if body.get("stream"):
            return await _stream(request, body["model"], reply)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        return web.json_response({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish}],
            "usage": {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28},
        })


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "invalid_request_error", "param": None,
                   "code": None}}, status=status)


async def _stream(request: web.Request, model: str, reply: Reply) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)

    async def chunk(delta: dict[str, Any], finish: str | None = None,
                    usage: dict[str, int] | None = None) -> None:
        payload: dict[str, Any] = {
            "id": "chatcmpl-fake", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta or finish
            else [],
        }
        if usage is not None:
            payload["usage"] = usage
        await response.write(f"data: {json.dumps(payload)}\n\n".encode())

    await chunk({"role": "assistant", "content": ""})
    text = reply.content or ""
    for start in range(0, len(text), 5):
        await chunk({"content": text[start:start + 5]})
    for index, call in enumerate(reply.tool_calls):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        await chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": call["function"]["name"],
                                                  "arguments": arguments[:half]}}]})
        await chunk({"tool_calls": [{"index": index,
                                     "function": {"arguments": arguments[half:]}}]})
    await chunk({}, finish=reply.finish)
    await chunk({}, usage={"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28})
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


class NumberedAnswers(FakeOpenAI):
    """Answers every request with ``answer <n>`` (``n``: the requests so far), unless a test
    queued replies in ``script`` first."""

    def next_reply(self, body: dict[str, Any]) -> Reply:
        if self.script:
            return self.script.pop(0)
        return Reply(content=f"answer {len(self.requests)}")

    def received(self, text: str) -> list[dict[str, Any]]:
        """The messages of the one request whose last message says ``text``."""
        (seen,) = [r["messages"] for r in self.requests
                   if r["messages"][-1].get("content") == text]
        return list(seen)
