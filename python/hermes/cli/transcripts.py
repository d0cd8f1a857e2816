"""A transcript as people read it: on a terminal (``hermes sessions show``), as Markdown or as
JSONL (``hermes sessions export``). Text is printed as written, never read as markup."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from hermes.cli.output import when

if TYPE_CHECKING:
    from rich.text import Text

_ROLE_STYLES = {"user": "bold green", "assistant": "bold cyan", "tool": "bold yellow",
                "system": "bold magenta"}
#: Session columns a transcript's heading shows, in this order.
HEADING_KEYS = ("title", "source", "session_key", "model", "started_at", "ended_at",
                "end_reason", "message_count")


def heading(session: dict[str, Any]) -> list[tuple[str, str]]:
    """The session's columns worth showing above its transcript, as (key, text) pairs."""
    return [(key, when(session[key]) if key.endswith("_at") else str(session[key]))
            for key in HEADING_KEYS if session.get(key) not in (None, "")]


def message_text(message: dict[str, Any]) -> Text:
    from rich.text import Text

    role = str(message.get("role"))
    if role == "session_meta":
        return Text(f"[session_meta] {json.dumps(_meta_details(message), default=str)}",
                    style="dim")
    label = role if role != "tool" else f"tool {message.get('tool_name') or ''}".strip()
    text = Text(f"{label}:", style=_ROLE_STYLES.get(role, "bold"))
    if message.get("content"):
        text.append("\n" + content_text(message["content"]))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        text.append(f"\n→ {function.get('name')}({function.get('arguments')})", style="yellow")
    return text


def jsonl(messages: list[dict[str, Any]]) -> Iterator[str]:
    """One OpenAI-style message a line."""
    for message in messages:
        yield json.dumps(message, ensure_ascii=False, default=str) + "\n"


def markdown(session: dict[str, Any], messages: list[dict[str, Any]]) -> Iterator[str]:
    """One piece per message (the header rides with the first) so progress counts messages."""
    header = f"# Session {session['id']}\n\n" + "".join(
        f"- **{key}**: {value}\n" for key, value in heading(session)
        if key not in ("session_key", "message_count"))
    if not messages:
        yield header
    for index, message in enumerate(messages):
        yield (header if index == 0 else "") + _markdown_message(message)


def _markdown_message(message: dict[str, Any]) -> str:
    role = str(message.get("role"))
    if role == "session_meta":
        return f"\n<!-- session_meta {json.dumps(_meta_details(message), default=str)} -->\n"
    if role == "tool":
        body = content_text(message.get("content"))
        return f"\n## tool `{message.get('tool_name') or ''}`\n\n```\n{body}\n```\n"
    part = f"\n## {role}\n\n"
    if message.get("content"):
        part += content_text(message["content"]) + "\n"
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        part += (f"\n**calls `{function.get('name')}`**\n\n```json\n"
                 f"{function.get('arguments')}\n```\n")
    return part


def _meta_details(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in ("role", "content")}


def content_text(content: Any) -> str:
    """Message content as text: strings as they are, lists of parts by their text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p)
                         for p in content)
    return "" if content is None else json.dumps(content, default=str)
