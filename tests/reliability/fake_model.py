"""A minimal OpenAI-compatible chat-completions server on loopback (its own thread and loop).

It answers in turn: a tool call (to a tool that does not exist, so the agent records the
error as the tool's result and asks again), then a plain answer, and every ``fail_every``-th
request with HTTP 500. It records each request's ``Authorization`` header so a test can show
which key reached it. Streaming requests get the same answers as server-sent events.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from aiohttp import web


class FakeModel:
    def __init__(self, fail_every: int = 0) -> None:
        self.fail_every = fail_every
        self.requests = 0
        self.authorizations: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeModel:
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

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests += 1
        self.authorizations.append(request.headers.get("Authorization", ""))
        if self.fail_every and self.requests % self.fail_every == 0:
            return web.json_response({"error": {"message": "scripted outage", "type": "server_error",
                                                 "param": None, "code": None}}, status=500)
        last = body["messages"][-1]
        message: dict[str, Any] = {"role": "assistant"}
        if last.get("role") == "user":
            message["content"] = None
            message["tool_calls"] = [{"id": f"call_{self.requests}", "type": "function",
                                      "function": {"name": "lookup", "arguments": "{}"}}]
        else:
            message["content"] = f"answer {self.requests}"
        finish = "tool_calls" if "tool_calls" in message else "stop"
        if body.get("stream"):
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            delta = dict(message)
            if "tool_calls" in delta:
                delta["tool_calls"] = [{"index": 0, **call} for call in delta["tool_calls"]]
            for payload in ({"delta": delta, "finish_reason": None},
                            {"delta": {}, "finish_reason": finish}):
                chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                         "created": int(time.time()), "model": body["model"],
                         "choices": [{"index": 0, **payload}]}
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        return web.json_response({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        })
