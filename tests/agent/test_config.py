"""Settings: config.yaml, then environment, then flags; clear errors; context lengths."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes.agent.model_metadata import (
    DEFAULT_CONTEXT_LENGTH,
    estimate_tokens,
    get_model_context_length,
)
from hermes.config import HermesConfig, load_config
from hermes.errors import ConfigError


def test_defaults_without_a_file(hermes_home: Path) -> None:
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
