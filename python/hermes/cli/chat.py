"""``hermes chat``: a conversation with the agent in this terminal, stored like any chat.

The conversation is named (``--session NAME``, default ``default``): starting the same name
again continues it. ``--resume ID|TITLE`` makes an earlier session that name's current one
first. What is typed is read by the local platform adapter
(``hermes.gateway.platforms.local``): line editing and history, and the slash commands.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from hermes.cli.arguments import Commands, add_model_flags
from hermes.cli.configuration import gateway_config, settings
from hermes.cli.failures import CommandError
from hermes.cli.output import console
from hermes.cli.transcripts import content_text
from hermes.paths import store_exists

if TYPE_CHECKING:
    from hermes.gateway.config import GatewayConfig


def add_commands(commands: Commands) -> None:
    chat = commands.add_parser(
        "chat", help="talk to the agent in this terminal",
        description="A terminal conversation, stored like any gateway chat. Starting the "
                    "same --session NAME again continues it. Type /help for the commands; "
                    "/exit or Ctrl-D ends the chat.")
    chat.add_argument("--session", default="default", metavar="NAME",
                      help="the conversation's name, not a session id: each name is a "
                           "conversation of its own, continued when started again "
                           "(default: default)")
    chat.add_argument("--resume", metavar="ID|TITLE",
                      help="continue an earlier session, found by its id or title, as this "
                           "conversation")
    add_model_flags(chat)
    chat.set_defaults(handler=run_chat)


def run_chat(args: argparse.Namespace) -> int:
    config = gateway_config(settings(args), "local", {"chat": args.session}, only=True)
    if args.resume:
        _switch_to(config, args.session, args.resume)
    _show_where_we_are(config, args.session)  # before the adapter starts prompting
    import asyncio  # here: the other commands never load it

    return asyncio.run(_converse(config))


async def _converse(config: GatewayConfig) -> int:
    from hermes.gateway.config import Platform
    from hermes.gateway.platforms.local import LocalAdapter
    from hermes.gateway.run import GatewayRunner

    runner = GatewayRunner(config)
    await runner.start()
    try:
        adapter = runner.adapters[Platform.LOCAL]
        assert isinstance(adapter, LocalAdapter)
        await adapter.wait_closed()
    finally:
        await runner.stop()
    return 0


def _switch_to(config: GatewayConfig, name: str, ident: str) -> None:
    """Make the session ``ident`` names the current one of the conversation ``name``."""
    from hermes.gateway.commands import reachable_by
    from hermes.gateway.platforms.local import chat_source
    from hermes.gateway.session import SessionStore
    from hermes.session_lookup import find_session
    from hermes.state import SessionDB

    path = config.state_db
    if path is None or not store_exists(path):
        raise CommandError(f"no session database at {path}, so no session {ident!r} to "
                           "resume; start without --resume")
    source = chat_source(name)
    with SessionDB(path) as db:
        store = SessionStore(db, config)
        key = store.session_key(source)
        session = find_session(db, ident, reachable_by(source, key))
        store.switch_session(key, session["id"], source)


def _show_where_we_are(config: GatewayConfig, name: str) -> None:
    """Say whether the conversation is new; for a continued one, show its end, so the person
    sees where they left off."""
    from rich.text import Text

    from hermes.gateway.platforms.local import chat_source, message_line
    from hermes.gateway.session import SessionStore
    from hermes.state import SessionDB

    out = console()
    path = config.state_db
    session: dict[str, Any] | None = None
    transcript: list[dict[str, Any]] = []
    if path is not None and store_exists(path):
        with SessionDB(path) as db:
            store = SessionStore(db, config)
            entry = store.get_entry(store.session_key(chat_source(name)))
            if entry is not None:
                session = db.get_session(entry.session_id)
                transcript = store.load_transcript(entry.session_id)
    if session is None:
        out.print(Text(f"new conversation {name!r} — /help lists the commands, /exit or "
                       "Ctrl-D ends it", style="dim"))
        return
    shown = [m for m in transcript
             if m.get("role") in ("user", "assistant") and m.get("content")]
    title = f" {session['title']!r}," if session.get("title") else ""
    out.print(Text(f"continuing {name!r} (session {session['id']},{title} {len(shown)} "
                   "messages) — /help lists the commands, /exit or Ctrl-D ends it",
                   style="dim"))
    for message in shown[-10:]:
        speaker = "you" if message["role"] == "user" else "hermes"
        out.print(message_line(speaker, content_text(message["content"]), earlier=True))
