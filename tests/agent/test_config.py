"""Settings: config.yaml, then environment, then flags; clear errors; context lengths."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from hermes.agent.model_metadata import (
    DEFAULT_CONTEXT_LENGTH,
    estimate_tokens,
    get_model_context_length,
)
from hermes.config import HermesConfig, load_config
from hermes.gateway.platform_env import PLATFORM_ENVIRONMENT
from hermes.errors import ConfigError


def test_defaults_without_a_file(hermes_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_TITLE_GENERATION")  # set by tests/conftest.py for every test
    config = load_config()
    assert config == HermesConfig()
    assert config.model.is_remote is False
    assert config.api_server.host == "127.0.0.1"
    assert config.tools.terminal.enabled is False
    assert config.db_path == hermes_home / "state.db"


def test_file_then_environment_then_flags(hermes_home: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (hermes_home / "config.yaml").write_text(
        "model:\n  name: file-model\n  base_url: http://file/v1\n  timeout: 5\n"
        "api_server:\n  port: 9000\n  key: file-key\n"
        "state_db: ~/elsewhere.db\n"
        "gateway:\n  busy_policy: queue\n")  # another reader's section is left alone
    config = load_config()
    assert (config.model.name, config.model.base_url, config.model.timeout) == (
        "file-model", "http://file/v1", 5.0)
    assert config.db_path == Path("~/elsewhere.db").expanduser()

    monkeypatch.setenv("HERMES_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://openai-env/v1")
    monkeypatch.setenv("API_SERVER_PORT", "9100")
    config = load_config()
    assert config.model.name == "env-model"
    assert config.model.base_url == "http://openai-env/v1"
    assert config.api_server.port == 9100
    assert config.api_server.key == "file-key"

    monkeypatch.setenv("HERMES_BASE_URL", "http://hermes-env/v1")  # beats OPENAI_BASE_URL
    config = load_config({"model.name": "flag-model", "api_server.port": 9200,
                          "api_server.host": None})
    assert config.model.name == "flag-model"
    assert config.model.base_url == "http://hermes-env/v1"
    assert config.api_server.port == 9200
    assert config.api_server.host == "127.0.0.1"  # None: flag not given


def test_home_is_resolved_on_every_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, model in (("a", "model-a"), ("b", "model-b")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(f"model: {{name: {model}}}\n")
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "a"))
    assert load_config().model.name == "model-a"
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "b"))
    assert load_config().model.name == "model-b"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model: [unclosed", "is not valid YAML"),
        ("- just\n- a list\n", "must hold a mapping"),
        ("model: 3\n", "model must be a mapping"),
        ("api_server: {port: eighty}\n", "api_server.port must be a whole number, got 'eighty'"),
        ("tools: {terminal: {enabled: maybe}}\n", "tools.terminal.enabled must be true or false"),
        ("agent: {max_iterations: null}\n", "agent.max_iterations must be set"),
    ],
)
def test_bad_files_name_the_file_and_the_key(hermes_home: Path, text: str, message: str) -> None:
    (hermes_home / "config.yaml").write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config()
    assert message in str(raised.value)
    assert str(hermes_home / "config.yaml") in str(raised.value)


def test_unknown_keys_are_warned_about(hermes_home: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    (hermes_home / "config.yaml").write_text("model: {nmae: typo}\n")
    load_config()
    assert "ignoring unknown setting model.nmae" in caplog.text


def test_context_lengths() -> None:
    assert get_model_context_length("gpt-4o-mini-2024-07-18") == 128_000
    assert get_model_context_length("gpt-4") == 8_192
    assert get_model_context_length("openai/gpt-4.1-mini") == 1_047_576
    assert get_model_context_length("something-new") == DEFAULT_CONTEXT_LENGTH
    assert get_model_context_length("gpt-4", config_context_length=4096) == 4096


def test_token_estimate_grows_with_content() -> None:
    short = estimate_tokens([{"role": "user", "content": "hi"}])
    long = estimate_tokens([{"role": "user", "content": "hi " * 400}])
    calls = estimate_tokens([{"role": "assistant", "content": None,
                              "tool_calls": [{"function": {"arguments": "x" * 400}}]}])
    assert short < calls < long


# -- the one loader: gateway, package and CLI settings alike ---------------------------------

BOOLEAN_HELP = "true or false (1, true, yes, on or 0, false, no, off; any case)"


@pytest.mark.parametrize(("text", "expected"), [("YES", True), ("On", True), ("1", True),
                                                ("off", False), ("No", False), ("0", False)])
def test_one_boolean_rule_for_file_and_environment(hermes_home: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   text: str, expected: bool) -> None:
    (hermes_home / "config.yaml").write_text(
        f"tools: {{terminal: {{enabled: '{text}'}}}}\n"
        f"gateway: {{group_sessions_per_user: '{text}'}}\n")
    config = load_config()
    assert config.tools.terminal.enabled is expected
    assert config.gateway.group_sessions_per_user is expected
    (hermes_home / "config.yaml").unlink()
    monkeypatch.setenv("HERMES_TERMINAL_TOOL", text)
    assert load_config().tools.terminal.enabled is expected


@pytest.mark.parametrize("text", [" ", "maybe", "2"])
def test_any_other_boolean_names_the_variable_and_the_accepted_values(
        monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("HERMES_TERMINAL_TOOL", text)
    with pytest.raises(ConfigError) as raised:
        load_config()
    assert str(raised.value) == (f"environment variable HERMES_TERMINAL_TOOL: "
                                 f"tools.terminal.enabled must be {BOOLEAN_HELP}, got {text!r}")


def test_an_empty_boolean_in_the_file_is_an_error(hermes_home: Path) -> None:
    (hermes_home / "config.yaml").write_text("gateway: {thread_sessions_per_user: ''}\n")
    with pytest.raises(ConfigError, match="gateway.thread_sessions_per_user must be true or "
                                          "false .*got ''") as raised:
        load_config()
    assert str(hermes_home / "config.yaml") in str(raised.value)


def test_an_empty_variable_counts_as_unset(hermes_home: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (hermes_home / "config.yaml").write_text("model: {api_key: file-key}\n"
                                             "tools: {terminal: {enabled: true}}\n"
                                             "gateway: {drain_timeout: 4}\n")
    for variable in ("OPENAI_API_KEY", "HERMES_TERMINAL_TOOL", "HERMES_GATEWAY_DRAIN_TIMEOUT",
                     "API_SERVER_PORT"):
        monkeypatch.setenv(variable, "")
    config = load_config()
    assert config.model.api_key == "file-key"
    assert config.tools.terminal.enabled is True
    assert config.gateway.drain_timeout == 4.0
    assert config.api_server.port == 8642


def test_gateway_settings_take_file_then_environment_then_flags(
        hermes_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (hermes_home / "config.yaml").write_text(
        "state_db: ~/file.db\ngateway: {drain_timeout: 7, busy_policy: interrupt}\n")
    config = load_config()
    assert (config.gateway.drain_timeout, config.gateway.busy_policy) == (7.0, "interrupt")
    assert config.gateway.state_db == config.db_path == Path("~/file.db").expanduser()
    monkeypatch.setenv("HERMES_GATEWAY_DRAIN_TIMEOUT", "3")
    assert load_config().gateway.drain_timeout == 3.0
    flagged = load_config({"gateway.drain_timeout": 1, "state_db": "/tmp/flag.db",
                           "gateway.busy_policy": None})
    assert flagged.gateway.drain_timeout == 1.0
    assert flagged.gateway.busy_policy == "interrupt"  # None: flag not given
    assert flagged.gateway.state_db == flagged.db_path == Path("/tmp/flag.db")


def test_a_gateway_check_names_the_variable_the_value_came_from(
        hermes_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (hermes_home / "config.yaml").write_text("gateway: {busy_policy: queue}\n")
    monkeypatch.setenv("HERMES_GATEWAY_SYNCHRONOUS", "off")
    with pytest.raises(ConfigError) as raised:
        load_config()
    assert str(raised.value) == ("environment variable HERMES_GATEWAY_SYNCHRONOUS: gateway "
                                 "setting synchronous='off' is invalid: use 'FULL' (durable on "
                                 "power loss) or 'NORMAL'")


@pytest.mark.parametrize(("text", "message"), [
    ("gateway: {state_db: /x.db}\n", "set state_db at the top level"),
    ("gateway: {platforms: {webhook: {alowed_users: [a]}}}\n",
     "unknown gateway.platforms.webhook setting 'alowed_users'"),
    ("gateway: {platforms: {webhook: {allowed_users: ''}}}\n",
     "gateway.platforms.webhook.allowed_users must be a list, got ''"),
])
def test_gateway_mistakes_are_errors_never_silently_dropped(hermes_home: Path, text: str,
                                                           message: str) -> None:
    (hermes_home / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config()


def _section_fields(cls: type, seen: set[str]) -> None:
    for f in dataclasses.fields(cls):
        seen.add(f.name)
        hint = typing.get_type_hints(cls)[f.name]
        for part in (hint, *typing.get_args(hint)):
            if dataclasses.is_dataclass(part):
                _section_fields(part, seen)  # type: ignore[arg-type]


def test_every_key_and_variable_is_documented_in_the_loader_and_the_readme() -> None:
    import hermes.config

    keys: set[str] = set()
    _section_fields(HermesConfig, keys)
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for doc in (hermes.config.__doc__ or "", readme):
        assert [k for k in sorted(keys) if f"{k}:" not in doc] == []
        assert [v for v, _ in hermes.config.ENVIRONMENT if v not in doc] == []
        assert [v for v, _, _ in PLATFORM_ENVIRONMENT if v not in doc] == []
