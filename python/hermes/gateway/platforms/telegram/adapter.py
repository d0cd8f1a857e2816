"""The Telegram adapter: updates in (long polling or a webhook), replies out.

Built on python-telegram-bot's ``Bot`` (typed Bot API methods and errors, asyncio on the
gateway's own event loop), without its ``Application``/``Updater``: their polling confirms an
update as soon as it is fetched, and this adapter confirms one only once its turn is answered
(``ledger``). Its webhook server is the gateway's aiohttp, not PTB's tornado one.

An update's life:

1. fetched (``getUpdates`` at the ledger's durable offset, or POSTed to the webhook) and
   claimed in the ledger; one already done (a redelivery after a restart) is skipped;
2. turned into a ``MessageEvent`` (``events``) and handed to the runner, which checks the
   allowlists before anything is stored, queues it behind a running turn of the same
   conversation and answers it (a message delivered again is answered from the transcript,
   ``hermes.gateway.redelivery``); the typing action is shown meanwhile;
3. the reply is split (``split``) and sent, threaded to the message, with flood control
   (429 ``retry_after``) honoured;
4. marked done and the ledger saved (fsync'd); only then may the offset move past it, with
   the next ``getUpdates`` (in webhook mode: the 200 answer to Telegram's POST).

While the gateway stops (``stop_receiving``) nothing new is fetched, and a message whose turn
never started is left unconfirmed rather than told "the gateway is shutting down": Telegram
sends it to the next process.

While any update is being handled, Telegram answers every ``getUpdates`` at once with it (it is
not confirmed yet), so the adapter polls every ``busy_poll_interval`` seconds instead of
holding a long poll, and again as soon as an update is done.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlparse

from aiohttp import web
from telegram import Bot, Message, ReplyParameters, Update
from telegram.error import (
    BadRequest,
    Conflict,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.warnings import PTBDeprecationWarning

from hermes.config import adapter_settings
from hermes.errors import ConfigError
from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.platforms.base import BasePlatformAdapter, MessageEvent, SendResult
from hermes.gateway.platforms.telegram.events import message_event
from hermes.gateway.platforms.telegram.ledger import UpdateLedger, ledger_path
from hermes.gateway.platforms.telegram.redact import SecretFilter
from hermes.gateway.platforms.telegram.split import split_message
from hermes.gateway.turn import STOPPING_NOTICE

logger = logging.getLogger(__name__)

#: The header Telegram sends the webhook secret in (``setWebhook``'s ``secret_token``).
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_ALLOWED_UPDATES = ["message", "channel_post"]
_REPLY_MODES = ("off", "first", "all")
_MAX_BACKOFF = 30.0
# PTB warns on every 429 (even raising one reads the int form) that ``retry_after`` will
# become a timedelta; ``_seconds`` takes both.
warnings.filterwarnings("ignore", message=r".*`retry_after` will be of type",
                        category=PTBDeprecationWarning)
_TOKEN_SHAPE = re.compile(r"\d+:[A-Za-z0-9_-]+")
#: Libraries whose log lines can quote a Bot API URL, which holds the token (httpx logs every
#: request at INFO).
_LIBRARIES = ("httpx", "httpcore", "telegram")


@dataclass(frozen=True)
class TelegramSettings:
    """``gateway.platforms.telegram.extra`` (environment: see ``hermes.gateway.platform_env``)."""

    #: The Bot API server, e.g. a local ``telegram-bot-api`` (default: api.telegram.org).
    base_url: str | None = None
    #: Without ``allowed_users`` the adapter refuses to start unless this is on.
    allow_all_users: bool = False
    #: In groups and topics, answer only messages that name the bot or reply to it.
    require_mention: bool = False
    #: Which parts of a reply are threaded to the message: "off", "first" or "all".
    reply_to_mode: str = "first"
    #: Set to receive updates by webhook (Telegram POSTs them) instead of long polling.
    webhook_url: str | None = None
    webhook_host: str = "0.0.0.0"
    webhook_port: int = 8443
    webhook_secret: str | None = field(default=None, repr=False)
    #: Seconds one long poll waits for news.
    poll_timeout: int = 25
    #: Seconds between polls while an update is being handled (see the module docstring).
    busy_poll_interval: float = 1.0
    #: Seconds between typing actions (Telegram shows one for about 5 s).
    typing_interval: float = 4.0
    #: Attempts per message part before a send is given up (flood waits included).
    send_attempts: int = 5


def telegram_settings(config: PlatformConfig) -> TelegramSettings:
    settings = adapter_settings(TelegramSettings, config.extra, where="gateway.platforms.telegram")
    if settings.reply_to_mode not in _REPLY_MODES:
        raise ConfigError(f"gateway.platforms.telegram: reply_to_mode must be one of "
                          f"{', '.join(_REPLY_MODES)} (TELEGRAM_REPLY_TO_MODE), "
                          f"got {settings.reply_to_mode!r}")
    if settings.webhook_url and not settings.webhook_secret:
        raise ConfigError("telegram webhook mode needs a secret: set TELEGRAM_WEBHOOK_SECRET "
                          "(e.g. `openssl rand -hex 32`) next to TELEGRAM_WEBHOOK_URL, or unset "
                          "the URL to use long polling")
    return settings


class TelegramAdapter(BasePlatformAdapter):
    def __init__(self, config: PlatformConfig, platform: Platform = Platform.TELEGRAM) -> None:
        super().__init__(config, platform)
        self.settings = telegram_settings(config)
        if not config.token:
            raise ConfigError("telegram is enabled but has no bot token: set TELEGRAM_BOT_TOKEN "
                              "(or gateway.platforms.telegram.token) to the token @BotFather gave")
        if config.allowed_users is None and not self.settings.allow_all_users:
            raise ConfigError(
                "telegram: anyone who finds the bot could drive the agent; set "
                "TELEGRAM_ALLOWED_USERS (or gateway.platforms.telegram.allowed_users) to the "
                "Telegram user ids allowed to use it, or TELEGRAM_ALLOW_ALL_USERS=true")
        if not _TOKEN_SHAPE.fullmatch(config.token):
            raise ConfigError("the Telegram bot token is malformed: it looks like "
                              "'123456789:AA...' (check TELEGRAM_BOT_TOKEN)")
        self._redactor = SecretFilter([config.token, self.settings.webhook_secret or ""])
        for watched in _loggers():
            watched.addFilter(self._redactor)
        base = (self.settings.base_url or "https://api.telegram.org").rstrip("/")
        self._bot = Bot(config.token, base_url=f"{base}/bot", base_file_url=f"{base}/file/bot")
        self._bot_id = int(config.token.split(":", 1)[0])
        self._username: str | None = None
        self._ledger: UpdateLedger | None = None
        self._stopping = False
        self._poller: asyncio.Task[None] | None = None
        self._webhook: web.AppRunner | None = None
        self._tasks: dict[int, asyncio.Task[bool]] = {}
        self._progress = asyncio.Event()

    # ----------------------------------------------------------------- lifecycle

    async def connect(self) -> bool:
        try:
            await self._bot.initialize()  # getMe
        except TelegramError as exc:
            if isinstance(exc, InvalidToken):  # its message quotes the token: not logged
                logger.error("Telegram refused the bot token (401 Unauthorized): check "
                             "TELEGRAM_BOT_TOKEN")
            else:
                logger.error("cannot reach the Telegram Bot API: %s", exc)
            await self.disconnect()  # the runner only disconnects adapters that connected
            return False
        self._username = self._bot.username
        webhook = bool(self.settings.webhook_url)
        self._ledger = UpdateLedger(ledger_path(self._bot_id), ordered=not webhook)
        try:
            if webhook:
                await self._start_webhook()
            else:
                # Updates queued while we were away are kept: they may be unanswered messages.
                await self._bot.delete_webhook(drop_pending_updates=False)
                self._poller = asyncio.ensure_future(self._poll())
        except (TelegramError, OSError) as exc:
            logger.error("cannot start receiving Telegram updates: %s", exc)
            await self.disconnect()
            return False
        logger.info("telegram: @%s receiving by %s", self._username,
                    "webhook" if webhook else "long polling")
        return True

    async def stop_receiving(self) -> None:
        self._stopping = True
        if self._poller is not None:
            # A long poll cut off here confirms nothing: what it would have returned stays
            # with Telegram.
            self._poller.cancel()

    async def disconnect(self) -> None:
        await self.stop_receiving()
        for task in list(self._tasks.values()):
            task.cancel()  # their turns are over or abandoned; Telegram redelivers them
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        if self._ledger is not None:
            await self._ledger.save()
            if self._poller is not None and self._ledger.offset:
                try:  # confirm what was done since the last poll
                    await self._bot.get_updates(offset=self._ledger.offset, limit=1, timeout=0)
                except TelegramError as exc:
                    logger.info("telegram: could not confirm the last updates (%s); they will "
                                "be recognised as done when redelivered", exc)
        if self._webhook is not None:
            await self._webhook.cleanup()
            self._webhook = None
        await self._bot.shutdown()
        for watched in _loggers():
            watched.removeFilter(self._redactor)

    # ----------------------------------------------------------------- receiving

    async def _poll(self) -> None:
        assert self._ledger is not None
        backoff = 1.0
        while not self._stopping:
            waiting = self._ledger.busy
            self._progress.clear()
            try:
                updates = await self._bot.get_updates(
                    offset=self._ledger.offset or None, allowed_updates=_ALLOWED_UPDATES,
                    timeout=0 if waiting else self.settings.poll_timeout)
            except RetryAfter as exc:
                wait = _seconds(exc)
                logger.warning("telegram: flood control, polling again in %.0fs", wait)
                await asyncio.sleep(wait)
                continue
            except InvalidToken:
                logger.error("Telegram refused the bot token (401 Unauthorized); polling stops")
                return
            except Conflict as exc:
                # Another process polls this bot, or a webhook is set for it.
                logger.error("telegram: %s; retrying in %.0fs", exc, _MAX_BACKOFF)
                await asyncio.sleep(_MAX_BACKOFF)
                continue
            except TelegramError as exc:  # network, 5xx, anything else: back off
                logger.warning("telegram: getUpdates failed (%s); retrying in %.0fs", exc,
                               backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)
                continue
            backoff = 1.0
            for update in updates:
                if self._ledger.begin(update.update_id):
                    self._start(update)
            if self._ledger.busy:
                try:
                    await asyncio.wait_for(self._progress.wait(),
                                           self.settings.busy_poll_interval)
                except asyncio.TimeoutError:
                    pass

    async def _start_webhook(self) -> None:
        assert self.settings.webhook_url is not None and self.settings.webhook_secret is not None
        app = web.Application()
        app.router.add_post(urlparse(self.settings.webhook_url).path or "/telegram",
                            self._on_webhook)
        self._webhook = web.AppRunner(app, access_log=None)
        await self._webhook.setup()
        await web.TCPSite(self._webhook, self.settings.webhook_host,
                          self.settings.webhook_port).start()
        await self._bot.set_webhook(self.settings.webhook_url,
                                    secret_token=self.settings.webhook_secret,
                                    allowed_updates=_ALLOWED_UPDATES, drop_pending_updates=False)

    async def _on_webhook(self, request: web.Request) -> web.Response:
        assert self._ledger is not None and self.settings.webhook_secret is not None
        offered = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(offered, self.settings.webhook_secret.encode()):
            logger.warning("telegram webhook: a request without the right secret token from %s",
                           request.remote)
            return web.json_response({"ok": False, "error": "wrong secret token"}, status=401)
        if self._stopping:  # Telegram retries later, by then to the next process
            return web.json_response({"ok": False, "error": "stopping"}, status=503)
        try:
            body = await request.json()
            update = Update.de_json(body, self._bot)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return web.json_response({"ok": False, "error": f"not a Telegram update: {exc}"},
                                     status=400)
        if self._ledger.begin(update.update_id):
            self._start(update)
        task = self._tasks.get(update.update_id)
        # The update's handling, not this HTTP exchange, decides: a sender that gave up
        # waiting does not cancel the turn.
        done = await asyncio.shield(task) if task is not None else True
        if not done:
            return web.json_response({"ok": False, "error": "stopping"}, status=503)
        return web.json_response({"ok": True})

    def _start(self, update: Update) -> None:
        task = asyncio.ensure_future(self._process(update))
        self._tasks[update.update_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(update.update_id, None))

    async def _process(self, update: Update) -> bool:
        """Handle one update; ``True`` once it is done (and durably recorded so)."""
        assert self._ledger is not None
        try:
            done = await self._answer(update)
        except asyncio.CancelledError:
            self._ledger.forget(update.update_id)
            raise
        except Exception:
            # A bug must not stall the update stream: the update counts as done.
            logger.exception("telegram: handling update %d failed", update.update_id)
            done = True
        if not done:
            self._ledger.forget(update.update_id)
            return False
        self._ledger.finish(update.update_id)
        await self._ledger.save()
        self._progress.set()
        return True

    async def _answer(self, update: Update) -> bool:
        """Answer the update's message; ``False`` to leave it to the next process."""
        message = update.message or update.channel_post
        if message is None:
            return True
        event = message_event(message, bot_id=self._bot_id, bot_username=self._username,
                              require_mention=self.settings.require_mention)
        if event is None:
            return True
        if self._stopping:
            return False
        # Created before the handler runs and cancelled right after: a message the runner
        # turns away at once (an unknown user) returns without yielding, so this task never
        # starts and such a sender sees no sign of the bot.
        typing = asyncio.ensure_future(self._keep_typing(event))
        try:
            reply = await self.dispatch(event)
        finally:
            typing.cancel()
        if reply == STOPPING_NOTICE and self._stopping:
            return False
        if reply:
            await self._reply(event, message, reply)
        return True

    async def _keep_typing(self, event: MessageEvent) -> None:
        thread = _thread(event.source.thread_id)
        while True:
            try:
                await self._bot.send_chat_action(event.source.chat_id, "typing",
                                                 message_thread_id=thread)
            except RetryAfter as exc:
                await asyncio.sleep(_seconds(exc))
                continue
            except TelegramError as exc:
                logger.debug("telegram: no typing action for %s: %s", event.source.chat_id, exc)
                return
            await asyncio.sleep(self.settings.typing_interval)

    # ----------------------------------------------------------------- sending

    async def _reply(self, event: MessageEvent, message: Message, reply: str) -> None:
        parts = split_message(reply)
        for index, part in enumerate(parts):
            threaded = self.settings.reply_to_mode == "all" or (
                self.settings.reply_to_mode == "first" and index == 0)
            result = await self._send_part(event.source.chat_id, part,
                                           thread=_send_thread(event.source.thread_id),
                                           reply_to=message.message_id if threaded else None)
            if not result.success:
                logger.error("telegram: could not send part %d/%d of the reply to message %s "
                             "in chat %s (%s); the reply is in the transcript", index + 1,
                             len(parts), event.message_id, event.source.chat_id, result.error)
                return

    async def send(self, chat_id: str, content: str, reply_to: str | None = None,
                   metadata: Mapping[str, Any] | None = None) -> SendResult:
        thread = _send_thread(str((metadata or {}).get("thread_id") or "") or None)
        result = SendResult(success=True)
        for index, part in enumerate(split_message(content)):
            result = await self._send_part(
                chat_id, part, thread=thread,
                reply_to=int(reply_to) if reply_to and reply_to.isdigit() and index == 0 else None)
            if not result.success:
                break
        return result

    async def _send_part(self, chat_id: str, text: str, *, thread: int | None,
                         reply_to: int | None) -> SendResult:
        """One message, retried on flood control (after ``retry_after``), network and server
        errors (backing off), and without its topic when Telegram no longer knows it."""
        backoff = 1.0
        error = "not attempted"
        for _ in range(max(self.settings.send_attempts, 1)):
            try:
                sent = await self._bot.send_message(
                    chat_id, text, message_thread_id=thread,
                    reply_parameters=ReplyParameters(message_id=reply_to,
                                                     allow_sending_without_reply=True)
                    if reply_to is not None else None)
                return SendResult(success=True, message_id=str(sent.message_id))
            except RetryAfter as exc:
                wait = _seconds(exc)
                logger.info("telegram: flood control, sending to %s again in %.0fs", chat_id,
                            wait)
                error = str(exc)
                await asyncio.sleep(wait)
            except BadRequest as exc:  # before NetworkError: PTB derives it from that
                if thread is not None and "thread not found" in exc.message.lower():
                    thread = None
                    continue
                return SendResult(success=False, error=str(exc))
            except NetworkError as exc:  # connection errors, timeouts, 5xx
                error = str(exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)
            except TelegramError as exc:  # blocked by the user, kicked from the group, ...
                return SendResult(success=False, error=str(exc))
        return SendResult(success=False, error=error)


#: A forum's "General" topic: typing actions name it, messages must not (Telegram refuses).
_GENERAL_TOPIC = 1


def _loggers() -> list[logging.Logger]:
    """This module's logger and every logger of the libraries (a filter applies to the logger
    it is added to, not to its children, and the libraries create theirs at import)."""
    names = [n for n in logging.root.manager.loggerDict
             if n.split(".", 1)[0] in _LIBRARIES]
    return [logging.getLogger(n) for n in (__name__, *_LIBRARIES, *names)]


def _seconds(flood: RetryAfter) -> float:
    """The wait a 429 asks for (PTB gives an int or a timedelta, depending on its settings)."""
    wait = flood.retry_after
    return wait.total_seconds() if isinstance(wait, timedelta) else float(wait)


def _thread(thread_id: str | None) -> int | None:
    """A topic id as the Bot API takes it."""
    return int(thread_id) if thread_id and thread_id.lstrip("-").isdigit() else None


def _send_thread(thread_id: str | None) -> int | None:
    thread = _thread(thread_id)
    return None if thread == _GENERAL_TOPIC else thread
