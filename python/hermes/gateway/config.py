"""What the gateway runner is configured with: platforms, the agent cache, shutdown bounds.

``GatewayConfig()`` with no arguments is a working configuration (the api_server platform on
loopback, the built-in agent), so tests and embedders only name what they change. Every
setting is checked when the object is made (``InvalidSettingError`` names the setting and the
fix). The model settings (name, endpoint, key) are not here: they are read per agent build by
``hermes.gateway.run._resolve_runtime_agent_kwargs``, so a key never sits in this object
(which is logged) and an edited ``config.yaml`` reaches the next agent.

The ``gateway`` section of ``config.yaml`` and its environment variables are read by the one
loader, ``hermes.config``, whose docstring documents every key; ``load_gateway_config()``
returns its gateway part.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from hermes.errors import InvalidSettingError
from hermes.state import Synchronous


class Platform(Enum):
    """The chat platforms a session can come from; the value is what ``state.db`` stores."""

    LOCAL = "local"
    TELEGRAM = "telegram"
    DISCORD = "discord"
    WHATSAPP = "whatsapp"
    SLACK = "slack"
    SIGNAL = "signal"
    MATTERMOST = "mattermost"
    MATRIX = "matrix"
    HOMEASSISTANT = "homeassistant"
    EMAIL = "email"
    SMS = "sms"
    API_SERVER = "api_server"
    WEBHOOK = "webhook"


BusyPolicy = Literal["queue", "interrupt"]
_BUSY_POLICIES: tuple[BusyPolicy, ...] = ("queue", "interrupt")
ResetMode = Literal["none", "idle", "daily", "both"]
_RESET_MODES: tuple[ResetMode, ...] = ("none", "idle", "daily", "both")
_SYNCHRONOUS: tuple[Synchronous, ...] = ("FULL", "NORMAL")


@dataclass(frozen=True)
class PlatformConfig:
    """One platform's switch, adapter, credential and allowlists.

    ``adapter`` ("module:Class") plugs in an adapter the package does not ship; ``None`` uses
    the built-in one for the platform. ``allowed_users`` ``None`` lets every user of the
    platform in (the shipped platforms are loopback, key- or signature-protected, or refuse to
    start without an allowlist); a tuple admits only those user ids. ``allowed_chats`` does the
    same for the group chats (and channels) a message may come from; direct messages are
    judged by ``allowed_users`` alone. ``token`` is the platform's credential (a bot token).
    ``extra`` is passed to the adapter untouched. Neither ``token`` nor ``extra`` (which may
    hold secrets) is shown in this object's ``repr``.
    """

    enabled: bool = False
    adapter: str | None = None
    allowed_users: tuple[str, ...] | None = None
    allowed_chats: tuple[str, ...] | None = None
    token: str | None = field(default=None, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)


def _default_platforms() -> dict[Platform, PlatformConfig]:
    return {Platform.API_SERVER: PlatformConfig(enabled=True)}


@dataclass(frozen=True)
class SessionResetPolicy:
    """When a chat's conversation expires and its next message starts a new one (hermes-agent's
    ``session_reset``): ``idle`` after ``idle_minutes`` without a turn, ``daily`` at the first
    message after ``at_hour`` o'clock (local time), ``both`` whichever comes first, ``none``
    never (the default). The expired session is ended with the reason ``idle`` or ``daily``."""

    mode: ResetMode = "none"
    idle_minutes: float = 1440.0
    at_hour: int = 4

    def __post_init__(self) -> None:
        _check(self.mode in _RESET_MODES, "session_reset.mode", self.mode,
               "use 'none', 'idle', 'daily' or 'both'")
        _check(self.idle_minutes > 0, "session_reset.idle_minutes", self.idle_minutes,
               "use a positive number of minutes")
        _check(0 <= self.at_hour <= 23, "session_reset.at_hour", self.at_hour,
               "use an hour from 0 to 23")

    def expiry(self, last_active: datetime, now: datetime) -> str | None:
        """Why a conversation last active at ``last_active`` has expired by ``now`` (``"idle"``
        or ``"daily"``), or ``None`` while it goes on."""
        if self.mode in ("idle", "both") and now - last_active > timedelta(
                minutes=self.idle_minutes):
            return "idle"
        if self.mode in ("daily", "both"):
            boundary = now.replace(hour=self.at_hour, minute=0, second=0, microsecond=0)
            if now < boundary:
                boundary -= timedelta(days=1)
            if last_active < boundary:
                return "daily"
        return None


@dataclass(frozen=True)
class GatewayConfig:
    """Everything the runner reads; immutable so a running gateway has one consistent view."""

    platforms: Mapping[Platform, PlatformConfig] = field(default_factory=_default_platforms)
    #: "queue": a message for a busy conversation waits for the running turn;
    #: "interrupt": it also asks the running agent to stop early. Never concurrent.
    busy_policy: BusyPolicy = "queue"
    agent_cache_size: int = 128
    agent_idle_ttl: float = 3600.0
    #: How often idle cached agents are swept.
    agent_sweep_interval: float = 60.0
    #: Threads running agent turns; turns beyond this wait for a free thread.
    max_concurrent_turns: int = 64
    drain_timeout: float = 30.0
    interrupt_grace: float = 5.0
    #: Bound on each step of tearing one agent down (flush, memory provider, close). With
    #: the defaults a stop takes at most about a minute, inside systemd's 90 s stop timeout.
    cleanup_timeout: float = 10.0
    #: Bound on telling one chat that the gateway is stopping, and on one adapter disconnect.
    notify_timeout: float = 5.0
    #: A boot after an unclean exit marks sessions active this recently as resume_pending.
    resume_recent_window: float = 120.0
    #: Resume notes are only added while the interruption is at most this old (0: always).
    resume_freshness: float = 3600.0
    #: Group chats get one conversation per participant unless this is off.
    group_sessions_per_user: bool = True
    #: Threads are shared by their participants unless this is on.
    thread_sessions_per_user: bool = False
    #: When a chat's conversation expires (default: never).
    session_reset: SessionResetPolicy = field(default_factory=SessionResetPolicy)
    #: "module:callable" building agents instead of ``hermes.agent.AIAgent``.
    agent_factory: str | None = None
    #: The session store (``load_config`` puts config.yaml's ``database.url`` or top-level
    #: ``state_db`` here): a file, or a ``postgresql://`` URL; ``None``: $HERMES_HOME/state.db.
    state_db: Path | str | None = None
    #: "FULL": every commit is fsync'd (survives power loss); "NORMAL": not, so it survives
    #: a crash of the process but may lose the last commits on power loss. At NORMAL a first
    #: turn's ``session_meta`` commit is cheap enough to run on the event loop.
    synchronous: Synchronous = "FULL"

    def __post_init__(self) -> None:
        _check(self.busy_policy in _BUSY_POLICIES, "busy_policy", self.busy_policy,
               "use 'queue' or 'interrupt'")
        _check(self.synchronous in _SYNCHRONOUS, "synchronous", self.synchronous,
               "use 'FULL' (durable on power loss) or 'NORMAL'")
        _check(self.agent_cache_size >= 1, "agent_cache_size", self.agent_cache_size,
               "use a positive number of agents")
        _check(self.max_concurrent_turns >= 1, "max_concurrent_turns",
               self.max_concurrent_turns, "use a positive number of threads")
        for name in ("agent_idle_ttl", "agent_sweep_interval", "drain_timeout",
                     "interrupt_grace", "cleanup_timeout", "notify_timeout",
                     "resume_recent_window", "resume_freshness"):
            value = getattr(self, name)
            _check(value >= 0, name, value, "use a number of seconds, 0 or more")
        _check(self.agent_factory is None or ":" in self.agent_factory, "agent_factory",
               self.agent_factory, "write it as 'package.module:callable'")

    def enabled_platforms(self) -> dict[Platform, PlatformConfig]:
        """The platforms the runner starts adapters for."""
        return {p: c for p, c in self.platforms.items() if c.enabled}


def _check(ok: bool, key: str, value: object, fix: str) -> None:
    if not ok:
        raise InvalidSettingError(key, f"gateway setting {key}={value!r} is invalid: {fix}")


def load_gateway_config() -> GatewayConfig:
    """The gateway's part of ``hermes.config.load_config()`` (config.yaml, then environment).

    Raises ``ConfigError`` naming the file or variable, the key and the fix for a bad value.
    """
    from hermes.config import load_config  # hermes.config imports this module for its types

    return load_config().gateway
