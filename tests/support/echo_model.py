"""A fake OpenAI endpoint that answers by rule, for real gateway processes with the real agent.

The rule looks at the request's last user message (what the model is sent, gateway notes
included): one containing ``hold`` waits until ``release()``; one containing ``long reply``
gets ``LONG_REPLY`` (over 5,000 characters, a code block longer than a Telegram message,
emoji); anything else gets ``echo: <the message>``. ``arrived`` lists every request's last user
message as it arrives (a held one too).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web
from support.fake_openai import FakeOpenAI, Reply

_CODE = "\n".join(f"    result_{i} = compute({i})  # step {i} ✅" for i in range(130))
LONG_REPLY = ("Here is the script you asked for 🙂\n\n```python\ndef main():\n" + _CODE
              + "\n```\n\n" + "That is all of it. " * 40)


def last_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    return content if isinstance(content, str) else str(content)


class EchoModel(FakeOpenAI):
    def __init__(self) -> None:
        super().__init__()
        self.arrived: list[str] = []
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def next_reply(self, body: dict[str, Any]) -> Reply:
        text = last_user_text(body)
        if "long reply" in text:
            return Reply(content=LONG_REPLY)
        return Reply(content=f"echo: {text}")

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        text = last_user_text(await request.json())
        self.arrived.append(text)
        if "hold" in text:
            for _ in range(6000):  # at most a minute
                if self._released.is_set():
                    break
                await asyncio.sleep(0.01)
        return await super()._complete(request)
