"""Model backends: what the agent loop calls to get the model's next message.

One protocol, two implementations:

* ``OpenAIChatBackend`` (``hermes.agent.openai_chat``, imported only when a model endpoint is
  configured) speaks the chat-completions API through the ``openai`` package, so any
  OpenAI-compatible server works (OpenAI, OpenRouter, vLLM, Ollama, llama.cpp, ...). Retries on
  429 and 5xx are the client's own (``max_retries``, exponential backoff); what is left after
  them becomes a ``ModelError`` (a ``ModelConfigError``, also a ``ConfigError``, when the fix
  is a setting), each naming the endpoint and what to do, and carrying a ``ModelFailure``
  that says which way the call failed, for callers that answer in HTTP statuses.
* ``OfflineBackend`` needs no network. It answers every message by saying it is offline and
  echoing the message, so a freshly installed gateway works end to end before any model is
  configured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from hermes.agent.model_metadata import estimate_tokens
from hermes.config import ModelConfig
from hermes.errors import ConfigError, HermesError


class ModelFailure(Enum):
    """Which way a model call failed; the values are the api_server's error codes."""

    KEY_REFUSED = "model_key_refused"  # HTTP 401/403: the endpoint refused the model key
    NOT_FOUND = "model_not_found"  # HTTP 404: no such model or route there
    REQUEST_REFUSED = "model_request_refused"  # HTTP 400/422: the endpoint refused the request
    RATE_LIMITED = "model_rate_limited"  # HTTP 429, still after the retries
    UNREACHABLE = "model_unreachable"  # connection refused, DNS, TLS
    TIMEOUT = "model_timeout"
    FAILED = "model_failed"  # HTTP 5xx after the retries, or anything else


class ModelError(HermesError):
    """The model endpoint failed in a way a retry did not fix."""

    def __init__(self, message: str, failure: ModelFailure = ModelFailure.FAILED) -> None:
        super().__init__(message)
        self.failure = failure


class ModelConfigError(ModelError, ConfigError):
    """A model-endpoint failure that a setting fixes (a refused key, an unknown model)."""


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
