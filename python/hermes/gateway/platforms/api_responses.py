"""``/v1/responses`` in OpenAI's Responses shapes: create (plain or streamed), retrieve, delete.

Routes::

    POST   /v1/responses        a turn: ``input`` (a string, or a list of message items),
                                ``instructions``, ``model``, ``previous_response_id``,
                                ``store``, ``stream``, ``user``
    GET    /v1/responses/{id}   a stored response, as its create returned it
    DELETE /v1/responses/{id}   forgets it: it can no longer be read or chained from

A turn runs as a stateless chat turn does (``api_server``): the model sees the conversation
of the ``previous_response_id`` chain (its inputs and answers, oldest first), then this
request's input; ``instructions`` and the input's system and developer messages are the
system prompt (a previous response's instructions do not carry over, as in OpenAI's API).
The last input item must be a user message with text. Input items other than messages (function
call outputs, images, files) are not passed on: a non-message item is a 400, a non-text part of
a message is dropped. The turn is stored in the session the conversation's fingerprint names,
so a chain's turns land in one session of the transcript store.

With ``store`` true (the default) the response is kept in ``state.db`` (its own table,
``hermes.state.responses``), with the conversation a chained request continues, so a chain
survives a gateway restart. A response belongs to the key that created it: another key's
response id is the same 404 as an unknown one, for reading, deleting and chaining alike.

Streamed (``"stream": true``), the events are OpenAI's, as server-sent events with
``event:`` lines and increasing ``sequence_number``: ``response.created``,
``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta`` per piece, ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``, ``response.completed`` (the
whole response, ``usage`` included). A turn that fails before any text is an ordinary error
status; after the first piece, an ``error`` event ends the stream. ``usage`` counts the
model's tokens over the turn's model calls; ``status`` is ``"incomplete"`` (reason
``max_output_tokens``) when the model's answer was cut at its length limit.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from hermes.gateway.client_turn import ClientTurn, TurnReport
from hermes.gateway.platforms import api_turn
from hermes.gateway.platforms.api_chat import optional_field, requested_model
from hermes.gateway.platforms.api_http import RequestError, read_json
from hermes.state.responses import StoredResponse
from hermes.text import valid_text

if TYPE_CHECKING:
    from hermes.gateway.platforms.api_server import APIServerAdapter

_SYSTEM_ROLES = ("system", "developer")
_ROLES = ("user", "assistant", "system", "developer")
_TEXT_PARTS = ("input_text", "output_text", "text")


@dataclass(frozen=True)
class ResponsesRequest:
    """A validated ``POST /v1/responses`` body."""

    text: str
    history: list[dict[str, Any]]
    system_prompt: str | None
    instructions: str | None
    previous_response_id: str | None
    model: str
    stream: bool
    store: bool
    user: str | None


def parse_responses_request(body: object, known_models: list[str]) -> ResponsesRequest:
    """Validate a request body (its strings already valid text)."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    model = requested_model(body, known_models)
    instructions = optional_field(body, "instructions", str, "a string or null")
    previous = optional_field(body, "previous_response_id", str, "a string or null")
    stream = bool(optional_field(body, "stream", bool, "true, false or null"))
    store = optional_field(body, "store", bool, "true, false or null")
    user = optional_field(body, "user", str, "a string or null")
    raw = body.get("input")
    if raw is None:
        raise RequestError(400, "'input' is required: a string or a list of message items",
                           param="input", code="missing_required_parameter")
    if isinstance(raw, str):
        items = [{"role": "user", "content": raw}]
    elif isinstance(raw, list) and raw:
        items = [_item(item, f"input[{index}]") for index, item in enumerate(raw)]
    else:
        raise RequestError(400, "'input' must be a string or a non-empty list of message "
                           "items", param="input")
    last = items[-1]
    if last["role"] != "user" or not last["content"].strip():
        raise RequestError(400, "the last input item must be a user message with text: it "
                           "is the new input", param="input")
    prompts = [instructions or ""] + [m["content"] for m in items if m["role"] in _SYSTEM_ROLES]
    return ResponsesRequest(
        text=last["content"],
        history=[m for m in items[:-1] if m["role"] not in _SYSTEM_ROLES],
        system_prompt="\n\n".join(p for p in prompts if p) or None,
        instructions=instructions, previous_response_id=previous or None, model=model,
        stream=stream, store=store is not False, user=user,
    )


def _item(item: object, where: str) -> dict[str, str]:
    """One input item as the transcript keeps a message: ``role`` and text ``content``."""
    if not isinstance(item, dict):
        raise RequestError(400, f"{where} must be a message item: an object with 'role' and "
                           "'content'", param=where)
    kind = item.get("type", "message")
    if kind != "message":
        raise RequestError(400, f"{where}: items of type {str(kind)[:40]!r} are not supported "
                           "here; send message items (role and content)", param=f"{where}.type")
    role = item.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        raise RequestError(400, f"{where}.role must be one of {', '.join(_ROLES)}",
                           param=f"{where}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise RequestError(400, f"{where}.content must be a string or a list of parts",
                           param=f"{where}.content")
    pieces: list[str] = []
    for part in content:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise RequestError(400, f"{where}.content parts must be objects with a 'type'",
                               param=f"{where}.content")
        if part["type"] in _TEXT_PARTS:
            if not isinstance(part.get("text"), str):
                raise RequestError(400, f"{where}.content text parts need a string 'text'",
                                   param=f"{where}.content")
            pieces.append(part["text"])
    return {"role": role, "content": "\n".join(pieces)}


@dataclass
class _Answer:
    """What a response object says, as it grows: its ids, the request's fields, the text."""

    id: str
    message_id: str
    created_at: int
    request: ResponsesRequest

    def body(self, report: TurnReport | None = None, text: str = "") -> dict[str, Any]:
        """The response in progress (no ``report`` yet), or finished with ``text``."""
        incomplete = report is not None and report.finish_reason == "length"
        status = ("in_progress" if report is None else
                  "incomplete" if incomplete else "completed")
        return {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "model": self.request.model,
            "output": [] if report is None else [self.message(text, status)],
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": self.request.instructions,
            "previous_response_id": self.request.previous_response_id,
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
            "store": self.request.store, "user": self.request.user, "metadata": {},
            "text": {"format": {"type": "text"}},
            "usage": None if report is None else _usage(report),
        }

    def message(self, text: str, status: str) -> dict[str, Any]:
        return {"type": "message", "id": self.message_id, "role": "assistant",
                "status": status, "content": [_part(text)]}


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _usage(report: TurnReport) -> dict[str, Any]:
    return {"input_tokens": report.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": report.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": report.prompt_tokens + report.completion_tokens}


class ResponsesRoutes:
    """The three routes, on the adapter's dispatch, caller and store."""

    def __init__(self, adapter: APIServerAdapter) -> None:
        self._adapter = adapter

    def add_to(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/responses", self._create)
        router.add_get("/v1/responses/{response_id}", self._retrieve)
        router.add_delete("/v1/responses/{response_id}", self._delete)

    @property
    def _owner(self) -> str:
        return self._adapter.caller.identity

    async def _create(self, request: web.Request) -> web.StreamResponse:
        adapter = self._adapter
        parsed = parse_responses_request(
            await read_json(request, adapter.settings.max_body_bytes), adapter.models)
        store = api_turn.attached(adapter.session_store)
        history: list[dict[str, Any]] = []
        if parsed.previous_response_id is not None:
            previous = await self._stored(parsed.previous_response_id, "previous_response_id")
            history = previous.conversation
        client = ClientTurn(caller=self._owner, history=history + parsed.history,
                            system_prompt=parsed.system_prompt)
        event = api_turn.client_event(request, adapter.platform, parsed.text, client,
                                      parsed.user)
        answer = _Answer(id=f"resp_{uuid.uuid4().hex}", message_id=f"msg_{uuid.uuid4().hex}",
                         created_at=int(time.time()), request=parsed)

        async def keep(report: TurnReport, text: str) -> dict[str, Any]:
            body = answer.body(report, text)
            if parsed.store:
                conversation = [*(client.history or []), {"role": "user", "content": parsed.text},
                                {"role": "assistant", "content": text}]
                await store.call(lambda s: s.state_db.save_response(
                    answer.id, self._owner, body, conversation, session_id=report.session_id,
                    previous_response_id=parsed.previous_response_id))
            return body

        if parsed.stream:
            events = _ResponseEvents(request, answer,
                                     lambda: api_turn.session_headers(client.session_id))
            streamed = await api_turn.stream(adapter.dispatch, event, events)
            if isinstance(streamed, web.StreamResponse):
                return streamed
            report, text = streamed
            return await events.finish(text, await keep(report, text))
        report = await api_turn.answer(adapter.dispatch, event)
        body = await keep(report, report.reply or "")
        return web.json_response(body, headers=api_turn.session_headers(report.session_id))

    async def _retrieve(self, request: web.Request) -> web.Response:
        stored = await self._stored(valid_text(request.match_info["response_id"]))
        return web.json_response(stored.response)

    async def _delete(self, request: web.Request) -> web.Response:
        response_id = valid_text(request.match_info["response_id"])
        store = api_turn.attached(self._adapter.session_store)
        owner = self._owner
        if not await store.call(lambda s: s.state_db.delete_response(response_id, owner)):
            raise _not_found(response_id, None)
        return web.json_response({"id": response_id, "object": "response", "deleted": True})

    async def _stored(self, response_id: str, param: str | None = None) -> StoredResponse:
        store = api_turn.attached(self._adapter.session_store)
        owner = self._owner
        stored = await store.call(lambda s: s.state_db.get_response(response_id, owner))
        if stored is None:
            raise _not_found(response_id, param)
        return stored


def _not_found(response_id: str, param: str | None) -> RequestError:
    return RequestError(404, f"no stored response {response_id[:80]!r} for this key (it was "
                        "never stored, was deleted, or belongs to another key)", param=param,
                        code="response_not_found", kind="not_found_error")


class _ResponseEvents:
    """Writes a response's stream events (see the module docstring). The response starts
    with the first write, with the events that open the output message."""

    def __init__(self, request: web.Request, answer: _Answer,
                 headers: Callable[[], dict[str, str]]) -> None:
        self._request = request
        self._answer = answer
        self._headers = headers
        self._sequence = 0
        self.response: web.StreamResponse | None = None

    async def _open(self) -> web.StreamResponse:
        if self.response is None:
            self.response = web.StreamResponse(headers={
                **self._headers(), "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache"})
            await self.response.prepare(self._request)
            answer = self._answer
            await self._event("response.created", response=answer.body())
            await self._event("response.in_progress", response=answer.body())
            await self._event("response.output_item.added", output_index=0,
                              item={**answer.message("", "in_progress"), "content": []})
            await self._event("response.content_part.added", **self._at(), part=_part(""))
        return self.response

    async def _event(self, kind: str, **data: Any) -> None:
        response = await self._open()
        payload = json.dumps({"type": kind, "sequence_number": self._sequence, **data})
        self._sequence += 1
        await response.write(f"event: {kind}\ndata: {payload}\n\n".encode())

    def _at(self) -> dict[str, Any]:
        return {"item_id": self._answer.message_id, "output_index": 0, "content_index": 0}

    async def text(self, piece: str) -> None:
        await self._event("response.output_text.delta", **self._at(), delta=piece, logprobs=[])

    async def keepalive(self) -> None:
        await (await self._open()).write(b": keepalive\n\n")

    async def finish(self, text: str, body: dict[str, Any]) -> web.StreamResponse:
        await self._event("response.output_text.done", **self._at(), text=text, logprobs=[])
        await self._event("response.content_part.done", **self._at(), part=_part(text))
        await self._event("response.output_item.done", output_index=0, item=body["output"][0])
        await self._event("response.completed", response=body)
        return await self._end()

    async def error(self, error: RequestError) -> web.StreamResponse:
        """After the start an error is an event, as OpenAI sends one mid-stream."""
        await self._event("error", code=error.code, message=error.message, param=error.param)
        return await self._end()

    async def _end(self) -> web.StreamResponse:
        response = await self._open()
        await response.write_eof()
        return response
