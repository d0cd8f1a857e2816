"""Stopping the gateway: a fixed sequence of phases, each bounded by a timeout.

1. refuse new turns (``runner._start_draining``), ask the adapters to stop receiving, and
   tell the chats with a running turn;
2. mark those conversations ``resume_pending`` *before* waiting for them — if the process is
   killed during the drain, the next boot still knows their turns were cut off;
3. drain: wait up to ``drain_timeout`` for running turns to finish (a finished turn clears
   its mark again);
4. if that timed out, interrupt the agents and give them ``interrupt_grace`` to stop;
5. finalize every agent (running and cached): flush its in-flight transcript, then release
   its resources off the event loop, each step bounded by ``cleanup_timeout``; then write the
   conversations' activity bookkeeping still held in memory (bounded too);
6. disconnect the adapters (bounded), then forget them, stop the worker threads and close
   the database;
7. write ``$HERMES_HOME/.clean_shutdown`` only if nothing was cut off, so the next boot
   knows whether recently active conversations need a resume note.

An agent stuck in a tool that ignores interrupts cannot hold this up: every wait is bounded,
its worker thread is a daemon, and its transcript so far is flushed in phase 5.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from hermes.gateway.busy import RunningTurn
from hermes.gateway.resume import CLEAN_SHUTDOWN_MARKER
from hermes.gateway.seams import ShutdownHost

logger = logging.getLogger(__name__)

SHUTDOWN_NOTICE = ("The gateway is shutting down. If your request is cut short, it will be "
                   "picked up again when the gateway is back.")
_POLL_SECONDS = 0.05


async def bounded(step: Awaitable[Any], timeout: float, what: str) -> bool:
    """Await ``step`` for at most ``timeout`` seconds; ``False`` (logged) if it timed out or
    failed. The step is cancelled, but a worker thread it started finishes on its own."""
    try:
        await asyncio.wait_for(step, timeout)
        return True
    except asyncio.TimeoutError:
        logger.warning("shutdown: %s did not finish within %.1fs; going on without it",
                       what, timeout)
    except Exception:
        logger.exception("shutdown: %s failed; going on", what)
    return False


async def _wait_idle(runner: ShutdownHost, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while runner._slots().keys() and time.monotonic() < deadline:
        await asyncio.sleep(_POLL_SECONDS)
    return not runner._slots().keys()


async def stop(runner: ShutdownHost) -> bool:
    """Run the phases; returns whether the shutdown was clean (nothing cut off)."""
    config = runner.config
    started = time.monotonic()

    def phase(name: str) -> None:
        logger.info("shutdown: %s (+%.2fs)", name, time.monotonic() - started)

    runner._start_draining()
    for platform, adapter in list(runner.adapters.items()):
        await bounded(adapter.stop_receiving(), config.notify_timeout,
                      f"stopping {platform.value} from receiving")
    running = runner._slots().turns()
    phase(f"notifying {len(running)} chat(s) with a running turn")
    await asyncio.gather(*(_notify(runner, turn) for turn in running))

    store = runner.async_session_store
    running_keys = [turn.session_key for turn in running]
    marked = [key for key in running_keys
              if await bounded(store.call(lambda s: s.mark_resume_pending(key, "shutdown_timeout")),
                               config.cleanup_timeout, f"marking {key} resume_pending")]
    phase("draining running turns")
    drained = await _wait_idle(runner, config.drain_timeout)
    if drained:
        for key in marked:
            await bounded(store.call(lambda s: s.clear_resume_pending(key)), config.cleanup_timeout,
                          f"clearing the resume mark of {key}")
    else:
        stuck = runner._slots().turns()
        phase(f"drain timed out; interrupting {len(stuck)} turn(s)")
        for turn in stuck:
            logger.warning("shutdown: interrupting the turn of %s (running for %.1fs)",
                           turn.session_key, time.time() - turn.started_at)
            if turn.agent is not None:
                turn.agent.interrupt("the gateway is shutting down")
        await _wait_idle(runner, config.interrupt_grace)

    phase("finalizing agents")
    agents: dict[str, Any] = {f"cached:{i}": a for i, a in enumerate(runner._cache().clear())}
    agents.update({turn.session_key: turn.agent for turn in runner._slots().turns()
                   if turn.agent is not None})
    finalized = await runner._finalize_shutdown_agents(_unique(agents))
    if runner._session_store_opened():
        await bounded(store.call(lambda s: s.save_activity()), config.cleanup_timeout,
                      "writing the conversations' activity")

    phase("disconnecting adapters")
    for platform, adapter in list(runner.adapters.items()):
        await bounded(adapter.disconnect(), config.notify_timeout,
                      f"disconnecting {platform.value}")
    runner._close_resources()

    clean = drained and finalized
    if clean:
        marker = runner._home() / CLEAN_SHUTDOWN_MARKER
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError as exc:  # the next boot merely adds resume notes it did not need
            logger.warning("shutdown: cannot write %s: %s", marker, exc)
    phase("stopped" if clean else "stopped; turns were cut off, next boot resumes them")
    return clean


def _unique(agents: dict[str, Any]) -> dict[str, Any]:
    """One entry per agent object (a running agent is usually cached as well)."""
    seen: set[int] = set()
    result: dict[str, Any] = {}
    for key, agent in agents.items():
        if id(agent) not in seen:
            seen.add(id(agent))
            result[key] = agent
    return result


async def _notify(runner: ShutdownHost, turn: RunningTurn) -> None:
    source = turn.source
    adapter = runner.adapters.get(source.platform) if source else None
    if source is not None and adapter is not None:
        await bounded(adapter.send(source.chat_id, SHUTDOWN_NOTICE), runner.config.notify_timeout,
                      f"notifying {turn.session_key}")


def _flush_inflight(agent: Any) -> None:
    """Write what the agent has not written yet: a turn cut off in a tool call is otherwise
    lost, because the agent's own end-of-turn flush never runs."""
    flush = getattr(agent, "_flush_messages_to_session_db", None)
    messages = getattr(agent, "_session_messages", None)
    if not callable(flush) or not isinstance(messages, list) or not messages:
        return
    strip = getattr(agent, "_drop_trailing_empty_response_scaffolding", None)
    if callable(strip):
        # The agent's normal end-of-turn path drops its private retry nudges; a resumed
        # conversation must not replay them either.
        strip(messages)
    flush(messages)


async def finalize_agents(
    agents: Mapping[str, Any],
    run_off_loop: Callable[..., Awaitable[Any]],
    cleanup: Callable[[Any], None],
    timeout: float,
) -> bool:
    """Flush and release every agent, concurrently; ``True`` if every step finished in time."""

    async def finalize(key: str, agent: Any) -> bool:
        flushed = await bounded(run_off_loop(_flush_inflight, agent), timeout,
                                f"flushing the transcript of {key}")
        released = await bounded(run_off_loop(cleanup, agent), timeout,
                                 f"releasing the agent of {key}")
        return flushed and released

    outcomes = await asyncio.gather(*(finalize(k, a) for k, a in agents.items()))
    return all(outcomes)
