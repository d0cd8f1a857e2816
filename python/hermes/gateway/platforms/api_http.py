"""The api_server's HTTP plumbing that every route shares: errors in OpenAI's shape, request
bodies read as clean JSON, and an aiohttp runner that answers even malformed HTTP that way.

Every error a client gets is ``{"error": {"message", "type", "param", "code"}}`` with a 4xx
status for the client's mistakes and a 5xx only for the gateway's or the model's failures, so
OpenAI clients raise their usual exceptions:

* route code raises ``RequestError``; the ``json_errors`` middleware turns it, aiohttp's own
  HTTP exceptions (unknown route, wrong method, a body over the limit) and any other failure
  into such a response;
* HTTP that aiohttp's parser refuses before any route runs (a bad request line, NUL or CR in a
  header, a bad Content-Length, a header over ``MAX_HEADER_BYTES``) is answered by
  ``JsonErrorsRunner``'s connections, in the same shape, with one log line and no traceback
  (aiohttp itself answers in plain text and logs a traceback per malformed request).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from hermes.text import valid_strings, valid_text

logger = logging.getLogger("hermes.gateway.platforms.api_server")

#: What a client learns of an internal failure; the details go to the gateway's log only.
FAILED = "the gateway failed to answer; the error is in its log"
#: aiohttp's parser refuses longer header lines (with a plain-text 400) before any route can
#: check them; above its default (8190) so a route can say which header is too long.
MAX_HEADER_BYTES = 64 * 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RequestError(Exception):
    """A failed request, answered with ``status`` and OpenAI's error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind
        self.headers = dict(headers or {})

    def body(self) -> dict[str, dict[str, str | None]]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.status, headers=self.headers)


def header(request: web.Request, name: str) -> str:
    """A request header's value, stripped and made valid text ("" when absent)."""
    return valid_text(request.headers.get(name, "").strip())


async def read_json(request: web.Request, max_bytes: int) -> object:
    """The request body as JSON, every string in it made valid text (``hermes.text``)."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise web.HTTPRequestEntityTooLarge(max_size=max_bytes, actual_size=declared)
    try:
        raw = await request.read()
    except web.RequestPayloadError as exc:  # a broken chunked encoding, a cut-off body
        raise RequestError(400, f"the request body could not be read: {exc}") from None
    try:
        return valid_strings(json.loads(raw))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise RequestError(400, "the request body nests JSON too deeply") from None


def json_errors(max_body_bytes: int) -> Middleware:
    """The middleware that answers every failure of a route in OpenAI's error shape."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except RequestError as exc:
            return exc.response()
        except web.HTTPRequestEntityTooLarge:
            return RequestError(
                413, f"the request body is larger than {max_body_bytes} bytes "
                "(api_server.max_body_bytes)", code="request_too_large").response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return RequestError(exc.status, f"{request.method} {valid_text(request.path)}: "
                                f"{exc.reason}", code=exc.reason.lower().replace(" ", "_"),
                                headers=_allow_header(exc)).response()
        except Exception:  # a bug: still an OpenAI-shaped answer
            logger.exception("api_server failed on %s %s", request.method, request.path)
            return RequestError(500, FAILED, kind="server_error").response()

    return middleware


def _allow_header(exc: web.HTTPException) -> dict[str, str]:
    allow = exc.headers.get("Allow")
    return {"Allow": allow} if allow else {}


class JsonErrorsRunner(web.AppRunner):
    """An ``AppRunner`` whose connections answer malformed HTTP in OpenAI's error shape."""

    async def _make_server(self) -> web.Server:
        # The stock server starts the application and holds its handler; ours serves that
        # handler with connections of our own class.
        server = await super()._make_server()
        return _JsonErrorsServer(server.request_handler, request_factory=server.request_factory,
                                 **self._handler_kwargs())

    def _handler_kwargs(self) -> dict[str, Any]:
        return {"access_log": None, "max_field_size": MAX_HEADER_BYTES,
                "max_line_size": MAX_HEADER_BYTES}


class _JsonErrorsServer(web.Server):
    def __init__(self, handler: Any, *, request_factory: Any, **handler_kwargs: Any) -> None:
        super().__init__(handler, request_factory=request_factory)
        self._handler_kwargs = handler_kwargs

    def __call__(self) -> web.RequestHandler:
        # Called by the event loop for each accepted connection.
        return _JsonErrorsConnection(self, loop=asyncio.get_running_loop(),
                                     **self._handler_kwargs)


class _JsonErrorsConnection(web.RequestHandler):
    """One client connection. aiohttp calls ``handle_error`` for a request its parser
    refused (a 400) and for an exception that escaped every middleware (a 500)."""

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status >= 500:
            logger.error("api_server failed on a request from %s", request.remote, exc_info=exc)
            error = RequestError(status, FAILED, kind="server_error")
        else:
            reason = valid_text(" ".join((message or str(exc or "")).split()))[:300]
            logger.warning("api_server: malformed HTTP from %s: %s", request.remote, reason)
            error = RequestError(status, f"malformed HTTP request: {reason}",
                                 code="malformed_request")
        if request.writer.output_size > 0:  # a response is under way: nothing can follow
            raise ConnectionError("the response had started; cannot send an error after it")
        response = error.response()
        response.force_close()  # the parser's state after an error is unknown
        return response
