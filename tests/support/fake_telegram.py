"""A fake Telegram Bot API server on loopback, for driving the real Telegram adapter.

It serves ``/bot<token>/<method>`` like api.telegram.org (point the adapter's ``base_url`` at
``fake.url``) and keeps what Telegram keeps: a queue of updates that stay until confirmed
(``getUpdates`` with a higher offset, or a 2xx answer to a webhook POST), the messages the
bot sent, its chat actions and its webhook. Methods: ``getMe``, ``getUpdates`` (long poll,
offset semantics, 409 while a webhook is set), ``sendMessage`` (400 over 4096 UTF-16 units,
like Telegram), ``sendChatAction``, ``setWebhook``, ``deleteWebhook``. ``fail(method, ...)``
scripts error answers (a 429 with ``retry_after``, a 500, ...); ``on_send`` lets a test act
at the moment a message arrives (kill the gateway, freeze confirmations).

It runs its own event loop in a daemon thread, so tests can drive it from any thread; read
its state through the methods, which copy under a lock.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

BOT_USERNAME = "hermes_test_bot"
_INT_FIELDS = {"offset", "limit", "timeout", "message_thread_id"}
_JSON_FIELDS = {"reply_parameters", "allowed_updates", "drop_pending_updates"}
#: What ``on_send`` may answer: keep the message and answer 200, or lose it (no answer).
SEND, LOSE = "send", "lose"


@dataclass
class Failure:
    status: int
    description: str
    retry_after: int | None = None


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class FakeTelegram:
    def __init__(self, token: str) -> None:
        self.token = token
        self.bot = {"id": int(token.split(":")[0]), "is_bot": True, "first_name": "Hermes",
                    "username": BOT_USERNAME}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._pending: list[dict[str, Any]] = []  # unconfirmed updates, in id order
        self._update_ids = itertools.count(1000)
        self._message_ids = itertools.count(1)
        self._chats: dict[int, dict[str, Any]] = {}
        self._failures: dict[str, deque[Failure]] = {}
        self.sent: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []
        self.polls: list[int | None] = []  # the offset of every getUpdates
        self.refused: list[tuple[str, int, float]] = []  # (method, status, when)
        self.webhook: dict[str, Any] | None = None
        self.frozen = False  # confirm nothing (a cut network, from the bot's side)
        self.on_send: Callable[[dict[str, Any]], str] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeTelegram:
        threading.Thread(target=self._loop.run_forever, daemon=True).start()
        self._call(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)

    def _call(self, coroutine: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # ------------------------------------------------------------ what users do

    def chat(self, chat_id: int, kind: str = "private", *, forum: bool = False,
             title: str | None = None) -> dict[str, Any]:
        chat: dict[str, Any] = {"id": chat_id, "type": kind}
        if kind != "private":
            chat["title"] = title or f"chat {chat_id}"
        if forum:
            chat["is_forum"] = True
        with self._lock:
            self._chats[chat_id] = chat
        return chat

    def message(self, chat: dict[str, Any], text: str, *, user: int,
                thread: int | None = None, reply_to_bot: bool = False) -> dict[str, Any]:
        """A user writes ``text`` in ``chat``; returns the message (its ``message_id``)."""
        message: dict[str, Any] = {
            "message_id": next(self._message_ids), "date": int(time.time()), "chat": chat,
            "from": {"id": user, "is_bot": False, "first_name": f"user{user}"}, "text": text}
        if thread is not None:
            message["message_thread_id"] = thread
            message["is_topic_message"] = True
        if reply_to_bot:
            message["reply_to_message"] = {"message_id": 1, "date": int(time.time()),
                                           "chat": chat, "from": self.bot, "text": "earlier"}
        with self._lock:
            self._pending.append({"update_id": next(self._update_ids), "message": message})
        return message

    def fail(self, method: str, *failures: Failure) -> None:
        """Answer the next calls of ``method`` with these errors, in order."""
        with self._lock:
            self._failures.setdefault(method, deque()).extend(failures)

    # ------------------------------------------------------------ what tests read

    def pending_ids(self) -> list[int]:
        with self._lock:
            return [u["update_id"] for u in self._pending]

    def replies_to(self, message: dict[str, Any]) -> list[str]:
        """Texts the bot sent replying to ``message``."""
        with self._lock:
            return [s["text"] for s in self.sent if s["chat_id"] == message["chat"]["id"]
                    and s.get("reply_to") == message["message_id"]]

    def sent_to(self, chat_id: int) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(s) for s in self.sent if s["chat_id"] == chat_id]

    def snapshot(self, name: str) -> list[Any]:
        with self._lock:
            return list(getattr(self, name))

    async def wait_for(self, condition: Callable[[], object], timeout: float = 30.0,
                       what: str = "the condition") -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; sent: {self.snapshot('sent')}")
            await asyncio.sleep(0.02)

    def deliver_webhook(self) -> list[int]:
        """POST every pending update to the webhook, in order, as Telegram does; an update is
        confirmed by a 2xx answer. Returns the statuses."""
        return list(self._call(self._deliver_webhook(), timeout=120))

    async def _deliver_webhook(self) -> list[int]:
        assert self.webhook is not None
        statuses = []
        async with aiohttp.ClientSession() as http:
            for update in list(self._pending):
                headers = {"X-Telegram-Bot-Api-Secret-Token": self.webhook.get("secret_token", "")}
                async with http.post(self.webhook["url"], json=update, headers=headers) as answer:
                    statuses.append(answer.status)
                    if answer.status < 300:
                        with self._lock:
                            self._pending.remove(update)
        return statuses

    # ------------------------------------------------------------ the Bot API

    async def _api(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return _error(Failure(401, "Unauthorized"))
        method = request.match_info["method"]
        params = await _params(request)
        with self._lock:
            queued = self._failures.get(method)
            failure = queued.popleft() if queued else None
        if failure is not None:
            with self._lock:
                self.refused.append((method, failure.status, time.monotonic()))
            return _error(failure)
        handler = {"getMe": self._get_me, "getUpdates": self._get_updates,
                   "sendMessage": self._send_message, "sendChatAction": self._send_chat_action,
                   "setWebhook": self._set_webhook, "deleteWebhook": self._delete_webhook,
                   }.get(method)
        if handler is None:
            return _error(Failure(404, "Not Found: method not found"))
        return await handler(params)

    async def _get_me(self, params: dict[str, Any]) -> web.StreamResponse:
        return _ok(self.bot)

    async def _get_updates(self, params: dict[str, Any]) -> web.StreamResponse:
        if self.webhook is not None:
            return _error(Failure(409, "Conflict: can't use getUpdates method while webhook is "
                                       "active; use deleteWebhook to delete the webhook first"))
        offset = params.get("offset")
        with self._lock:
            self.polls.append(offset)
        wait = min(float(params.get("timeout") or 0), 30.0)
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                if not self.frozen:
                    if offset:
                        self._pending = [u for u in self._pending if u["update_id"] >= offset]
                    ready = [u for u in self._pending if not offset or u["update_id"] >= offset]
                    if ready:
                        return _ok(ready[:int(params.get("limit") or 100)])
            if time.monotonic() >= deadline:
                return _ok([])
            await asyncio.sleep(0.01)  # a long poll: look again

    async def _send_message(self, params: dict[str, Any]) -> web.StreamResponse:
        text = str(params.get("text") or "")
        if not text:
            return _error(Failure(400, "Bad Request: message text is empty"))
        if utf16_units(text) > 4096:
            return _error(Failure(400, "Bad Request: message is too long"))
        chat_id = int(params["chat_id"])
        reply = params.get("reply_parameters") or {}
        record = {"chat_id": chat_id, "text": text, "thread": params.get("message_thread_id"),
                  "reply_to": reply.get("message_id"), "message_id": next(self._message_ids),
                  "at": time.monotonic()}
        decision = self.on_send(record) if self.on_send is not None else SEND
        if decision == LOSE:
            await asyncio.sleep(3600)  # the sender died meanwhile; nothing is delivered
        with self._lock:
            self.sent.append(record)
            chat = self._chats.get(chat_id, {"id": chat_id, "type": "private"})
        return _ok({"message_id": record["message_id"], "date": int(time.time()), "chat": chat,
                    "from": self.bot, "text": text})

    async def _send_chat_action(self, params: dict[str, Any]) -> web.StreamResponse:
        with self._lock:
            self.actions.append({"chat_id": int(params["chat_id"]), "action": params["action"],
                                 "thread": params.get("message_thread_id"),
                                 "at": time.monotonic()})
        return _ok(True)

    async def _set_webhook(self, params: dict[str, Any]) -> web.StreamResponse:
        with self._lock:
            self.webhook = {"url": params["url"], "secret_token": params.get("secret_token", "")}
        return _ok(True)

    async def _delete_webhook(self, params: dict[str, Any]) -> web.StreamResponse:
        with self._lock:
            self.webhook = None
            if params.get("drop_pending_updates"):
                self._pending.clear()
        return _ok(True)


async def _params(request: web.Request) -> dict[str, Any]:
    """The call's parameters: a JSON body, or form fields as python-telegram-bot sends them (numbers and
    objects JSON-encoded, text as it is)."""
    if request.content_type == "application/json":
        body: dict[str, Any] = await request.json()
        return body
    params: dict[str, Any] = {}
    for key, value in (await request.post()).items():
        text = str(value)
        if key in _INT_FIELDS:
            params[key] = int(text)
        elif key in _JSON_FIELDS:
            params[key] = json.loads(text)
        else:
            params[key] = text
    return params


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(failure: Failure) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": failure.status,
                            "description": failure.description}
    if failure.retry_after is not None:
        body["parameters"] = {"retry_after": failure.retry_after}
    return web.json_response(body, status=failure.status)
