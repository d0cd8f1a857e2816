"""Context-window sizes of chat models.

The agent uses the size to decide how much old history fits into one request. A short
table of well-known model families is enough here: the lookup is by prefix, longest first,
so ``gpt-4o-mini-2024-07-18`` resolves through ``gpt-4o``. Anything unknown gets
``DEFAULT_CONTEXT_LENGTH``, and an explicit ``config_context_length`` (``model.context_length``
in ``config.yaml``) always wins, which is how a local server with a small window is described.

The gateway's tests replace ``get_model_context_length`` with ``monkeypatch``; callers look it
up through this module at call time so the replacement takes effect.
"""

from __future__ import annotations

import json
from typing import Any

DEFAULT_CONTEXT_LENGTH = 128_000

# Prefix -> tokens. Vendor prefixes such as ``openai/`` or ``anthropic/`` (OpenRouter
# style) are stripped before the lookup.
_CONTEXT_LENGTHS: dict[str, int] = {
    "gpt-3.5-turbo": 16_385,
    "gpt-4-turbo": 128_000,
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4": 8_192,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude": 200_000,
    "gemini-1.5": 1_048_576,
    "gemini-2": 1_048_576,
    "llama-3.1": 131_072,
    "llama3.1": 131_072,
    "llama3": 8_192,
    "mistral": 32_768,
    "qwen2.5": 32_768,
    "qwen3": 131_072,
    "deepseek": 128_000,
    "hermes-3": 131_072,
    "hermes-4": 131_072,
    "offline": DEFAULT_CONTEXT_LENGTH,
}
_PREFIXES_LONGEST_FIRST = sorted(_CONTEXT_LENGTHS, key=len, reverse=True)


def get_model_context_length(
    model: str,
    base_url: str | None = None,
    api_key: str | None = None,
    config_context_length: int | None = None,
    provider: str | None = None,
) -> int:
    """How many tokens ``model`` accepts in one request.

    ``base_url``, ``api_key`` and ``provider`` are accepted for signature compatibility with
    hermes-agent (whose version probes the endpoint); this implementation never touches the
    network, so they do not change the answer.
    """
    if config_context_length is not None and config_context_length > 0:
        return config_context_length
    name = (model or "").strip().lower().rsplit("/", 1)[-1]
    for prefix in _PREFIXES_LONGEST_FIRST:
        if name.startswith(prefix):
            return _CONTEXT_LENGTHS[prefix]
    return DEFAULT_CONTEXT_LENGTH


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """A rough token count (four characters a token) for deciding what fits in a window.

    Good enough to keep a long conversation under the model's limit; not a billing figure.
    """
    characters = 0
    for message in messages:
        for key in ("content", "tool_calls"):
            value = message.get(key)
            if value:
                text = value if isinstance(value, str) else json.dumps(value, default=str)
                characters += len(text)
    return characters // 4 + 4 * len(messages)
