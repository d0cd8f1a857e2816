"""``hermes sessions export --format html``: one self-contained page, readable offline.

Everything taken from the store (titles, ids, messages, tool calls, reasoning, system
prompts) is HTML-escaped, quotes included, before it goes into the page, so a transcript
that holds markup or script shows it as text. The page loads nothing and runs nothing: its
Content-Security-Policy allows only its own inline style (no script, no fetch, no form), and
folding (tool calls, reasoning, the system prompt) is ``<details>``. Several sessions get a
list of links at the top, one section each.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from hermes.cli.output import when
from hermes.cli.transcripts import Transcript, content_text

_STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; margin: 0 auto; max-width: 60rem; padding: 1rem;
       color: #1a1a1a; background: #fafafa; }
header.session { border-bottom: 1px solid #ccc; margin: 2rem 0 1rem; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 0 1rem; color: #555; }
dl.meta dt { font-weight: 600; }
dl.meta dd { margin: 0; overflow-wrap: anywhere; }
article.message { border: 1px solid #ddd; border-radius: 6px; margin: .75rem 0;
                  padding: .5rem .75rem; background: #fff; }
article.role-user { background: #eef6ff; }
article.role-tool { background: #f6f6f0; }
.role { font-weight: 600; text-transform: capitalize; }
time { color: #777; font-size: .85em; margin-left: .5rem; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f0f0f0; padding: .5rem;
      border-radius: 4px; }
nav li { margin: .2rem 0; }
@media (prefers-color-scheme: dark) {
  body { color: #e6e6e6; background: #161616; }
  article.message { background: #1f1f1f; border-color: #333; }
  article.role-user { background: #1b2633; }
  article.role-tool { background: #24241c; }
  pre { background: #2a2a2a; }
  dl.meta, time { color: #aaa; }
}
"""
# Nothing but the inline style above: no script, no remote resource, no form, no frame.
_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
           "form-action 'none'; frame-ancestors 'none'")


def escaped(value: Any) -> str:
    """Any value as HTML text, ``<``, ``>``, ``&`` and both quotes escaped."""
    return html.escape(value if isinstance(value, str) else str(value), quote=True)


def _anchor(session_id: str) -> str:
    """A fragment id for a session: the id's letters, digits, ``-`` and ``_``, others as
    ``_XX`` (hex), so any id makes a safe, unique anchor."""
    return "session-" + "".join(
        char if char.isascii() and (char.isalnum() or char in "-_") else f"_{ord(char):x}"
        for char in session_id)


class HtmlPage:
    wants_rows = False

    def begin(self, sessions: Sequence[dict[str, Any]]) -> str:
        if len(sessions) == 1:
            only = sessions[0]
            title = only.get("title") or f"Session {only['id']}"
        else:
            title = f"{len(sessions)} hermes sessions"
        page = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                f"<meta http-equiv=\"Content-Security-Policy\" content=\"{_POLICY}\">\n"
                "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                f"<title>{escaped(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
                f"<h1>{escaped(title)}</h1>\n")
        if len(sessions) > 1:
            page += "<nav><ol>\n" + "".join(
                f"<li><a href=\"#{_anchor(row['id'])}\">{escaped(_label(row))}</a> "
                f"<time>{escaped(when(row.get('started_at')))}</time></li>\n"
                for row in sessions) + "</ol></nav>\n"
        return page

    def session(self, transcript: Transcript, index: int) -> Iterator[str]:
        session = transcript.session
        rows = [("id", session["id"]), ("title", session.get("title")),
                ("source", session.get("source")), ("model", session.get("model")),
                ("started", when(session.get("started_at"))),
                ("ended", when(session.get("ended_at"))),
                ("end reason", session.get("end_reason")),
                ("messages", len(transcript.messages))]
        # A whole compression chain is one section: each of its sessions' links lands here.
        others = [i for i in session.get("lineage_session_ids") or [] if i != session["id"]]
        head = (f"<section id=\"{_anchor(session['id'])}\">\n"
                + "".join(f"<span id=\"{_anchor(i)}\"></span>" for i in others)
                + "<header class=\"session\">\n"
                f"<h2>{escaped(_label(session))}</h2>\n<dl class=\"meta\">\n" + "".join(
                    f"<dt>{name}</dt><dd>{escaped(value)}</dd>\n"
                    for name, value in rows if value not in (None, "")) + "</dl>\n")
        if session.get("system_prompt"):
            head += ("<details><summary>System prompt</summary>"
                     f"<pre>{escaped(session['system_prompt'])}</pre></details>\n")
        head += "</header>\n"
        messages = [m for m in transcript.messages if m.get("role") != "session_meta"]
        if not messages:
            yield head + "<p>No messages.</p>\n</section>\n"
        for number, message in enumerate(messages):
            piece = (head if number == 0 else "") + _message(message)
            yield piece + ("</section>\n" if number == len(messages) - 1 else "")

    def end(self) -> str:
        stamp = datetime.now().strftime("%Y-%m-%d %H:%M")
        return f"<footer><p>Exported by hermes on {stamp}</p></footer>\n</body>\n</html>\n"


def _label(session: dict[str, Any]) -> str:
    return str(session.get("title") or session["id"])


def _message(message: dict[str, Any]) -> str:
    role = str(message.get("role") or "unknown")
    # The role also names a CSS class: letters and digits only there.
    css = "".join(char for char in role.lower() if char.isascii() and char.isalnum())
    label = role if role != "tool" else f"tool {message.get('tool_name') or ''}".strip()
    stamp = message.get("timestamp")
    part = (f"<article class=\"message role-{css}\">\n<div><span class=\"role\">"
            f"{escaped(label)}</span>"
            + (f"<time>{escaped(when(stamp))}</time>" if stamp is not None else "") + "</div>\n")
    content = content_text(message.get("content"))
    if content:
        part += (f"<pre>{escaped(content)}</pre>\n" if role == "tool"
                 else f"<div class=\"text\">{escaped(content)}</div>\n")
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if reasoning:
        part += ("<details><summary>Reasoning</summary>"
                 f"<div class=\"text\">{escaped(content_text(reasoning))}</div></details>\n")
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            function = {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, default=str)
        part += (f"<details><summary>calls {escaped(function.get('name') or '?')}</summary>"
                 f"<pre>{escaped(arguments)}</pre></details>\n")
    return part + "</article>\n"
