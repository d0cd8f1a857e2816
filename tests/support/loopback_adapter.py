"""A loopback HTTP platform for tests of real gateway processes.

``POST /message`` with ``{"chat_id", "user_id", "text", "message_id"?, "chat_type"?}`` runs the
message through the runner and answers ``{"reply": ...}``. It binds 127.0.0.1 on a free port
and writes the port to ``extra.port_file`` once it listens. Messages the gateway pushes on its
own (shutdown notices) are appended to ``extra.outbox`` as JSON lines.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.platforms.base import BasePlatformAdapter, MessageEvent, SendResult
from hermes.gateway.session import SessionSource


class LoopbackAdapter(BasePlatformAdapter):
    def __init__(self, config: PlatformConfig, platform: Platform) -> None:
        super().__init__(config, platform)
        self._runner: web.AppRunner | None = None

    async def connect(self) -> bool:
        app = web.Application()
        app.router.add_post("/message", self._on_message)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        port_file = Path(self.config.extra["port_file"])
        partial = port_file.with_suffix(".tmp")
        partial.write_text(str(port))
        os.replace(partial, port_file)
        return True

    async def _on_message(self, request: web.Request) -> web.Response:
        body = await request.json()
        source = SessionSource(platform=self.platform, chat_id=str(body["chat_id"]),
                               chat_type=body.get("chat_type", "dm"),
                               user_id=str(body.get("user_id", body["chat_id"])))
        event = MessageEvent(text=body["text"], source=source,
                             message_id=body.get("message_id"))
        reply = await self.dispatch(event)
        return web.json_response({"reply": reply})

    async def disconnect(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def send(self, chat_id: str, content: str, reply_to: str | None = None,
                   metadata: Mapping[str, Any] | None = None) -> SendResult:
        outbox = self.config.extra.get("outbox")
        if outbox:
            with open(outbox, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"chat_id": chat_id, "content": content}) + "\n")
        return SendResult(success=True)
