"""The Telegram adapter's parts on their own: splitting, the update ledger, the environment."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes.gateway.config import Platform, load_gateway_config
from hermes.gateway.platforms.telegram.ledger import UpdateLedger
from hermes.gateway.platforms.telegram.split import split_message, utf16_len

_PIECES = st.sampled_from(["word", "😀", "𝄞", "é", " ", "\n", "\n\n", "\n```\n", "\n```py\n",
                           "x" * 300, "long" * 50 + "\n"])


def _fences_removed(text: str) -> str:
    """``text`` without its fence lines (a long block's are repeated) and whitespace."""
    lines = [line for line in text.split("\n") if not line.strip().startswith("```")]
    return "".join("".join(lines).replace("```", "").split())


@settings(max_examples=120, deadline=None)
@given(st.lists(_PIECES, max_size=200), st.integers(min_value=40, max_value=600))
def test_split_keeps_every_character_within_the_limit(pieces: list[str], limit: int) -> None:
    text = "".join(pieces)
    parts = split_message(text, limit)
    assert all(utf16_len(part) <= limit for part in parts)
    assert all(part.strip() for part in parts) or parts == [text]
    assert _fences_removed("\n".join(parts)) == _fences_removed(text)  # lost: only spaces


def test_utf16_length_counts_astral_characters_twice() -> None:
    assert utf16_len("a😀é") == 4
    assert utf16_len("😀" * 2048) == 4096
    parts = split_message("😀" * 2049)
    assert [utf16_len(p) for p in parts] == [4096, 2]  # never half a surrogate pair


def test_split_prefers_block_boundaries_and_reopens_long_code() -> None:
    code = "```js\n" + "\n".join(f"let v{i} = {i};" for i in range(30)) + "\n```"
    text = "first paragraph\n\n" + code + "\n\nlast paragraph"
    parts = split_message(text, 120)
    assert parts[0] == "first paragraph"  # the code block does not start mid-message
    assert all(p.startswith("```js\n") and p.endswith("\n```") for p in parts[1:-1])
    assert parts[-1].endswith("\n```\n\nlast paragraph")  # the block's tail fits beside it
    assert split_message(text, 4096) == [text]


def test_ledger_confirms_only_a_done_prefix_and_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"

    async def scenario() -> None:
        ledger = UpdateLedger(path, ordered=True)
        assert ledger.begin(10) and ledger.begin(11) and ledger.begin(12)
        assert not ledger.begin(11)  # already being handled
        ledger.finish(11)
        ledger.finish(12)
        await ledger.save()
        assert ledger.offset == 10  # 10 still runs: nothing above it may be confirmed
        ledger.forget(10)  # given up (the gateway stops): it must stay unconfirmed
        ledger.begin(13)
        ledger.finish(13)
        await ledger.save()
        assert ledger.offset == 10

        again = UpdateLedger(path, ordered=True)  # a restart: Telegram sends 10..13 again
        assert again.offset == 10
        assert [i for i in (10, 11, 12, 13, 14) if again.begin(i)] == [10, 14]
        again.finish(10)
        again.finish(14)
        await again.save()
        assert again.offset == 15
        assert json.loads(path.read_text()) == {"offset": 15, "done": []}

    asyncio.run(scenario())


def test_unreadable_ledger_starts_empty(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "ledger.json"
    path.write_text("{not json")
    ledger = UpdateLedger(path, ordered=True)
    assert ledger.offset == 0 and ledger.begin(5)
    assert "unreadable Telegram ledger" in caplog.text


def test_environment_uses_hermes_agent_names(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "1:abc")
    monkeypatch.setenv("TELEGRAM_ALLOWED_USERS", "42, 43")
    monkeypatch.setenv("TELEGRAM_ALLOWED_CHATS", "-1001")
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", "s3")
    monkeypatch.setenv("WEBHOOK_PORT", "9000")  # names a platform the file does not enable
    telegram = load_gateway_config().platforms[Platform.TELEGRAM]
    assert telegram.enabled and telegram.token == "1:abc"
    assert telegram.allowed_users == ("42", "43") and telegram.allowed_chats == ("-1001",)
    assert telegram.extra["webhook_secret"] == "s3"
    assert "1:abc" not in repr(telegram) and "s3" not in repr(telegram)
    assert not load_gateway_config().platforms[Platform.WEBHOOK].enabled

    (home / "config.yaml").write_text("gateway:\n  platforms:\n    telegram: {enabled: false}\n")
    assert not load_gateway_config().platforms[Platform.TELEGRAM].enabled  # the file said no
