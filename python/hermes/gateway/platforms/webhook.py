"""The webhook platform: signed JSON events in, the agent's reply POSTed to a callback URL.

As hermes-agent's webhook platform: ``POST /webhooks/<route>`` takes an event (GitHub, GitLab,
a monitoring system, another program), checks its HMAC-SHA256 signature, renders the route's
prompt from the payload, answers ``202 Accepted`` at once and runs the turn in the background;
the reply goes where the route says (``deliver``). ``GET /health`` answers without checks.

Settings, ``gateway.platforms.webhook.extra`` (environment: ``WEBHOOK_ENABLED``,
``WEBHOOK_PORT``, ``WEBHOOK_SECRET``)::

    host: 127.0.0.1          # 0.0.0.0 to take events from other machines
    port: 8644
    secret: ...              # for routes without their own
    max_body_bytes: 1048576
    rate_limit: 30           # accepted events per route and minute
    callback_attempts: 5     # per reply, on connection errors, timeouts, 429 and 5xx
    callback_backoff: 1.0    # seconds before the second attempt, doubling after
    callback_timeout: 10.0   # seconds per attempt
    routes:
      github:
        secret: ...
        events: [pull_request]           # optional filter (X-GitHub-Event, payload "type")
        prompt: "Review {pull_request.title}: {pull_request.html_url}"
        deliver: callback                # or "log"
        deliver_extra: {url: "https://ci.example/hooks/hermes"}

``prompt`` and the ``deliver_extra`` values are templates: ``{a.b}`` is the payload's
``a.b``, ``{event_type}`` the event, ``{__raw__}`` the whole payload as JSON; without a
prompt the agent gets the event and its payload.

Signatures (the first header present decides; a missing or wrong one is ``401`` and nothing
is stored or run):

* ``X-Webhook-Signature-V2``: hex HMAC-SHA256 of ``<X-Webhook-Timestamp>.<body>``; the
  timestamp (Unix seconds) must be within 5 minutes;
* ``X-Hub-Signature-256``: ``sha256=`` + hex HMAC-SHA256 of the body (GitHub);
* ``X-Webhook-Signature``: hex HMAC-SHA256 of the body (legacy: it can be replayed; logged).

The secret ``INSECURE_NO_AUTH`` turns the check off, on a loopback host only.

Each delivery is its own conversation (``webhook:<route>:<delivery id>``), the delivery id
being ``X-GitHub-Delivery``, ``X-Request-ID`` or ``X-Webhook-Delivery`` when the sender gives
one. A delivery id seen in the last hour is answered ``200 duplicate`` and not run again.

The callback is a ``POST`` of ``{"delivery_id", "route", "event_type", "content"}``, signed
the same way (``X-Webhook-Signature-V2`` with the route's secret, ``X-Webhook-Timestamp``),
retried with backoff on connection errors, timeouts, ``429`` (its ``Retry-After`` honoured)
and ``5xx``; any other answer ends the attempts.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from hermes.config import adapter_settings
from hermes.errors import ConfigError
from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.platforms.api_auth import is_loopback
from hermes.gateway.platforms.base import BasePlatformAdapter, MessageEvent, SendResult
from hermes.gateway.session import SessionSource

logger = logging.getLogger(__name__)

INSECURE_NO_AUTH = "INSECURE_NO_AUTH"
SIGNATURE_V2_HEADER = "X-Webhook-Signature-V2"
TIMESTAMP_HEADER = "X-Webhook-Timestamp"
SIGNATURE_V1_HEADER = "X-Webhook-Signature"
GITHUB_SIGNATURE_HEADER = "X-Hub-Signature-256"
_DELIVERY_HEADERS = ("X-GitHub-Delivery", "X-Request-ID", "X-Webhook-Delivery")
_REPLAY_WINDOW = 300
_SEEN_TTL = 3600.0
_RATE_WINDOW = 60.0
_DELIVER_TYPES = ("callback", "log")
_PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_.]+)\}")


@dataclass(frozen=True)
class WebhookSettings:
    host: str = "127.0.0.1"
    port: int = 8644
    secret: str | None = field(default=None, repr=False)
    max_body_bytes: int = 1024 * 1024
    rate_limit: int = 30
    callback_attempts: int = 5
    callback_backoff: float = 1.0
    callback_timeout: float = 10.0


@dataclass(frozen=True)
class Route:
    name: str
    secret: str = field(repr=False)
    events: tuple[str, ...]
    prompt: str | None
    deliver: str
    deliver_extra: Mapping[str, Any]


@dataclass(frozen=True)
class Delivery:
    """Where one event's reply goes."""

    route: Route
    delivery_id: str
    event_type: str
    target: Mapping[str, Any]  # deliver_extra, rendered from this event's payload


def webhook_settings(config: PlatformConfig) -> tuple[WebhookSettings, dict[str, Route]]:
    extra = dict(config.extra)
    raw_routes = extra.pop("routes", None) or {}
    where = "gateway.platforms.webhook"
    settings = adapter_settings(WebhookSettings, extra, where=where)
    if not isinstance(raw_routes, dict) or not raw_routes:
        raise ConfigError(f"{where}: extra.routes must name at least one route, e.g. "
                          "routes: {alerts: {secret: ..., deliver: callback, "
                          "deliver_extra: {url: ...}}}")
    routes = {}
    for name, raw in raw_routes.items():
        routes[str(name)] = _route(str(name), raw, settings, f"{where}: extra.routes.{name}")
    return settings, routes


def _route(name: str, raw: object, settings: WebhookSettings, where: str) -> Route:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping of route settings")
    secret = str(raw.get("secret") or settings.secret or "")
    if not secret:
        raise ConfigError(f"{where} has no HMAC secret: set its secret (or extra.secret, "
                          f"WEBHOOK_SECRET); for a local test only, {INSECURE_NO_AUTH}")
    if secret == INSECURE_NO_AUTH and not is_loopback(settings.host):
        raise ConfigError(f"{where} uses {INSECURE_NO_AUTH} on the non-loopback host "
                          f"{settings.host}: anyone could run the agent; set a secret")
    deliver = str(raw.get("deliver") or "log")
    if deliver not in _DELIVER_TYPES:
        raise ConfigError(f"{where}: deliver must be one of {', '.join(_DELIVER_TYPES)}, "
                          f"got {deliver!r}")
    deliver_extra = raw.get("deliver_extra") or {}
    if not isinstance(deliver_extra, dict):
        raise ConfigError(f"{where}: deliver_extra must be a mapping")
    if deliver == "callback" and not deliver_extra.get("url"):
        raise ConfigError(f"{where}: deliver: callback needs deliver_extra.url")
    events = raw.get("events") or []
    if not isinstance(events, list):
        raise ConfigError(f"{where}: events must be a list of event types")
    prompt = raw.get("prompt")
    return Route(name=name, secret=secret, events=tuple(str(e) for e in events),
                 prompt=None if prompt is None else str(prompt), deliver=deliver,
                 deliver_extra=deliver_extra)


def sign(secret: str, body: bytes, timestamp: str) -> str:
    """The ``X-Webhook-Signature-V2`` of ``body`` sent at ``timestamp``."""
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def signature_problem(headers: Mapping[str, str], body: bytes, secret: str,
                      now: float | None = None) -> str | None:
    """Why the request's signature does not hold (``None``: it does)."""
    now = time.time() if now is None else now
    if headers.get(SIGNATURE_V2_HEADER):
        stamp = headers.get(TIMESTAMP_HEADER, "")
        if not stamp.isdigit():
            return f"{SIGNATURE_V2_HEADER} needs {TIMESTAMP_HEADER} (Unix seconds)"
        if abs(now - int(stamp)) > _REPLAY_WINDOW:
            return f"{TIMESTAMP_HEADER} is outside the {_REPLAY_WINDOW} s window"
        return _mismatch(headers[SIGNATURE_V2_HEADER], sign(secret, body, stamp))
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if headers.get(GITHUB_SIGNATURE_HEADER):
        return _mismatch(headers[GITHUB_SIGNATURE_HEADER], f"sha256={digest}")
    if headers.get(SIGNATURE_V1_HEADER):
        return _mismatch(headers[SIGNATURE_V1_HEADER], digest)
    return (f"no signature header ({SIGNATURE_V2_HEADER}, {GITHUB_SIGNATURE_HEADER} or "
            f"{SIGNATURE_V1_HEADER})")


def _mismatch(offered: str, expected: str) -> str | None:
    # Bytes: compare_digest refuses non-ASCII str, and the header is the sender's to choose.
    return None if hmac.compare_digest(offered.encode(), expected.encode()) else "wrong signature"


def render(template: str, payload: Any, event_type: str) -> str:
    """``template`` with ``{a.b}`` taken from ``payload`` (unknown names are left as they are)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "__raw__":
            return json.dumps(payload, indent=2, ensure_ascii=False)[:4000]
        if name == "event_type":
            return event_type
        found: Any = payload
        for part in name.split("."):
            if not isinstance(found, dict) or part not in found:
                return match.group(0)
            found = found[part]
        if isinstance(found, (dict, list)):
            return json.dumps(found, indent=2, ensure_ascii=False)[:2000]
        return str(found)

    return _PLACEHOLDER.sub(value, template)


class WebhookAdapter(BasePlatformAdapter):
    def __init__(self, config: PlatformConfig, platform: Platform = Platform.WEBHOOK) -> None:
        super().__init__(config, platform)
        self.settings, self.routes = webhook_settings(config)
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self._stopping = False
        self._seen: dict[str, float] = {}
        self._hits: dict[str, deque[float]] = {}
        self._deliveries: dict[str, Delivery] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._warned_v1: set[str] = set()

    @property
    def port(self) -> int:
        """The port listened on (``port: 0`` picks a free one)."""
        return int(self._runner.addresses[0][1]) if self._runner is not None else 0

    async def connect(self) -> bool:
        app = web.Application(client_max_size=self.settings.max_body_bytes)
        app.router.add_get("/health", self._health)
        app.router.add_post("/webhooks/{route}", self._on_event)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, self.settings.host, self.settings.port).start()
        except OSError as exc:
            logger.error("webhook: cannot listen on %s:%d (%s); set another host or port in "
                         "gateway.platforms.webhook.extra", self.settings.host,
                         self.settings.port, exc.strerror or exc)
            await self._runner.cleanup()
            self._runner = None
            return False
        self._http = aiohttp.ClientSession()
        logger.info("webhook: listening on %s:%d, routes %s", self.settings.host, self.port,
                    ", ".join(self.routes))
        return True

    async def stop_receiving(self) -> None:
        self._stopping = True

    async def disconnect(self) -> None:
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "platform": "webhook"})

    async def _on_event(self, request: web.Request) -> web.Response:
        route = self.routes.get(request.match_info["route"])
        if route is None:
            return _error(404, f"unknown route {request.match_info['route']!r}")
        if self._stopping:
            return _error(503, "the gateway is stopping; send the event again later")
        if (request.content_length or 0) > self.settings.max_body_bytes:
            return _error(413, f"the body is over {self.settings.max_body_bytes} bytes")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"the body is over {self.settings.max_body_bytes} bytes")
        if route.secret != INSECURE_NO_AUTH:
            problem = signature_problem(request.headers, body, route.secret)
            if problem is not None:
                logger.warning("webhook %s: refused an event from %s: %s", route.name,
                               request.remote, problem)
                return _error(401, problem)
            if (not request.headers.get(SIGNATURE_V2_HEADER)
                    and not request.headers.get(GITHUB_SIGNATURE_HEADER)
                    and route.name not in self._warned_v1):
                self._warned_v1.add(route.name)
                logger.warning("webhook %s: the sender uses %s, which can be replayed; sign "
                               "'<timestamp>.<body>' into %s with %s instead", route.name,
                               SIGNATURE_V1_HEADER, SIGNATURE_V2_HEADER, TIMESTAMP_HEADER)
        if not self._within_rate(route.name):
            return _error(429, f"more than {self.settings.rate_limit} events a minute")
        try:
            payload = json.loads(body)
        except ValueError as exc:
            return _error(400, f"the body is not JSON: {exc}")
        event_type = (request.headers.get("X-GitHub-Event") or request.headers.get(
            "X-GitLab-Event") or (payload.get("event_type") or payload.get("type")
                                  if isinstance(payload, dict) else None) or "unknown")
        if route.events and event_type not in route.events:
            return web.json_response({"status": "ignored", "event": event_type})
        delivery_id = next((request.headers[h] for h in _DELIVERY_HEADERS
                            if request.headers.get(h)), None) or uuid.uuid4().hex
        if not self._first_sighting(delivery_id):
            return web.json_response({"status": "duplicate", "delivery_id": delivery_id})
        event = self._event(route, payload, event_type, delivery_id)
        self._deliveries[event.source.chat_id] = Delivery(
            route=route, delivery_id=delivery_id, event_type=event_type,
            target={k: render(v, payload, event_type) if isinstance(v, str) else v
                    for k, v in route.deliver_extra.items()})
        task = asyncio.ensure_future(self._run(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return web.json_response({"status": "accepted", "route": route.name,
                                  "event": event_type, "delivery_id": delivery_id}, status=202)

    def _event(self, route: Route, payload: Any, event_type: str,
               delivery_id: str) -> MessageEvent:
        if route.prompt is not None:
            prompt = render(route.prompt, payload, event_type)
        else:
            raw = json.dumps(payload, indent=2, ensure_ascii=False)[:4000]
            prompt = f"Webhook event '{event_type}' on route '{route.name}':\n\n```json\n{raw}\n```"
        source = SessionSource(platform=self.platform,
                               chat_id=f"webhook:{route.name}:{delivery_id}",
                               chat_type="webhook", user_id=f"webhook:{route.name}",
                               user_name=route.name, chat_name=f"webhook/{route.name}")
        return MessageEvent(text=prompt, source=source, message_id=delivery_id)

    async def _run(self, event: MessageEvent) -> None:
        try:
            reply = await self.dispatch(event)
            if reply:
                await self.send(event.source.chat_id, reply)
        except Exception:
            logger.exception("webhook: the event %s failed", event.message_id)
        finally:
            self._deliveries.pop(event.source.chat_id, None)

    def _within_rate(self, route: str) -> bool:
        now = time.monotonic()
        hits = self._hits.setdefault(route, deque())
        while hits and hits[0] < now - _RATE_WINDOW:
            hits.popleft()
        if len(hits) >= self.settings.rate_limit:
            return False
        hits.append(now)
        return True

    def _first_sighting(self, delivery_id: str) -> bool:
        now = time.monotonic()
        for seen_id, at in list(self._seen.items()):
            if at > now - _SEEN_TTL:
                break  # insertion order is time order
            del self._seen[seen_id]
        if delivery_id in self._seen:
            return False
        self._seen[delivery_id] = now
        return True

    async def send(self, chat_id: str, content: str, reply_to: str | None = None,
                   metadata: Mapping[str, Any] | None = None) -> SendResult:
        delivery = self._deliveries.get(chat_id)
        if delivery is None:
            logger.warning("webhook: no delivery is waiting for %s; dropping a %d-character "
                           "message", chat_id, len(content))
            return SendResult(success=False, error="no such delivery")
        if delivery.route.deliver == "log":
            logger.info("webhook %s: reply to %s: %s", delivery.route.name, delivery.delivery_id,
                        content)
            return SendResult(success=True)
        return await self._post_callback(delivery, content)

    async def _post_callback(self, delivery: Delivery, content: str) -> SendResult:
        assert self._http is not None
        url = str(delivery.target["url"])
        body = json.dumps({"delivery_id": delivery.delivery_id, "route": delivery.route.name,
                           "event_type": delivery.event_type, "content": content},
                          ensure_ascii=False).encode()
        wait = self.settings.callback_backoff
        outcome = "not attempted"
        for attempt in range(1, max(self.settings.callback_attempts, 1) + 1):
            stamp = str(int(time.time()))
            headers = {"Content-Type": "application/json", "X-Webhook-Delivery":
                       delivery.delivery_id, TIMESTAMP_HEADER: stamp,
                       SIGNATURE_V2_HEADER: sign(delivery.route.secret, body, stamp)}
            retry_after: float | None = None
            try:
                async with self._http.post(url, data=body, headers=headers, timeout=aiohttp
                                           .ClientTimeout(total=self.settings.callback_timeout)
                                           ) as response:
                    if response.status < 300:
                        return SendResult(success=True)
                    outcome = f"HTTP {response.status}"
                    if response.status != 429 and response.status < 500:
                        break
                    retry_after = _seconds(response.headers.get("Retry-After"))
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                outcome = f"{type(exc).__name__}: {exc}"
            if attempt < self.settings.callback_attempts:
                logger.info("webhook %s: callback for %s failed (%s); attempt %d in %.1fs",
                            delivery.route.name, delivery.delivery_id, outcome, attempt + 1,
                            retry_after if retry_after is not None else wait)
                await asyncio.sleep(retry_after if retry_after is not None else wait)
                wait *= 2
        logger.error("webhook %s: gave up delivering the reply to %s at %s (%s)",
                     delivery.route.name, delivery.delivery_id, url, outcome)
        return SendResult(success=False, error=outcome)


def _seconds(header: str | None) -> float | None:
    try:
        return max(float(header), 0.0) if header else None
    except ValueError:
        return None  # an HTTP date: the usual backoff serves


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)
