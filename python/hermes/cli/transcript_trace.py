"""``hermes sessions export --format trace``: a session as an agent trace in Claude Code's
JSONL transcript form, which the Hugging Face Agent Trace Viewer (and other trace tools)
read, as hermes-agent 0.19.0's ``--format trace`` writes it.

One line a turn: a user message (``type: user``, its text), an assistant message
(``type: assistant``: text blocks and one ``tool_use`` block a tool call, its arguments
parsed), a tool result (``type: user`` holding a ``tool_result`` block for its call id).
Each line names its session, the session's working directory and git branch, and the turn
before it (``parentUuid``). System prompts and session_meta rows are left out. Unlike
hermes-agent's, the turn ids are derived from the session id and the turn's place (the same
export twice is the same file), and each turn carries its message's own time.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from hermes import __version__
from hermes.cli.transcripts import Format, Transcript, content_text, iso_time, json_line

# Turn ids: uuid5 of "<session id>/<turn number>" in this namespace.
_TURNS = uuid.UUID("3f7d9a52-8a43-4f4e-9b57-0c2b5e3d6a10")


class Trace(Format):
    def session(self, transcript: Transcript, index: int) -> Iterator[str]:
        session = transcript.session
        common = {"isSidechain": False, "userType": "external",
                  "cwd": session.get("cwd") or "", "sessionId": session["id"],
                  "version": f"hermes-gateway {__version__}",
                  "gitBranch": session.get("git_branch") or ""}
        parent: str | None = None
        turns = [m for m in transcript.messages if m.get("role") not in ("system", "session_meta")]
        if not turns:
            yield ""
        for number, message in enumerate(turns):
            turn = str(uuid.uuid5(_TURNS, f"{session['id']}/{number}"))
            line = {"parentUuid": parent, **common, "uuid": turn,
                    "timestamp": iso_time(message.get("timestamp")) or iso_time(
                        session.get("started_at")),
                    **_turn(message, session.get("model") or "unknown")}
            parent = turn
            yield json_line(line)


def _turn(message: dict[str, Any], model: str) -> dict[str, Any]:
    role = message.get("role")
    if role == "assistant":
        blocks = _text_blocks(message.get("content")) + [
            _tool_use(call) for call in message.get("tool_calls") or [] if isinstance(call, dict)]
        return {"type": "assistant", "message": {
            "role": "assistant", "model": model,
            "content": blocks or [{"type": "text", "text": ""}]}}
    if role == "tool":
        return {"type": "user", "message": {"role": "user", "content": [{
            "type": "tool_result",
            "tool_use_id": message.get("tool_call_id") or message.get("tool_name") or "tool",
            "content": content_text(message.get("content"))}]}}
    content = message.get("content")
    return {"type": "user", "message": {
        "role": "user",
        "content": content if isinstance(content, str) else _text_blocks(content)}}


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    """Content as text blocks: a string, or each part of a list (images by a placeholder:
    a trace carries no image data)."""
    if content is None or content == "":
        return []
    if not isinstance(content, list):
        return [{"type": "text", "text": content_text(content)}]
    blocks = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("image_url", "image", "input_image"):
            blocks.append({"type": "text", "text": "[image omitted]"})
        else:
            blocks.append({"type": "text", "text": content_text([part])})
    return blocks


def _tool_use(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict):
        function = {}
    arguments = function.get("arguments")
    parsed: Any
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            parsed = {"_raw": arguments}
    else:
        parsed = arguments if isinstance(arguments, dict) else {}
    return {"type": "tool_use", "id": call.get("id") or "", "name": function.get("name") or "tool",
            "input": parsed}
