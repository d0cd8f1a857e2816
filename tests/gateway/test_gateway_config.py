"""GatewayConfig defaults, validation and loading from config.yaml + environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes.errors import ConfigError
from hermes.gateway.config import GatewayConfig, Platform, PlatformConfig, load_gateway_config
from hermes.gateway.platforms import create_adapter


def test_defaults_need_no_arguments() -> None:
    config = GatewayConfig()
    assert config.busy_policy == "queue"
    assert config.synchronous == "FULL"
    assert config.enabled_platforms() == {Platform.API_SERVER: PlatformConfig(enabled=True)}


@pytest.mark.parametrize("bad", [{"busy_policy": "drop"}, {"agent_cache_size": 0},
                                 {"drain_timeout": -1.0}, {"agent_factory": "no_colon"},
                                 {"synchronous": "OFF"}])
def test_bad_values_say_what_to_do(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="invalid: "):
        GatewayConfig(**bad)  # type: ignore[arg-type]


def test_load_from_yaml_and_environment(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (home / "config.yaml").write_text(
        "state_db: /tmp/x.db\n"
        "gateway:\n"
        "  busy_policy: interrupt\n"
        "  agent_cache_size: 4\n"
        "  group_sessions_per_user: 'off'\n"
        "  platforms:\n"
        "    webhook: {adapter: 'pkg.mod:Adapter', allowed_users: [alice, 7], extra: {port: 1}}\n"
        "    api_server: {enabled: false}\n")
    monkeypatch.setenv("HERMES_GATEWAY_DRAIN_TIMEOUT", "2.5")
    monkeypatch.setenv("HERMES_GATEWAY_SYNCHRONOUS", "NORMAL")
    config = load_gateway_config()
    assert (config.busy_policy, config.agent_cache_size, config.drain_timeout) == ("interrupt", 4, 2.5)
    assert config.synchronous == "NORMAL"
    assert config.group_sessions_per_user is False
    assert config.state_db == Path("/tmp/x.db")
    assert config.enabled_platforms() == {Platform.WEBHOOK: PlatformConfig(
        enabled=True, adapter="pkg.mod:Adapter", allowed_users=("alice", "7"), extra={"port": 1})}


def test_missing_file_gives_defaults(home: Path) -> None:
    assert load_gateway_config() == GatewayConfig()


@pytest.mark.parametrize(("section", "message"), [
    ("gateway: [1]", "must be a mapping"),
    ("gateway:\n  drain_timeout: soon", "drain_timeout must be a float"),
    ("gateway:\n  colour: blue", "unknown gateway setting"),
    ("gateway:\n  platforms: {irc: {}}", "unknown platform 'irc'"),
    ("gateway:\n  platforms: {webhook: {allowed_users: bob}}", "must be a list"),
    ("gateway:\n  busy_policy: drop", "use 'queue' or 'interrupt'"),
])
def test_bad_file_names_file_and_key(home: Path, section: str, message: str) -> None:
    (home / "config.yaml").write_text(section + "\n")
    with pytest.raises(ConfigError, match=message) as caught:
        load_gateway_config()
    assert str(home / "config.yaml") in str(caught.value)


def test_adapter_errors_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="has no built-in adapter"):
        create_adapter(Platform.SLACK, PlatformConfig(enabled=True))
    with pytest.raises(ConfigError, match="cannot import"):
        create_adapter(Platform.SLACK, PlatformConfig(enabled=True, adapter="no.such:Thing"))
    with pytest.raises(ConfigError, match="not a BasePlatformAdapter"):
        create_adapter(Platform.SLACK, PlatformConfig(enabled=True, adapter="pathlib:Path"))
