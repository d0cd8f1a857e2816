"""Every setting of hermes — the agent, its tools, the api_server, the gateway, the CLI — and
the one loader that reads them.

``load_config()`` reads three layers, later ones winning key by key: ``$HERMES_HOME/config.yaml``,
then the environment variables below, then flags (passed in as ``overrides``, dotted keys such
as ``"api_server.port"``; a ``None`` value is a flag not given). ``HERMES_HOME`` is resolved on
every call, so a test or a second profile only has to change the environment. The gateway's
part is ``load_config().gateway`` (``hermes.gateway.config.load_gateway_config`` returns it).

``config.yaml`` (every key optional; a value shown is its default unless its comment
names another)::

    state_db: ~/.hermes/state.db   # the session database of the gateway and the CLI
                                   # (default: $HERMES_HOME/state.db)
    database:
      url: postgresql://hermes:secret@db.local/hermes   # a PostgreSQL server instead of
                                   # state_db (default: none; README, Limits)
    model:
      name: gpt-4o-mini            # the model to ask for (default: none; needed with an endpoint)
      base_url: http://127.0.0.1:11434/v1   # any OpenAI-compatible endpoint (default: none,
                                            # the agent runs offline)
      api_key: sk-...              # the endpoint's key (default: none)
      timeout: 120                 # seconds per request
      max_retries: 2               # on 429 and 5xx, with the client's backoff
      context_length: 32768        # overrides the built-in table (default: none)
    agent:
      max_iterations: 20           # model calls per turn
      system_prompt: You are ...   # (default: none)
    auxiliary:
      title_generation:
        enabled: true              # a platform conversation's title asked of the model after
                                   # its first exchange (else, or offline: its first message)
    tools:
      terminal:
        enabled: false             # the shell tool runs commands on this machine
        timeout: 60                # seconds per command
        max_output_bytes: 65536
        cwd: /srv/work             # (default: the gateway's working directory)
    api_server:
      host: 127.0.0.1
      port: 8642
      key: change-me               # bearer token (default: none; needed off loopback)
      max_body_bytes: 1048576
      model_name: hermes-agent     # the id /v1/models advertises
    gateway:
      busy_policy: queue           # or "interrupt": a new message also stops the running turn
      agent_cache_size: 128        # cached agents (one per conversation), least recent out
      agent_idle_ttl: 3600         # seconds an unused cached agent is kept
      agent_sweep_interval: 60     # seconds between sweeps of idle cached agents
      max_concurrent_turns: 64     # worker threads running turns; more turns wait
      drain_timeout: 30            # seconds running turns get to finish on shutdown
      interrupt_grace: 5           # seconds interrupted turns get to stop after that
      cleanup_timeout: 10          # bound on each step of tearing one agent down
      notify_timeout: 5            # bound on one shutdown notice and one adapter disconnect
      resume_recent_window: 120    # after an unclean exit, conversations active this many
                                   # seconds before it get a resume note
      resume_freshness: 3600       # resume notes only for interruptions this recent (0: any)
      group_sessions_per_user: true    # a group chat is one conversation per participant
      thread_sessions_per_user: false  # a thread is shared by its participants
      session_reset:               # when a chat's conversation expires (default: never)
        mode: none                 # idle, daily, both (whichever first) or none
        idle_minutes: 1440         # idle: this long without a turn
        at_hour: 4                 # daily: the first message after this hour (local time)
      agent_factory: mypkg.agents:build   # replaces hermes.agent.AIAgent (default: none)
      synchronous: FULL            # or NORMAL: a commit survives a crash, not a power loss
      platforms:                   # default: api_server alone, enabled
        api_server: {enabled: true}
        webhook:                   # a platform listed here is enabled unless it says false
          enabled: true
          adapter: mypkg.hooks:WebhookAdapter   # "module:Class" (default: the built-in one)
          allowed_users: [alice]   # only these user ids (default: every user)
          allowed_chats: [-1001]   # only these group chats (default: every chat; DMs are
                                   # judged by allowed_users alone)
          token: "123456:ABC..."   # the platform's credential (a bot token; never logged)
          extra: {port: 9000}      # handed to the adapter as is (api_server: host, port, ...)

Environment variables (each names one key; a later line wins over an earlier one)::

    OPENAI_BASE_URL                 model.base_url
    HERMES_BASE_URL                 model.base_url
    OPENAI_API_KEY                  model.api_key
    HERMES_MODEL                    model.name
    HERMES_TERMINAL_TOOL            tools.terminal.enabled
    API_SERVER_HOST                 api_server.host
    API_SERVER_PORT                 api_server.port
    API_SERVER_KEY                  api_server.key
    HERMES_GATEWAY_BUSY_POLICY      gateway.busy_policy
    HERMES_GATEWAY_DRAIN_TIMEOUT    gateway.drain_timeout
    HERMES_GATEWAY_INTERRUPT_GRACE  gateway.interrupt_grace
    HERMES_GATEWAY_AGENT_FACTORY    gateway.agent_factory
    HERMES_GATEWAY_SYNCHRONOUS      gateway.synchronous
    HERMES_DATABASE_URL             database.url
    HERMES_TITLE_GENERATION         auxiliary.title_generation.enabled

A variable that is empty counts as unset (``OPENAI_API_KEY=`` leaves the file's key).

The chat platforms' variables keep hermes-agent's names (``hermes.gateway.platform_env``; lists
are comma-separated; a platform the file does not list is enabled by its credential alone)::

    TELEGRAM_BOT_TOKEN              gateway.platforms.telegram.token (enables Telegram)
    TELEGRAM_ALLOWED_USERS          gateway.platforms.telegram.allowed_users
    TELEGRAM_ALLOWED_CHATS          gateway.platforms.telegram.allowed_chats
    TELEGRAM_ALLOW_ALL_USERS        gateway.platforms.telegram.extra.allow_all_users
    TELEGRAM_REQUIRE_MENTION        gateway.platforms.telegram.extra.require_mention
    TELEGRAM_REPLY_TO_MODE          gateway.platforms.telegram.extra.reply_to_mode
    TELEGRAM_WEBHOOK_URL            gateway.platforms.telegram.extra.webhook_url
    TELEGRAM_WEBHOOK_PORT           gateway.platforms.telegram.extra.webhook_port
    TELEGRAM_WEBHOOK_SECRET         gateway.platforms.telegram.extra.webhook_secret
    WEBHOOK_ENABLED                 gateway.platforms.webhook.enabled
    WEBHOOK_PORT                    gateway.platforms.webhook.extra.port
    WEBHOOK_SECRET                  gateway.platforms.webhook.extra.secret

An adapter reads its own ``extra`` settings with ``adapter_settings`` (same checks, same
messages); they are listed in the README's Platforms section.

Values. Booleans are ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case)
or a YAML boolean; anything else, the empty string included, is a ``ConfigError``. Numbers may
be given as strings. A bad value is a ``ConfigError`` naming where it came from (the file, or
the environment variable), the key, and what it must be. Unknown keys are an error inside
``gateway`` (a misspelt allowlist or durability setting must not pass unnoticed), a logged
warning in the other sections, and ignored at the top level (other programs' sections).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union

from hermes.errors import ConfigError, InvalidSettingError
from hermes.gateway.config import GatewayConfig, PlatformConfig
from hermes.gateway.platform_env import platform_environment
from hermes.paths import hermes_home, state_db_path

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "ENVIRONMENT", "OFFLINE_MODEL", "AgentConfig", "ApiServerConfig", "AuxiliaryConfig",
    "DatabaseConfig",
    "HermesConfig",
    "ModelConfig", "TerminalToolConfig", "ToolsConfig", "config_path", "load_config",
]

logger = logging.getLogger(__name__)

OFFLINE_MODEL = "offline"


@dataclass(frozen=True)
class ModelConfig:
    name: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    timeout: float = 120.0
    max_retries: int = 2
    context_length: int | None = None

    @property
    def is_remote(self) -> bool:
        """Whether an endpoint is configured; otherwise the agent runs the offline backend."""
        return bool(self.base_url or self.api_key)

    def resolved_name(self) -> str:
        """The model to ask for; ``offline`` without an endpoint. An endpoint without a model
        name is a ``ConfigError``: guessing one would fail later, less clearly."""
        if self.name:
            return self.name
        if self.is_remote:
            raise ConfigError(
                "a model endpoint is configured but no model name: set model.name in "
                "$HERMES_HOME/config.yaml, HERMES_MODEL, or pass --model"
            )
        return OFFLINE_MODEL


@dataclass(frozen=True)
class AgentConfig:
    max_iterations: int = 20
    system_prompt: str | None = None


@dataclass(frozen=True)
class TerminalToolConfig:
    enabled: bool = False
    timeout: float = 60.0
    max_output_bytes: int = 64 * 1024
    cwd: str | None = None


@dataclass(frozen=True)
class ToolsConfig:
    terminal: TerminalToolConfig = field(default_factory=TerminalToolConfig)


@dataclass(frozen=True)
class ApiServerConfig:
    host: str = "127.0.0.1"
    port: int = 8642
    key: str | None = None
    max_body_bytes: int = 1024 * 1024
    model_name: str = "hermes-agent"


@dataclass(frozen=True)
class TitleGenerationConfig:
    #: After a platform conversation's first exchange, ask the model for its title.
    enabled: bool = True


@dataclass(frozen=True)
class AuxiliaryConfig:
    """Model calls beside the conversation's own (hermes-agent's ``auxiliary`` section)."""

    title_generation: TitleGenerationConfig = field(default_factory=TitleGenerationConfig)


@dataclass(frozen=True)
class DatabaseConfig:
    #: A ``postgresql://`` URL: the store lives on that server, not in ``state_db``.
    url: str | None = None


@dataclass(frozen=True)
class HermesConfig:
    """The whole configuration. ``load_config`` gives ``gateway.state_db`` the top-level
    ``state_db``: the gateway and the CLI use one database."""

    model: ModelConfig = field(default_factory=ModelConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    auxiliary: AuxiliaryConfig = field(default_factory=AuxiliaryConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    api_server: ApiServerConfig = field(default_factory=ApiServerConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    state_db: Path | None = None
    database: DatabaseConfig = field(default_factory=DatabaseConfig)

    @property
    def db_path(self) -> Path:
        """The ``state.db`` file this configuration points at (unused with ``database.url``)."""
        return self.state_db if self.state_db is not None else state_db_path()

    @property
    def store_location(self) -> Path | str:
        """Where the session store is: ``database.url`` if set, else ``db_path``."""
        return self.database.url or self.db_path


#: Environment variable -> dotted key, in the order they are applied (a later one wins).
ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("OPENAI_BASE_URL", "model.base_url"),
    ("HERMES_BASE_URL", "model.base_url"),
    ("OPENAI_API_KEY", "model.api_key"),
    ("HERMES_MODEL", "model.name"),
    ("HERMES_TERMINAL_TOOL", "tools.terminal.enabled"),
    ("API_SERVER_HOST", "api_server.host"),
    ("API_SERVER_PORT", "api_server.port"),
    ("API_SERVER_KEY", "api_server.key"),
    ("HERMES_GATEWAY_BUSY_POLICY", "gateway.busy_policy"),
    ("HERMES_GATEWAY_DRAIN_TIMEOUT", "gateway.drain_timeout"),
    ("HERMES_GATEWAY_INTERRUPT_GRACE", "gateway.interrupt_grace"),
    ("HERMES_GATEWAY_AGENT_FACTORY", "gateway.agent_factory"),
    ("HERMES_GATEWAY_SYNCHRONOUS", "gateway.synchronous"),
    ("HERMES_DATABASE_URL", "database.url"),
    ("HERMES_TITLE_GENERATION", "auxiliary.title_generation.enabled"),
)

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_TYPE_NAMES: dict[object, str] = {
    bool: "true or false (1, true, yes, on or 0, false, no, off; any case)",
    int: "a whole number",
    float: "a float such as 2.5",
    str: "a string",
    Path: "a path",
}
#: Sections whose unknown keys are errors, not warnings.
_STRICT_SECTIONS = frozenset({"gateway"})
#: Values a section gets for merely being listed (a platform under ``gateway.platforms``).
_LISTED_DEFAULTS: dict[type, dict[str, object]] = {PlatformConfig: {"enabled": True}}
#: Fields the loader fills itself, with what to write instead.
_NOT_SETTINGS = {"gateway.state_db": "set state_db at the top level (the gateway and the CLI "
                                     "share one database)"}
_OVERRIDE = "a flag or override"


def config_path() -> Path:
    return hermes_home() / "config.yaml"


def load_config(overrides: Mapping[str, object] | None = None) -> HermesConfig:
    """Read ``config.yaml``, apply the environment, then ``overrides`` (see the module
    docstring). Raises ``ConfigError`` naming the file or variable and the key for unreadable
    YAML or a bad value."""
    document = _Document(config_path())
    for variable, key in ENVIRONMENT:
        value = os.environ.get(variable)
        if value:  # empty counts as unset, as a shell's `export NAME=` means
            document.set(key, value, f"environment variable {variable}")
    gateway = document.raw.get("gateway")
    file_platforms = gateway.get("platforms") if isinstance(gateway, dict) else None
    for key, setting, origin in platform_environment(file_platforms, os.environ):
        document.set(key, setting, origin)
    for key, override in (overrides or {}).items():
        if override is not None:
            document.set(key, override, _OVERRIDE)
    config = _build(HermesConfig, document.raw, document, prefix="")
    store = config.database.url or config.state_db
    return dataclasses.replace(config, gateway=dataclasses.replace(config.gateway, state_db=store))


def adapter_settings(cls: type[_T], extra: Mapping[str, object], *, where: str) -> _T:
    """A platform adapter's own settings, its ``PlatformConfig.extra``, as the frozen dataclass
    ``cls``, every value checked as the loader checks its own; errors name ``where`` (e.g.
    ``gateway.platforms.telegram``) and the key."""
    return _build(cls, dict(extra), _Document(where, dict(extra)), prefix="extra.")


class _Document:
    """The settings read so far, as nested mappings, and where each key's value came from."""

    def __init__(self, path: Path | str, raw: dict[str, Any] | None = None) -> None:
        self.path = path
        self.raw = _read_yaml(Path(path)) if raw is None else raw
        self._origins: dict[str, str] = {}

    def set(self, key: str, value: object, origin: str) -> None:
        *parents, leaf = key.split(".")
        node = self.raw
        for depth, part in enumerate(parents):
            child = node.setdefault(part, {})
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                section = ".".join(parents[: depth + 1])
                raise ConfigError(f"{self.path}: {section} must be a mapping")
            node = child
        node[leaf] = value
        self._origins[key] = origin

    def where(self, key: str) -> str:
        """Where the value of ``key`` came from: an environment variable, a flag, the file."""
        return self._origins.get(key, str(self.path))


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}; check its permissions") from exc
    import yaml  # here: without a config.yaml (the common case) a command never loads it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}; fix or remove the file") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sections, not {type(data).__name__}")
    return data


_T = TypeVar("_T", bound="DataclassInstance")

# Resolving a dataclass's string annotations is slow; the gateway reads its settings per turn.
_hints = functools.cache(typing.get_type_hints)


def _build(cls: type[_T], raw: object, document: _Document, *, prefix: str) -> _T:
    """The frozen dataclass ``cls`` from its section ``raw``, every value type-checked."""
    section = prefix.rstrip(".")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{document.path}: {section or 'the file'} must be a mapping")
    raw = {**_LISTED_DEFAULTS.get(cls, {}), **raw}
    known = {f.name for f in dataclasses.fields(cls)} - {
        key.removeprefix(prefix) for key in _NOT_SETTINGS if key.startswith(prefix)}
    for unknown in sorted(set(raw) - known):
        key = f"{prefix}{unknown}"
        if key in _NOT_SETTINGS:
            raise ConfigError(f"{document.where(key)}: {key} is not a setting; "
                              f"{_NOT_SETTINGS[key]}")
        if not prefix:
            continue  # a top-level section of another program sharing the file
        if section.split(".")[0] in _STRICT_SECTIONS:
            raise ConfigError(f"{document.where(key)}: unknown {section} setting {unknown!r}; "
                              f"remove it or use one of {', '.join(sorted(known))}")
        logger.warning("%s: ignoring unknown setting %s", document.where(key), key)
    hints = _hints(cls)
    values = {name: _value(raw[name], hints[name], document, f"{prefix}{name}")
              for name in known & set(raw)}
    try:
        return cls(**values)
    except InvalidSettingError as exc:  # a range check of the section itself
        raise ConfigError(f"{document.where(prefix + exc.key)}: {exc}") from None


def _value(value: object, hint: object, document: _Document, key: str) -> object:
    """``value`` as the type ``hint`` names, or a ``ConfigError`` saying where and why."""
    if hint is Any:
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, document, prefix=f"{key}.")
    optional = False
    if typing.get_origin(hint) in (Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(members) < len(typing.get_args(hint))
        hint = members[0]
    if value is None or (optional and value == "" and hint in _TYPE_NAMES):
        if optional:
            return None  # unset (an empty text clears a scalar; never an allowlist)
        raise ConfigError(f"{document.where(key)}: {key} must be set (or removed to use the "
                          "default)")
    origin = typing.get_origin(hint)
    if origin in (Mapping, dict):
        return _mapping(value, hint, document, key)
    if origin is tuple:
        if not isinstance(value, list):
            raise ConfigError(f"{document.where(key)}: {key} must be a list, got {value!r}")
        item = typing.get_args(hint)[0]
        return tuple(_value(v, item, document, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is Literal:
        hint = str  # the section's own check names the choices
    converted = _scalar(value, hint)
    if converted is None:
        expected = _TYPE_NAMES.get(hint, str(hint))
        raise ConfigError(f"{document.where(key)}: {key} must be {expected}, got {value!r}")
    return converted


def _mapping(value: object, hint: object, document: _Document, key: str) -> dict[Any, object]:
    if not isinstance(value, dict):
        raise ConfigError(f"{document.where(key)}: {key} must be a mapping")
    key_hint, item_hint = typing.get_args(hint)
    result: dict[Any, object] = {}
    for name, item in value.items():
        if isinstance(key_hint, type) and issubclass(key_hint, Enum):
            try:
                name = key_hint(str(name))
            except ValueError:
                choices = ", ".join(str(member.value) for member in key_hint)
                raise ConfigError(f"{document.where(key)}: unknown {key_hint.__name__.lower()} "
                                  f"{name!r} in {key}; use one of {choices}") from None
        label = name.value if isinstance(name, Enum) else name
        result[name] = _value(item, item_hint, document, f"{key}.{label}")
    return result


def _scalar(value: object, hint: object) -> object | None:
    """``value`` as a bool, int, float, str or Path; ``None`` when it is not one."""
    if isinstance(value, bool):
        return value if hint is bool else None
    text = str(value).strip() if isinstance(value, (str, int, float)) else None
    if text is None:
        return None
    if hint is bool:
        lowered = text.lower()
        return lowered in _TRUE if lowered in _TRUE | _FALSE else None
    try:
        if hint is int:
            return int(text)
        if hint is float:
            return float(text)
    except ValueError:
        return None
    if hint is str:
        return str(value)
    if hint is Path:
        return Path(text).expanduser()
    return None
