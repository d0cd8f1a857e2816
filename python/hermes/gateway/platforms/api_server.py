"""The api_server platform: an OpenAI-compatible HTTP endpoint in front of the gateway.

Routes::

    POST /v1/chat/completions   plain JSON, or server-sent events with "stream": true
    GET  /v1/models             the model ids this server answers to
    GET  /health                liveness, without authentication

Any OpenAI client works against it (``base_url="http://127.0.0.1:8642/v1"``).

Conversations. The gateway keeps each conversation's transcript in ``state.db`` and every
request continues one. Which one is chosen by, in order: the ``X-Hermes-Session-Id`` header,
the request's ``user`` field, or else a hash of the request's first user message (so a client
that resends the whole history, as chat front-ends do, stays in one conversation). The chosen
id comes back in the ``X-Hermes-Session-Id`` response header.

Only the request's **last** message is taken as the new input; it must be a user message
(text, or content parts of which the text parts are used). ``model`` may be left out; given,
it must be one ``/v1/models`` lists (the reply comes from the gateway's configured model).
Earlier messages in the request are *not* appended again: the stored transcript is the
history the agent sees, so a client resending history neither duplicates it nor rewrites it.
System messages in the request are ignored for the same reason (the agent's system prompt is
the gateway's configuration).

Security. With ``api_server.key`` set, every route but ``/health`` needs
``Authorization: Bearer <key>`` (compared in constant time). Without a key the server only
starts on a loopback address: anyone who can reach a non-loopback port could otherwise drive
the agent and its tools.

Errors always come back as JSON in OpenAI's shape,
``{"error": {"message", "type", "param", "code"}}``, with a 4xx status for the client's
mistakes (bad JSON, missing or mistyped fields, a body over ``api_server.max_body_bytes``
(1 MiB by default), an unknown model, a missing or wrong key), so OpenAI clients raise their
usual exception and the gateway keeps serving.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from hermes.agent.conversation import reply_stream
from hermes.config import ApiServerConfig, load_config
from hermes.errors import ConfigError
from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.platforms.base import BasePlatformAdapter, MessageEvent, SendResult
from hermes.gateway.session import SessionSource

logger = logging.getLogger(__name__)

SESSION_HEADER = "X-Hermes-Session-Id"
_SESSION_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
_ROLES = {"system", "developer", "user", "assistant", "tool"}
# An SSE comment every so often keeps proxies from closing a stream while a tool runs.
_KEEPALIVE_SECONDS = 15.0
# What a client learns of an internal failure; the details go to the gateway's log only.
_FAILED = "the gateway failed to answer; the error is in its log"


class RequestError(Exception):
    """A client mistake, answered with ``status`` and OpenAI's error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind

    def response(self) -> web.Response:
        return error_response(self.status, self.message, param=self.param, code=self.code,
                              kind=self.kind)


def error_response(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    kind: str = "invalid_request_error",
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status)


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost may resolve anywhere
        return False


def check_bind_allowed(settings: ApiServerConfig) -> None:
    """Refuse a keyless server on a non-loopback address (raises ``ConfigError``)."""
    if not settings.key and not is_loopback(settings.host):
        raise ConfigError(
            f"refusing to serve the api_server on {settings.host}:{settings.port} without a "
            "key: anyone reaching that address could drive the agent and its tools. Set "
            "api_server.key in $HERMES_HOME/config.yaml (or API_SERVER_KEY), or bind to "
            "127.0.0.1"
        )


@dataclass(frozen=True)
class ChatRequest:
    """A validated ``/v1/chat/completions`` body."""

    text: str
    conversation_id: str
    user: str | None
    model: str
    stream: bool


def parse_chat_request(
    body: object, headers: Mapping[str, str], known_models: list[str]
) -> ChatRequest:
    """Validate a request body; every problem raises ``RequestError`` naming the field."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    model = body.get("model", known_models[0])
    if not isinstance(model, str):
        raise RequestError(400, "'model' must be a string", param="model")
    if model not in known_models:
        raise RequestError(
            404,
            f"the model {model!r} does not exist here; use one of: {', '.join(known_models)}",
            param="model",
            code="model_not_found",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(400, "'stream' must be true or false", param="stream")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise RequestError(400, "'user' must be a string", param="user")
    if user is not None:
        # It becomes part of the conversation's routing key, which must be valid UTF-8;
        # lone surrogates (a broken client's escapes) are replaced.
        user = user.encode("utf-8", "replace").decode("utf-8")

    messages = body.get("messages")
    if messages is None:
        raise RequestError(400, "'messages' is required: a list of chat messages",
                           param="messages", code="missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list of chat messages",
                           param="messages")
    texts = [_message_text(message, index) for index, message in enumerate(messages)]
    last = messages[-1]
    if last["role"] != "user" or not texts[-1].strip():
        raise RequestError(
            400,
            "the last message must be a user message with text: it is the new input (the "
            "conversation's history comes from the gateway's store, not from the request)",
            param=f"messages[{len(messages) - 1}]",
        )

    conversation_id = headers.get(SESSION_HEADER, "").strip()
    if conversation_id and not _SESSION_ID.fullmatch(conversation_id):
        raise RequestError(
            400,
            f"the {SESSION_HEADER} header must be 1-128 letters, digits or ._:@- "
            f"(got {conversation_id[:40]!r})",
            param=SESSION_HEADER,
        )
    if not conversation_id and user:
        # 'user' is free text in OpenAI's API; hash what cannot be used as an id as it is.
        conversation_id = user if _SESSION_ID.fullmatch(user) else f"user-{_digest(user)}"
    if not conversation_id:
        first_user = next(t for m, t in zip(messages, texts) if m["role"] == "user")
        conversation_id = f"api-{_digest(first_user)}"
    return ChatRequest(text=texts[-1], conversation_id=conversation_id, user=user,
                       model=model, stream=stream)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _message_text(message: object, index: int) -> str:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise RequestError(400, f"{where} must be an object with 'role' and 'content'",
                           param=where)
    role = message.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        raise RequestError(400, f"{where}.role must be one of {', '.join(sorted(_ROLES))}",
                           param=f"{where}.role")
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise RequestError(400, f"{where}.content parts must be objects with a 'type'",
                                   param=f"{where}.content")
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise RequestError(400, f"{where}.content text parts need a string 'text'",
                                       param=f"{where}.content")
                pieces.append(part["text"])
        return "\n".join(pieces)
    raise RequestError(400, f"{where}.content must be a string, a list of parts or null",
                       param=f"{where}.content")


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
        self._runner: web.AppRunner | None = None
        self.port: int | None = None  # the bound port (differs from settings when 0)

    async def connect(self) -> bool:
        check_bind_allowed(self.settings)
        app = web.Application(
            client_max_size=self.settings.max_body_bytes,
            middlewares=[self._errors_as_json, self._authenticate],
        )
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        self._runner = web.AppRunner(app, access_log=None)
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

    # -- middlewares -----------------------------------------------------------------------

    @web.middleware
    async def _errors_as_json(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except RequestError as exc:
            return exc.response()
        except web.HTTPRequestEntityTooLarge:
            return error_response(
                413,
                f"the request body is larger than {self.settings.max_body_bytes} bytes "
                "(api_server.max_body_bytes)",
                code="request_too_large",
            )
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return error_response(exc.status, f"{request.method} {request.path}: {exc.reason}",
                                  code=exc.reason.lower().replace(" ", "_"))
        except Exception:  # a bug or a failed turn: still an OpenAI-shaped answer
            logger.exception("api_server failed on %s %s", request.method, request.path)
            return error_response(500, _FAILED, kind="server_error")

    @web.middleware
    async def _authenticate(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        key = self.settings.key
        if key and request.path != "/health":
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            # Bytes on both sides: compare_digest refuses non-ASCII str, and the header is
            # whatever the client sent.
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode("utf-8", "surrogateescape"), key.encode("utf-8")
            ):
                raise RequestError(
                    401,
                    "missing or invalid API key: send 'Authorization: Bearer <api_server.key>'",
                    code="invalid_api_key",
                    kind="authentication_error",
                )
        return await handler(request)

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
        declared = request.content_length
        if declared is not None and declared > self.settings.max_body_bytes:
            raise web.HTTPRequestEntityTooLarge(
                max_size=self.settings.max_body_bytes, actual_size=declared
            )
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"the request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise RequestError(400, "the request body nests JSON too deeply") from None
        chat = parse_chat_request(body, request.headers, self.models)
        event = MessageEvent(
            text=chat.text,
            source=SessionSource(
                platform=self.platform,
                chat_id=chat.conversation_id,
                chat_type="dm",
                user_id=chat.user or chat.conversation_id,
            ),
            message_id=request.headers.get("X-Request-Id"),
        )
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        headers = {SESSION_HEADER: chat.conversation_id}
        if chat.stream:
            return await self._stream_reply(request, event, chat, completion_id, headers)
        reply = await self._reply(event)
        return web.json_response(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": chat.model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": reply},
                    "finish_reason": "stop",
                }],
            },
            headers=headers,
        )

    async def _reply(self, event: MessageEvent) -> str:
        reply = await self.dispatch(event)
        if reply is None:
            # The runner answers None when it will not run a turn for this event (an
            # unauthorised user); a request/response client still needs an answer.
            raise RequestError(403, "the gateway did not accept this message (is the user "
                               "allowed on the api_server platform?)", kind="permission_error")
        return reply

    async def _stream_reply(
        self,
        request: web.Request,
        event: MessageEvent,
        chat: ChatRequest,
        completion_id: str,
        headers: dict[str, str],
    ) -> web.StreamResponse:
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
            turn = asyncio.ensure_future(self._reply(event))
        finally:
            reply_stream.reset(token)

        response = web.StreamResponse(headers={
            **headers,
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
        })
        chunks = _ChunkWriter(response, completion_id, chat.model)
        streamed: list[str] = []
        try:
            await response.prepare(request)
            await chunks.delta({"role": "assistant", "content": ""})
            while not turn.done() or not pieces.empty():
                getter = asyncio.ensure_future(pieces.get())
                done, _ = await asyncio.wait({getter, turn}, timeout=_KEEPALIVE_SECONDS,
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    streamed.append(getter.result())
                    await chunks.delta({"content": streamed[-1]})
                else:
                    getter.cancel()
                    if not done:
                        await response.write(b": keepalive\n\n")
        except ConnectionResetError:
            # The client left. The turn goes on (the gateway stores it); only its answer
            # has nowhere to go.
            logger.info("api_server client of %s disconnected mid-stream", chat.conversation_id)
            turn.add_done_callback(_log_failure)
            return response
        finally:
            closed = True
        try:
            reply = turn.result()
        except RequestError as exc:
            await chunks.error(exc.message, exc.kind, exc.code)
            return response
        except Exception:  # headers are out: report in the stream, as OpenAI does
            logger.exception("turn failed for api_server conversation %s", chat.conversation_id)
            await chunks.error(_FAILED, "server_error", None)
            return response
        # The runner's reply is the final answer; add it only if it was not streamed (the
        # backend cannot stream, or the turn ended in an error message).
        if reply.strip() and reply.strip() not in "".join(streamed):
            await chunks.delta({"content": ("\n\n" if streamed else "") + reply})
        await chunks.finish()
        return response


def _log_failure(turn: asyncio.Future[str]) -> None:
    if not turn.cancelled() and turn.exception() is not None:
        logger.error("a turn whose client had left failed", exc_info=turn.exception())


class _ChunkWriter:
    """Writes ``chat.completion.chunk`` events in OpenAI's SSE framing."""

    def __init__(self, response: web.StreamResponse, completion_id: str, model: str) -> None:
        self._response = response
        self._id = completion_id
        self._model = model
        self._created = int(time.time())

    async def _event(self, payload: object) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        await self._response.write(f"data: {data}\n\n".encode())

    async def delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> None:
        await self._event({
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        })

    async def finish(self) -> None:
        await self.delta({}, finish_reason="stop")
        await self._event("[DONE]")
        await self._response.write_eof()

    async def error(self, message: str, kind: str, code: str | None) -> None:
        await self._event({"error": {"message": message, "type": kind, "param": None,
                                     "code": code}})
        await self._event("[DONE]")
        await self._response.write_eof()
