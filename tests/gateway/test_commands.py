"""The chat commands the gateway answers itself (``/help``, ``/title``, ``/sessions``,
``/resume``), on a started runner with a real state.db; ``/stop`` and ``/new`` are in
test_turn.py. A sender reaches only their own sessions."""

from __future__ import annotations

import dataclasses

import pytest
from support import scripted_agent
from support.events import RunnerFactory, current_session_id, event, runner_db

from hermes.gateway.client_turn import ClientTurn
from hermes.gateway.commands import MAX_TITLE_LENGTH, parse
from hermes.gateway.config import Platform


def test_parse_takes_the_rest_of_the_line_as_the_argument() -> None:
    invocation = parse("  /TITLE@hermes_bot   Cat  facts ")
    assert invocation is not None
    assert (invocation.command.value, invocation.argument) == ("title", "Cat  facts")
    assert parse("/etc/hosts is a file") is None and parse("hello /new") is None


@pytest.mark.asyncio
async def test_help_lists_every_command(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    text = await runner._handle_message(event("/help"))
    for usage in ("/help", "/new, /reset", "/stop", "/title [TEXT]", "/sessions",
                  "/resume ID|TITLE"):
        assert usage in text
    assert scripted_agent.BUILDS == []  # no model turn


@pytest.mark.asyncio
async def test_title_sets_shows_and_refuses_a_duplicate(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    assert await runner._handle_message(event("/title")) == (
        "This conversation has no title yet; /title TEXT gives it one.")
    assert await runner._handle_message(event("/title  Cat   facts ")) == "Title set: Cat facts"
    assert runner_db(runner).get_session(current_session_id(runner))["title"] == "Cat facts"
    assert await runner._handle_message(event("/title")) == (
        "This conversation's title: Cat facts")

    other = await runner._handle_message(event("/title Cat facts", chat_id="7"))
    assert other == "Another conversation is already titled 'Cat facts'; choose another title."
    too_long = await runner._handle_message(event("/title " + "x" * (MAX_TITLE_LENGTH + 1)))
    assert too_long.startswith(f"That title is {MAX_TITLE_LENGTH + 1} characters long")
    assert runner_db(runner).get_session(current_session_id(runner))["title"] == "Cat facts"
    assert scripted_agent.BUILDS == []


@pytest.mark.asyncio
async def test_resume_by_title_or_id_continues_that_session(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    await runner._handle_message(event("first"))
    first = current_session_id(runner)
    await runner._handle_message(event("/title Shopping"))
    await runner._handle_message(event("/new"))
    await runner._handle_message(event("second"))
    second = current_session_id(runner)

    reply = await runner._handle_message(event("/resume Shopping"))
    assert reply.startswith(f"Resumed {first} (Shopping):")
    assert current_session_id(runner) == first
    db = runner_db(runner)
    assert db.get_session(first)["end_reason"] is None  # reopened
    assert db.get_session(second)["end_reason"] == "resumed_other"
    assert await runner._handle_message(event("more")) == "echo: more [history=2]"

    assert (await runner._handle_message(event(f"/resume {second}"))).startswith(
        f"Resumed {second}")
    assert current_session_id(runner) == second
    assert await runner._handle_message(event("/resume")) == (
        "Say which conversation: /resume ID or /resume TITLE (/sessions lists them).")


@pytest.mark.asyncio
async def test_sessions_lists_only_the_senders_own(make_runner: RunnerFactory) -> None:
    runner = await make_runner()
    await runner._handle_message(event("mine", chat_id="42"))
    mine = current_session_id(runner, "42")
    await runner._handle_message(event("theirs", chat_id="99"))
    theirs = current_session_id(runner, "99")

    listing = await runner._handle_message(event("/sessions", chat_id="42"))
    assert f"* {mine}" in listing and theirs not in listing
    refused = await runner._handle_message(event(f"/resume {theirs}", chat_id="42"))
    assert refused == f"No conversation of yours is called {theirs!r}; /sessions lists them."
    assert current_session_id(runner, "42") == mine


@pytest.mark.asyncio
async def test_a_clients_text_is_never_a_command(make_runner: RunnerFactory) -> None:
    """An api_server client's message is content, as in OpenAI's API: '/sessions' or
    '/resume' from a client reaches the model and lists or resumes nothing."""
    runner = await make_runner()
    await runner._handle_message(event("mine"))
    mine = current_session_id(runner)
    for text in ("/sessions", f"/resume {mine}"):
        client = ClientTurn(caller="anonymous", history=[])
        sent = dataclasses.replace(event(text, platform=Platform.API_SERVER), client=client)
        assert await runner._handle_message(sent) == f"echo: {text} [history=0]"
        assert client.report is not None
        assert client.report.session_id != mine
    assert current_session_id(runner) == mine
