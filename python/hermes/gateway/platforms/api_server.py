"""The api_server platform: an OpenAI-compatible HTTP endpoint in front of the gateway.

Routes::

    POST /v1/chat/completions   plain JSON, or server-sent events with "stream": true
    GET  /v1/models             the model ids this server answers to
    GET  /health                liveness, without authentication

Any OpenAI client works against it (``base_url="http://127.0.0.1:8642/v1"``). The request
format is ``hermes.gateway.platforms.api_chat``'s, keys and callers ``api_auth``'s, errors
and the HTTP plumbing ``api_http``'s; a further route file can use all three.

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

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from hermes.agent.conversation import reply_stream
from hermes.config import load_config
from hermes.gateway.client_turn import ClientTurn, TurnReport
from hermes.gateway.config import Platform, PlatformConfig
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
    FAILED,
    JsonErrorsRunner,
    RequestError,
    header,
    json_errors,
    read_json,
)
from hermes.gateway.platforms.base import BasePlatformAdapter, MessageEvent, SendResult
from hermes.gateway.session import SessionSource
from hermes.gateway.turn import STOPPING_NOTICE

logger = logging.getLogger(__name__)

# An SSE comment every so often keeps proxies from closing a stream while a tool runs.
_KEEPALIVE_SECONDS = 15.0
# The answer to each way a model call fails (``ModelFailure`` values); others are 502s.
_FAILURE_STATUS = {"model_rate_limited": 503, "model_unreachable": 503, "model_timeout": 504}


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
        self.port: int | None = None  # the bound port (differs from settings when 0)

    async def connect(self) -> bool:
        check_bind_allowed(self.settings)
        app = web.Application(
            client_max_size=self.settings.max_body_bytes,
            middlewares=[json_errors(self.settings.max_body_bytes),
                         authenticate(self.settings.key)],
        )
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
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
        return web.json_response({"status": "ok", "platform": self.platform.value})

    async def _list_models(self, request: web.Request) -> web.Response:
        now = int(time.time())
        return web.json_response({
            "object": "list",
            "data": [{"id": m, "object": "model", "created": now, "owned_by": "hermes"}
                     for m in self.models],
        })

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        chat = parse_chat_request(await read_json(request, self.settings.max_body_bytes),
                                  self.models)
        session_id = requested_session_id(request, self.caller)
        client = ClientTurn(caller=self.caller.identity,
                            history=None if session_id else chat.history,
                            system_prompt=chat.system_prompt, session_id=session_id)
        event = MessageEvent(
            text=chat.text,
            # The chat and thread are the caller's and the conversation's: the gateway fills
            # them in (hermes.gateway.client_turn.route).
            source=SessionSource(platform=self.platform, chat_id="", user_id=chat.user),
            message_id=header(request, "X-Request-Id") or None,
            client=client,
        )
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        if chat.stream:
            return await self._stream_reply(request, event, client, chat, completion_id)
        report = _answered(client, await self.dispatch(event))
        return web.json_response(completion(completion_id, chat.model, report),
                                 headers={SESSION_HEADER: report.session_id})

    async def _stream_reply(self, request: web.Request, event: MessageEvent, client: ClientTurn,
                            chat: ChatRequest, completion_id: str) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[str] = asyncio.Queue()
        closed = False

        def on_delta(text: str) -> None:  # called on the agent's thread
            # A later turn run in this context (a queued message of the same conversation)
            # finds this sink too; once this response is over, its text is not ours.
            if not closed:
                loop.call_soon_threadsafe(pieces.put_nowait, text)

        # The task copies the current context, so the agent (run with that context in the
        # gateway's executor) finds the sink and streams its text into ``pieces``.
        token = reply_stream.set(on_delta)
        try:
            turn = asyncio.ensure_future(self.dispatch(event))
        finally:
            reply_stream.reset(token)

        chunks = ChunkWriter(request, completion_id, chat.model,
                             lambda: _session_headers(client.session_id))
        streamed: list[str] = []
        try:
            while not turn.done() or not pieces.empty():
                getter = asyncio.ensure_future(pieces.get())
                done, _ = await asyncio.wait({getter, turn}, timeout=_KEEPALIVE_SECONDS,
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    streamed.append(getter.result())
                    await chunks.text(streamed[-1])
                else:
                    getter.cancel()
                    if not done:
                        await chunks.keepalive()
        except ConnectionResetError:
            # The client left. The turn goes on (the gateway stores it); only its answer
            # has nowhere to go.
            logger.info("api_server client of %s disconnected mid-stream", client.session_id)
            turn.add_done_callback(_log_failure)
            assert chunks.response is not None  # only a started response can be reset
            return chunks.response
        finally:
            closed = True
        try:
            report = _answered(client, turn.result())
        except Exception as exc:
            if not chunks.started:
                raise  # nothing sent yet: an answer with its own status
            if isinstance(exc, RequestError):
                return await chunks.error(exc)
            logger.exception("turn failed for api_server session %s", client.session_id)
            return await chunks.error(RequestError(500, FAILED, kind="server_error"))
        # The reply is the final answer; add it when it was not streamed (the backend
        # cannot stream, or the agent's own words, such as a max_iterations note).
        if report.reply and report.reply.strip() not in "".join(streamed):
            await chunks.text(("\n\n" if streamed else "") + report.reply)
        return await chunks.finish(report, chat.include_usage)


def _session_headers(session_id: str | None) -> dict[str, str]:
    return {SESSION_HEADER: session_id} if session_id else {}


def _answered(client: ClientTurn, reply: str | None) -> TurnReport:
    """The report of a turn that answered, or the ``RequestError`` for one that did not."""
    if client.unknown_session:
        raise RequestError(
            404, f"no stored conversation {client.session_id!r} for this caller: continue "
            f"only a conversation that this key and 'user' started, with the id its answers "
            f"carried in {SESSION_HEADER}", param=SESSION_HEADER, code="session_not_found",
            kind="not_found_error")
    report = client.report
    if report is None:  # the gateway answered without running a turn
        if reply is None:
            # An unauthorised user: a request/response client still needs an answer.
            raise RequestError(403, "the gateway did not accept this message (is the user "
                               "allowed on the api_server platform?)", kind="permission_error")
        if reply == STOPPING_NOTICE:
            raise RequestError(503, "the gateway is shutting down and did not run this turn; "
                               "send it again once it is back", code="gateway_stopping",
                               kind="server_error")
        raise RequestError(500, FAILED, kind="server_error")
    headers = _session_headers(report.session_id)
    if report.failure is not None:
        raise RequestError(_FAILURE_STATUS.get(report.failure, 502),
                           f"the model call failed: {report.error}", code=report.failure,
                           kind="server_error", headers={**headers, "x-should-retry": "false"})
    if report.interrupted:
        raise RequestError(503, "the turn was cut off before it finished (the gateway is "
                           "stopping, or a newer message of this conversation interrupted "
                           "it); send it again", code="turn_interrupted", kind="server_error",
                           headers=headers)
    return report


def _log_failure(turn: asyncio.Future[str | None]) -> None:
    if not turn.cancelled() and turn.exception() is not None:
        logger.error("a turn whose client had left failed", exc_info=turn.exception())
