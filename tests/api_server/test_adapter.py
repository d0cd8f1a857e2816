"""The api_server adapter on its own, with a stand-in for the gateway runner's handler: how
a request becomes an event, how replies and streamed pieces go out, and what is refused."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import openai
import pytest
import pytest_asyncio
from openai.types.chat import ChatCompletionMessageParam

from hermes.agent.conversation import reply_stream
from hermes.config import ApiServerConfig
from hermes.errors import ConfigError
from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.platforms.api_server import (
    SESSION_HEADER,
    APIServerAdapter,
    check_bind_allowed,
    is_loopback,
)
from hermes.gateway.platforms.base import MessageEvent

Handler = Callable[[MessageEvent], Awaitable["str | None"]]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    for variable in ("API_SERVER_KEY", "API_SERVER_HOST", "API_SERVER_PORT", "HERMES_MODEL"):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path


class Served:
    def __init__(self, adapter: APIServerAdapter) -> None:
        self.adapter = adapter
        self.events: list[MessageEvent] = []
        self.handler: Handler = self.echo

    async def echo(self, event: MessageEvent) -> str | None:
        return f"echo: {event.text}"

    async def handle(self, event: MessageEvent) -> str | None:
        self.events.append(event)
        return await self.handler(event)

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{self.adapter.port}/v1",
                                  api_key="unused", max_retries=0)


@pytest_asyncio.fixture
async def served() -> AsyncIterator[Served]:
    adapter = APIServerAdapter(PlatformConfig(enabled=True, extra={"port": 0}))
    harness = Served(adapter)
    adapter.set_message_handler(harness.handle)
    assert await adapter.connect()
    try:
        yield harness
    finally:
        await adapter.disconnect()
        await adapter.disconnect()  # safe twice


@pytest.mark.asyncio
async def test_a_request_becomes_one_event_for_its_conversation(served: Served) -> None:
    client = served.client()
    reply = await client.chat.completions.create(
        model="hermes-agent",
        messages=[{"role": "system", "content": "ignored: the gateway has its own"},
                  {"role": "user", "content": "earlier, already stored"},
                  {"role": "assistant", "content": "ok"},
                  {"role": "user", "content": [{"type": "text", "text": "new input"}]}],
        user="alice@example.com",
    )
    assert reply.choices[0].message.content == "echo: new input"
    (event,) = served.events
    assert event.text == "new input"
    assert event.source.platform is Platform.API_SERVER
    assert event.source.chat_id == "alice@example.com"
    assert event.source.user_id == "alice@example.com"


@pytest.mark.asyncio
async def test_the_conversation_id_comes_from_header_then_user_then_first_message(
    served: Served,
) -> None:
    client = served.client()
    ask = client.chat.completions.with_raw_response.create
    one: list[ChatCompletionMessageParam] = [{"role": "user", "content": "first"}]
    raw = await ask(model="hermes-agent", messages=one, user="bob",
                    extra_headers={SESSION_HEADER: "chosen-id"})
    assert raw.headers[SESSION_HEADER] == "chosen-id"
    raw = await ask(model="hermes-agent", messages=one, user="bob smith")
    assert raw.headers[SESSION_HEADER].startswith("user-")  # hashed: not usable as it is
    first = (await ask(model="hermes-agent", messages=one)).headers[SESSION_HEADER]
    again = (await ask(model="hermes-agent", messages=one + [
        {"role": "assistant", "content": "x"}, {"role": "user", "content": "next"}],
    )).headers[SESSION_HEADER]
    assert first == again and first.startswith("api-")
    with pytest.raises(openai.BadRequestError, match=SESSION_HEADER):
        await ask(model="hermes-agent", messages=one, extra_headers={SESSION_HEADER: "../x y"})


@pytest.mark.asyncio
async def test_streamed_pieces_from_the_agents_thread_reach_the_client(served: Served) -> None:
    async def streaming_turn(event: MessageEvent) -> str | None:
        def agent_thread() -> str:
            sink = reply_stream.get()
            assert sink is not None
            for piece in ("Hel", "lo ", "there"):
                sink(piece)
            return "Hello there"

        # As the gateway runs agents: on a worker thread, with the caller's context.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, contextvars.copy_context().run, agent_thread)

    served.handler = streaming_turn
    stream = await served.client().chat.completions.create(
        model="hermes-agent", messages=[{"role": "user", "content": "hi"}], stream=True)
    chunks = [chunk async for chunk in stream]
    pieces = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert pieces == ["Hel", "lo ", "there"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert {c.id for c in chunks} == {chunks[0].id}
    assert chunks[0].object == "chat.completion.chunk"


@pytest.mark.asyncio
async def test_a_reply_that_was_not_streamed_is_sent_whole(served: Served) -> None:
    stream = await served.client().chat.completions.create(
        model="hermes-agent", messages=[{"role": "user", "content": "hi"}], stream=True)
    pieces = [c.choices[0].delta.content async for c in stream if c.choices[0].delta.content]
    assert pieces == ["echo: hi"]


@pytest.mark.asyncio
async def test_an_unaccepted_message_is_refused_plainly_and_in_streams(served: Served) -> None:
    async def refuse(event: MessageEvent) -> str | None:
        return None

    served.handler = refuse
    client = served.client()
    with pytest.raises(openai.PermissionDeniedError, match="did not accept"):
        await client.chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": "hi"}])
    stream = await client.chat.completions.create(
        model="hermes-agent", messages=[{"role": "user", "content": "hi"}], stream=True)
    with pytest.raises(openai.APIError, match="did not accept"):
        async for _ in stream:
            pass


@pytest.mark.asyncio
async def test_a_failing_turn_is_a_500_json_error(served: Served) -> None:
    async def crash(event: MessageEvent) -> str | None:
        raise RuntimeError("the runner broke")

    served.handler = crash
    with pytest.raises(openai.InternalServerError, match="failed to answer"):
        await served.client().chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": "hi"}])
    stream = await served.client().chat.completions.create(
        model="hermes-agent", messages=[{"role": "user", "content": "hi"}], stream=True)
    with pytest.raises(openai.APIError, match="failed to answer"):
        async for _ in stream:
            pass


@pytest.mark.asyncio
async def test_a_smaller_body_limit_is_enforced() -> None:
    adapter = APIServerAdapter(PlatformConfig(extra={"port": 0, "max_body_bytes": 1000}))
    adapter.set_message_handler(lambda event: asyncio.sleep(0, "never"))
    assert await adapter.connect()
    try:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{adapter.port}/v1",
                                    api_key="x", max_retries=0)
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(
                model="hermes-agent", messages=[{"role": "user", "content": "x" * 2000}])
        assert raised.value.status_code == 413
        assert "larger than 1000 bytes" in str(raised.value)
    finally:
        await adapter.disconnect()


@pytest.mark.asyncio
async def test_settings_come_from_config_then_environment_then_extra(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home / "config.yaml").write_text(
        "model: {name: my-model}\napi_server: {port: 9001, model_name: public-name}\n")
    monkeypatch.setenv("API_SERVER_KEY", "from-env")
    adapter = APIServerAdapter(PlatformConfig(extra={"host": "::1"}))
    assert adapter.settings == ApiServerConfig(host="::1", port=9001, key="from-env",
                                               model_name="public-name")
    assert adapter.models == ["public-name", "my-model"]


@pytest.mark.asyncio
async def test_a_public_address_without_a_key_is_refused_at_start() -> None:
    adapter = APIServerAdapter(PlatformConfig(extra={"host": "0.0.0.0", "port": 0}))
    with pytest.raises(ConfigError, match="without a key"):
        await adapter.connect()
    check_bind_allowed(ApiServerConfig(host="0.0.0.0", key="secret"))  # a key makes it fine


def test_loopback_addresses() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "192.168.1.4", "example.com", "::"))


@pytest.mark.asyncio
async def test_send_cannot_push_to_an_http_client(served: Served) -> None:
    result = await served.adapter.send("conv", "gateway stopping")
    assert result.success is False
    assert "cannot push" in (result.error or "")
