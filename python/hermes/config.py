"""Settings for the agent, its tools, the api_server and the CLI.

Three layers, later ones winning: ``$HERMES_HOME/config.yaml``, then environment variables,
then command-line flags (passed in as ``overrides``). ``HERMES_HOME`` is resolved on every
call, so a test or a second profile only has to change the environment.

``config.yaml`` (every key optional)::

    model:
      name: gpt-4o-mini            # the model the agent asks for
      base_url: http://127.0.0.1:11434/v1   # any OpenAI-compatible endpoint
      api_key: sk-...
      timeout: 120                 # seconds per request
      max_retries: 2               # on 429 and 5xx, with the client's backoff
      context_length: 32768        # overrides the built-in table
    agent:
      max_iterations: 20           # model calls per turn
      system_prompt: You are ...
    tools:
      terminal:
        enabled: false             # the shell tool runs commands on this machine
        timeout: 60
        max_output_bytes: 65536
        cwd: /srv/work
    api_server:
      host: 127.0.0.1
      port: 8642
      key: change-me               # required for a non-loopback host
      max_body_bytes: 1048576
      model_name: hermes-agent     # the id /v1/models advertises
    state_db: /var/lib/hermes/state.db

Environment: ``HERMES_MODEL``, ``HERMES_BASE_URL`` (else ``OPENAI_BASE_URL``),
``OPENAI_API_KEY``, ``HERMES_TERMINAL_TOOL``, ``API_SERVER_HOST``, ``API_SERVER_PORT``,
``API_SERVER_KEY``. Sections this module does not know (the gateway's own, for instance) are
left to their readers.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union

import yaml

from hermes.errors import ConfigError
from hermes.paths import hermes_home, state_db_path

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

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
class HermesConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    api_server: ApiServerConfig = field(default_factory=ApiServerConfig)
    state_db: str | None = None

    @property
    def db_path(self) -> Path:
        """The session database this configuration points at."""
        return Path(self.state_db).expanduser() if self.state_db else state_db_path()


# Environment variable -> dotted key. Earlier names lose to later ones for the same key.
_ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("OPENAI_BASE_URL", "model.base_url"),
    ("HERMES_BASE_URL", "model.base_url"),
    ("OPENAI_API_KEY", "model.api_key"),
    ("HERMES_MODEL", "model.name"),
    ("HERMES_TERMINAL_TOOL", "tools.terminal.enabled"),
    ("API_SERVER_HOST", "api_server.host"),
    ("API_SERVER_PORT", "api_server.port"),
    ("API_SERVER_KEY", "api_server.key"),
)

_TYPE_NAMES: dict[object, str] = {
    bool: "true or false", int: "a whole number", float: "a number", str: "a string",
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def config_path() -> Path:
    return hermes_home() / "config.yaml"


def load_config(overrides: Mapping[str, object] | None = None) -> HermesConfig:
    """Read ``config.yaml``, apply the environment, then ``overrides``.

    ``overrides`` maps dotted keys (``"model.name"``, ``"api_server.port"``) to values; a
    ``None`` value means "flag not given" and is skipped. Raises ``ConfigError`` naming the
    file and key for unreadable YAML or a value of the wrong type.
    """
    path = config_path()
    raw = _read_yaml(path)
    for variable, key in _ENVIRONMENT:
        if os.environ.get(variable):
            _set_dotted(raw, key, os.environ[variable])
    for key, override in (overrides or {}).items():
        if override is not None:
            _set_dotted(raw, key, override)
    return _build(HermesConfig, raw, where=str(path), prefix="")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}; check its permissions") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}; fix or remove the file") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sections, not {type(data).__name__}")
    return data


def _set_dotted(raw: dict[str, Any], key: str, value: object) -> None:
    *parents, leaf = key.split(".")
    node = raw
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[leaf] = value


_T = TypeVar("_T", bound="DataclassInstance")


def _build(cls: type[_T], raw: object, *, where: str, prefix: str) -> _T:
    """Turn a parsed YAML mapping into the frozen dataclass ``cls``, checking every type."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: {prefix.rstrip('.') or 'the file'} must be a mapping")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for unknown in sorted(set(raw) - known):
        if prefix:  # top-level sections belong to other readers too (the gateway's)
            logger.warning("%s: ignoring unknown setting %s%s", where, prefix, unknown)
    values: dict[str, object] = {}
    for name in known & set(raw):
        hint = hints[name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            values[name] = _build(hint, raw[name], where=where, prefix=f"{prefix}{name}.")
        else:
            values[name] = _coerce(raw[name], hint, where=where, key=f"{prefix}{name}")
    return cls(**values)


def _coerce(value: object, hint: object, *, where: str, key: str) -> object:
    optional = False
    if typing.get_origin(hint) in (Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(members) < len(typing.get_args(hint))
        hint = members[0]
    if value is None or (optional and value == ""):
        if optional:
            return None
        raise ConfigError(f"{where}: {key} must be set (or removed to use the default)")
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
            raise ValueError(value)
        if hint is int and not isinstance(value, bool):
            return int(str(value).strip())
        if hint is float and not isinstance(value, bool):
            return float(str(value).strip())
        if hint is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    except ValueError:
        pass
    expected = _TYPE_NAMES.get(hint, str(hint))
    raise ConfigError(f"{where}: {key} must be {expected}, got {value!r}")
