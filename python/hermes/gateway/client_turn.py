"""Turns of request/response clients (the api_server): which stored conversation a client's
message belongs to, what its model sees, and what the turn reports back.

An adapter puts a ``ClientTurn`` on the ``MessageEvent`` (``event.client``). It comes in one
of two modes:

* **stateless** (``history`` is a list): the client sent the whole conversation, as OpenAI's
  API has it. The model sees that history (and the client's system prompt), never the stored
  transcript. The turn is still stored, in a session whose id is the conversation's
  fingerprint: ``api-`` and 32 hex digits of HMAC-SHA256, under a random secret kept in the
  database (``SessionStore.client_secret``), of the caller, the client's system prompt and
  its first user message. A UI resending its conversation each time therefore lands in one
  session; a different caller or system prompt never does. The resent history is passed to
  the agent as ``conversation_history``, whose dicts are never written (SPEC §4): a turn
  writes only its new user message and the agent's new messages. The one exception is the
  first turn of a session: a history it arrives with is written once, before the turn, so the
  stored transcript is the whole conversation.
* **continued** (``history`` is ``None``): ``session_id`` names a stored conversation to go
  on with; its stored transcript is the history and the client sends only its new message.

The caller is who asks (``caller``: which gateway key authenticated, as a hash, or
``"anonymous"``) together with the request's ``user`` field (the event's ``user_id``). It
becomes the conversation's chat, as an HMAC tag (``caller-`` and 24 hex digits), and the
session id its thread, so the routing key is ``agent:main:api_server:dm:<tag>:<session id>``
and the sessions row records the tag as ``chat_id``: a session belongs to the caller that
started it. A caller naming another caller's session id looks up its own key, finds nothing,
and gets the same answer as for an id that does not exist (``unknown_session``). The sessions
API finds a caller's sessions by that ``chat_id`` (``caller_chat``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes.gateway.events import MessageEvent
    from hermes.gateway.session import AsyncSessionStore

SESSION_ID_PREFIX = "api-"
CALLER_TAG_PREFIX = "caller-"


@dataclass
class TurnReport:
    """What a client turn's agent run said, beside its text: the model's side of it."""

    session_id: str
    reply: str | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    interrupted: bool
    #: ``hermes.agent.backends.ModelFailure`` value of a failed model call, else ``None``.
    failure: str | None
    error: str | None

    @classmethod
    def of(cls, result: Mapping[str, Any], session_id: str,
           disowned: bool = False) -> TurnReport:
        """From an agent's result dict (SPEC §5; absent keys, as a deployment's own agent
        may leave them, read as a plain answer). A ``disowned`` turn (its result dropped)
        counts as interrupted."""
        reply = result.get("final_response")
        failure = result.get("failure")
        error = result.get("error")
        if result.get("failed") and failure is None:
            failure = "model_failed"
        return cls(
            session_id=session_id,
            reply=str(reply) if reply is not None else None,
            finish_reason=str(result.get("finish_reason") or "stop"),
            prompt_tokens=int(result.get("prompt_tokens") or 0),
            completion_tokens=int(result.get("completion_tokens") or 0),
            interrupted=disowned or bool(result.get("interrupted")),
            failure=str(failure) if failure is not None else None,
            error=str(error) if error is not None else None,
        )


@dataclass
class ClientTurn:
    """A client message's conversation (see the module docstring); the gateway fills in
    ``report`` (or ``unknown_session``) for the adapter to answer with."""

    caller: str
    history: list[dict[str, Any]] | None
    system_prompt: str | None = None
    session_id: str | None = None
    report: TurnReport | None = None
    unknown_session: bool = False

    @property
    def stateless(self) -> bool:
        return self.history is not None


async def route(store: AsyncSessionStore, event: MessageEvent,
                client: ClientTurn) -> MessageEvent:
    """``event`` with its source naming the client's conversation: the caller's tag as the
    chat, the session id (derived for a stateless turn) as the thread."""
    secret = await _secret(store)
    source = event.source
    tag = _tag(secret, client.caller, source.user_id)
    session_id = client.session_id
    if session_id is None:
        first_user = next((m.get("content") for m in client.history or []
                           if m.get("role") == "user"), event.text)
        session_id = SESSION_ID_PREFIX + _digest(
            secret, "conversation", tag, client.system_prompt or "", str(first_user))[:32]
        client.session_id = session_id
    return dataclasses.replace(event, source=dataclasses.replace(
        source, chat_id=CALLER_TAG_PREFIX + tag, chat_type="dm", thread_id=session_id))


async def caller_chat(store: AsyncSessionStore, caller: str, user: str | None) -> str:
    """The chat id the sessions of ``caller`` with ``user`` are stored under (``caller-``
    and the tag): what their ``sessions`` rows record as ``chat_id``."""
    return CALLER_TAG_PREFIX + _tag(await _secret(store), caller, user)


async def _secret(store: AsyncSessionStore) -> bytes:
    secret = store.call_here(lambda s: s.loaded_client_secret)
    if secret is None:  # the first client turn of this process: read (or make) it
        secret = await store.call(lambda s: s.client_secret())
    return secret


def _tag(secret: bytes, caller: str, user: str | None) -> str:
    return _digest(secret, "caller", caller, user or "")[:24]


def _digest(secret: bytes, purpose: str, *parts: str) -> str:
    # JSON keeps the parts apart unambiguously ("a" + "bc" is not "ab" + "c").
    message = json.dumps([purpose, *parts], ensure_ascii=False).encode("utf-8")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()
