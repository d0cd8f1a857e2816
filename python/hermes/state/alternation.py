"""A stored transcript made fit to replay to a model: roles alternate.

Providers expect, after the system prompt, user or tool turns alternating with assistant
turns, and each tool result answering a tool call of the assistant turn before it. A durable
transcript can break that (a turn that stored no answer leaves two user messages; a recovery
path leaves two assistant messages), and a provider then answers with nothing or an HTTP 400.
The repair changes only the list it is given, never the stored rows, in hermes-agent's three
steps:

1. adjacent assistant messages become one, unless either carries a Codex continuation
   (``codex_reasoning_items``, ``codex_message_items``, ``finish_reason="incomplete"``), which
   must be replayed as it is: a provisional verification candidate is replaced by the answer
   after it; otherwise the tool calls are joined, the texts joined by a line break, and the
   first ``reasoning_content`` kept;
2. a tool result that answers no pending tool call (by ``id`` or ``call_id``) of the last
   assistant message, or answers one a second time, is dropped;
3. adjacent user messages with text become one, joined by a blank line, without the
   ``api_content`` that no longer matches it.
"""

from __future__ import annotations

from typing import Any

_VERIFICATION_CANDIDATE = frozenset({"verification_required", "verify_hook_continue"})


def repaired_alternation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with their role alternation repaired (see the module)."""
    return _merge_users(_drop_unasked_tool_results(_merge_assistants(messages)))


def _is_codex_interim(message: dict[str, Any]) -> bool:
    return bool(message.get("codex_reasoning_items") or message.get("codex_message_items")
                or message.get("finish_reason") == "incomplete")


def _merge_assistants(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        previous = out[-1] if out else None
        if (previous is None or message.get("role") != "assistant"
                or previous.get("role") != "assistant"
                or _is_codex_interim(message) or _is_codex_interim(previous)):
            out.append(message)
            continue
        if previous.get("finish_reason") in _VERIFICATION_CANDIDATE:
            out[-1] = message
            continue
        calls = list(previous.get("tool_calls") or []) + list(message.get("tool_calls") or [])
        if calls:
            previous["tool_calls"] = calls
        before, after = previous.get("content"), message.get("content")
        if isinstance(before, str) and isinstance(after, str):
            previous["content"] = "\n".join(t for t in (before.strip(), after.strip()) if t)
        elif not before and after is not None:
            previous["content"] = after
        if not previous.get("reasoning_content") and message.get("reasoning_content"):
            previous["reasoning_content"] = message["reasoning_content"]
    return out


def _drop_unasked_tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pending: set[Any] = set()
    for message in messages:
        role = message.get("role")
        if role == "tool":
            answered = message.get("tool_call_id")
            if answered and answered in pending:
                pending.discard(answered)
                out.append(message)
            continue
        if role == "assistant":
            pending = {call.get(key) for call in message.get("tool_calls") or []
                       if isinstance(call, dict) for key in ("id", "call_id") if call.get(key)}
        elif role == "user":
            pending = set()
        out.append(message)
    return out


def _merge_users(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        previous = out[-1] if out else None
        before, after = (previous or {}).get("content", ""), message.get("content", "")
        if (previous is not None and message.get("role") == "user"
                and previous.get("role") == "user"
                and isinstance(before, str) and isinstance(after, str)):
            previous["content"] = f"{before}\n\n{after}" if before and after else before or after
            previous.pop("api_content", None)
            continue
        out.append(message)
    return out
