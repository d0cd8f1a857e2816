"""The chat commands the gateway answers itself, without a model turn.

``/stop`` interrupts the conversation's running turn and disowns it; ``/new`` (or ``/reset``)
does the same and then starts a new conversation under the same chat (the old session stays
in ``state.db``, ended); ``/resume`` does the same and then continues an earlier session. All
three act at once, even while a turn is running: that is their point. ``/title`` names the
current session, ``/sessions`` lists the sender's recent ones, ``/help`` lists the commands.

A sender reaches only their own sessions: those of this conversation, or of the same user on
the same platform (in a terminal chat, every chat of this OS user).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

from hermes.errors import InvalidTitleError, SessionNotFoundError, TitleInUseError
from hermes.gateway.events import SessionSource
from hermes.gateway.seams import CommandHost
from hermes.session_lookup import find_session, recent_sessions

if TYPE_CHECKING:
    from hermes.gateway.session import SessionStore

#: Longest title accepted (hermes-agent's limit too).
MAX_TITLE_LENGTH = 100


class Command(Enum):
    HELP = "help"
    NEW = "new"
    STOP = "stop"
    TITLE = "title"
    SESSIONS = "sessions"
    RESUME = "resume"


@dataclass(frozen=True)
class Invocation:
    command: Command
    argument: str


#: What ``/help`` shows: each command's usage and what it does.
USAGE: dict[Command, tuple[str, str]] = {
    Command.HELP: ("/help", "list the commands"),
    Command.NEW: ("/new, /reset", "start a new conversation (this one is kept, ended)"),
    Command.STOP: ("/stop", "stop the reply being written"),
    Command.TITLE: ("/title [TEXT]", "show or set this conversation's title"),
    Command.SESSIONS: ("/sessions", "list your recent conversations"),
    Command.RESUME: ("/resume ID|TITLE", "continue an earlier conversation"),
}

_NAMES = {"/help": Command.HELP, "/new": Command.NEW, "/reset": Command.NEW,
          "/stop": Command.STOP, "/title": Command.TITLE, "/sessions": Command.SESSIONS,
          "/resume": Command.RESUME}
#: Every command word, as ``/help`` and an unknown-command error list them.
NAMES = tuple(_NAMES)


def parse(text: str) -> Invocation | None:
    """The command ``text`` is, if it is one (``/new``, ``/new@botname``, any case), with the
    rest of the line as its argument."""
    parts = text.strip().split(maxsplit=1)
    if not parts:
        return None
    command = _NAMES.get(parts[0].lower().split("@", 1)[0])
    if command is None:
        return None
    return Invocation(command, parts[1].strip() if len(parts) > 1 else "")


def help_text(extra: dict[str, str] | None = None) -> str:
    """The commands, one a line; ``extra`` adds a platform's own (usage -> what it does)."""
    rows = [*USAGE.values(), *(extra or {}).items()]
    width = max(len(usage) for usage, _ in rows)
    return "\n".join(f"{usage:<{width}}  {summary}" for usage, summary in rows)


async def execute(runner: CommandHost, invocation: Invocation, source: SessionSource,
                  session_key: str) -> str:
    command, argument = invocation.command, invocation.argument
    if command is Command.HELP:
        return help_text()
    store = runner.async_session_store
    if command is Command.TITLE:
        return await store.call(_title, source, argument)
    allowed = reachable_by(source, session_key)
    if command is Command.SESSIONS:
        return await store.call(_list_sessions, source, session_key, allowed)
    if command is Command.RESUME and not argument:
        return "Say which conversation: /resume ID or /resume TITLE (/sessions lists them)."
    stopped = runner._interrupt_session(session_key, f"/{command.value} from the user")
    if command is Command.STOP:
        return "Stopped the running turn." if stopped else "Nothing is running right now."
    if command is Command.NEW:
        await store.call(lambda s: s.reset_session(session_key))
        return "Started a new conversation."
    return await store.call(_resume, source, session_key, argument, allowed)


def reachable_by(source: SessionSource, session_key: str) -> Callable[[dict[str, Any]], bool]:
    """Whether a session is the sender's: of this conversation, or of the same user on the
    same platform."""
    def reachable(session: dict[str, Any]) -> bool:
        if session.get("session_key") == session_key:
            return True
        return (source.user_id is not None and session.get("user_id") == source.user_id
                and session.get("source") == source.platform.value)
    return reachable


def _title(store: SessionStore, source: SessionSource, title: str) -> str:
    entry = store.get_or_create_session(source)
    if not title:
        current = (store.state_db.get_session(entry.session_id) or {}).get("title")
        return (f"This conversation's title: {current}" if current else
                "This conversation has no title yet; /title TEXT gives it one.")
    title = " ".join(title.split())
    if len(title) > MAX_TITLE_LENGTH:
        return f"That title is {len(title)} characters long; the limit is {MAX_TITLE_LENGTH}."
    try:
        store.state_db.set_session_title(entry.session_id, title)
    except TitleInUseError:
        # Its message names the session that has it, which may be someone else's.
        return f"Another conversation is already titled {title!r}; choose another title."
    except InvalidTitleError as exc:
        return f"That title cannot be used: {exc}"
    return f"Title set: {title}"


def _list_sessions(store: SessionStore, source: SessionSource, session_key: str,
                   allowed: Callable[[dict[str, Any]], bool]) -> str:
    sessions = recent_sessions(store.state_db, allowed, source=source.platform.value)
    if not sessions:
        return "No conversations yet."
    current = store.get_entry(session_key)
    lines = []
    for session in sessions:
        mark = "*" if current is not None and session["id"] == current.session_id else " "
        started = session.get("started_at")
        when = (datetime.fromtimestamp(started).strftime("%Y-%m-%d %H:%M")
                if isinstance(started, (int, float)) else "")
        name = session.get("title") or session.get("chat_id") or ""
        lines.append(f"{mark} {session['id']}  {when}  {session.get('message_count') or 0} "
                     f"messages  {name}".rstrip())
    return "\n".join(["Recent conversations (* is this one); /resume ID or TITLE continues one:",
                      *lines])


def _resume(store: SessionStore, source: SessionSource, session_key: str, ident: str,
            allowed: Callable[[dict[str, Any]], bool]) -> str:
    try:
        session = find_session(store.state_db, ident, allowed)
    except SessionNotFoundError:
        return f"No conversation of yours is called {ident!r}; /sessions lists them."
    store.switch_session(session_key, session["id"], source)
    title = f" ({session['title']})" if session.get("title") else ""
    return (f"Resumed {session['id']}{title}: {session.get('message_count') or 0} messages "
            "so far.")
