"""The api_server platform: an OpenAI-compatible HTTP endpoint in front of the gateway.

Routes::

    POST /v1/chat/completions   plain JSON, or server-sent events with "stream": true
    GET  /v1/models             the model ids this server answers to
    GET  /health, /v1/health    liveness and version, without authentication
    GET  /health/detailed       version, pid, uptime, and the store: reachable, counts
    /v1/responses...            OpenAI's Responses API (``api_responses``)
    /api/sessions...            hermes-agent's sessions API (``api_sessions``)

Any OpenAI client works against it (``base_url="http://127.0.0.1:8642/v1"``). The request
format is ``hermes.gateway.platforms.api_chat``'s, keys and callers ``api_auth``'s, errors
and the HTTP plumbing ``api_http``'s, one turn's answer or stream ``api_turn``'s; every route
file uses them.

**Stateless by default, as OpenAI's API.** A request's messages are what the model sees: its
system and developer messages are added to the gateway's own system prompt
(``agent.system_prompt``), after it; the user, assistant and tool messages before the last
are the history; the last user message is the new input. Nothing of the stored transcript is
added. The turn is stored all the same, in the session its conversation's fingerprint names
(caller, system prompt, first user message, under a secret kept in ``state.db``; see
``hermes.gateway.client_turn``), so a chat front-end resending its whole conversation each
time (Open WebUI, LibreChat, ...) maps to one stored session, while different callers or
system prompts never share one. Only the new user message and the agent's new messages are
written per turn, so the stored transcript holds each message once, in order; an earlier
message edited by the client changes what the model sees, never the stored rows. A
session's first turn also stores the history it arrives with, once.

**Continuity from state.db, opt-in.** With ``X-Hermes-Session-Id: <id>`` the history comes
from the stored session and the request need carry only its new user message (its system
messages still apply; its other earlier messages are not used). The id is one a response
carried: every answer has ``X-Hermes-Session-Id`` naming the session its turn is stored in.
Only a server with a key configured offers this, to the caller (key and ``user``) whose
conversation it is; another caller's id, or an unknown one, is the same 404.

**Honest answers.** ``usage`` is the model's token counts summed over the turn's model calls
(in a stream, a last chunk with ``choices: []`` when ``stream_options.include_usage`` is
true) and ``finish_reason`` the model's own (``"length"`` also when the turn stopped at
``agent.max_iterations``). A failed model call is an error, never an answer: 502 (the model
endpoint refused the key, the model, the request, or failed), 503 (unreachable, still rate
limiting) or 504 (timed out), with the cause and ``x-should-retry: false`` (the gateway has
already retried); a turn cut off by a shutdown or a newer message is a 503. Once a stream has
started, such an error is an event in it, as OpenAI sends one. A client's text is never taken
as a gateway command (``/new``, ``/stop``).

**Input.** Every string of the body and every header the server reads is made valid text
before anything else sees it (``hermes.text``): a lone surrogate becomes U+FFFD, for the store
and the model alike.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from hermes import __version__
from hermes.config import load_config
from hermes.gateway.client_turn import ClientTurn
from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.platforms import api_turn
from hermes.gateway.platforms.api_auth import (
    SESSION_HEADER,
    Caller,
    authenticate,
    check_bind_allowed,
    requested_session_id,
)
from hermes.gateway.platforms.api_chat import (
    ChatRequest,
    ChunkWriter,
    completion,
    parse_chat_request,
)
from hermes.gateway.platforms.api_http import (
    JsonErrorsRunner,
    RequestError,
    json_errors,
    read_json,
)
from hermes.gateway.platforms.api_responses import ResponsesRoutes
from hermes.gateway.platforms.api_sessions import SessionsRoutes
from hermes.gateway.platforms.base import BasePlatformAdapter, MessageEvent, SendResult
from hermes.gateway.session import SessionStore

logger = logging.getLogger(__name__)


class APIServerAdapter(BasePlatformAdapter):
    """Serves the routes above; each chat request becomes one ``MessageEvent``."""

    def __init__(self, config: PlatformConfig, platform: Platform = Platform.API_SERVER) -> None:
        super().__init__(config, platform)
        # config.yaml's api_server section and API_SERVER_*, overridden by the platform's
        # ``extra`` (where ``hermes gateway run --host/--port`` put theirs).
        settings = load_config({f"api_server.{key}": value for key, value in config.extra.items()})
        self.settings = settings.api_server
        # The public id first: it is what a request without "model" gets. The backend's
        # model name is accepted too, as clients often send the name they know.
        self.models = list(dict.fromkeys(
            [self.settings.model_name] + ([settings.model.name] if settings.model.name else [])
        ))
        self.caller = Caller.of_key(self.settings.key)
        self._runner: web.AppRunner | None = None
        self._started = time.monotonic()
        self.port: int | None = None  # the bound port (differs from settings when 0)

    async def connect(self) -> bool:
        check_bind_allowed(self.settings)
        app = web.Application(
            client_max_size=self.settings.max_body_bytes,
            middlewares=[json_errors(self.settings.max_body_bytes),
                         authenticate(self.settings.key)],
        )
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/health", self._health)
        app.router.add_get("/health/detailed", self._health_detailed)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        ResponsesRoutes(self).add_to(app.router)
        SessionsRoutes(self).add_to(app.router)
        self._runner = JsonErrorsRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            logger.error("api_server cannot listen on %s:%s: %s", self.settings.host,
                         self.settings.port, exc)
            return False
        sockets = self._runner.addresses
        self.port = int(sockets[0][1]) if sockets else self.settings.port
        logger.info("api_server listening on http://%s:%s/v1 (%s)", self.settings.host,
                    self.port, "key required" if self.settings.key else "no key, loopback only")
        return True

    async def disconnect(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def send(
        self,
        chat_id: str,
        content: str,
        reply_to: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SendResult:
        # HTTP is request/response: a reply goes out in the response of its request, and
        # there is no channel to push anything else (such as a shutdown notice) to a client.
        return SendResult(success=False, error="the api_server cannot push messages")

    # -- routes ----------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "platform": self.platform.value,
                                  "version": __version__})

    async def _health_detailed(self, request: web.Request) -> web.Response:
        store = api_turn.attached(self.session_store)
        try:
            sessions, responses = await store.call(_counts)
        except Exception as exc:  # the store's own error says what is wrong with the file
            logger.error("api_server /health/detailed: state.db unreachable: %s", exc)
            raise RequestError(503, f"state.db is unreachable: {exc}", code="store_unreachable",
                               kind="server_error") from None
        return web.json_response({
            "status": "ok", "platform": self.platform.value, "version": __version__,
            "pid": os.getpid(), "uptime_seconds": round(time.monotonic() - self._started, 3),
            "models": self.models, "key_required": self.caller.authenticated,
            "store": {"reachable": True, "sessions": sessions, "responses": responses},
        })

    async def _list_models(self, request: web.Request) -> web.Response:
        now = int(time.time())
        return web.json_response({
            "object": "list",
            "data": [{"id": m, "object": "model", "created": now, "owned_by": "hermes",
                      "permission": [], "root": m, "parent": None} for m in self.models],
        })

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        chat = parse_chat_request(await read_json(request, self.settings.max_body_bytes),
                                  self.models)
        session_id = requested_session_id(request, self.caller)
        client = ClientTurn(caller=self.caller.identity,
                            history=None if session_id else chat.history,
                            system_prompt=chat.system_prompt, session_id=session_id)
        event = api_turn.client_event(request, self.platform, chat.text, client, chat.user)
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        if chat.stream:
            return await self._stream_reply(request, event, client, chat, completion_id)
        report = await api_turn.answer(self.dispatch, event)
        return web.json_response(completion(completion_id, chat.model, report),
                                 headers={SESSION_HEADER: report.session_id})

    async def _stream_reply(self, request: web.Request, event: MessageEvent,
                            client: ClientTurn, chat: ChatRequest,
                            completion_id: str) -> web.StreamResponse:
        chunks = ChunkWriter(request, completion_id, chat.model,
                             lambda: api_turn.session_headers(client.session_id))
        streamed = await api_turn.stream(self.dispatch, event, chunks)
        if isinstance(streamed, web.StreamResponse):
            return streamed
        report, _ = streamed
        return await chunks.finish(report, chat.include_usage)


def _counts(store: SessionStore) -> tuple[int, int]:
    db = store.state_db
    return db.session_count(include_archived=True), db.response_count()
