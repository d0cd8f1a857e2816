"""hermes-agent's sessions REST API on the api_server, in its JSON shapes.

Routes::

    GET    /api/sessions                    the caller's sessions, newest first (paged)
    POST   /api/sessions                    a new, empty session (``id``, ``title``,
                                            ``system_prompt``, ``model``; all optional)
    GET    /api/sessions/{id}               one session
    PATCH  /api/sessions/{id}               ``title`` (null clears it), ``end_reason``
    DELETE /api/sessions/{id}               the session and its messages
    GET    /api/sessions/{id}/messages      its messages, oldest first (paged)
    POST   /api/sessions/{id}/fork          a new session with a copy of its messages
    POST   /api/sessions/{id}/chat          one turn (``message`` or ``input``, and
                                            ``system_message`` or ``instructions``)
    POST   /api/sessions/{id}/chat/stream   the same turn as server-sent events

Paged routes take ``limit`` (default 50, at most 200) and ``offset`` query parameters and
answer ``has_more``.

**Who sees what.** These routes expose stored transcripts, so, like continuity on
``/v1/chat/completions``, they need a configured key (403 without one; 401 for a request
without it). A caller (the key, and the ``user`` query parameter when given, as the ``user``
field of a chat request) sees only its *client-visible* sessions: the api_server sessions it
started, through this API or ``/v1/chat/completions`` and ``/v1/responses`` (their
``chat_id`` is the caller's tag, ``hermes.gateway.client_turn``). hermes-agent lists every
session of its database here; sessions of other platforms (Telegram, the CLI) and other keys
are not visible here, and another caller's session id is the same 404 as an unknown one.
A session id chosen at ``POST`` that is already taken (by anyone) is a 409.

A chat turn continues the stored session as ``X-Hermes-Session-Id`` does: its transcript is
what the model sees, and the turn is stored in it; failures answer as on
``/v1/chat/completions`` (``api_turn``). The stream's events are hermes-agent's:
``run.started``, ``message.started``, ``assistant.delta`` per piece, ``assistant.completed``,
``run.completed`` (with ``usage``), then ``done``; a failure after the start is an ``error``
event before ``done``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from hermes._core import Append, Insert
from hermes.errors import StateDbError
from hermes.gateway.client_turn import ClientTurn, TurnReport, caller_chat
from hermes.gateway.commands import MAX_TITLE_LENGTH
from hermes.gateway.config import Platform
from hermes.gateway.events import MessageEvent, SessionSource
from hermes.gateway.platforms import api_turn
from hermes.gateway.platforms.api_auth import check_session_id, require_key
from hermes.gateway.platforms.api_http import RequestError, read_json
from hermes.gateway.session import AsyncSessionStore, SessionStore
from hermes.session_lookup import recent_sessions
from hermes.text import valid_text

if TYPE_CHECKING:
    from hermes.gateway.platforms.api_server import APIServerAdapter

_SESSION_FIELDS = (
    "id", "source", "user_id", "model", "title", "started_at", "ended_at", "end_reason",
    "message_count", "tool_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens", "estimated_cost_usd", "actual_cost_usd",
    "api_call_count", "parent_session_id", "last_active", "preview",
)
_MESSAGE_FIELDS = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "timestamp", "token_count", "finish_reason", "reasoning", "reasoning_content",
)
_PAGE_DEFAULT = 50
_PAGE_MAX = 200


def session_json(session: Mapping[str, Any]) -> dict[str, Any]:
    """A session as clients see it: no system prompt or model config, only whether the
    session has them."""
    shown = {key: session[key] for key in _SESSION_FIELDS if key in session}
    shown["has_system_prompt"] = bool(session.get("system_prompt"))
    shown["has_model_config"] = bool(session.get("model_config"))
    return shown


def _message_json(message: Mapping[str, Any]) -> dict[str, Any]:
    return {key: message[key] for key in _MESSAGE_FIELDS if key in message}


def _page(request: web.Request) -> tuple[int, int]:
    return (_number(request, "limit", _PAGE_DEFAULT, _PAGE_MAX),
            _number(request, "offset", 0, None))


def _number(request: web.Request, name: str, default: int, most: int | None) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit():
        raise RequestError(400, f"the {name!r} query parameter must be a whole number >= 0 "
                           f"(got {valid_text(raw)[:40]!r})", param=name)
    value = int(raw)
    return value if most is None else min(value, most)


def _body_text(body: Mapping[str, Any], *names: str) -> str | None:
    for name in names:
        value = body.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise RequestError(400, f"'{name}' must be a string", param=name)
            return value
    return None


def _title(value: object) -> str | None:
    """A title as stored: whitespace runs made single spaces; ``None`` clears it."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise RequestError(400, "'title' must be a string or null", param="title")
    title = " ".join(value.split())
    if len(title) > MAX_TITLE_LENGTH:
        raise RequestError(400, f"the title is {len(title)} characters long; at most "
                           f"{MAX_TITLE_LENGTH}", param="title", code="invalid_title")
    return title or None


def _new_id() -> str:
    return f"api_{int(time.time())}_{uuid.uuid4().hex[:8]}"


class SessionsRoutes:
    """The routes above, on the adapter's dispatch, caller and store."""

    def __init__(self, adapter: APIServerAdapter) -> None:
        self._adapter = adapter

    def add_to(self, router: web.UrlDispatcher) -> None:
        router.add_get("/api/sessions", self._list)
        router.add_post("/api/sessions", self._create)
        router.add_get("/api/sessions/{session_id}", self._get)
        router.add_patch("/api/sessions/{session_id}", self._patch)
        router.add_delete("/api/sessions/{session_id}", self._delete)
        router.add_get("/api/sessions/{session_id}/messages", self._messages)
        router.add_post("/api/sessions/{session_id}/fork", self._fork)
        router.add_post("/api/sessions/{session_id}/chat", self._chat)
        router.add_post("/api/sessions/{session_id}/chat/stream", self._chat_stream)

    # -- who is asking, and what they may see -----------------------------------------

    async def _caller(self, request: web.Request) -> tuple[AsyncSessionStore, str, str | None]:
        """The store, the caller's chat id and its ``user``; 403 on a server without a key."""
        require_key(self._adapter.caller, "the sessions API", None)
        store = api_turn.attached(self._adapter.session_store)
        user = valid_text(request.query.get("user", "")) or None
        return store, await caller_chat(store, self._adapter.caller.identity, user), user

    def _source(self, chat: str, session_id: str, user: str | None) -> SessionSource:
        # The source a client turn of this session is routed by (client_turn.route).
        return SessionSource(platform=self._adapter.platform, chat_id=chat, chat_type="dm",
                             thread_id=session_id, user_id=user)

    async def _owned(self, request: web.Request) -> tuple[AsyncSessionStore, str, str | None,
                                                         dict[str, Any]]:
        """The caller's session of the path, with the store, chat id and user; 404 for an
        unknown id and for another caller's alike."""
        store, chat, user = await self._caller(request)
        session_id = valid_text(request.match_info["session_id"])
        session = await store.call(lambda s: s.state_db.get_session(session_id))
        if not _visible(session, chat):
            raise RequestError(404, f"no session {session_id[:80]!r} for this caller (the key "
                               "and 'user' that started it see it)", code="session_not_found",
                               kind="not_found_error")
        assert session is not None
        return store, chat, user, session

    # -- routes ------------------------------------------------------------------------

    async def _list(self, request: web.Request) -> web.Response:
        store, chat, _ = await self._caller(request)
        limit, offset = _page(request)
        # The store's listings have no filter on the caller's tag: walk and keep its own.
        rows = await store.call(lambda s: recent_sessions(
            s.state_db, lambda row: _visible(row, chat), source=Platform.API_SERVER.value,
            limit=offset + limit + 1))
        page = rows[offset:offset + limit]
        return web.json_response({"object": "list", "data": [session_json(s) for s in page],
                                  "limit": limit, "offset": offset,
                                  "has_more": len(rows) > offset + limit})

    async def _create(self, request: web.Request) -> web.Response:
        store, chat, user = await self._caller(request)
        body = await self._body(request)
        raw_id = _body_text(body, "id", "session_id")
        session_id = check_session_id(raw_id.strip(), "id") if raw_id else _new_id()
        system_prompt = _body_text(body, "system_prompt")
        model = _body_text(body, "model") or self._adapter.models[0]
        title = _title(body.get("title"))
        source = self._source(chat, session_id, user)
        row = {"id": session_id, "source": source.platform.value, "user_id": user,
               "chat_id": chat, "chat_type": "dm", "thread_id": session_id, "model": model,
               "system_prompt": system_prompt, "title": title, "started_at": time.time()}
        session = await store.call(_create_session, source, row, [])
        return web.json_response({"object": "hermes.session", "session": session_json(session)},
                                 status=201)

    async def _get(self, request: web.Request) -> web.Response:
        *_, session = await self._owned(request)
        return web.json_response({"object": "hermes.session", "session": session_json(session)})

    async def _patch(self, request: web.Request) -> web.Response:
        store, _, _, session = await self._owned(request)
        body = await self._body(request)
        unknown = sorted(set(body) - {"title", "end_reason"})
        if unknown:
            raise RequestError(400, f"these session fields cannot be changed: "
                               f"{', '.join(unknown)[:200]} (only title and end_reason)",
                               param=unknown[0][:40], code="unsupported_session_field")
        changes: dict[str, Any] = {}
        if "title" in body:
            changes["title"] = _title(body["title"])
        end_reason = _body_text(body, "end_reason")
        if end_reason:
            changes.update(ended_at=time.time(), end_reason=end_reason)
        session_id = session["id"]
        if changes:
            await store.call(_update_session, session_id, changes)
        updated = await store.call(lambda s: s.state_db.get_session(session_id)) or session
        return web.json_response({"object": "hermes.session", "session": session_json(updated)})

    async def _delete(self, request: web.Request) -> web.Response:
        store, chat, user, session = await self._owned(request)
        session_id = session["id"]
        await store.call(_delete_session, self._source(chat, session_id, user), session_id)
        return web.json_response({"object": "hermes.session.deleted", "id": session_id,
                                  "deleted": True})

    async def _messages(self, request: web.Request) -> web.Response:
        store, _, _, session = await self._owned(request)
        limit, offset = _page(request)
        session_id = session["id"]
        # session_meta rows are left out before paging, so the page is cut here.
        rows = [m for m in await store.call(lambda s: s.state_db.get_messages(session_id))
                if m.get("role") != "session_meta"]
        page = rows[offset:offset + limit]
        return web.json_response({"object": "list", "session_id": session_id,
                                  "data": [_message_json(m) for m in page], "limit": limit,
                                  "offset": offset, "has_more": len(rows) > offset + limit})

    async def _fork(self, request: web.Request) -> web.Response:
        store, chat, user, parent = await self._owned(request)
        body = await self._body(request)
        raw_id = _body_text(body, "id", "session_id")
        fork_id = check_session_id(raw_id.strip(), "id") if raw_id else _new_id()
        source = self._source(chat, fork_id, user)
        row = {"id": fork_id, "source": source.platform.value, "user_id": user,
               "chat_id": chat, "chat_type": "dm", "thread_id": fork_id,
               "model": parent.get("model"), "system_prompt": parent.get("system_prompt"),
               "parent_session_id": parent["id"], "title": _title(body.get("title")),
               "started_at": time.time()}
        parent_id = parent["id"]
        messages = [m for m in await store.call(
            lambda s: s.state_db.get_messages_as_conversation(parent_id))
            if m.get("role") != "session_meta"]
        fork = await store.call(_create_session, source, row, messages)
        # As hermes-agent's /branch: the original is ended as branched (a later message
        # to it reopens it).
        await store.call(lambda s: s.state_db.end_session(parent_id, "branched"))
        return web.json_response({"object": "hermes.session", "session": session_json(fork)},
                                 status=201)

    async def _chat(self, request: web.Request) -> web.Response:
        event, session_id = await self._chat_event(request)
        report = await api_turn.answer(self._adapter.dispatch, event)
        return web.json_response({
            "object": "hermes.session.chat.completion", "session_id": report.session_id,
            "message": {"role": "assistant", "content": report.reply or ""},
            "usage": _usage(report),
        }, headers=api_turn.session_headers(session_id))

    async def _chat_stream(self, request: web.Request) -> web.StreamResponse:
        event, session_id = await self._chat_event(request)
        events = _RunEvents(request, session_id, event.text)
        streamed = await api_turn.stream(self._adapter.dispatch, event, events)
        if isinstance(streamed, web.StreamResponse):
            return streamed
        report, text = streamed
        return await events.finish(report, text)

    async def _chat_event(self, request: web.Request) -> tuple[MessageEvent, str]:
        _, _, user, session = await self._owned(request)
        body = await self._body(request)
        message = _body_text(body, "message", "input")
        if message is None or not message.strip():
            raise RequestError(400, "'message' is required: the user's text",
                               param="message", code="missing_message")
        system_prompt = _body_text(body, "system_message", "instructions")
        client = ClientTurn(caller=self._adapter.caller.identity, history=None,
                            system_prompt=system_prompt, session_id=session["id"])
        return (api_turn.client_event(request, self._adapter.platform, message, client, user),
                session["id"])

    async def _body(self, request: web.Request) -> dict[str, Any]:
        if not request.can_read_body:
            return {}
        body = await read_json(request, self._adapter.settings.max_body_bytes)
        if not isinstance(body, dict):
            raise RequestError(400, "the request body must be a JSON object")
        return body


def _visible(session: Mapping[str, Any] | None, chat: str) -> bool:
    return (session is not None and session.get("source") == Platform.API_SERVER.value
            and session.get("chat_id") == chat)


def _usage(report: TurnReport) -> dict[str, int]:
    return {"input_tokens": report.prompt_tokens, "output_tokens": report.completion_tokens,
            "total_tokens": report.prompt_tokens + report.completion_tokens}


def _create_session(store: SessionStore, source: SessionSource, row: dict[str, Any],
                    messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The session row (and its messages) in one transaction, refused if its id or title is
    taken; then its routing, so client turns continue it."""
    db = store.state_db
    session_id = row["id"]
    ops: list[Insert | Append] = [Insert("sessions", {k: v for k, v in row.items()
                                                      if v is not None})]
    if messages:
        ops.append(Append(session_id, messages))
    try:
        db.apply(ops)
    except StateDbError as exc:
        if db.get_session(session_id) is not None:
            raise RequestError(409, f"a session {session_id!r} exists already; choose another "
                               "id, or leave it out for a new one", param="id",
                               code="session_exists") from None
        if "UNIQUE" in str(exc):
            raise RequestError(409, f"another session is already titled {row['title']!r}; "
                               "choose another title", param="title",
                               code="invalid_title") from None
        raise
    store.get_or_create_session(source, session_id)
    session = db.get_session(session_id)
    assert session is not None
    return session


def _update_session(store: SessionStore, session_id: str, changes: dict[str, Any]) -> None:
    try:
        store.state_db.update_session(session_id, **changes)
    except StateDbError as exc:
        if "UNIQUE" not in str(exc):
            raise
        raise RequestError(409, f"another session is already titled {changes['title']!r}; "
                           "choose another title", param="title", code="invalid_title") from None


def _delete_session(store: SessionStore, source: SessionSource, session_id: str) -> None:
    """The session's messages and row, its children unlinked, in one transaction; then its
    routing, so a later turn naming it finds nothing."""
    store.state_db.delete_session(session_id)
    store.forget_session(store.session_key(source))


class _RunEvents:
    """Writes a session chat's stream (see the module docstring). The response starts with
    the first write, with ``run.started`` and ``message.started``."""

    def __init__(self, request: web.Request, session_id: str, user_message: str) -> None:
        self._request = request
        self._session_id = session_id
        self._user_message = user_message
        self._run_id = f"run_{uuid.uuid4().hex}"
        self._message_id = f"msg_{uuid.uuid4().hex}"
        self._sequence = 0
        self.response: web.StreamResponse | None = None

    async def _open(self) -> web.StreamResponse:
        if self.response is None:
            self.response = web.StreamResponse(headers={
                **api_turn.session_headers(self._session_id),
                "Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await self.response.prepare(self._request)
            await self._write("run.started",
                              user_message={"role": "user", "content": self._user_message})
            await self._write("message.started",
                              message={"id": self._message_id, "role": "assistant"})
        return self.response

    async def _write(self, name: str, **payload: Any) -> None:
        response = await self._open()
        self._sequence += 1
        data = {"session_id": self._session_id, "run_id": self._run_id, "seq": self._sequence,
                "ts": time.time(), **payload}
        await response.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

    async def text(self, piece: str) -> None:
        await self._write("assistant.delta", message_id=self._message_id, delta=piece)

    async def keepalive(self) -> None:
        await (await self._open()).write(b": keepalive\n\n")

    async def finish(self, report: TurnReport, text: str) -> web.StreamResponse:
        await self._write("assistant.completed", message_id=self._message_id, content=text,
                          completed=True, partial=False, interrupted=False)
        await self._write("run.completed", message_id=self._message_id, completed=True,
                          usage=_usage(report))
        return await self._end()

    async def error(self, error: RequestError) -> web.StreamResponse:
        await self._write("error", message=error.message, code=error.code)
        return await self._end()

    async def _end(self) -> web.StreamResponse:
        await self._write("done")
        response = await self._open()
        await response.write_eof()
        return response
