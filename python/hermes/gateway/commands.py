"""The chat commands the gateway answers itself, without a model turn.

``/stop`` interrupts the conversation's running turn and disowns it; ``/new`` (or ``/reset``)
does the same and then starts a new conversation under the same chat (the old session stays
in ``state.db``, ended). Both act at once, even while a turn is running: that is their point.
"""

from __future__ import annotations

from enum import Enum

from hermes.gateway.seams import CommandHost


class Command(Enum):
    STOP = "stop"
    NEW = "new"


_NAMES = {"/stop": Command.STOP, "/new": Command.NEW, "/reset": Command.NEW}


def parse(text: str) -> Command | None:
    """The command ``text`` is, if it is one (``/new``, ``/new@botname``, any case)."""
    word = text.strip().split(maxsplit=1)[0].lower() if text.strip() else ""
    return _NAMES.get(word.split("@", 1)[0])


async def execute(runner: CommandHost, command: Command, session_key: str) -> str:
    stopped = runner._interrupt_session(session_key, f"/{command.value} from the user")
    if command is Command.STOP:
        return "Stopped the running turn." if stopped else "Nothing is running right now."
    await runner.async_session_store.call(lambda store: store.reset_session(session_key))
    return "Started a new conversation."
