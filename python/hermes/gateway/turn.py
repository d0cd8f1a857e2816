"""The path of one inbound message, from the adapter's handler to the reply (SPEC §6).

``handle_message`` (the adapter's handler): authorize, key the conversation, run commands,
then queue the message on its conversation and wait for its reply. ``session_worker`` runs a
conversation's queued messages one turn at a time. ``handle_with_agent`` is one turn:

1. get or create the conversation, load its transcript; a message the platform delivered
   again whose turn finished is answered with its stored reply here (``redelivery``);
2. run the agent (``runner._run_agent``: cached or built, on a worker thread) on it;
3. drop the result if a command disowned the turn meanwhile (stale run generation);
4. write the transcript (``transcript.write_turn``);
5. update the routing entry, then re-baseline the agent cache's message count — after every
   write of the turn, so this process's own rows never look like another process's;
6. after a conversation's first exchange, title it (``auto_title``, in the background);
   emit the hooks and return the reply for the adapter to send.

A client turn (``event.client``, the api_server; ``hermes.gateway.client_turn``) is routed by
its caller and conversation first, and is never a command. Stateless, step 1 reads no
transcript and step 2 gives the agent the client's own history; continued, step 1 finds the
caller's conversation or reports that it has none. Its result goes back on
``event.client.report``.

Steps 1 and 4–5 run on the event loop when they cannot wait on the database — a cached
conversation with a short transcript opens with a memory lookup and a read of a few rows, a
turn whose rows the agent already wrote ends with memory-only bookkeeping, and at
``synchronous=NORMAL`` a first turn commits its ``session_meta`` row there unless another
writer is in the way — and in one worker thread each otherwise (a new conversation, a long
transcript, messages to write, a resume mark to clear, any commit at FULL). A thread hop costs
80–150 us here (two wake-ups across CPUs), more than that work itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from hermes.agent.conversation import inbound_message_id
from hermes.errors import HermesError, WriterBusyError
from hermes.gateway import auto_title, client_turn, commands, redelivery, resume, transcript
from hermes.gateway.client_turn import TurnReport
from hermes.gateway.events import MessageEvent, SessionSource
from hermes.gateway.seams import TurnHost
from hermes.gateway.session import SessionEntry, SessionStore
from hermes.state import writes_without_waiting

logger = logging.getLogger(__name__)

STOPPING_NOTICE = ("The gateway is shutting down and did not start on your message. "
                   "Please send it again once the gateway is back.")
FAILURE_NOTICE = "Sorry, something went wrong while answering; the error was logged."
#: A cached conversation with at most this many rows opens its turn on the event loop:
#: reading them (~2 us a row) costs less than a thread hop.
INLINE_OPEN_MAX_ROWS = 64


async def handle_message(runner: TurnHost, event: MessageEvent) -> str | None:
    if event.client is not None:
        event = await client_turn.route(runner.async_session_store, event, event.client)
    source = event.source
    if not runner._is_user_authorized(source):
        logger.warning("ignoring a message from unauthorized user %s on %s",
                       source.user_id, source.platform.value)
        return None
    session_key = runner._session_key_for(source)
    # A client's text is content, as in OpenAI's API, never a gateway command.
    invocation = commands.parse(event.text) if event.client is None else None
    if invocation is not None:
        # Commands act on a running turn, so they never wait behind it.
        return await commands.execute(runner, invocation, source, session_key)
    if runner._draining:
        return STOPPING_NOTICE
    slots = runner._slots()
    item = slots.enqueue(session_key, event)
    if slots.is_running(session_key):
        if await runner._handle_active_session_busy_message(event, session_key):
            logger.info("interrupted the running turn of %s for a new message", session_key)
    else:
        slots.claim(session_key, source)
        runner._spawn(session_worker(runner, session_key))
    return await item.reply


async def session_worker(runner: TurnHost, session_key: str) -> None:
    """Run the conversation's queued messages in order; release its slot when none are left."""
    slots = runner._slots()
    try:
        while (item := slots.next_queued(session_key)) is not None:
            if runner._draining:
                item.resolve(STOPPING_NOTICE)
                continue
            # The turn runs in its sender's context, not in that of whichever request
            # started this worker.
            turn_task = item.context.run(asyncio.ensure_future,
                                         run_turn(runner, item.event, session_key))
            item.resolve(await turn_task)
    finally:
        slots.release(session_key)
        while (left := slots.next_queued(session_key)) is not None:
            left.resolve(STOPPING_NOTICE)  # only after a cancellation: the loop drains it


async def run_turn(runner: TurnHost, event: MessageEvent, session_key: str) -> str | None:
    generation = runner._begin_session_run_generation(session_key)
    runner._slots().set_pending(session_key)
    try:
        return await runner._handle_message_with_agent(event, event.source, session_key,
                                                       generation)
    except Exception:
        logger.exception("turn of %s failed", session_key)
        return FAILURE_NOTICE


async def handle_with_agent(runner: TurnHost, event: MessageEvent, source: SessionSource,
                            session_key: str, run_generation: int) -> str | None:
    """One turn: steps 1–6 of the module docstring."""
    client = event.client
    opened = await _open(runner, event, source, session_key)
    if opened is None:
        assert client is not None  # only a continued client conversation may be missing
        client.unknown_session = True
        return None
    entry = opened.entry
    if client is None and event.message_id:
        answered = await _answered_before(runner, event.message_id, opened, session_key)
        if answered is not None:
            return answered
    if client is not None and client.stateless:
        message = event.text  # the client's history is the context; no gateway notes in it
    else:
        message = resume.annotate(event.text, entry, opened.history,
                                  runner.config.resume_freshness)
    context: dict[str, Any] = {
        "platform": source.platform.value, "user_id": source.user_id,
        "session_key": session_key, "session_id": entry.session_id, "message": event.text,
    }
    if opened.starts:
        await runner.hooks.emit("session:start", context)
    await runner.hooks.emit("agent:start", context)
    started = time.monotonic()
    marked = inbound_message_id.set(event.message_id)  # the agent's user row carries it
    try:
        result = await runner._run_agent(
            message, opened.history, source, entry.session_id, session_key, run_generation,
            persist_user_message=None if message == event.text else event.text,
            ephemeral_system_prompt=client.system_prompt if client is not None else None)
    finally:
        inbound_message_id.reset(marked)
    if not runner._is_session_run_current(session_key, run_generation):
        logger.info("dropping the result of a disowned turn of %s", session_key)
        if client is not None:
            client.report = TurnReport.of(result, entry.session_id, disowned=True)
        return None
    clears_resume = entry.resume_pending and resume.turn_completed(result)
    await _close(runner, entry, session_key, event, opened.needs_meta, len(opened.history),
                 result, clears_resume)
    await runner._refresh_agent_cache_message_count(session_key, entry.session_id)
    if client is not None:
        client.report = TurnReport.of(result, entry.session_id)
    reply = result.get("final_response")
    if reply and not result.get("failed") and auto_title.is_first_exchange(opened.history):
        # Off the reply's path: the title is bookkeeping.
        runner._spawn(runner.async_session_store.call(
            lambda s: auto_title.title_first_exchange(s.state_db, entry.session_id, event.text,
                                                      str(reply), ask_model=client is None)))
    await runner.hooks.emit("agent:end", {**context, "response": reply,
                                          "seconds": time.monotonic() - started})
    return str(reply) if reply is not None else None


@dataclass(frozen=True)
class _Opened:
    entry: SessionEntry
    history: list[dict[str, Any]]  # the agent's ``conversation_history``
    starts: bool  # the stored transcript was empty: the conversation starts with this turn
    needs_meta: bool  # it has no ``session_meta`` row yet: this turn writes it


async def _open(runner: TurnHost, event: MessageEvent, source: SessionSource,
                session_key: str) -> _Opened | None:
    """Step 1; ``None`` for a continued client conversation that does not exist. A
    conversation with a cached agent has its routing entry in memory (this process routed its
    last turn), so it is looked up on the loop; its transcript is read there too when the live
    count says it is short. Anything else takes one thread hop."""
    client = event.client
    if client is not None and client.history is not None:
        return await _open_stateless(runner, source, session_key, client.history)
    store = runner.async_session_store
    create = client is None  # a client names a conversation to continue: it must exist
    # An expired conversation is ended and a new one written: never on the loop.
    if not runner._has_cached_agent(session_key) or store.call_here(
            lambda s: s.has_expired(source)):
        opened = await store.call(_open_turn, source, create)
        if opened is None:
            return None
        entry, stored = opened
    else:
        found = store.call_here(_lookup, source, create)
        if found is None:
            return None
        entry = found
        live = runner._live_message_count(entry.session_id)
        if live is not None and live <= INLINE_OPEN_MAX_ROWS:
            stored = store.call_here(lambda s: s.load_transcript(entry.session_id))
        else:
            stored = await store.call(lambda s: s.load_transcript(entry.session_id))
    # Marker rows describe the transcript; they are not conversation for the model.
    history = [m for m in stored if m.get("role") != "session_meta"]
    # A first turn that died before its end never wrote its marker: the next one does.
    return _Opened(entry, history, starts=not stored, needs_meta=len(history) == len(stored))


def _lookup(store: SessionStore, source: SessionSource, create: bool) -> SessionEntry | None:
    return store.get_or_create_session(source) if create else store.find_session(source)


def _open_turn(store: SessionStore, source: SessionSource,
               create: bool) -> tuple[SessionEntry, list[dict[str, Any]]] | None:
    entry = _lookup(store, source, create)
    return None if entry is None else (entry, store.load_transcript(entry.session_id))


async def _open_stateless(runner: TurnHost, source: SessionSource, session_key: str,
                          history: list[dict[str, Any]]) -> _Opened:
    """Step 1 of a stateless client turn: the session named by the conversation's fingerprint
    (``source.thread_id``), and no transcript read (the client sent the history). A session's
    first turn writes the history it arrives with, once."""
    store = runner.async_session_store

    def lookup(s: SessionStore) -> SessionEntry:
        return s.get_or_create_session(source, source.thread_id)

    entry = (store.call_here(lookup) if runner._has_cached_agent(session_key)
             else await store.call(lookup))
    starts = runner._live_message_count(entry.session_id) == 0
    if starts and history:
        await store.call(lambda s: s.append_conversation(entry.session_id, history))
    return _Opened(entry, history, starts=starts, needs_meta=starts)


async def _answered_before(runner: TurnHost, message_id: str, opened: _Opened,
                           session_key: str) -> str | None:
    """A message the platform delivered again whose turn finished: its stored reply
    (``redelivery``), without running the model or writing anything; ``None`` otherwise."""
    answered = redelivery.stored_answer(opened.history, message_id)
    if answered is None:
        return None
    logger.info("message %s of %s was delivered again after its turn finished; answering "
                "with the stored reply", message_id, session_key)
    if answered.is_last_turn and opened.entry.resume_pending:
        # The transcript shows the conversation's last turn finished: nothing to resume.
        await runner.async_session_store.call(lambda s: s.clear_resume_pending(session_key))
    return answered.reply


async def _close(runner: TurnHost, entry: SessionEntry, session_key: str,
                 event: MessageEvent, needs_meta: bool, history_len: int, result: dict[str, Any],
                 clears_resume: bool) -> None:
    """Steps 4–5, where they cost least: on the loop when nothing is committed (the agent wrote
    its rows; activity is memory-only); on the loop too when the only commit is the first
    turn's ``session_meta`` row at ``synchronous=NORMAL`` (a page-cache write, cheaper than the
    hop) and no other writer is in the way; in one worker thread otherwise."""
    store = runner.async_session_store
    args = (entry, session_key, event, needs_meta, history_len, result, clears_resume)
    if clears_resume:
        await store.call(_close_turn, *args)
    elif not transcript.writes_rows(first_turn=needs_meta, result=result):
        store.call_here(_close_turn, *args)
    elif (transcript.writes_only_meta(first_turn=needs_meta, result=result)
          and runner._commits_cheaply()):
        try:
            with writes_without_waiting():
                store.call_here(_close_turn, *args)
        except WriterBusyError:
            await store.call(_close_turn, *args)
    else:
        await store.call(_close_turn, *args)


def _close_turn(store: SessionStore, entry: SessionEntry, session_key: str, event: MessageEvent,
                needs_meta: bool, history_len: int, result: dict[str, Any],
                clears_resume: bool) -> None:
    """Every write of a finished turn; the cache re-baseline must follow all of them."""
    transcript.write_turn(store, entry.session_id, event, first_turn=needs_meta,
                          history_len=history_len, result=result)
    try:
        store.update_session(session_key,
                             last_prompt_tokens=int(result.get("last_prompt_tokens") or 0))
        if clears_resume:
            store.clear_resume_pending(session_key)
    except HermesError as exc:
        # Bookkeeping only: the turn's messages are stored (or spooled) and the user gets the
        # answer; the routing entry catches up on the next turn.
        logger.warning("could not update the routing entry of %s after its turn: %s",
                       session_key, exc)
