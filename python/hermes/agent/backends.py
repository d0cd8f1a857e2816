"""Model backends: what the agent loop calls to get the model's next message.

One protocol, two implementations:

* ``OpenAIChatBackend`` (``hermes.agent.openai_chat``, imported only when a model endpoint is
  configured) speaks the chat-completions API through the ``openai`` package, so any
  OpenAI-compatible server works (OpenAI, OpenRouter, vLLM, Ollama, llama.cpp, ...). Retries on
  429 and 5xx are the client's own (``max_retries``, exponential backoff); what is left after
  them becomes a ``ModelError`` or, when the fix is a setting, a ``ConfigError``, each naming
  the endpoint and what to do.
* ``OfflineBackend`` needs no network. It answers every message by saying it is offline and
  echoing the message, so a freshly installed gateway works end to end before any model is
  configured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from hermes.agent.model_metadata import estimate_tokens
from hermes.config import ModelConfig
from hermes.errors import HermesError


class ModelError(HermesError):
    """The model endpoint failed in a way a retry did not fix."""


@dataclass
class ModelResponse:
    content: str | None
    # OpenAI shape: [{"id", "type": "function", "function": {"name", "arguments"}}]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning: str | None = None


class ModelBackend(Protocol):
    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, model: str
    ) -> ModelResponse: ...


@runtime_checkable
class StreamingBackend(Protocol):
    """A backend that can also hand out the reply's text as it is generated."""

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        model: str,
        on_delta: Callable[[str], None],
    ) -> ModelResponse: ...


class OfflineBackend:
    """Answers without a model, plainly saying so."""

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, model: str
    ) -> ModelResponse:
        said = next(
            (m.get("content") for m in reversed(messages) if m.get("role") == "user"), None
        )
        echo = said if isinstance(said, str) else "(no text)"
        content = (
            "hermes is running offline: no model endpoint is configured, so this reply is "
            f"an echo.\nYou said: {echo}\n"
            "To talk to a model, set model.base_url (and model.api_key, model.name) in "
            "$HERMES_HOME/config.yaml, or HERMES_BASE_URL / OPENAI_API_KEY / HERMES_MODEL."
        )
        return ModelResponse(
            content=content,
            finish_reason="stop",
            prompt_tokens=estimate_tokens(messages),
            completion_tokens=estimate_tokens([{"content": content}]),
        )


def make_backend(config: ModelConfig) -> ModelBackend:
    """OpenAI-compatible when an endpoint or key is configured, otherwise offline."""
    if not config.is_remote:
        return OfflineBackend()
    # Imported here: the openai package is slow to import and most processes never need it.
    from hermes.agent.openai_chat import OpenAIChatBackend

    return OpenAIChatBackend(
        base_url=config.base_url,
        api_key=config.api_key,
        timeout=config.timeout,
        max_retries=config.max_retries,
    )
