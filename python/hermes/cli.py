"""The ``hermes`` command.

::

    hermes gateway run [--host H] [--port P] [--model M] [--base-url URL] [--db FILE]
    hermes chat [--session NAME] [--model M] [--base-url URL] [--db FILE]
    hermes sessions list [--source S] [--limit N]
    hermes sessions show ID
    hermes sessions search QUERY [--source S] [--session ID] [--limit N]
    hermes sessions export ID --format jsonl|md [-o FILE]
    hermes sessions recover

Settings come from ``$HERMES_HOME/config.yaml``, then the environment, then these flags
(``hermes.config`` documents every key and variable). ``show`` and ``export`` take a session id (for an api_server
conversation, the ``X-Hermes-Session-Id`` its answers carried), or a chat's conversation id or
session key, and then pick that conversation's newest session.

Exit status: 0 done, 1 failed (the message says why and what to do), 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from hermes.config import HermesConfig, load_config
from hermes.errors import HermesError, SessionNotFoundError

if TYPE_CHECKING:  # imported where used: `hermes --help` should not load the gateway
    from hermes.gateway.config import GatewayConfig
    from hermes.state import SessionDB

logger = logging.getLogger("hermes")

# Exports of at least this many messages show a progress bar (on a terminal).
_PROGRESS_THRESHOLD = 200
_ROLE_STYLES = {"user": "bold green", "assistant": "bold cyan", "tool": "bold yellow",
                "system": "bold magenta"}

Handler = Callable[[argparse.Namespace], int]


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        # ``hermes`` or ``hermes sessions`` alone: show what can follow.
        args.help_parser.print_help()
        return 2
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return handler(args)
    except (HermesError, ValueError) as exc:
        Console(stderr=True, highlight=False).print(Text(f"hermes: {exc}", style="red"),
                                                    soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return 130


# -- the parser -------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hermes",
        description="Agent gateway with durable conversation transcripts.",
        epilog="Settings: $HERMES_HOME/config.yaml, overridden by environment, then flags.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what happens")
    parser.set_defaults(help_parser=parser)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    gateway = commands.add_parser("gateway", help="run the gateway")
    gateway.set_defaults(help_parser=gateway)
    gateway_commands = gateway.add_subparsers(title="commands", metavar="COMMAND")
    run = gateway_commands.add_parser(
        "run", help="serve the OpenAI-compatible api_server until interrupted",
        description="Serve POST /v1/chat/completions, GET /v1/models and GET /health. "
                    "Without a configured model endpoint the agent runs offline (echo).")
    run.add_argument("--host", help="address to listen on (default 127.0.0.1; any other "
                                    "needs api_server.key)")
    run.add_argument("--port", type=int, help="port to listen on (default 8642)")
    _model_flags(run)
    run.set_defaults(handler=_gateway_run)

    chat = commands.add_parser(
        "chat", help="talk to the agent in this terminal",
        description="A terminal conversation, stored like any gateway chat. Starting the "
                    "same --session again continues it. /exit or Ctrl-D ends it.")
    chat.add_argument("--session", default="default", metavar="NAME",
                      help="conversation name (default: default)")
    _model_flags(chat)
    chat.set_defaults(handler=_chat)

    sessions = commands.add_parser("sessions", help="inspect stored conversations")
    sessions.set_defaults(help_parser=sessions)
    session_commands = sessions.add_subparsers(title="commands", metavar="COMMAND")

    listing = session_commands.add_parser("list", help="newest sessions first")
    listing.add_argument("--source", help="only this platform (api_server, local, ...)")
    listing.add_argument("--limit", type=int, default=50, help="how many (default 50)")
    _db_flag(listing)
    listing.set_defaults(handler=_sessions_list)

    show = session_commands.add_parser("show", help="print a whole transcript")
    show.add_argument("id", help="session id (an api_server answer's "
                      "X-Hermes-Session-Id), chat id or session key")
    _db_flag(show)
    show.set_defaults(handler=_sessions_show)

    search = session_commands.add_parser(
        "search", help="full-text search over messages",
        description='FTS5 syntax: words, "phrases", OR, NOT, prefix*.')
    search.add_argument("query")
    search.add_argument("--source", help="only this platform")
    search.add_argument("--session", help="only this session id")
    search.add_argument("--limit", type=int, default=20, help="how many hits (default 20)")
    _db_flag(search)
    search.set_defaults(handler=_sessions_search)

    export = session_commands.add_parser(
        "export", help="write a transcript as JSONL or Markdown",
        description="JSONL: one OpenAI-style message per line. Markdown: a readable document.")
    export.add_argument("id", help="session id (an api_server answer's "
                      "X-Hermes-Session-Id), chat id or session key")
    export.add_argument("--format", choices=("jsonl", "md"), default="jsonl")
    export.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    _db_flag(export)
    export.set_defaults(handler=_sessions_export)

    recover = session_commands.add_parser(
        "recover", help="import messages spooled while the database was failing",
        description="Re-imports $HERMES_HOME/sessions/*.recovery.jsonl; running it again "
                    "writes nothing twice.")
    _db_flag(recover)
    recover.set_defaults(handler=_sessions_recover)
    return parser


def _model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model name to ask the endpoint for")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. "
                                           "http://127.0.0.1:11434/v1")
    _db_flag(parser)


def _db_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", type=Path, help="session database (default: state_db of "
                                                "config.yaml, else $HERMES_HOME/state.db)")


# -- gateway and chat ----------------------------------------------------------------------


def _settings(
    args: argparse.Namespace, overrides: dict[str, object] | None = None
) -> HermesConfig:
    """The configuration with this command's flags applied; fails early (``ConfigError``)
    on an endpoint without a model name rather than on every message.

    --model and --base-url are exported to this process's environment: the gateway reads
    model settings afresh for each agent it builds (config.yaml, then the environment), and
    flags sit on top of both that way.
    """
    if args.model:
        os.environ["HERMES_MODEL"] = args.model
    if args.base_url:
        os.environ["HERMES_BASE_URL"] = args.base_url
    config = load_config({"state_db": str(args.db) if args.db else None, **(overrides or {})})
    config.model.resolved_name()
    return config


def _gateway_config(
    config: HermesConfig, platform: str, extra: dict[str, Any], *, only: bool
) -> GatewayConfig:
    """The gateway's configuration with ``platform`` enabled and given ``extra`` settings;
    with ``only``, every other platform off (a terminal chat must not also open the port
    of a gateway that may be running beside it)."""
    from hermes.gateway.config import Platform, PlatformConfig

    gateway_config = config.gateway
    chosen = Platform(platform)
    configured = gateway_config.platforms.get(chosen, PlatformConfig())
    platforms = {} if only else dict(gateway_config.platforms)
    platforms[chosen] = dataclasses.replace(
        configured, enabled=True, extra={**configured.extra, **extra})
    return dataclasses.replace(gateway_config, platforms=platforms, state_db=config.db_path)


def _gateway_run(args: argparse.Namespace) -> int:
    from hermes.gateway.platforms.api_auth import check_bind_allowed
    from hermes.gateway.run import GatewayRunner

    extra = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    config = _settings(args, {f"api_server.{k}": v for k, v in extra.items()})
    settings = config.api_server
    check_bind_allowed(settings)  # fail before anything starts, with the reason
    runner = GatewayRunner(_gateway_config(config, "api_server", extra, only=False))
    endpoint = config.model.base_url or ("api.openai.com" if config.model.is_remote
                                         else "offline: replies are echoes")
    Console(stderr=True, highlight=False).print(Text(
        f"hermes gateway: http://{settings.host}:{settings.port}/v1  model "
        f"{config.model.resolved_name()} ({endpoint})  db {config.db_path}"))
    return asyncio.run(runner.run())


def _chat(args: argparse.Namespace) -> int:
    config = _settings(args)
    gateway_config = _gateway_config(config, "local", {"chat": args.session}, only=True)
    _show_resumed(gateway_config, args.session)  # before the adapter starts prompting
    return asyncio.run(_chat_session(gateway_config))


async def _chat_session(gateway_config: GatewayConfig) -> int:
    from hermes.gateway.config import Platform
    from hermes.gateway.platforms.local import LocalAdapter
    from hermes.gateway.run import GatewayRunner

    runner = GatewayRunner(gateway_config)
    await runner.start()
    try:
        adapter = runner.adapters[Platform.LOCAL]
        assert isinstance(adapter, LocalAdapter)
        await adapter.wait_closed()
    finally:
        await runner.stop()
    return 0


def _show_resumed(gateway_config: GatewayConfig, name: str) -> None:
    """Print the end of a continued conversation so the person sees where they left off."""
    from hermes.gateway.platforms.local import chat_source, message_line
    from hermes.gateway.session import SessionStore
    from hermes.state import SessionDB

    console = Console(highlight=False)
    path = gateway_config.state_db
    entry = None
    transcript: list[dict[str, Any]] = []
    if path is not None and path.exists():
        with SessionDB(path) as db:
            store = SessionStore(db, gateway_config)
            entry = store.get_entry(store.session_key(chat_source(name)))
            if entry is not None:
                transcript = store.load_transcript(entry.session_id)
    if entry is None:
        console.print(Text(f"new conversation {name!r} — /exit or Ctrl-D to end", style="dim"))
        return
    shown = [m for m in transcript
             if m.get("role") in ("user", "assistant") and m.get("content")]
    console.print(Text(f"continuing {name!r} (session {entry.session_id}, {len(shown)} "
                       "messages) — /exit or Ctrl-D to end", style="dim"))
    for message in shown[-10:]:
        speaker = "you" if message["role"] == "user" else "hermes"
        console.print(message_line(speaker, _text(message["content"]), earlier=True))


# -- sessions ----------------------------------------------------------------------------------


def _open_db(args: argparse.Namespace) -> SessionDB:
    from hermes.state import SessionDB

    path: Path = args.db or load_config().db_path
    if not path.exists():
        raise HermesError(f"no session database at {path}; run the gateway or `hermes chat` "
                          "first, or pass --db")
    return SessionDB(path)


def _sessions_list(args: argparse.Namespace) -> int:
    with _open_db(args) as db:
        rows = db.list_sessions(source=args.source, limit=args.limit)
    table = Table(title=f"{_count(len(rows), 'session')} (newest first)")
    table.add_column("id", no_wrap=True)  # whole, so it can be copied into `show`
    for column in ("source", "conversation", "started", "messages", "ended"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["id"], row.get("source") or "", _conversation_name(row),
                      _when(row.get("started_at")), str(row.get("message_count") or 0),
                      row.get("end_reason") or "")
    Console().print(table)
    return 0


def _sessions_show(args: argparse.Namespace) -> int:
    with _open_db(args) as db:
        session = _resolve_session(db, args.id)
        messages = db.get_messages_as_conversation(session["id"])
    console = Console(highlight=False)
    console.print(Text(f"session {session['id']}", style="bold"))
    for key in ("source", "session_key", "model", "started_at", "ended_at", "end_reason",
                "message_count"):
        if session.get(key) not in (None, ""):
            value = _when(session[key]) if key.endswith("_at") else str(session[key])
            console.print(Text(f"  {key}: {value}", style="dim"))
    for message in messages:
        console.print()
        console.print(_render(message))
    return 0


def _render(message: dict[str, Any]) -> Text:
    role = str(message.get("role"))
    if role == "session_meta":
        details = {k: v for k, v in message.items() if k not in ("role", "content")}
        return Text(f"[session_meta] {json.dumps(details, default=str)}", style="dim")
    label = role if role != "tool" else f"tool {message.get('tool_name') or ''}".strip()
    text = Text(f"{label}:", style=_ROLE_STYLES.get(role, "bold"))
    if message.get("content"):
        text.append("\n" + _text(message["content"]))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        text.append(f"\n→ {function.get('name')}({function.get('arguments')})", style="yellow")
    return text


def _sessions_search(args: argparse.Namespace) -> int:
    with _open_db(args) as db:
        hits = db.search_messages(args.query, source=args.source, session_id=args.session,
                                  limit=args.limit)
    table = Table(title=f"{_count(len(hits), 'match', 'matches')} for {args.query!r}")
    for column in ("session", "source", "role", "when", "match"):
        table.add_column(column, overflow="fold")
    for hit in hits:
        snippet = str(hit.get("snippet") or hit.get("content") or "")
        table.add_row(hit.get("session_id") or "", hit.get("source") or "",
                      hit.get("role") or "", _when(hit.get("timestamp")),
                      _highlight(snippet))
    Console().print(table)
    return 0


def _highlight(snippet: str) -> Text:
    """The store marks matches as >>>word<<<; show them bold instead."""
    text = Text()
    for index, piece in enumerate(snippet.replace("<<<", ">>>").split(">>>")):
        text.append(piece, style="bold reverse" if index % 2 else "")
    return text


def _sessions_export(args: argparse.Namespace) -> int:
    with _open_db(args) as db:
        session = _resolve_session(db, args.id)
        messages = db.get_messages_as_conversation(session["id"])
    lines = _jsonl(messages) if args.format == "jsonl" else _markdown(session, messages)
    if args.output is None:
        _write(sys.stdout, lines, len(messages), show_progress=False)
        return 0
    # A transcript is as private as the database it came from: 0600, like state.db.
    descriptor = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(descriptor, "w", encoding="utf-8") as out:
        _write(out, lines, len(messages), show_progress=len(messages) >= _PROGRESS_THRESHOLD)
    Console(stderr=True).print(f"wrote {len(messages)} messages to {args.output}")
    return 0


def _write(out: TextIO, lines: Iterator[str], total: int, *, show_progress: bool) -> None:
    console = Console(stderr=True)
    with Progress(console=console, transient=True,
                  disable=not (show_progress and console.is_terminal)) as progress:
        task = progress.add_task("exporting", total=total)
        for line in lines:
            out.write(line)
            progress.advance(task)


def _jsonl(messages: list[dict[str, Any]]) -> Iterator[str]:
    for message in messages:
        yield json.dumps(message, ensure_ascii=False, default=str) + "\n"


def _markdown(session: dict[str, Any], messages: list[dict[str, Any]]) -> Iterator[str]:
    """One piece per message (the header rides with the first) so progress counts messages."""
    header = f"# Session {session['id']}\n\n"
    for key in ("source", "model", "started_at", "ended_at", "end_reason"):
        if session.get(key) not in (None, ""):
            value = _when(session[key]) if key.endswith("_at") else session[key]
            header += f"- **{key}**: {value}\n"
    if not messages:
        yield header
    for index, message in enumerate(messages):
        yield (header if index == 0 else "") + _markdown_message(message)


def _markdown_message(message: dict[str, Any]) -> str:
    role = str(message.get("role"))
    if role == "session_meta":
        details = {k: v for k, v in message.items() if k not in ("role", "content")}
        return f"\n<!-- session_meta {json.dumps(details, default=str)} -->\n"
    if role == "tool":
        body = _text(message.get("content"))
        return f"\n## tool `{message.get('tool_name') or ''}`\n\n```\n{body}\n```\n"
    part = f"\n## {role}\n\n"
    if message.get("content"):
        part += _text(message["content"]) + "\n"
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        part += (f"\n**calls `{function.get('name')}`**\n\n```json\n"
                 f"{function.get('arguments')}\n```\n")
    return part


def _sessions_recover(args: argparse.Namespace) -> int:
    from hermes.recovery import recover_all

    with _open_db(args) as db:
        report = recover_all(db)
    console = Console(highlight=False)
    if not report.imported and not report.failed:
        console.print("nothing to recover: no spooled messages")
        return 0
    for path, count in report.imported.items():
        console.print(Text(f"imported {count} messages from {path}"))
    for path, reason in report.failed.items():
        console.print(Text(f"could not import {path}: {reason}", style="red"))
    console.print(f"{report.written} messages recovered, {len(report.failed)} files failed")
    return 1 if report.failed else 0


# -- helpers -----------------------------------------------------------------------------------


def _resolve_session(db: SessionDB, ident: str) -> dict[str, Any]:
    """A session id, or else the newest session of that conversation id or session key."""
    session: dict[str, Any] | None = db.get_session(ident)
    if session is not None:
        return session
    offset, page = 0, 500
    while rows := db.list_sessions(limit=page, offset=offset):
        for row in rows:  # newest first, so the first match is the current session
            if ident in (row.get("chat_id"), row.get("session_key")):
                return dict(row)
        offset += page
    raise SessionNotFoundError(f"no session or conversation {ident!r}; `hermes sessions list` "
                               "shows what there is")


def _conversation_name(row: dict[str, Any]) -> str:
    return str(row.get("title") or row.get("chat_id") or row.get("display_name") or "")


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _text(content: Any) -> str:
    """Message content as text: strings as they are, lists of parts by their text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p)
                         for p in content)
    return "" if content is None else json.dumps(content, default=str)


def _when(value: Any) -> str:
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M:%S")
    return "" if value is None else str(value)


if __name__ == "__main__":
    sys.exit(main())
