"""What each gateway module may use of the runner: one ``Protocol`` a module.

``GatewayRunner`` (``run.py``) owns the gateway's state and satisfies every host below
(``tests/typing/test_gateway_seams.py`` makes ``mypy --strict`` check it). Each module is typed
against its own host, so it sees exactly the members it needs and never imports ``run``.

The members keep hermes-agent's runner names: its regression tests (``tests/seeds/``) replace
some of them on a runner instance (``_run_agent``, ``_handle_message_with_agent``,
``_is_session_run_current``, ...). A module therefore calls them through the runner, never
around it, so that a replacement takes effect. State is reached through views that apply its
rules (``_slots()``: running slots and queues; ``_cache()``: the agent cache), not by writing
the runner's dicts.

================  ==============  ==========================================================
host              module          what for
================  ==============  ==========================================================
``CommandHost``   ``commands``    interrupt a turn; reset, title, list or resume sessions
``TurnHost``      ``turn``        one inbound message: authorize, queue, run, write, report
``AgentHost``     ``agents``      a coherent agent for a turn (interrupted if it was disowned),
                                  run on a worker thread
``ShutdownHost``  ``shutdown``    the bounded phases of ``stop()``
================  ==============  ==========================================================
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from hermes.gateway.agent_cache import AgentCache
from hermes.gateway.busy import Slots
from hermes.gateway.config import GatewayConfig, Platform
from hermes.gateway.events import MessageEvent, SendResult, SessionSource
from hermes.gateway.hooks import HookRegistry
from hermes.gateway.session import AsyncSessionStore

if TYPE_CHECKING:
    from hermes.state import SessionDB

__all__ = ["AgentHost", "CommandHost", "ConnectedAdapter", "ShutdownHost", "TurnHost"]

_T = TypeVar("_T")


class _RunnerState(Protocol):
    """What the turn, agent and shutdown modules all read: the settings and the slots."""

    @property
    def config(self) -> GatewayConfig: ...

    def _slots(self) -> Slots: ...


class CommandHost(Protocol):
    @property
    def async_session_store(self) -> AsyncSessionStore: ...

    def _interrupt_session(self, session_key: str, reason: str) -> bool: ...


class TurnHost(_RunnerState, CommandHost, Protocol):
    @property
    def hooks(self) -> HookRegistry: ...

    @property
    def _draining(self) -> bool: ...

    def _is_user_authorized(self, source: SessionSource) -> bool: ...

    def _session_key_for(self, source: SessionSource) -> str: ...

    async def _handle_active_session_busy_message(self, event: MessageEvent,
                                                  session_key: str) -> bool: ...

    async def _handle_message_with_agent(self, event: MessageEvent, source: SessionSource,
                                         session_key: str, run_generation: int) -> str | None:
        ...

    async def _run_agent(self, message: str, history: list[dict[str, Any]],
                         source: SessionSource, session_id: str, session_key: str,
                         run_generation: int, persist_user_message: str | None = None,
                         ephemeral_system_prompt: str | None = None) -> dict[str, Any]: ...

    def _begin_session_run_generation(self, session_key: str) -> int: ...

    def _is_session_run_current(self, session_key: str, generation: int) -> bool: ...

    def _spawn(self, coroutine: Coroutine[Any, Any, object]) -> None: ...

    def _has_cached_agent(self, session_key: str) -> bool: ...

    def _live_message_count(self, session_id: str) -> int | None: ...

    def _commits_cheaply(self) -> bool: ...

    async def _refresh_agent_cache_message_count(self, session_key: str,
                                                 session_id: str | None) -> None: ...


class AgentHost(_RunnerState, Protocol):
    def _cache(self) -> AgentCache: ...

    def _sync_session_db(self) -> SessionDB | None: ...

    def _live_message_count(self, session_id: str) -> int | None: ...

    def _own_appends(self, session_id: str) -> int | None: ...

    def _is_session_run_current(self, session_key: str, generation: int) -> bool: ...

    def _release_agents(self, released: Iterable[Any]) -> None: ...

    async def _run_in_executor_with_context(self, func: Callable[..., _T], *args: Any) -> _T:
        ...


class ConnectedAdapter(Protocol):
    """What the shutdown does with a connected platform adapter."""

    async def stop_receiving(self) -> None: ...

    async def send(self, chat_id: str, content: str) -> SendResult: ...

    async def disconnect(self) -> None: ...


class ShutdownHost(_RunnerState, Protocol):
    def _cache(self) -> AgentCache: ...

    @property
    def async_session_store(self) -> AsyncSessionStore: ...

    @property
    def adapters(self) -> Mapping[Platform, ConnectedAdapter]: ...

    def _start_draining(self) -> None: ...

    def _session_store_opened(self) -> bool: ...

    async def _finalize_shutdown_agents(self, agents_by_key: Mapping[str, Any]) -> bool: ...

    def _close_resources(self) -> None: ...

    def _home(self) -> Path: ...
