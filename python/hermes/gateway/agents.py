"""Getting an agent for a turn — reused from the cache or built — and running the turn.

Agents are ``hermes.agent.AIAgent`` unless ``GatewayConfig.agent_factory`` names another
callable (a deployment's own agent, or a scripted one in tests of real gateway processes);
either is called with the same keyword arguments. Building and running happen on the
runner's worker threads: both block (model calls, tools, SQLite), and the event loop must
keep serving every other conversation meanwhile.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hermes.gateway.agent_cache import agent_signature
from hermes.gateway.events import SessionSource
from hermes.gateway.plugins import load_dotted
from hermes.gateway.seams import AgentHost

if TYPE_CHECKING:
    from hermes.state import SessionDB

logger = logging.getLogger(__name__)

AgentFactory = Callable[..., Any]


def agent_factory(path: str | None) -> AgentFactory:
    """The configured factory, or ``AIAgent`` (imported here: the agent is heavy)."""
    if path is None:
        from hermes.agent import AIAgent
        return AIAgent
    factory = load_dotted(path, "gateway.agent_factory")
    if not callable(factory):
        raise TypeError(f"gateway.agent_factory {path!r} is not callable")
    return factory


def build_agent(factory: AgentFactory, session_id: str, session_db: SessionDB | None,
                source: SessionSource, runtime_kwargs: Mapping[str, Any]) -> Any:
    return factory(session_id=session_id, session_db=session_db,
                   platform=source.platform.value, **runtime_kwargs)


async def run_agent(
    runner: AgentHost,
    message: str,
    history: list[dict[str, Any]],
    source: SessionSource,
    session_id: str,
    session_key: str,
    run_generation: int,
    runtime_kwargs: Mapping[str, Any],
    persist_user_message: str | None = None,
) -> dict[str, Any]:
    """One turn: a coherent agent for the conversation, then ``run_conversation`` off-loop.

    ``persist_user_message`` is the user's own text when ``message`` carries a gateway note
    (resume, tool tail): the model sees the note, the transcript keeps the original. A turn
    that a command disowned before its agent was running (``/stop`` while the agent was being
    built) starts interrupted: it stops at its first check, as if stopped a moment later.
    """
    signature = agent_signature(runtime_kwargs)
    live = runner._live_message_count(session_id)
    own = runner._own_appends(session_id)
    cache = runner._cache()
    cached, stale = cache.checkout(session_key, signature, session_id, live)
    if stale:
        logger.info("rebuilding the agent of %s: its settings or its transcript changed "
                    "(another process wrote the session)", session_key)
        runner._release_agents(stale)
    agent: Any = cached
    if agent is None:
        factory = agent_factory(runner.config.agent_factory)
        agent = await runner._run_in_executor_with_context(
            build_agent, factory, session_id, runner._sync_session_db(), source, runtime_kwargs)
        runner._release_agents(cache.put(session_key, agent, signature, live or 0, session_id,
                                         busy=runner._slots().keys(), own=own))
    runner._slots().set_agent(session_key, agent)
    if not runner._is_session_run_current(session_key, run_generation):
        agent.interrupt("stopped before the turn started")
    try:
        result: dict[str, Any] = await runner._run_in_executor_with_context(functools.partial(
            agent.run_conversation, message, conversation_history=history, task_id=session_id,
            persist_user_message=persist_user_message))
    finally:
        if getattr(agent, "is_interrupted", False):
            # The interrupt arrived after the agent's last check: left set, it would end the
            # conversation's next turn at once. A fresh agent starts clean.
            if cache.evict(session_key, agent) is not None:
                runner._release_agents([agent])
    return result
