"""The api_server adapter on its own, over real HTTP with the real ``openai`` client, with a
stand-in for the gateway runner's handler that reports back as the gateway does: how a
request becomes a client turn, how answers, usage, failures and streamed pieces go out, and
what is refused."""

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
from hermes.gateway.client_turn import TurnReport
from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.platforms.api_auth import SESSION_HEADER, check_bind_allowed, is_loopback
from hermes.gateway.platforms.api_server import APIServerAdapter
from hermes.gateway.platforms.base import MessageEvent

Handler = Callable[[MessageEvent], Awaitable["str | None"]]
HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
KEY = "adapter-test-key"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    for variable in ("API_SERVER_KEY", "API_SERVER_HOST", "API_SERVER_PORT", "HERMES_MODEL"):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path


def report(event: MessageEvent, reply: str | None, **fields: object) -> str | None:
    """Answer ``event`` as the gateway does: its report on the client turn, then the reply."""
    client = event.client
    assert client is not None
    client.session_id = client.session_id or "api-stand-in"
    values: dict[str, object] = {"session_id": client.session_id, "reply": reply,
                                 "finish_reason": "stop", "prompt_tokens": 11,
                                 "completion_tokens": 4, "interrupted": False, "failure": None,
                                 "error": None, **fields}
    client.report = TurnReport(**values)  # type: ignore[arg-type]
    return reply


class Served:
    def __init__(self, adapter: APIServerAdapter) -> None:
        self.adapter = adapter
        self.events: list[MessageEvent] = []
        self.handler: Handler = self.echo
        self.clients: list[openai.AsyncOpenAI] = []

    async def echo(self, event: MessageEvent) -> str | None:
        return report(event, f"echo: {event.text}")

    async def handle(self, event: MessageEvent) -> str | None:
        self.events.append(event)
        return await self.handler(event)

    def client(self, key: str = "unused", retries: int = 0) -> openai.AsyncOpenAI:
        self.clients.append(openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{self.adapter.port}/v1", api_key=key,
            max_retries=retries))
        return self.clients[-1]

    async def close(self) -> None:
        """The clients first (closed on this test's loop), then the server."""
        for client in self.clients:
            await client.close()
        await self.adapter.disconnect()


async def serve(extra: dict[str, object]) -> Served:
    adapter = APIServerAdapter(PlatformConfig(enabled=True, extra={"port": 0, **extra}))
    harness = Served(adapter)
    adapter.set_message_handler(harness.handle)
    assert await adapter.connect()
    return harness


@pytest_asyncio.fixture
async def served() -> AsyncIterator[Served]:
    harness = await serve({})
    try:
        yield harness
    finally:
        await harness.close()
        await harness.adapter.disconnect()  # safe twice


@pytest_asyncio.fixture
async def keyed() -> AsyncIterator[Served]:
    harness = await serve({"key": KEY})
    try:
        yield harness
    finally:
        await harness.close()


@pytest.mark.asyncio
async def test_a_request_is_a_stateless_turn_carrying_the_whole_conversation(
    served: Served,
) -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": "{\"q\": 1}"}}
    raw = await served.client().chat.completions.with_raw_response.create(
        model="hermes-agent",
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "earlier"},
                  {"role": "assistant", "content": None, "tool_calls": [call]},  # type: ignore[list-item]
                  {"role": "tool", "tool_call_id": "call_1", "content": "42"},
                  {"role": "developer", "content": "Answer in French."},
                  {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                  {"role": "user", "content": [{"type": "text", "text": "new"},
                                               {"type": "text", "text": "input"}]}],
        user="alice@example.com",
    )
    assert raw.headers[SESSION_HEADER] == "api-stand-in"
    assert raw.parse().choices[0].message.content == "echo: new\ninput"
    (event,) = served.events
    assert event.text == "new\ninput"
    assert event.source.platform is Platform.API_SERVER
    assert event.source.user_id == "alice@example.com"
    client = event.client
    assert client is not None and client.stateless
    assert client.caller == "anonymous"
    assert client.system_prompt == "Be brief.\n\nAnswer in French."
    assert client.history == [
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "assistant", "content": "ok"},
    ]


@pytest.mark.asyncio
async def test_usage_and_the_models_finish_reason_are_reported(served: Served) -> None:
    async def cut_short(event: MessageEvent) -> str | None:
        return report(event, "a long answer th", finish_reason="length", prompt_tokens=30,
                      completion_tokens=16)

    served.handler = cut_short
    reply = await served.client().chat.completions.create(model="hermes-agent", messages=HI)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens,
            reply.usage.total_tokens) == (30, 16, 46)


@pytest.mark.asyncio
async def test_streamed_pieces_from_the_agents_thread_reach_the_client(served: Served) -> None:
    async def streaming_turn(event: MessageEvent) -> str | None:
        def agent_thread() -> str | None:
            sink = reply_stream.get()
            assert sink is not None
            for piece in ("Hel", "lo ", "there"):
                sink(piece)
            return report(event, "Hello there")

        # As the gateway runs agents: on a worker thread, with the caller's context.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, contextvars.copy_context().run, agent_thread)

    served.handler = streaming_turn
    stream = await served.client().chat.completions.create(
        model="hermes-agent", messages=HI, stream=True, stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert pieces == ["Hel", "lo ", "there"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "stop"
    # OpenAI's usage chunk: the last, with no choices.
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 15
    assert {c.id for c in chunks} == {chunks[0].id}
    assert chunks[0].object == "chat.completion.chunk"


@pytest.mark.asyncio
async def test_a_reply_that_was_not_streamed_is_sent_whole_and_usage_only_when_asked(
    served: Served,
) -> None:
    stream = await served.client().chat.completions.create(
        model="hermes-agent", messages=HI, stream=True)
    chunks = [chunk async for chunk in stream]
    assert [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content] == [
        "echo: hi"]
    assert all(c.usage is None for c in chunks)


@pytest.mark.asyncio
async def test_stream_null_is_accepted_and_stream_options_need_a_stream(served: Served) -> None:
    client = served.client()
    reply = await client.chat.completions.create(model="hermes-agent", messages=HI,
                                                 extra_body={"stream": None})
    assert reply.choices[0].message.content == "echo: hi"
    with pytest.raises(openai.BadRequestError, match="only allowed when 'stream' is true"):
        await client.chat.completions.create(model="hermes-agent", messages=HI,
                                             stream_options={"include_usage": True})


@pytest.mark.asyncio
async def test_an_unaccepted_message_is_a_403_plain_and_streamed(served: Served) -> None:
    async def refuse(event: MessageEvent) -> str | None:
        return None

    served.handler = refuse
    client = served.client()
    with pytest.raises(openai.PermissionDeniedError, match="did not accept"):
        await client.chat.completions.create(model="hermes-agent", messages=HI)
    # Nothing was streamed yet, so the stream too is answered with the status.
    with pytest.raises(openai.PermissionDeniedError, match="did not accept"):
        await client.chat.completions.create(model="hermes-agent", messages=HI, stream=True)


@pytest.mark.asyncio
async def test_a_failing_turn_is_a_500_json_error(served: Served) -> None:
    async def crash(event: MessageEvent) -> str | None:
        raise RuntimeError("the runner broke")

    served.handler = crash
    client = served.client()
    with pytest.raises(openai.InternalServerError, match="failed to answer"):
        await client.chat.completions.create(model="hermes-agent", messages=HI)
    with pytest.raises(openai.InternalServerError, match="failed to answer"):
        await client.chat.completions.create(model="hermes-agent", messages=HI, stream=True)


@pytest.mark.parametrize(("failure", "status"), [
    ("model_key_refused", 502), ("model_not_found", 502), ("model_request_refused", 502),
    ("model_failed", 502), ("model_unreachable", 503), ("model_rate_limited", 503),
    ("model_timeout", 504), ("a_deployments_own_failure", 502)])
@pytest.mark.asyncio
async def test_a_failed_model_call_is_a_5xx_that_is_not_retried(
    served: Served, failure: str, status: int,
) -> None:
    async def fail(event: MessageEvent) -> str | None:
        return report(event, "The model call failed: ...", failure=failure,
                      error="the model endpoint said no")

    served.handler = fail
    with pytest.raises(openai.APIStatusError) as raised:
        # The client would retry a 5xx twice; the gateway already retried, and says so.
        await served.client(retries=2).chat.completions.create(model="hermes-agent",
                                                               messages=HI)
    assert raised.value.status_code == status
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert raised.value.response.headers[SESSION_HEADER] == "api-stand-in"
    body = raised.value.body
    assert isinstance(body, dict)
    assert body["code"] == failure and "the model endpoint said no" in body["message"]
    assert len(served.events) == 1


@pytest.mark.asyncio
async def test_a_failure_after_text_was_streamed_is_an_error_event(served: Served) -> None:
    async def fail_late(event: MessageEvent) -> str | None:
        def agent_thread() -> str | None:
            sink = reply_stream.get()
            assert sink is not None
            sink("Let me look that up.")
            return report(event, "The model call failed", failure="model_timeout",
                          error="the model endpoint did not answer in time")

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, contextvars.copy_context().run, agent_thread)

    served.handler = fail_late
    stream = await served.client().chat.completions.create(model="hermes-agent", messages=HI,
                                                           stream=True)
    seen: list[str] = []
    with pytest.raises(openai.APIError, match="did not answer in time"):
        async for chunk in stream:
            seen += [chunk.choices[0].delta.content or ""] if chunk.choices else []
    assert "Let me look that up." in seen


@pytest.mark.asyncio
async def test_an_interrupted_turn_is_a_503(served: Served) -> None:
    async def cut_off(event: MessageEvent) -> str | None:
        return report(event, "Interrupted before the turn finished.", interrupted=True)

    served.handler = cut_off
    with pytest.raises(openai.InternalServerError) as raised:
        await served.client().chat.completions.create(model="hermes-agent", messages=HI)
    assert raised.value.status_code == 503
    assert "cut off before it finished" in str(raised.value)


@pytest.mark.asyncio
async def test_continuity_needs_a_key(served: Served) -> None:
    with pytest.raises(openai.PermissionDeniedError) as raised:
        await served.client().chat.completions.create(
            model="hermes-agent", messages=HI, extra_headers={SESSION_HEADER: "api-123"})
    assert "API_SERVER_KEY" in str(raised.value) and "api_server.key" in str(raised.value)
    assert served.events == []


@pytest.mark.asyncio
async def test_a_continued_turn_names_its_session_and_sends_no_history(keyed: Served) -> None:
    raw = await keyed.client(KEY).chat.completions.with_raw_response.create(
        model="hermes-agent", extra_headers={SESSION_HEADER: "api-0123abc"},
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "ignored: the store has the history"},
                  {"role": "assistant", "content": "ignored too"},
                  {"role": "user", "content": "next"}])
    assert raw.headers[SESSION_HEADER] == "api-0123abc"
    (event,) = keyed.events
    assert event.client is not None and not event.client.stateless
    assert event.client.session_id == "api-0123abc"
    assert event.client.system_prompt == "Be brief."
    assert event.client.caller.startswith("key:") and KEY not in event.client.caller
    assert event.text == "next"


@pytest.mark.asyncio
async def test_an_unknown_session_is_a_404_that_names_no_owner(keyed: Served) -> None:
    async def unknown(event: MessageEvent) -> str | None:
        assert event.client is not None
        event.client.unknown_session = True
        return None

    keyed.handler = unknown
    with pytest.raises(openai.NotFoundError) as raised:
        await keyed.client(KEY).chat.completions.create(
            model="hermes-agent", messages=HI, extra_headers={SESSION_HEADER: "api-x"})
    assert raised.value.body == {
        "message": raised.value.body["message"], "type": "not_found_error",  # type: ignore[index]
        "param": SESSION_HEADER, "code": "session_not_found"}


@pytest.mark.parametrize(("value", "says"), [
    ("x" * 129, "too long (129 characters; at most 128)"),
    ("s" * 9000, "too long (9000 characters"),  # over aiohttp's own 8190-byte header limit
    ("../etc/passwd", "letters, digits or ._:@-"),
    ("a b", "letters, digits or ._:@-"),
    ("a;b", "letters, digits or ._:@-"),
])
@pytest.mark.asyncio
async def test_session_ids_are_validated(keyed: Served, value: str, says: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await keyed.client(KEY).chat.completions.create(
            model="hermes-agent", messages=HI,
            extra_headers={SESSION_HEADER: value})
    assert says in str(raised.value)
    assert raised.value.body["param"] == SESSION_HEADER  # type: ignore[index]
    assert keyed.events == []


@pytest.mark.asyncio
async def test_a_smaller_body_limit_is_enforced() -> None:
    harness = await serve({"max_body_bytes": 1000})
    try:
        with pytest.raises(openai.APIStatusError) as raised:
            await harness.client().chat.completions.create(
                model="hermes-agent", messages=[{"role": "user", "content": "x" * 2000}])
        assert raised.value.status_code == 413
        assert "larger than 1000 bytes" in str(raised.value)
        assert harness.events == []
    finally:
        await harness.close()


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
