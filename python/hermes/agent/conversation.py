"""The agent's conversation loop: model → tools → model ..., until a final answer.

``ConversationLoop`` is a mixin; ``hermes.agent.AIAgent`` combines it with the transcript
persistence mixin, which provides the flush, the session identity and the interrupt flag.

Durability: the loop flushes after the user message, after every model response and after
every tool result. The flush writes each message dict of the live list at most once (it tracks
them by identity), so a crash, even ``kill -9``, loses at most the round in progress, and the
exit paths that flush again (shutdown, interrupt) write nothing twice.

The live list starts as a shallow copy of ``conversation_history``: the history's dict objects
are reused as they are, which is how the flush recognises them as already stored.

What the model is sent is built from the live list each round (``_api_messages``): the system
prompt (the configured ``system_prompt``, then the ``ephemeral_system_prompt`` a caller such as
the api_server adds for this agent), then the conversation, every string made valid Unicode
(``hermes.text``) so no caller's broken text reaches the model client.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hermes.agent import model_metadata
from hermes.agent.backends import (
    ModelBackend,
    ModelError,
    ModelFailure,
    ModelResponse,
    OfflineBackend,
    StreamingBackend,
    make_backend,
)
from hermes.agent.tools import Tool, ToolRegistry, default_registry
from hermes.config import OFFLINE_MODEL, HermesConfig, load_config
from hermes.errors import ConfigError, HermesError
from hermes.text import valid_strings

logger = logging.getLogger(__name__)

Message = dict[str, Any]

#: When set (by a platform that streams, such as the api_server), the model's reply text is
#: passed to this callable piece by piece as it is generated, from the agent's thread. A
#: context variable reaches the agent because the gateway runs agents with the caller's
#: context copied into the worker thread.
reply_stream: ContextVar[Callable[[str], None] | None] = ContextVar(
    "hermes_reply_stream", default=None
)
#: The chat platform's id of the message a turn answers, set by the gateway for the turn; the
#: user row carries it (``platform_message_id``), so a message the platform delivers again
#: is recognised in the transcript (``hermes.gateway.redelivery``).
inbound_message_id: ContextVar[str | None] = ContextVar("hermes_inbound_message_id",
                                                        default=None)

# Only these roles and keys go to a chat-completions endpoint. The transcript carries more
# (``session_meta`` rows, ``tool_name``, ``finish_reason``, reasoning), which strict servers
# reject as unknown properties.
_API_KEYS: dict[str, tuple[str, ...]] = {
    "system": ("role", "content"),
    "user": ("role", "content"),
    "assistant": ("role", "content", "tool_calls"),
    "tool": ("role", "tool_call_id", "content"),
}
# Share of the context window the request may fill; the rest is the reply's.
_PROMPT_SHARE = 0.75
_INTERRUPTED_TEXT = "Interrupted before the turn finished."
_TOOL_SKIPPED = "[not run: the turn was interrupted]"
_TOOL_CUT_OFF = "[no result: the turn was cut off before this tool finished]"


class ConversationLoop:
    # Class-level defaults: the loop's collaborators are set by ``_init_conversation``; these
    # keep attribute reads safe on agents built with ``object.__new__``.
    model: str = OFFLINE_MODEL
    system_prompt: str | None = None
    ephemeral_system_prompt: str | None = None
    max_iterations: int = 20
    context_length: int = model_metadata.DEFAULT_CONTEXT_LENGTH
    backend: ModelBackend = OfflineBackend()  # stateless, so one shared default is safe
    tool_registry: ToolRegistry = ToolRegistry()  # empty; replaced per agent, never filled

    if TYPE_CHECKING:  # provided by hermes.agent.persistence.TranscriptPersistence
        session_id: str | None
        _session_messages: list[Any]

        def _flush_messages_to_session_db(
            self, messages: Sequence[Any], conversation_history: Sequence[Any] | None = None
        ) -> bool | None: ...

        @property
        def is_interrupted(self) -> bool: ...

        def _interrupt_flag(self) -> threading.Event: ...

        def _spool_unflushed(
            self, messages: Sequence[Any], conversation_history: Sequence[Any] | None = None
        ) -> bool: ...

        def _record_usage(self, prompt_tokens: int, completion_tokens: int, model: str) -> None: ...

    def _init_conversation(
        self,
        *,
        model: str | None,
        backend: ModelBackend | None,
        tools: ToolRegistry | list[Tool] | None,
        system_prompt: str | None,
        max_iterations: int,
        api_key: str | None,
        base_url: str | None,
        **extra: Any,
    ) -> None:
        """Set up the loop's collaborators; called by ``AIAgent.__init__``.

        Unset arguments come from ``hermes.config`` (config.yaml, then environment). With no
        ``backend`` the agent talks to an OpenAI-compatible endpoint when a ``base_url`` or
        ``api_key`` is known and runs offline otherwise. ``extra`` may carry ``config`` (a
        ``HermesConfig`` to use instead of reading one) and ``ephemeral_system_prompt`` (sent
        after the system prompt, as hermes-agent does: a client's own instructions); other
        keys, which callers written for hermes-agent pass, are ignored.
        """
        config = extra.pop("config", None)
        if not isinstance(config, HermesConfig):
            config = load_config()
        ephemeral = extra.pop("ephemeral_system_prompt", None)
        self.ephemeral_system_prompt = ephemeral if isinstance(ephemeral, str) else None
        if extra:
            logger.debug("AIAgent: ignoring unsupported options %s", sorted(extra))
        model_config = replace(
            config.model,
            name=model or config.model.name,
            base_url=base_url or config.model.base_url,
            api_key=api_key or config.model.api_key,
        )
        if max_iterations < 1:
            raise ConfigError(f"max_iterations must be at least 1, got {max_iterations}")
        if backend is None:
            self.model = model_config.resolved_name()
            self.backend = make_backend(model_config)
        else:  # a caller's own backend: the name is only passed along to it
            self.model = model_config.name or OFFLINE_MODEL
            self.backend = backend
        if isinstance(tools, ToolRegistry):
            self.tool_registry = tools
        elif tools is not None:
            self.tool_registry = ToolRegistry(tools)
        else:
            self.tool_registry = default_registry(config.tools)
        self.system_prompt = system_prompt if system_prompt is not None else (
            config.agent.system_prompt
        )
        self.max_iterations = max_iterations
        # Looked up through the module so a test's monkeypatch of it takes effect.
        self.context_length = model_metadata.get_model_context_length(
            self.model,
            base_url=model_config.base_url,
            api_key=model_config.api_key,
            config_context_length=model_config.context_length,
        )

    def run_conversation(
        self,
        user_message: str,
        conversation_history: list[Message] | None = None,
        task_id: str | None = None,
        persist_user_message: str | None = None,
    ) -> dict[str, Any]:
        """Run one turn and return the result dict the gateway reads (SPEC §5).

        Besides SPEC §5's keys it reports the model's side of the turn: ``prompt_tokens`` and
        ``completion_tokens`` summed over its model calls, the last call's ``finish_reason``
        (``"length"`` when the turn stopped at ``max_iterations``), and for a failed model
        call ``failed``, ``error`` (what failed, and what to do) and ``failure`` (the
        ``ModelFailure`` value, e.g. ``"model_key_refused"``). ``final_response`` then says
        what failed in words, for platforms that can only show text.

        ``persist_user_message``, when given, is what the transcript stores as the user's
        message while the model is sent ``user_message`` (the gateway adds resume notes this
        way); the sent text is kept in the row's ``api_content``, as hermes-agent does, so a
        replay sends the same bytes.

        An interrupt ends the turn between rounds (a running tool is stopped) and stays set
        afterwards, so ``close()`` can record why; call ``clear_interrupt()`` before reusing
        the agent (the gateway builds a fresh one instead).
        """
        history = conversation_history or []
        messages: list[Message] = list(history)
        messages.append(_user_message(user_message, persist_user_message))
        self._session_messages = messages
        # The last flush decides: each flush retries whatever earlier ones failed to write.
        persisted = self._flush_messages_to_session_db(messages, conversation_history)

        interrupt = self._interrupt_flag()
        api_calls = 0
        last_prompt_tokens = 0
        prompt_tokens = completion_tokens = 0
        finish_reason: str | None = None
        final_response: str | None = None
        completed = False
        interrupted = False
        error: str | None = None
        failure: ModelFailure | None = None
        streamed_before = False
        while True:
            if self.is_interrupted:
                interrupted = True
                final_response = _INTERRUPTED_TEXT
                break
            if api_calls >= self.max_iterations:
                final_response = (
                    f"I stopped after {api_calls} model calls without reaching a final answer "
                    "(the limit is agent.max_iterations). Ask me to continue, or raise the limit."
                )
                messages.append({"role": "assistant", "content": final_response})
                persisted = self._flush_messages_to_session_db(messages, conversation_history)
                finish_reason = "length"
                break
            api_calls += 1
            try:
                response = self._call_model(messages, separate=streamed_before)
            except HermesError as exc:
                # The gateway and the terminal chat show this to the user; the turn so far
                # (at least the user message) is already stored.
                logger.warning("model call failed (task %s): %s", task_id, exc)
                error = str(exc)
                failure = exc.failure if isinstance(exc, ModelError) else ModelFailure.FAILED
                final_response = f"The model call failed: {exc}"
                break
            streamed_before = streamed_before or bool(response.content)
            last_prompt_tokens = response.prompt_tokens
            prompt_tokens += response.prompt_tokens
            completion_tokens += response.completion_tokens
            finish_reason = response.finish_reason
            messages.append(_assistant_message(response))
            persisted = self._flush_messages_to_session_db(messages, conversation_history)
            if not isinstance(self.backend, OfflineBackend):  # its counts are estimates
                self._record_usage(response.prompt_tokens, response.completion_tokens,
                                   self.model)
            if not response.tool_calls:
                final_response = response.content or ""
                completed = True
                break
            persisted = self._answer_tool_calls(
                messages, response.tool_calls, conversation_history, interrupt, task_id
            )

        if persisted is False:
            # A turn must not end with messages that only live in memory: the next turn
            # starts from the stored transcript. Spool what the database refused.
            persisted = self._spool_unflushed(messages, conversation_history)
        return {
            "final_response": final_response,
            "messages": messages,
            "tools": self.tool_registry.schemas(),
            "history_offset": len(history),
            "last_prompt_tokens": last_prompt_tokens,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "finish_reason": finish_reason,
            "completed": completed,
            "interrupted": interrupted,
            "failed": error is not None,
            "error": error,
            "failure": failure.value if failure is not None else None,
            "api_calls": api_calls,
            "model": self.model,
            "session_id": self.session_id,
            "agent_persisted": persisted,
        }

    def _answer_tool_calls(
        self,
        messages: list[Message],
        tool_calls: list[dict[str, Any]],
        conversation_history: list[Message] | None,
        interrupt: threading.Event,
        task_id: str | None,
    ) -> bool | None:
        """Run each call and append its result, flushing after each; returns the last flush's
        result."""
        persisted: bool | None = None
        for call in tool_calls:
            function = call.get("function") or {}
            name = str(function.get("name", ""))
            if self.is_interrupted:
                content = _TOOL_SKIPPED
            else:
                content = self.tool_registry.call(
                    name, function.get("arguments"), interrupt=interrupt, task_id=task_id
                )
            # Every tool call gets its result row, even when skipped: endpoints reject a
            # history with an unanswered tool call, and the next turn sends this history.
            messages.append(
                {"role": "tool", "tool_call_id": call.get("id"), "tool_name": name,
                 "content": content}
            )
            persisted = self._flush_messages_to_session_db(messages, conversation_history)
        return persisted

    def _call_model(self, messages: list[Message], *, separate: bool) -> ModelResponse:
        prompts = [p for p in (self.system_prompt, self.ephemeral_system_prompt) if p]
        request = self._fit_to_context(_api_messages(messages, "\n\n".join(prompts)))
        tools = self.tool_registry.schemas()
        sink = reply_stream.get()
        if sink is None or not isinstance(self.backend, StreamingBackend):
            return self.backend.complete(request, tools, model=self.model)
        gap_pending = separate

        def on_delta(text: str) -> None:
            nonlocal gap_pending
            if gap_pending:
                # Text of an earlier round (said before a tool call) is already on the
                # wire; keep this round's text from running into it.
                sink("\n\n")
                gap_pending = False
            sink(text)

        return self.backend.stream(request, tools, model=self.model, on_delta=on_delta)

    def _fit_to_context(self, request: list[Message]) -> list[Message]:
        """Drop the oldest whole turns until the request fits the model's window.

        A turn starts at a user message, so a tool result never loses its tool call. The
        system prompt and the current turn always stay; the transcript itself is untouched.
        """
        budget = int(self.context_length * _PROMPT_SHARE)
        head = request[:1] if request and request[0]["role"] == "system" else []
        body = request[len(head):]
        while model_metadata.estimate_tokens(head + body) > budget:
            starts = [i for i, m in enumerate(body) if m["role"] == "user" and i > 0]
            if not starts:
                break
            body = body[starts[0]:]
        return head + body


def _user_message(sent: str, stored: str | None) -> Message:
    message: Message = {"role": "user", "content": sent}
    if stored is not None and stored != sent:
        message = {"role": "user", "content": stored, "api_content": sent}
    platform_id = inbound_message_id.get()
    if platform_id:
        message["platform_message_id"] = platform_id
    return message


def _api_messages(messages: list[Message], system_prompt: str | None) -> list[Message]:
    request: list[Message] = [
        {"role": "system", "content": valid_strings(system_prompt)}] if system_prompt else []
    unanswered: list[str] = []
    for message in messages:
        role = str(message.get("role"))
        keys = _API_KEYS.get(role)
        if keys is None:  # session_meta and other bookkeeping rows
            continue
        if role != "tool":
            # A cut-off turn (shutdown, crash) can leave tool calls without results, which
            # endpoints reject: answer them before the conversation moves on.
            request.extend(_placeholder_result(call_id) for call_id in unanswered)
            unanswered = []
        # ``content`` is always sent (null for a pure tool-call message); other keys only
        # when set. ``api_content`` is the exact text once sent in place of ``content``.
        sent = {k: message.get(k) for k in keys if k == "content" or message.get(k)}
        if isinstance(message.get("api_content"), str):
            sent["content"] = message["api_content"]
        request.append(valid_strings(sent))
        if role == "assistant":
            unanswered = [str(c.get("id")) for c in message.get("tool_calls") or []
                          if isinstance(c, dict) and c.get("id")]
        elif role == "tool" and message.get("tool_call_id") in unanswered:
            unanswered.remove(message["tool_call_id"])
    return request


def _placeholder_result(call_id: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": _TOOL_CUT_OFF}


def _assistant_message(response: ModelResponse) -> Message:
    message: Message = {"role": "assistant", "content": response.content}
    if response.tool_calls:
        message["tool_calls"] = response.tool_calls
    message["finish_reason"] = response.finish_reason
    if response.reasoning:
        message["reasoning"] = response.reasoning
    return message
