"""The Telegram adapter in a gateway runner, against the fake Bot API server.

The runner is real (state.db, busy queues, commands), its agent the scripted one, so replies
are ``echo: <what the agent got> [history=<n>]``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import pytest
from platforms.conftest import TOKEN, TelegramRunner
from support.fake_telegram import BOT_USERNAME, Failure, FakeTelegram

from hermes.errors import ConfigError
from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.platforms.telegram import TelegramAdapter
from hermes.gateway.platforms.telegram.adapter import SECRET_HEADER
from hermes.gateway.run import GatewayRunner
from hermes.state import SessionDB

pytestmark = pytest.mark.asyncio


def _db(runner: GatewayRunner) -> SessionDB:
    assert runner._session_db is not None
    return runner._session_db._db


def _routing_keys(runner: GatewayRunner) -> set[str]:
    return set(_db(runner).load_gateway_routing_entries())


async def test_private_chat_group_and_forum_topic(telegram_runner: TelegramRunner,
                                                  telegram: FakeTelegram) -> None:
    runner = await telegram_runner()
    dm, group = telegram.chat(42), telegram.chat(-1001, "supergroup")
    forum = telegram.chat(-1002, "supergroup", forum=True)

    hello = telegram.message(dm, "hello", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(hello), what="the DM reply")
    again = telegram.message(dm, "again", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(again), what="the second DM reply")
    assert telegram.replies_to(hello) == ["echo: hello [history=0]"]
    assert telegram.replies_to(again) == ["echo: again [history=2]"]  # threaded, continued

    # A group: one conversation per participant.
    first = telegram.message(group, "mine", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(first))
    second = telegram.message(group, "yours", user=43)
    await telegram.wait_for(lambda: telegram.replies_to(second))
    assert telegram.replies_to(second) == ["echo: yours [history=0]"]

    # A forum topic: shared by its participants, replies stay in the topic.
    opened = telegram.message(forum, "topic start", user=42, thread=7)
    await telegram.wait_for(lambda: telegram.replies_to(opened))
    joined = telegram.message(forum, "me too", user=43, thread=7)
    await telegram.wait_for(lambda: telegram.replies_to(joined))
    assert telegram.replies_to(joined) == ["echo: me too [history=2]"]
    assert {s["thread"] for s in telegram.sent_to(-1002)} == {7}

    assert _routing_keys(runner) == {
        "agent:main:telegram:dm:42", "agent:main:telegram:group:-1001:42",
        "agent:main:telegram:group:-1001:43", "agent:main:telegram:forum:-1002:7"}
    await telegram.wait_for(lambda: not telegram.pending_ids(), what="every update confirmed")


async def test_message_during_a_turn_waits_for_it(telegram_runner: TelegramRunner,
                                                  telegram: FakeTelegram) -> None:
    await telegram_runner()
    dm = telegram.chat(42)
    slow = telegram.message(dm, "sleep:1.5", user=42)
    await telegram.wait_for(lambda: telegram.snapshot("actions"), what="a typing action")
    quick = telegram.message(dm, "and this", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(quick), what="the queued reply")

    sent = telegram.sent_to(42)
    assert [s["text"] for s in sent] == ["echo: sleep:1.5 [history=0]",
                                         "echo: and this [history=4]"]
    assert [s["reply_to"] for s in sent] == [slow["message_id"], quick["message_id"]]
    typing = [a for a in telegram.snapshot("actions") if a["chat_id"] == 42]
    assert typing[0]["action"] == "typing" and typing[0]["at"] < sent[0]["at"]


async def test_new_reset_and_stop(telegram_runner: TelegramRunner,
                                  telegram: FakeTelegram) -> None:
    await telegram_runner()
    dm = telegram.chat(42)
    for text in ("one", "two"):
        asked = telegram.message(dm, text, user=42)
        await telegram.wait_for(lambda: telegram.replies_to(asked))
    new = telegram.message(dm, f"/new@{BOT_USERNAME}", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(new))
    assert telegram.replies_to(new) == ["Started a new conversation."]
    fresh = telegram.message(dm, "fresh", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(fresh))
    assert telegram.replies_to(fresh) == ["echo: fresh [history=0]"]
    reset = telegram.message(dm, "/reset", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(reset))
    assert telegram.replies_to(reset) == ["Started a new conversation."]

    typed = len(telegram.snapshot("actions"))
    long_turn = telegram.message(dm, "sleep:30", user=42)
    # Its second typing action: the turn is running by then, so the /stop has a turn to stop.
    await telegram.wait_for(lambda: len(telegram.snapshot("actions")) >= typed + 2)
    stop = telegram.message(dm, "/stop", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(stop))
    assert telegram.replies_to(stop) == ["Stopped the running turn."]
    after = telegram.message(dm, "after", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(after))
    assert telegram.replies_to(long_turn) == []  # the stopped turn's result was dropped
    await telegram.wait_for(lambda: not telegram.pending_ids(), what="every update confirmed")


async def test_allowlists_are_checked_before_anything_is_stored(
        telegram_runner: TelegramRunner, telegram: FakeTelegram) -> None:
    runner = await telegram_runner(allowed_chats=("-1001",))
    stranger, outside = telegram.chat(99), telegram.chat(-1009, "supergroup")
    allowed_group = telegram.chat(-1001, "supergroup")
    telegram.message(stranger, "let me in", user=99)
    telegram.message(outside, "hi from elsewhere", user=42)
    welcome = telegram.message(allowed_group, "hi", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(welcome))
    await telegram.wait_for(lambda: not telegram.pending_ids(), what="every update confirmed")

    assert telegram.sent_to(99) == [] and telegram.sent_to(-1009) == []
    assert {a["chat_id"] for a in telegram.snapshot("actions")} <= {-1001}
    assert _routing_keys(runner) == {"agent:main:telegram:group:-1001:42"}
    assert [s["user_id"] for s in _db(runner).list_sessions()] == ["42"]


async def test_flood_control_waits_retry_after(telegram_runner: TelegramRunner,
                                               telegram: FakeTelegram) -> None:
    telegram.fail("getUpdates", Failure(429, "Too Many Requests: retry after 1", retry_after=1))
    telegram.fail("sendMessage", Failure(429, "Too Many Requests: retry after 1", retry_after=1))
    await telegram_runner()
    asked = telegram.message(telegram.chat(42), "hello", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(asked))
    assert telegram.replies_to(asked) == ["echo: hello [history=0]"]  # once
    refused = {method: at for method, status, at in telegram.snapshot("refused")}
    assert set(refused) == {"getUpdates", "sendMessage"}
    assert telegram.sent_to(42)[0]["at"] - refused["sendMessage"] >= 1.0  # waited as told


async def test_long_reply_split_within_telegram_limit(telegram_runner: TelegramRunner,
                                                      telegram: FakeTelegram) -> None:
    await telegram_runner()
    body = "\n".join(f"line {i} 😀 " + "x" * 40 for i in range(120))  # > one message
    text = f"intro\n\n```python\n{body}\n```\n\n" + "tail 🎉 " * 300
    asked = telegram.message(telegram.chat(42), text, user=42)
    await telegram.wait_for(lambda: len(telegram.sent_to(42)) >= 2 and not telegram.pending_ids())
    parts = [s["text"] for s in telegram.sent_to(42)]
    assert len(parts) >= 3
    assert all(len(p.encode("utf-16-le")) // 2 <= 4096 for p in parts)  # the fake refuses more
    assert all(p.count("```") % 2 == 0 for p in parts)  # every code fence closed ...
    assert parts[1].startswith("```python\n")  # ... and the long block reopened as it was
    assert "".join("".join(parts).replace("```python", "").replace("```", "").split()) == "".join(
        f"echo: {text} [history=0]".replace("```python", "").replace("```", "").split())
    assert [s["reply_to"] for s in telegram.sent_to(42)][:2] == [asked["message_id"], None]


async def test_webhook_mode(telegram_runner: TelegramRunner, telegram: FakeTelegram,
                            unused_tcp_port: int) -> None:
    url = f"http://127.0.0.1:{unused_tcp_port}/telegram/hook"
    runner = await telegram_runner(extra={"webhook_url": url, "webhook_host": "127.0.0.1",
                                          "webhook_port": unused_tcp_port,
                                          "webhook_secret": "hook-secret-5d4c"})
    assert telegram.webhook == {"url": url, "secret_token": "hook-secret-5d4c"}
    async with aiohttp.ClientSession() as http:
        forged = {"update_id": 1, "message": {"message_id": 1, "date": 0, "text": "forged",
                                              "chat": {"id": 42, "type": "private"},
                                              "from": {"id": 42, "is_bot": False,
                                                       "first_name": "x"}}}
        for headers in ({}, {SECRET_HEADER: "guess"}):
            async with http.post(url, json=forged, headers=headers) as answer:
                assert answer.status == 401
    assert _db(runner).list_sessions() == []  # nothing stored

    asked = telegram.message(telegram.chat(42), "by webhook", user=42)
    assert await asyncio.to_thread(telegram.deliver_webhook) == [200]
    assert telegram.replies_to(asked) == ["echo: by webhook [history=0]"]
    assert telegram.pending_ids() == []


async def test_token_stays_out_of_the_log(telegram_runner: TelegramRunner,
                                          telegram: FakeTelegram,
                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    telegram.fail("getUpdates", Failure(500, f"Internal error for /bot{TOKEN}/getUpdates"))
    await telegram_runner()
    asked = telegram.message(telegram.chat(42), "hello", user=42)
    await telegram.wait_for(lambda: telegram.replies_to(asked))
    assert "getUpdates failed" in caplog.text  # the error was logged ...
    assert TOKEN not in caplog.text and TOKEN.split(":")[1] not in caplog.text  # ... redacted


async def test_refuses_to_start_open_to_everyone(home: Path) -> None:
    with pytest.raises(ConfigError, match="TELEGRAM_ALLOWED_USERS"):
        TelegramAdapter(PlatformConfig(enabled=True, token=TOKEN), Platform.TELEGRAM)
    with pytest.raises(ConfigError, match="TELEGRAM_BOT_TOKEN"):
        TelegramAdapter(PlatformConfig(enabled=True, allowed_users=("1",)), Platform.TELEGRAM)
    with pytest.raises(ConfigError, match="TELEGRAM_WEBHOOK_SECRET"):
        TelegramAdapter(PlatformConfig(enabled=True, token=TOKEN, allowed_users=("1",),
                                       extra={"webhook_url": "https://x.example/t"}),
                        Platform.TELEGRAM)
    with pytest.raises(ConfigError, match="malformed") as caught:
        TelegramAdapter(PlatformConfig(enabled=True, token="not a token", allowed_users=("1",)),
                        Platform.TELEGRAM)
    assert "not a token" not in str(caught.value)


async def test_a_wrong_token_fails_to_connect_without_logging_it(
        home: Path, telegram: FakeTelegram, caplog: pytest.LogCaptureFixture) -> None:
    wrong = "654321:WRONG-token-1a2b3c"
    adapter = TelegramAdapter(PlatformConfig(enabled=True, token=wrong, allowed_users=("1",),
                                             extra={"base_url": telegram.url}), Platform.TELEGRAM)
    assert await adapter.connect() is False
    assert "401 Unauthorized" in caplog.text and wrong not in caplog.text
    await adapter.disconnect()
