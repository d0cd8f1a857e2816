"""What the gateway runner is configured with: platforms, the agent cache, shutdown bounds.

``GatewayConfig()`` with no arguments is a working configuration (the api_server platform on
loopback, the built-in agent), so tests and embedders only name what they change. The model
settings (name, endpoint, key) are not here: they belong to ``hermes.config`` and are read per
agent build by ``hermes.gateway.run._resolve_runtime_agent_kwargs``, so a key never sits in
this object (which is logged) and an edited ``config.yaml`` reaches the next agent.

``config.yaml``, section ``gateway`` (every key optional)::

    gateway:
      busy_policy: queue           # or "interrupt": a new message stops the running turn
      agent_cache_size: 128        # cached agents (one per conversation), least recent out
      agent_idle_ttl: 3600         # seconds an unused cached agent is kept
      drain_timeout: 30            # seconds running turns get to finish on shutdown
      interrupt_grace: 5           # seconds interrupted turns get to stop after that
      agent_factory: mypkg.agents:build   # replaces hermes.agent.AIAgent
      synchronous: FULL            # or NORMAL: a commit survives a crash, not a power loss
      platforms:
        api_server: {enabled: true}
        telegram: {enabled: true, token: "123456:ABC...", allowed_users: [42],
                   allowed_chats: [-1001], extra: {reply_to_mode: first}}
        webhook: {enabled: true, adapter: "mypkg.hooks:WebhookAdapter",
                  allowed_users: ["alice"], extra: {port: 9000}}

Environment: ``HERMES_GATEWAY_BUSY_POLICY``, ``HERMES_GATEWAY_DRAIN_TIMEOUT``,
``HERMES_GATEWAY_INTERRUPT_GRACE``, ``HERMES_GATEWAY_AGENT_FACTORY``,
``HERMES_GATEWAY_SYNCHRONOUS`` override the file; the chat platforms' variables (hermes-agent's
names: ``TELEGRAM_BOT_TOKEN``, ``WEBHOOK_SECRET``, ...) are in ``platform_env``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from hermes.config import _read_yaml, config_path
from hermes.errors import ConfigError
from hermes.gateway.platform_env import overlay_platform_environment
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
    #: "module:callable" building agents instead of ``hermes.agent.AIAgent``.
    agent_factory: str | None = None
    #: The session database; ``None``: ``state_db`` of config.yaml, else $HERMES_HOME/state.db.
    state_db: Path | None = None
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
        raise ConfigError(f"gateway setting {key}={value!r} is invalid: {fix}")


_ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("HERMES_GATEWAY_BUSY_POLICY", "busy_policy"),
    ("HERMES_GATEWAY_DRAIN_TIMEOUT", "drain_timeout"),
    ("HERMES_GATEWAY_INTERRUPT_GRACE", "interrupt_grace"),
    ("HERMES_GATEWAY_AGENT_FACTORY", "agent_factory"),
    ("HERMES_GATEWAY_SYNCHRONOUS", "synchronous"),
)


def load_gateway_config(path: Path | None = None) -> GatewayConfig:
    """Read the ``gateway`` section of ``config.yaml`` (default: under $HERMES_HOME), then env.

    Raises ``ConfigError`` naming the file, the key and the fix for any bad value.
    """
    where = path or config_path()
    document = _read_yaml(where)
    section = document.get("gateway") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: the gateway section must be a mapping of settings")
    raw: dict[str, Any] = dict(section)
    for variable, key in _ENVIRONMENT:
        if os.environ.get(variable):
            raw[key] = os.environ[variable]
    platforms = overlay_platform_environment(raw.get("platforms"), os.environ)
    if platforms is not None:
        raw["platforms"] = platforms
    if document.get("state_db") and "state_db" not in raw:
        raw["state_db"] = document["state_db"]
    try:
        return _from_mapping(raw, where)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _from_mapping(raw: dict[str, Any], where: Path) -> GatewayConfig:
    known = {f.name: f for f in dataclasses.fields(GatewayConfig)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"unknown gateway setting(s) {', '.join(unknown)}; remove or fix them")
    values: dict[str, Any] = {}
    for name, value in raw.items():
        if name == "platforms":
            values[name] = _platforms(value)
        elif name == "state_db":
            values[name] = Path(str(value)).expanduser()
        else:
            values[name] = _scalar(name, value, type(getattr(GatewayConfig(), name)))
    return GatewayConfig(**values)


def _scalar(name: str, value: object, kind: type) -> object:
    if value is None:
        return None
    try:
        if kind is bool:
            text = str(value).strip().lower()
            if text not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(value)
            return text in ("1", "true", "yes", "on")
        if kind in (int, float):
            return kind(str(value).strip())
    except ValueError:
        raise ConfigError(f"{name} must be a {kind.__name__}, got {value!r}") from None
    return str(value)


def _platforms(value: object) -> dict[Platform, PlatformConfig]:
    if not isinstance(value, dict):
        raise ConfigError("platforms must map platform names to settings")
    names = ", ".join(p.value for p in Platform)
    result: dict[Platform, PlatformConfig] = {}
    for name, settings in value.items():
        try:
            platform = Platform(str(name))
        except ValueError:
            raise ConfigError(f"unknown platform {name!r}; use one of {names}") from None
        settings = settings or {}
        if not isinstance(settings, dict):
            raise ConfigError(f"platforms.{name} must be a mapping")
        extra = settings.get("extra") or {}
        if not isinstance(extra, dict):
            raise ConfigError(f"platforms.{name}.extra must be a mapping")
        token = settings.get("token")
        result[platform] = PlatformConfig(
            enabled=bool(_scalar(f"platforms.{name}.enabled", settings.get("enabled", True), bool)),
            adapter=settings.get("adapter"),
            allowed_users=_id_list(f"platforms.{name}.allowed_users", settings.get("allowed_users")),
            allowed_chats=_id_list(f"platforms.{name}.allowed_chats", settings.get("allowed_chats")),
            token=None if token is None else str(token),
            extra=extra,
        )
    return result


def _id_list(key: str, value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise ConfigError(f"{key} must be a list of ids, e.g. [42, 1234567]")
    return tuple(str(item).strip() for item in value)
