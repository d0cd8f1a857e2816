"""A transcript as people read it: on a terminal (``hermes sessions show``), and the text
formats of ``hermes sessions export`` (JSONL, Markdown, Quarto Markdown, user prompts).
Text is printed as written, never read as markup.

An export format is a :class:`Format`: what its document begins with, the pieces of each
session, what it ends with. A session's pieces are one a message (one line per session for
the session-a-line JSONL), so a progress display can count them; a format that needs
hermes-agent's export rows (every column, for a backup that ``import_sessions`` reads back)
says so with ``wants_rows``. A Markdown document holds one session and ends with its own
check (hermes-agent's "Export verification" lines and the document's SHA-256), which
``hermes.cli.export_verification`` reads back.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from hermes.cli.output import when

if TYPE_CHECKING:
    from rich.text import Text

_ROLE_STYLES = {"user": "bold green", "assistant": "bold cyan", "tool": "bold yellow",
                "system": "bold magenta"}
#: Session columns a transcript's heading shows, in this order.
HEADING_KEYS = ("title", "source", "session_key", "model", "started_at", "ended_at",
                "end_reason", "message_count")


@dataclass(frozen=True)
class Transcript:
    """One session to export: its row and its messages (OpenAI-style, or with
    ``Format.wants_rows`` hermes-agent's export rows)."""

    session: dict[str, Any]
    messages: list[dict[str, Any]]


class Format:
    """An export format; one that writes nothing around its sessions keeps ``begin`` and
    ``end`` as they are here."""

    #: Whether ``Transcript.messages`` must be the store's export rows (every column).
    wants_rows = False

    def begin(self, sessions: Sequence[dict[str, Any]]) -> str:
        """What the document starts with; ``sessions`` are the rows about to be exported."""
        return ""

    def session(self, transcript: Transcript, index: int) -> Iterator[str]:
        """The pieces of the ``index``-th session (0 first): one a message, at least one."""
        raise NotImplementedError

    def end(self) -> str:
        """What the document ends with."""
        return ""


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


def content_text(content: Any) -> str:
    """Message content as text: strings as they are, lists of parts by their text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p)
                         for p in content)
    return "" if content is None else json.dumps(content, default=str)


def iso_time(value: Any) -> str | None:
    """A stored timestamp (epoch seconds) as UTC ISO 8601, ``...Z``; None when there is none."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    moment = datetime.fromtimestamp(value, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str) + "\n"


# -- JSONL --------------------------------------------------------------------------------


class MessageLines(Format):
    """JSONL of one session's conversation: one OpenAI-style message a line."""

    def session(self, transcript: Transcript, index: int) -> Iterator[str]:
        if not transcript.messages:
            yield ""
        for message in transcript.messages:
            yield json_line(message)


class SessionLines(Format):
    """JSONL of sessions, one a line with its ``messages``: hermes-agent's export form, which
    ``SessionDB.import_sessions`` (ours and hermes-agent's) reads back."""

    wants_rows = True

    def session(self, transcript: Transcript, index: int) -> Iterator[str]:
        yield json_line({**transcript.session, "messages": transcript.messages})


def user_prompts(transcript: Transcript) -> Iterator[dict[str, Any]]:
    """One record for each message the user wrote (``--only user-prompts``)."""
    number = 0
    for message in transcript.messages:
        if message.get("role") != "user":
            continue
        number += 1
        yield {"session_id": transcript.session["id"], "index": number,
               "created_at": iso_time(message.get("timestamp")), "role": "user",
               "text": content_text(message.get("content"))}


class PromptLines(Format):
    """JSONL of the user's prompts: one record a line (``user_prompts``)."""

    def session(self, transcript: Transcript, index: int) -> Iterator[str]:
        yield "".join(json_line(record) for record in user_prompts(transcript))


# -- Markdown -----------------------------------------------------------------------------


def fenced(text: str, info: str = "") -> str:
    """``text`` in a code fence longer than any run of backticks inside it, so nothing in it
    can close the fence early."""
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def _inline(text: str) -> str:
    """``text`` on one line, as a heading or list item holds it."""
    return " ".join(str(text).split())


class Markdown(Format):
    """A readable document of one session that carries its own check: the session's heading,
    its messages (tool output and tool calls fenced, session_meta rows as comments), then an
    "Export verification" section in hermes-agent's lines (the session id, the messages
    exported, the store's count, when, and the SHA-256 of the document as written with
    ``pending`` in place of that checksum), so hermes-agent's ``verify_export_file`` accepts
    it too. ``front_matter`` makes it Quarto Markdown (``.qmd``): a YAML header first.

    Each document is hashed as its pieces are yielded: a caller writes every piece of
    ``begin``, ``session`` and ``end``, in order, for one session.
    """

    def __init__(self, *, front_matter: bool = False, exported_at: float) -> None:
        self._front_matter = front_matter
        self.exported_at = exported_at
        self._digest = hashlib.sha256()
        self._session: dict[str, Any] = {}
        self._messages = 0

    def begin(self, sessions: Sequence[dict[str, Any]]) -> str:
        self._digest = hashlib.sha256()
        if not self._front_matter:
            return ""
        (session,) = sessions
        fields = {"title": _inline(session.get("title") or f"Session {session['id']}"),
                  "date": iso_time(session.get("started_at")), "session-id": session["id"]}
        # JSON strings are YAML strings: any title, quotes and colons included, stays one.
        return self._hashed("---\n" + "".join(
            f"{key}: {json.dumps(value, ensure_ascii=False)}\n"
            for key, value in fields.items() if value) + "---\n\n")

    def session(self, transcript: Transcript, index: int) -> Iterator[str]:
        session = self._session = transcript.session
        self._messages = len(transcript.messages)
        header = f"# Session {session['id']}\n\n" + "".join(
            f"- **{key}**: {_inline(value)}\n" for key, value in heading(session)
            if key not in ("session_key", "message_count"))
        if not transcript.messages:
            yield self._hashed(header)
        for number, message in enumerate(transcript.messages):
            yield self._hashed((header if number == 0 else "") + _markdown_message(message))

    def end(self) -> str:
        stored = self._session.get("message_count")
        head = ("\n## Export verification\n\n"
                f"- Session id: `{self._session.get('id')}`\n"
                f"- Exported messages: `{self._messages}`\n"
                "- Source DB message count at export: "
                f"`{stored if isinstance(stored, int) else self._messages}`\n"
                f"- Exported at: `{iso_time(self.exported_at)}`\n")
        self._hashed(head + checksum_line(PENDING))
        return head + checksum_line(self._digest.hexdigest())

    def _hashed(self, piece: str) -> str:
        self._digest.update(piece.encode("utf-8"))
        return piece


#: What stands for the checksum while it is computed (hermes-agent's word).
PENDING = "pending"
#: The checksum's line, hermes-agent's: what a reader of its exports looks for.
CHECKSUM_LINE = re.compile(r"^- SHA256 of exported body: `([0-9a-f]{64})`$", re.MULTILINE)


def checksum_line(value: str) -> str:
    return f"- SHA256 of exported body: `{value}`\n"


def _markdown_message(message: dict[str, Any]) -> str:
    role = str(message.get("role"))
    if role == "session_meta":
        # "--" would end the comment early.
        details = json.dumps(_meta_details(message), default=str).replace("--", "- -")
        return f"\n<!-- session_meta {details} -->\n"
    if role == "tool":
        body = content_text(message.get("content"))
        return f"\n## tool `{_inline(message.get('tool_name') or '')}`\n\n{fenced(body)}\n"
    part = f"\n## {_inline(role)}\n\n"
    if message.get("content"):
        part += content_text(message["content"]) + "\n"
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        part += (f"\n**calls `{_inline(function.get('name') or '')}`**\n\n"
                 f"{fenced(str(function.get('arguments')), 'json')}\n")
    return part


class PromptMarkdown(Format):
    """The user's prompts as a document: a section a session, a heading a prompt."""

    def begin(self, sessions: Sequence[dict[str, Any]]) -> str:
        return "# User prompts\n"

    def session(self, transcript: Transcript, index: int) -> Iterator[str]:
        session = transcript.session
        part = f"\n## Session {session['id']}\n\n" + "".join(
            f"- **{key}**: {_inline(value)}\n" for key, value in heading(session)
            if key in ("title", "source", "started_at"))
        prompts = list(user_prompts(transcript))
        if not prompts:
            part += "\n_No user prompts._\n"
        for prompt in prompts:
            part += f"\n### {prompt['index']}. {prompt['created_at'] or 'time unknown'}\n\n"
            part += f"{prompt['text']}\n"
        yield part


def _meta_details(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in ("role", "content")}
