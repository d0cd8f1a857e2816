"""``/v1/chat/completions`` in OpenAI's shapes: the request read into a conversation, and the
answer written back as a completion or as server-sent chunks.

A request's ``messages`` are the conversation: its ``system`` and ``developer`` messages,
joined in order, are the client's system prompt; the last message must be a user message
with text (the new input); the user, assistant (with ``tool_calls``) and tool messages before
it are the history. Text parts of a content list are joined with newlines; other parts
(images, audio, files) are not passed on. ``model`` may be left out; given, it must be one
``/v1/models`` lists. ``stream`` may be true, false or null; with ``stream_options:
{"include_usage": true}`` a stream ends with a chunk carrying ``usage`` and no choices, as
OpenAI's does. Every problem is a ``RequestError`` (400, or 404 for an unknown model) naming
the field.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from hermes.gateway.client_turn import TurnReport
from hermes.gateway.platforms.api_http import RequestError

_SYSTEM_ROLES = ("system", "developer")
_ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class ChatRequest:
    """A validated ``/v1/chat/completions`` body."""

    text: str
    history: list[dict[str, Any]]
    system_prompt: str | None
    user: str | None
    model: str
    stream: bool
    include_usage: bool


def parse_chat_request(body: object, known_models: list[str]) -> ChatRequest:
    """Validate a request body (its strings already valid text)."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    model = requested_model(body, known_models)
    stream = optional_field(body, "stream", bool, "true, false or null") or False
    options = optional_field(body, "stream_options", dict, "an object or null")
    if options is not None and not stream:
        raise RequestError(400, "'stream_options' is only allowed when 'stream' is true",
                           param="stream_options")
    include_usage = bool(optional_field(options or {}, "include_usage", bool, "true, false or null",
                                   where="stream_options.include_usage"))
    user = optional_field(body, "user", str, "a string")

    messages = body.get("messages")
    if messages is None:
        raise RequestError(400, "'messages' is required: a list of chat messages",
                           param="messages", code="missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list of chat messages",
                           param="messages")
    parsed = [_message(message, f"messages[{index}]") for index, message in enumerate(messages)]
    last = parsed[-1]
    if last["role"] != "user" or not str(last["content"]).strip():
        raise RequestError(400, "the last message must be a user message with text: it is "
                           "the new input", param=f"messages[{len(messages) - 1}]")
    prompts = [str(m["content"]) for m in parsed if m["role"] in _SYSTEM_ROLES]
    return ChatRequest(
        text=str(last["content"]),
        history=[m for m in parsed[:-1] if m["role"] not in _SYSTEM_ROLES],
        system_prompt="\n\n".join(p for p in prompts if p) or None,
        user=user, model=model, stream=stream, include_usage=include_usage,
    )


def requested_model(body: dict[str, Any], known_models: list[str]) -> str:
    """The body's ``model``: one ``/v1/models`` lists (404 otherwise), the first if absent."""
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
    return model


def optional_field(body: dict[str, Any], name: str, kind: type, described: str,
                   where: str | None = None) -> Any:
    """``body[name]``, which must be ``None`` (or absent) or of ``kind`` (400 otherwise)."""
    value = body.get(name)
    if value is not None and not isinstance(value, kind):
        raise RequestError(400, f"'{where or name}' must be {described}", param=where or name)
    return value


def _message(message: object, where: str) -> dict[str, Any]:
    """One request message as the transcript keeps it (``role``, text ``content``, and
    ``tool_calls`` / ``tool_call_id`` / ``tool_name`` where they apply)."""
    if not isinstance(message, dict):
        raise RequestError(400, f"{where} must be an object with 'role' and 'content'",
                           param=where)
    role = message.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        raise RequestError(400, f"{where}.role must be one of {', '.join(sorted(_ROLES))}",
                           param=f"{where}.role")
    text = _text(message.get("content"), f"{where}.content")
    parsed: dict[str, Any] = {"role": role, "content": text}
    if role == "assistant":
        calls = optional_field(message, "tool_calls", list, "a list or null", f"{where}.tool_calls")
        if calls:
            parsed["tool_calls"] = [_tool_call(call, f"{where}.tool_calls[{index}]")
                                    for index, call in enumerate(calls)]
        elif text is None:
            raise RequestError(400, f"{where} needs 'content' or 'tool_calls'",
                               param=f"{where}.content")
    elif role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise RequestError(400, f"{where}.tool_call_id is required for a tool message",
                               param=f"{where}.tool_call_id")
        parsed["tool_call_id"] = call_id
        name = optional_field(message, "name", str, "a string", f"{where}.name")
        if name:
            parsed["tool_name"] = name
    if text is None and role != "assistant":
        parsed["content"] = ""
    return parsed


def _text(content: object, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise RequestError(400, f"{where} parts must be objects with a 'type'",
                                   param=where)
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise RequestError(400, f"{where} text parts need a string 'text'",
                                       param=where)
                pieces.append(part["text"])
        return "\n".join(pieces)
    raise RequestError(400, f"{where} must be a string, a list of parts or null", param=where)


def _tool_call(call: object, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if (not isinstance(call, dict) or not isinstance(call.get("id"), str)
            or not isinstance(function, dict) or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str)):
        raise RequestError(400, f"{where} must be {{'id': str, 'type': 'function', "
                           "'function': {'name': str, 'arguments': str}}", param=where)
    return {"id": call["id"], "type": "function",
            "function": {"name": function["name"], "arguments": function["arguments"]}}


def usage(report: TurnReport) -> dict[str, int]:
    return {"prompt_tokens": report.prompt_tokens,
            "completion_tokens": report.completion_tokens,
            "total_tokens": report.prompt_tokens + report.completion_tokens}


def completion(completion_id: str, model: str, report: TurnReport) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": report.reply or ""},
            "logprobs": None,
            "finish_reason": report.finish_reason,
        }],
        "usage": usage(report),
    }


class ChunkWriter:
    """Writes ``chat.completion.chunk`` events in OpenAI's SSE framing. The response starts
    (status 200, headers from ``headers()``) with the first write, so a turn that fails before
    saying anything can still be answered with an error status."""

    def __init__(self, request: web.Request, completion_id: str, model: str,
                 headers: Callable[[], dict[str, str]]) -> None:
        self._request = request
        self._id = completion_id
        self._model = model
        self._headers = headers
        self._created = int(time.time())
        self.response: web.StreamResponse | None = None

    async def _send(self, data: bytes) -> None:
        if self.response is None:
            self.response = web.StreamResponse(headers={
                **self._headers(), "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache"})
            await self.response.prepare(self._request)
            await self.response.write(_sse(self._chunk({"role": "assistant", "content": ""})))
        await self.response.write(data)

    def _chunk(self, delta: dict[str, Any] | None, finish_reason: str | None = None,
               **extra: Any) -> dict[str, Any]:
        choices = [] if delta is None else [
            {"index": 0, "delta": delta, "finish_reason": finish_reason}]
        return {"id": self._id, "object": "chat.completion.chunk", "created": self._created,
                "model": self._model, "choices": choices, **extra}

    async def text(self, piece: str) -> None:
        await self._send(_sse(self._chunk({"content": piece})))

    async def keepalive(self) -> None:
        # An SSE comment every so often keeps proxies from closing a stream while a tool runs.
        await self._send(b": keepalive\n\n")

    async def finish(self, report: TurnReport, include_usage: bool) -> web.StreamResponse:
        await self._send(_sse(self._chunk({}, report.finish_reason)))
        if include_usage:
            await self._send(_sse(self._chunk(None, usage=usage(report))))
        return await self._end()

    async def error(self, error: RequestError) -> web.StreamResponse:
        """After the start an error is an event, as OpenAI sends one mid-stream."""
        await self._send(_sse(error.body()))
        return await self._end()

    async def _end(self) -> web.StreamResponse:
        await self._send(_sse("[DONE]"))
        assert self.response is not None
        await self.response.write_eof()
        return self.response


def _sse(payload: object) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()
