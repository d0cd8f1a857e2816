"""``GatewayRunner``: the gateway's facade. It owns the state; the behaviour is in the modules.

==================  ==========================================================================
``seams``           what each module may use of the runner: one ``Protocol`` a module
``turn``            one inbound message: authorize, queue per conversation, run a turn
``agents``          an agent for a turn (cached or built), run on a worker thread
``agent_cache``     the per-conversation agent cache and its cross-process coherence guard
``transcript``      what a turn writes (``session_meta`` row, the agent's messages)
``busy``            one turn at a time per conversation: slots, queues, run generations
``commands``        ``/stop`` and ``/new``
``resume``          notes for conversations whose turn a shutdown or crash cut off
``redelivery``      a message the platform delivered again: its stored reply, or a new run
``client_turn``     turns of request/response clients (api_server): routing, stateless history
``shutdown``        the bounded phases of ``stop()``
``session``         session keys, routing entries and transcripts in ``state.db``
``events``          the types exchanged with adapters (``MessageEvent``, ``SessionSource``, ...)
``executor``        the daemon worker threads turns run on
==================  ==========================================================================

The modules are typed against their host in ``seams``, never against this class: the runner
is the one place that holds the state, and each module sees only its own part of it. Method
names are those of hermes-agent's runner, whose regression tests reach into them; the methods
those tests call on a runner built with ``object.__new__`` (no ``__init__``) rely only on
class-level defaults and helpers created on first use.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import signal
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from hermes.gateway import agents, shutdown, turn
from hermes.gateway.agent_cache import AgentCache, CacheEntry
from hermes.gateway.busy import MessageQueues, RunGenerations, Slots
from hermes.gateway.config import GatewayConfig, Platform, load_gateway_config
from hermes.gateway.events import MessageEvent, SessionSource
from hermes.gateway.executor import DaemonThreadPool
from hermes.gateway.hooks import HookRegistry
from hermes.gateway.platforms import create_adapter
from hermes.gateway.platforms.base import BasePlatformAdapter
from hermes.gateway.resume import mark_if_unclean_boot
from hermes.gateway.session import AsyncSessionStore, SessionStore, build_session_key
from hermes.paths import hermes_home
from hermes.state import AsyncSessionDB, SessionDB

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Where ``.clean_shutdown`` is kept; ``None`` resolves ``$HERMES_HOME`` when it is needed.
_hermes_home: Path | None = None


def _resolve_runtime_agent_kwargs() -> dict[str, Any]:
    """The keyword arguments every agent is built with: model, endpoint, key and settings.

    Read from ``config.yaml`` and the environment on every agent build, so an edited model or
    key reaches the next agent (the changed signature retires cached agents), and never
    stored in ``GatewayConfig``, which is logged.
    """
    from hermes.config import load_config

    config = load_config()
    return {"model": config.model.name, "base_url": config.model.base_url,
            "api_key": config.model.api_key, "config": config}


class GatewayRunner:
    """Connects the platform adapters to agents, one coherent agent per conversation."""

    # Class-level defaults, for runners built without __init__ (see the module docstring).
    config: GatewayConfig = GatewayConfig()
    _session_db: AsyncSessionDB | None = None
    _draining: bool = False
    _executor: DaemonThreadPool | None = None
    _sweeper: asyncio.Task[None] | None = None
    _stop_task: asyncio.Task[bool] | None = None

    session_store: SessionStore
    adapters: dict[Platform, BasePlatformAdapter]
    _running_agents: dict[str, Any]
    _running_agents_ts: dict[str, float]
    _running_sources: dict[str, SessionSource]
    _pending_messages: MessageQueues
    _agent_cache: dict[str, CacheEntry]
    _agent_cache_lock: threading.Lock
    hooks: HookRegistry

    def __init__(self, config: GatewayConfig | None = None) -> None:
        self.config = config or GatewayConfig()
        self.adapters = {}
        self._running_agents = {}
        self._running_agents_ts = {}
        self._running_sources = {}
        self._pending_messages = {}
        self._agent_cache = {}
        self._agent_cache_lock = threading.Lock()
        self.hooks = HookRegistry()
        self._stop_requested = asyncio.Event()

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> bool:
        """Open ``state.db``, resume bookkeeping, connect adapters; ``False`` if none connected."""
        if self._session_db is None:
            db = SessionDB(self.config.state_db, synchronous=self.config.synchronous)
            self._session_db = AsyncSessionDB(db)
            self.session_store = SessionStore(db, self.config)
        flagged = await mark_if_unclean_boot(self.async_session_store, self._home(),
                                             self.config.resume_recent_window)
        if flagged:
            logger.info("previous gateway did not stop cleanly: %d conversation(s) will be "
                        "told their last turn was cut off", flagged)
        for platform, platform_config in self.config.enabled_platforms().items():
            adapter = create_adapter(platform, platform_config)
            adapter.set_message_handler(self._handle_message)
            adapter.set_session_store(self.async_session_store)
            if await adapter.connect():
                self.adapters[platform] = adapter
            else:
                logger.error("platform %s did not connect; running without it", platform.value)
        self._sweeper = asyncio.ensure_future(self._sweep_idle_agents())
        return bool(self.adapters)

    async def stop(self) -> bool:
        """Shut down in bounded phases (``shutdown.stop``); safe to call more than once.

        Returns whether the shutdown was clean (no turn was cut off).
        """
        if self._stop_task is None:
            self._stop_task = asyncio.ensure_future(shutdown.stop(self))
        self._stop_requested.set()
        return await asyncio.shield(self._stop_task)

    async def run(self) -> int:
        """``hermes gateway run``: start, serve until SIGTERM/SIGINT, stop. Returns the exit
        code: 0 once stopped as asked (cut-off turns are logged and resumed on the next boot),
        1 if no platform connected."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop_requested.set)
        try:
            try:
                started = await self.start()
            except BaseException:
                await self.stop()  # release what did start (listening ports, the database)
                raise
            if not started:
                logger.error("no platform adapter connected; stopping")
                await self.stop()
                return 1
            logger.info("gateway running (%s)", ", ".join(p.value for p in self.adapters))
            await self._stop_requested.wait()
            await self.stop()
            return 0
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)

    # ----------------------------------------------------------------- one message

    async def _handle_message(self, event: MessageEvent) -> str | None:
        return await turn.handle_message(self, event)

    async def _handle_message_with_agent(self, event: MessageEvent, source: SessionSource,
                                         session_key: str, run_generation: int) -> str | None:
        return await turn.handle_with_agent(self, event, source, session_key, run_generation)

    async def _run_agent(self, message: str, history: list[dict[str, Any]],
                         source: SessionSource, session_id: str, session_key: str,
                         run_generation: int, persist_user_message: str | None = None,
                         ephemeral_system_prompt: str | None = None) -> dict[str, Any]:
        runtime_kwargs = await self._run_in_executor_with_context(_resolve_runtime_agent_kwargs)
        if ephemeral_system_prompt:
            # A build argument, so the agent cache keeps one agent per prompt.
            runtime_kwargs["ephemeral_system_prompt"] = ephemeral_system_prompt
        return await agents.run_agent(self, message, history, source, session_id, session_key,
                                      run_generation, runtime_kwargs, persist_user_message)

    def _is_user_authorized(self, source: SessionSource) -> bool:
        """The platform's allowlists: its users, and for anything but a direct message its
        chats. Checked before anything of the message is stored."""
        platform_config = self.config.platforms.get(source.platform)
        if platform_config is None:
            return True
        users, chats = platform_config.allowed_users, platform_config.allowed_chats
        if users is not None and (source.user_id is None or source.user_id not in users):
            return False
        return chats is None or source.chat_type == "dm" or source.chat_id in chats

    def _session_key_for(self, source: SessionSource) -> str:
        return build_session_key(source, self.config.group_sessions_per_user,
                                 self.config.thread_sessions_per_user)

    async def _handle_active_session_busy_message(self, event: MessageEvent,
                                                  session_key: str) -> bool:
        """A message arrived while its conversation runs a turn. It waits in the queue; under
        the "interrupt" policy the running agent is also asked to stop early. Returns whether
        it was."""
        if self.config.busy_policy != "interrupt":
            return False
        agent = self._slots().agent(session_key)
        if agent is None:
            return False
        agent.interrupt("a new message arrived")
        return True

    def _interrupt_session(self, session_key: str, reason: str) -> bool:
        """Disown the conversation's running turn (its result will be dropped) and interrupt
        its agent; ``False`` if no turn was running."""
        self._begin_session_run_generation(session_key)
        slots = self._slots()
        agent = slots.agent(session_key)
        if agent is not None:
            agent.interrupt(reason)
        return slots.is_running(session_key)

    def _slots(self) -> Slots:
        return Slots(self._running_agents, self._running_agents_ts, self._running_sources,
                     self._pending_messages)

    def _generations(self) -> RunGenerations:
        generations = self.__dict__.get("_session_run_generation")
        if generations is None:
            generations = self.__dict__["_session_run_generation"] = RunGenerations()
        return generations

    def _begin_session_run_generation(self, session_key: str) -> int:
        return self._generations().begin(session_key)

    def _is_session_run_current(self, session_key: str, generation: int) -> bool:
        return self._generations().is_current(session_key, generation)

    @property
    def async_session_store(self) -> AsyncSessionStore:
        return AsyncSessionStore(lambda: self.session_store)

    # ----------------------------------------------------------------- agent cache

    def _cache(self) -> AgentCache:
        used_at = self.__dict__.setdefault("_agent_cache_used_at", {})
        own_at = self.__dict__.setdefault("_agent_cache_own_at", {})
        return AgentCache(self._agent_cache, self._agent_cache_lock, used_at, own_at,
                          capacity=self.config.agent_cache_size,
                          idle_ttl=self.config.agent_idle_ttl)

    def _has_cached_agent(self, session_key: str) -> bool:
        # One dict lookup, without building the ``_cache()`` view: a turn asks on the loop.
        return session_key in self._agent_cache

    def _live_message_count(self, session_id: str) -> int | None:
        """The session's ``message_count`` in ``state.db`` now; ``None`` if it cannot be read.

        Read on the loop, not through a worker thread: it is one indexed read of a few
        microseconds with the GIL released, and a WAL reader never waits for writers; a
        thread hop would cost far more than the read.
        """
        db = self._sync_session_db()
        if db is None:
            return None
        try:
            return db.live_message_count(session_id)
        except Exception:
            logger.warning("cannot read the message count of %s", session_id, exc_info=True)
            return None

    def _commits_cheaply(self) -> bool:
        """Whether a commit costs less than a thread hop: at ``synchronous=NORMAL`` it is a
        write to the page cache (tens of microseconds), at FULL it waits for an fsync."""
        db = self._sync_session_db()
        return db is not None and db.synchronous == "NORMAL"

    def _own_appends(self, session_id: str) -> int | None:
        """Rows this process has written to the session (``None`` without a database)."""
        db = self._sync_session_db()
        return None if db is None else db.own_appends(session_id)

    async def _refresh_agent_cache_message_count(self, session_key: str,
                                                 session_id: str | None) -> None:
        """Re-baseline the cached agent's snapshot to the live count after this turn's writes,
        so the coherence guard fires only on other processes' writes."""
        if not session_id or getattr(self, "_agent_cache", None) is None:
            return
        live = self._live_message_count(session_id)
        if live is not None:
            self._cache().rebaseline(session_key, session_id, live, self._own_appends(session_id))

    async def _sweep_idle_agents(self) -> None:
        while True:
            await asyncio.sleep(self.config.agent_sweep_interval)
            self._release_agents(self._cache().sweep_idle(busy=self._slots().keys()))

    def _release_agents(self, released: Iterable[Any]) -> None:
        """Release evicted agents in the background: closing one can take seconds."""
        for agent in released:
            self._spawn(shutdown.bounded(
                self._run_in_executor_with_context(self._cleanup_agent_resources, agent),
                self.config.cleanup_timeout, "releasing an evicted agent"))

    def _cleanup_agent_resources(self, agent: Any) -> None:
        """Let the agent's memory provider see the transcript, then close the agent (its tool
        processes and clients). Blocking: called on a worker thread."""
        messages = getattr(agent, "_session_messages", None)
        shutdown_memory = getattr(agent, "shutdown_memory_provider", None)
        if callable(shutdown_memory):
            shutdown_memory(messages if isinstance(messages, list) else None)
        if getattr(agent, "_end_session_on_close", False):
            # Retiring an agent does not end its conversation: the next message resumes it.
            agent._end_session_on_close = False
        close = getattr(agent, "close", None)
        if callable(close):
            close()

    async def _finalize_shutdown_agents(self, agents_by_key: Mapping[str, Any]) -> bool:
        """Flush each agent's in-flight transcript, then release it (both off the loop and
        bounded); ``True`` if all of it finished in time."""
        return await shutdown.finalize_agents(agents_by_key, self._run_in_executor_with_context,
                                              self._cleanup_agent_resources,
                                              self.config.cleanup_timeout)

    # ----------------------------------------------------------------- plumbing

    async def _run_in_executor_with_context(self, func: Callable[..., _T], *args: Any) -> _T:
        """Run blocking ``func`` on the runner's worker threads, with the caller's contextvars
        (the agent reads per-turn context such as the reply stream from them)."""
        if self._executor is None:
            self._executor = DaemonThreadPool(self.config.max_concurrent_turns)
        call = functools.partial(contextvars.copy_context().run, func, *args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def _spawn(self, coroutine: Coroutine[Any, Any, object]) -> None:
        """Run a background task, keeping a reference so it is not garbage-collected."""
        tasks: set[asyncio.Task[Any]] = self.__dict__.setdefault("_background", set())
        task = asyncio.ensure_future(coroutine)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def _start_draining(self) -> None:
        """Refuse new turns and stop the idle sweep; conversation workers are left to finish
        (that is the drain)."""
        self._draining = True
        if self._sweeper is not None:
            self._sweeper.cancel()

    def _session_store_opened(self) -> bool:
        """Whether ``start()`` got as far as the session store (it fails early without a
        database)."""
        return getattr(self, "session_store", None) is not None

    def _close_resources(self) -> None:
        """After the adapters disconnected: forget them, stop the worker threads, close the
        database."""
        self.adapters.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        db = self._sync_session_db()
        if db is not None:
            db.close()

    def _sync_session_db(self) -> SessionDB | None:
        """The database's blocking face (agents write through it on their worker threads);
        ``None`` before ``start()`` opened it."""
        return None if self._session_db is None else self._session_db.sync

    def _home(self) -> Path:
        return _hermes_home if _hermes_home is not None else hermes_home()


def run_gateway(config: GatewayConfig | None = None) -> int:
    """The whole ``hermes gateway run`` job; returns the process exit code."""
    return asyncio.run(GatewayRunner(config or load_gateway_config()).run())
