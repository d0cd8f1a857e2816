"""The secrets ``hermes sessions export --redact`` (and every trace) takes out, and the text
it leaves alone."""

from __future__ import annotations

import pytest

from hermes.cli.redaction import redact, redact_text


@pytest.mark.parametrize(("text", "expected"), [
    ("export OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234567890", "export OPENAI_API_KEY=[REDACTED]"),
    ("key sk-ant-api03-abcdefghijklmnopqrstuv end", "key sk-ant-[REDACTED] end"),
    ("curl -H 'Authorization: Bearer abc.def.ghi' https://x",
     "curl -H 'Authorization: Bearer [REDACTED]' https://x"),
    ("postgresql://bob:hunter2@db:5432/x", "postgresql://bob:[REDACTED]@db:5432/x"),
    ('{"api_key": "s3cr3t-value", "max_tokens": 100}', '{"api_key": "[REDACTED]", "max_tokens": 100}'),
    ("password=hunter2 db.password=pw2", "password=[REDACTED] db.password=[REDACTED]"),
    ("ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", "ghp_[REDACTED]"),
    ("AKIAIOSFODNN7EXAMPLE is the id", "AKIA[REDACTED] is the id"),
    ("https://x.com/cb?code=1&access_token=abcdef123&state=z",
     "https://x.com/cb?code=1&access_token=[REDACTED]&state=z"),
    ("run --password hunter2 --verbose", "run --password [REDACTED] --verbose"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- done",
     "[REDACTED] done"),
    ("bot 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1", "bot 123456789:[REDACTED]"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "eyJ[REDACTED]"),
    ("xoxb-1234567890-abcdefghij", "xoxb-[REDACTED]"),
])
def test_secrets_are_replaced(text: str, expected: str) -> None:
    assert redact_text(text) == expected


@pytest.mark.parametrize("text", [
    "max_tokens=100 token_count=5 author=me",
    "the secret to good code is tests",
    "password: none",
    "a sk-short key",
    "see https://example.com/path?page=2",
])
def test_ordinary_text_stays(text: str) -> None:
    assert redact_text(text) == text


def test_every_string_of_a_message_is_redacted_keys_and_numbers_kept() -> None:
    message = {"role": "tool", "content": [{"type": "text", "text": "token=abc123"}],
               "tool_calls": [{"function": {"arguments": '{"password": "pw"}'}}], "n": 5}
    assert redact(message) == {
        "role": "tool", "content": [{"type": "text", "text": "token=[REDACTED]"}],
        "tool_calls": [{"function": {"arguments": '{"password": "[REDACTED]"}'}}], "n": 5}
