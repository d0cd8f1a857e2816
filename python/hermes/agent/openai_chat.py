"""The chat-completions backend: any OpenAI-compatible server through the ``openai`` package.

Kept apart from ``hermes.agent.backends`` so that a process that never calls a model (the CLI,
a cron job, a writer) does not import the ``openai`` package, which takes most of a second to
import and to tear down at exit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from hermes.agent.backends import ModelConfigError, ModelError, ModelFailure, ModelResponse

# The openai client refuses to start without a key; local servers usually want none.
_PLACEHOLDER_API_KEY = "not-needed"


class OpenAIChatBackend:
    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout: float = 120.0,
        max_retries: int = 2,
    ) -> None:
        self.base_url = base_url
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or _PLACEHOLDER_API_KEY,
            timeout=timeout,
            max_retries=max_retries,
        )
        self._endpoint = str(self._client.base_url)
        # Untyped on purpose: the request types of ``create`` differ between openai
        # releases (1.x and later), while the plain dicts sent here suit them all.
        self._completions: Any = self._client.chat.completions
        self._max_retries = max_retries

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, model: str
    ) -> ModelResponse:
        with self._translated_errors(model):
            response: ChatCompletion = self._completions.create(
                model=model, messages=messages, **_tool_arguments(tools)
            )
        if not response.choices:
            raise ModelError(f"{self._endpoint} returned no choices for model {model!r}")
        choice = response.choices[0]
        message = choice.message
        usage = response.usage
        return ModelResponse(
            content=message.content,
            tool_calls=[
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.function.name,
                        "arguments": call.function.arguments,
                    },
                }
                for call in message.tool_calls or []
                if call.type == "function"
            ],
            finish_reason=choice.finish_reason,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            reasoning=_reasoning_of(message),
        )

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        model: str,
        on_delta: Callable[[str], None],
    ) -> ModelResponse:
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        result = ModelResponse(content=None)
        with self._translated_errors(model):
            chunks: Iterable[ChatCompletionChunk] = self._completions.create(
                model=model,
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
                **_tool_arguments(tools),
            )
            for chunk in chunks:
                if chunk.usage is not None:
                    result.prompt_tokens = chunk.usage.prompt_tokens
                    result.completion_tokens = chunk.usage.completion_tokens
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                    on_delta(delta.content)
                if piece := _reasoning_of(delta):
                    reasoning.append(piece)
                for part in delta.tool_calls or []:
                    _merge_tool_call_delta(calls, part)
                if choice.finish_reason:
                    result.finish_reason = choice.finish_reason
        result.content = "".join(text) if text else None
        result.reasoning = "".join(reasoning) or None
        result.tool_calls = [calls[index] for index in sorted(calls)]
        return result

    def _translated_errors(self, model: str) -> AbstractContextManager[None]:
        return _translated_errors(self._endpoint, model, self._max_retries)


def _tool_arguments(tools: list[dict[str, Any]]) -> dict[str, Any]:
    # Some servers reject an empty ``tools`` list, so leave the key out entirely.
    return {"tools": tools} if tools else {}


def _reasoning_of(message: object) -> str | None:
    """Reasoning text that OpenAI-compatible servers put beside the content (non-standard)."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None)
        if isinstance(value, str) and value:
            return value
    return None


def _merge_tool_call_delta(calls: dict[int, dict[str, Any]], part: Any) -> None:
    """Streamed tool calls arrive in pieces keyed by index; names and ids come once,
    arguments as consecutive fragments."""
    call = calls.setdefault(
        part.index,
        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
    )
    if part.id:
        call["id"] = part.id
    if part.function is not None:
        if part.function.name:
            call["function"]["name"] += part.function.name
        if part.function.arguments:
            call["function"]["arguments"] += part.function.arguments


@contextmanager
def _translated_errors(endpoint: str, model: str, max_retries: int) -> Iterator[None]:
    """Turn the openai package's exceptions into ours, with advice and a ``ModelFailure``."""
    where = f"model endpoint {endpoint}"
    try:
        yield
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        raise ModelConfigError(
            f"the {where} refused the model API key (HTTP {exc.status_code}); set "
            "model.api_key in $HERMES_HOME/config.yaml or OPENAI_API_KEY to a key it accepts",
            ModelFailure.KEY_REFUSED,
        ) from exc
    except openai.NotFoundError as exc:
        raise ModelConfigError(
            f"the {where} has no model {model!r} or no chat-completions route "
            f"(HTTP 404: {_detail(exc)}); check model.name and that model.base_url ends "
            "in the API root (often /v1)",
            ModelFailure.NOT_FOUND,
        ) from exc
    except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
        raise ModelError(
            f"the {where} refused the request for model {model!r} (HTTP {exc.status_code}: "
            f"{_detail(exc)}); the conversation or tool list may not suit this model",
            ModelFailure.REQUEST_REFUSED,
        ) from exc
    except openai.RateLimitError as exc:
        raise ModelError(
            f"the {where} is still rate limiting after {max_retries} retries; wait and try "
            "again, or raise model.max_retries",
            ModelFailure.RATE_LIMITED,
        ) from exc
    except openai.APITimeoutError as exc:
        raise ModelError(
            f"the {where} did not answer in time; raise model.timeout or check the server",
            ModelFailure.TIMEOUT,
        ) from exc
    except openai.APIConnectionError as exc:
        raise ModelError(
            f"cannot reach the {where}: {exc}; is the server running and model.base_url right?",
            ModelFailure.UNREACHABLE,
        ) from exc
    except openai.APIStatusError as exc:
        raise ModelError(
            f"the {where} failed (HTTP {exc.status_code}: {_detail(exc)}) after "
            f"{max_retries} retries"
        ) from exc
    except openai.OpenAIError as exc:
        raise ModelError(f"the {where} failed: {exc}") from exc


def _detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return exc.message
