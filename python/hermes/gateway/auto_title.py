"""A conversation's automatic title, set after its first exchange (hermes-agent does the
same, through ``set_auto_title_if_empty``).

As hermes-agent's gateway, a platform conversation's title is asked of the model: the first
exchange (each side cut to 500 characters) with an instruction to name it, in the background,
off the reply's path (``auxiliary.title_generation.enabled``, default true). The model's answer
is cleaned (reasoning blocks, quotes, a ``Title:`` prefix dropped; its first line, cut at a word
to ``MAX_AUTO_TITLE``). Without a model endpoint, when that setting is off, for an api_server
conversation (a client's: one model call per conversation would double a stateless client's),
or when the model fails or answers nothing usable, the title is the user's first message
itself, shortened. A title already there (a ``/title`` that came first) is never replaced, and
one another session already has gets a ``#2``, ``#3``, ... suffix.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from typing import Any

from hermes.config import ModelConfig, load_config
from hermes.errors import HermesError, TitleInUseError
from hermes.state import SessionDB

logger = logging.getLogger(__name__)

#: Longest automatic title; a longer first message is cut at a word.
MAX_AUTO_TITLE = 60
#: Seconds the model gets to answer (no retry): a title is not worth a long wait, and a call
#: still running holds the process's exit.
TITLE_TIMEOUT = 20.0
#: Characters of each side of the first exchange the model is shown.
_EXCHANGE_CHARS = 500
_INSTRUCTION = (
    "Name this conversation for a list of conversations: a short title of three to seven "
    "words, in the language the user wrote in. Answer with the title alone, without quotes "
    "or a full stop."
)
#: A reasoning model's thinking, which is not the title.
_THINKING = re.compile(r"<(think|thinking|reasoning)>.*?(</\1>|$)", re.DOTALL | re.IGNORECASE)


def is_first_exchange(history: Sequence[dict[str, Any]]) -> bool:
    """Whether a turn with this history before it is the conversation's first exchange."""
    return not any(message.get("role") == "user" for message in history)


def title_from(text: str) -> str:
    """``text``'s first line, whitespace collapsed, cut at a word to ``MAX_AUTO_TITLE``."""
    line = next((line for line in text.splitlines() if line.strip()), "")
    words = " ".join(line.split())
    if len(words) <= MAX_AUTO_TITLE:
        return words
    cut = words[:MAX_AUTO_TITLE - 1].rsplit(" ", 1)[0] or words[:MAX_AUTO_TITLE - 1]
    return cut.rstrip(" ,.;:") + "…"


def model_title(model: ModelConfig, first_message: str, reply: str) -> str | None:
    """The title ``model`` gives the first exchange, cleaned; ``None`` when no endpoint is
    configured, the call fails, or the answer has no words. Blocks: run it off the loop."""
    if not model.is_remote:
        return None
    from hermes.agent.backends import make_backend

    exchange = (f"User: {first_message[:_EXCHANGE_CHARS]}\n\n"
                f"Assistant: {reply[:_EXCHANGE_CHARS]}")
    try:
        answer = make_backend(model).complete(
            [{"role": "system", "content": _INSTRUCTION}, {"role": "user", "content": exchange}],
            [], model=model.resolved_name())
    except HermesError as exc:
        # Bookkeeping: the first message names the session instead.
        logger.info("the model gave no title (%s); the first message names the session", exc)
        return None
    text = _THINKING.sub("", answer.content or "")
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if line[:6].lower() == "title:":
        line = line[6:]
    return title_from(line.strip().strip("\"'`*“”‘’ ").rstrip(".")) or None


def title_first_exchange(db: SessionDB, session_id: str, first_message: str, reply: str, *,
                         ask_model: bool) -> str | None:
    """Title the session after its first exchange unless it has a title: the model's (when
    ``ask_model`` and the configuration allow), else its first message's. The title set, or
    ``None``. Blocks (a model call, the database): run it off the loop."""
    try:
        if db.get_session_title(session_id) is not None:
            return None
    except HermesError as exc:
        logger.warning("could not title session %s: %s", session_id, exc)
        return None
    return set_auto_title(db, session_id, first_message,
                          _asked_title(first_message, reply) if ask_model else None)


def _asked_title(first_message: str, reply: str) -> str | None:
    try:
        config = load_config()
    except HermesError as exc:
        logger.warning("no title asked of the model: %s", exc)
        return None
    if not config.auxiliary.title_generation.enabled:
        return None
    model = dataclasses.replace(config.model, timeout=min(config.model.timeout, TITLE_TIMEOUT),
                                max_retries=0)
    return model_title(model, first_message, reply)


def set_auto_title(db: SessionDB, session_id: str, first_message: str,
                   title: str | None = None) -> str | None:
    """Give the session ``title`` (default: one from its first message) unless it has one;
    the title set, or ``None`` (it had one, or there are no words)."""
    title = title or title_from(first_message)
    if not title:
        return None
    try:
        try:
            written = db.set_auto_title_if_empty(session_id, title)
        except TitleInUseError:
            title = db.get_next_title_in_lineage(title)  # "<title> #2", ...
            written = db.set_auto_title_if_empty(session_id, title)
    except HermesError as exc:
        # Bookkeeping: the turn is stored and answered; the session stays untitled.
        logger.warning("could not title session %s: %s", session_id, exc)
        return None
    return title if written else None
