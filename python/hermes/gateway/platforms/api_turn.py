"""One client turn run from an api_server route: the gateway's answer, or the error that
stands for it, plain or streamed. Every route that runs the agent (``/v1/chat/completions``,
``/v1/responses``, ``/api/sessions/{id}/chat``) goes through here, so each answers a failed
model call, a shutdown and an unknown conversation the same way.

* ``answer`` runs the turn and returns its ``TurnReport``, or raises the ``RequestError`` the
  client gets: 404 for a continued conversation the caller does not have; 502 (the model
  endpoint refused the key, the model, the request, or failed), 503 (unreachable, still
  rate limiting; a turn cut off by a shutdown or a newer message) or 504 (timed out), each
  with the cause and ``x-should-retry: false`` (the gateway has already retried).
* ``stream`` runs it with the agent's text going out as it comes, through a ``TextStream``
  (each route writes its own event format). The stream's response starts with its first
  piece of text, so a turn that fails before saying anything still gets an error status;
  after that, an error is an event in the stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web

from hermes.agent.conversation import reply_stream
from hermes.gateway.client_turn import ClientTurn, TurnReport
from hermes.gateway.config import Platform
from hermes.gateway.events import MessageEvent, SessionSource
from hermes.gateway.platforms.api_auth import SESSION_HEADER
from hermes.gateway.platforms.api_http import FAILED, RequestError, header
from hermes.gateway.session import AsyncSessionStore
from hermes.gateway.turn import STOPPING_NOTICE

logger = logging.getLogger("hermes.gateway.platforms.api_server")

Dispatch = Callable[[MessageEvent], Awaitable["str | None"]]

# An SSE comment every so often keeps proxies from closing a stream while a tool runs.
_KEEPALIVE_SECONDS = 15.0
# The answer to each way a model call fails (``ModelFailure`` values); others are 502s.
_FAILURE_STATUS = {"model_rate_limited": 503, "model_unreachable": 503, "model_timeout": 504}


class TextStream(Protocol):
    """A route's server-sent events: the response starts with the first write."""

    @property
    def response(self) -> web.StreamResponse | None: ...

    async def text(self, piece: str) -> None: ...

    async def keepalive(self) -> None: ...

    async def error(self, error: RequestError) -> web.StreamResponse:
        """An error event, then the end of the stream."""


def session_headers(session_id: str | None) -> dict[str, str]:
    return {SESSION_HEADER: session_id} if session_id else {}


async def answer(dispatch: Dispatch, event: MessageEvent) -> TurnReport:
    """Runs the event's turn; its report, or the ``RequestError`` answering it."""
    assert event.client is not None
    return answered(event.client, await dispatch(event))


async def stream(dispatch: Dispatch, event: MessageEvent,
                 out: TextStream) -> tuple[TurnReport, str] | web.StreamResponse:
    """Runs the event's turn, its text written to ``out`` as the agent produces it. Returns
    the report and the whole text sent (the reply added when it was not streamed: a backend
    that cannot stream, or the agent's own words), for the route to finish the stream with;
    or the response, already ended, when the client left or the turn failed mid-stream.
    Raises the ``RequestError`` of a turn that failed before any text went out."""
    client = event.client
    assert client is not None
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
        turn = asyncio.ensure_future(dispatch(event))
    finally:
        reply_stream.reset(token)

    streamed: list[str] = []
    try:
        while not turn.done() or not pieces.empty():
            getter = asyncio.ensure_future(pieces.get())
            done, _ = await asyncio.wait({getter, turn}, timeout=_KEEPALIVE_SECONDS,
                                         return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                streamed.append(getter.result())
                await out.text(streamed[-1])
            else:
                getter.cancel()
                if not done:
                    await out.keepalive()
    except ConnectionResetError:
        # The client left. The turn goes on (the gateway stores it); only its answer
        # has nowhere to go.
        logger.info("api_server client of %s disconnected mid-stream", client.session_id)
        turn.add_done_callback(_log_failure)
        assert out.response is not None  # only a started response can be reset
        return out.response
    finally:
        closed = True
    try:
        report = answered(client, turn.result())
    except Exception as exc:
        if out.response is None:
            raise  # nothing sent yet: an answer with its own status
        if isinstance(exc, RequestError):
            return await out.error(exc)
        logger.exception("turn failed for api_server session %s", client.session_id)
        return await out.error(RequestError(500, FAILED, kind="server_error"))
    text = "".join(streamed)
    if report.reply and report.reply.strip() not in text:
        extra = ("\n\n" if streamed else "") + report.reply
        await out.text(extra)
        text += extra
    return report, text


def answered(client: ClientTurn, reply: str | None) -> TurnReport:
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
    headers = session_headers(report.session_id)
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


def client_event(request: web.Request, platform: Platform, text: str, client: ClientTurn,
                 user: str | None) -> MessageEvent:
    """The event of a client's message; the gateway fills in its chat and thread (the
    caller's and the conversation's: ``hermes.gateway.client_turn.route``)."""
    return MessageEvent(text=text, source=SessionSource(platform=platform, chat_id="",
                                                        user_id=user),
                        message_id=header(request, "X-Request-Id") or None, client=client)


def attached(store: AsyncSessionStore | None) -> AsyncSessionStore:
    """The gateway's store, for routes that read it; a 503 before the runner attached it."""
    if store is None:
        raise RequestError(503, "the api_server has no state.db attached (it runs without "
                           "the gateway runner)", code="store_unavailable", kind="server_error")
    return store
