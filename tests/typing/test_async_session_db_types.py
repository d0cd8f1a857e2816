"""What ``mypy --strict`` sees of ``AsyncSessionDB``: each coroutine has its ``SessionDB``
method's exact signature and result type.

``scripts/test`` type-checks this file. An ``assert_type`` that no longer holds fails that
check, and so does each ``# type: ignore[arg-type]`` below once mypy stops rejecting the
wrong argument it marks (``--strict`` reports unused ignores): a coroutine typed ``Any``
fails both ways. pytest runs the same calls against a real ``state.db``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from typing_extensions import assert_type

from hermes._core import FlushTracker
from hermes.state import AsyncSessionDB, SessionDB


async def _every_result_type(adb: AsyncSessionDB) -> None:
    assert_type(adb.sync, SessionDB)
    assert_type(await adb.create_session("s1", "cli", title="typed"), str)
    assert_type(await adb.ensure_session("s1"), str)
    assert_type(await adb.append_message("s1", "user", "hello"), int)
    assert_type(await adb.append_messages("s1", [{"role": "assistant", "content": "hi"}]), list[int])
    live: list[dict[str, Any]] = [{"role": "user", "content": "flushed"}]
    assert_type(await adb.flush(FlushTracker(), "s1", live), int)
    assert_type(await adb.get_session("s1"), dict[str, Any] | None)
    assert_type(await adb.live_message_count("s1"), int | None)
    assert_type(await adb.own_appends("s1"), int)
    assert_type(await adb.foreign_commit_since_last_look(), bool)
    assert_type(await adb.get_messages("s1"), list[dict[str, Any]])
    assert_type(await adb.get_messages_as_conversation("s1"), list[dict[str, Any]])
    assert_type(await adb.update_session("s1", title="retitled"), None)
    assert_type(await adb.list_sessions(limit=5), list[dict[str, Any]])
    assert_type(await adb.search_messages("hello"), list[dict[str, Any]])
    assert_type(await adb.has_platform_message_id("s1", "p1"), bool)
    assert_type(await adb.load_gateway_routing_entries(), dict[str, str])
    assert_type(await adb.get_meta("k"), str | None)
    assert_type(await adb.find_session_by_origin(platform="cli", chat_id="c"), str | None)
    assert_type(await adb.list_gateway_sessions(), list[dict[str, Any]])
    assert_type(await adb.bind_telegram_topic(chat_id="c", thread_id="1", user_id="u",
                                              session_key="k", session_id="s1"), None)
    assert_type(await adb.get_telegram_topic_binding(chat_id="c", thread_id="1"),
                dict[str, Any] | None)
    assert_type(await adb.delete_telegram_topic_binding(chat_id="c", thread_id="1"), int)
    assert_type(await adb.request_handoff("s1", "telegram"), bool)
    assert_type(await adb.get_handoff_state("s1"), dict[str, Any] | None)


async def _wrong_arguments_are_rejected(adb: AsyncSessionDB) -> None:
    with pytest.raises(TypeError):
        await adb.get_session(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await adb.list_sessions(limit="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await adb.get_telegram_topic_binding("c", "1")  # type: ignore[call-arg]


def test_coroutines_return_what_their_methods_return(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "state.db") as db:
        adb = AsyncSessionDB(db)
        asyncio.run(_every_result_type(adb))
        asyncio.run(_wrong_arguments_are_rejected(adb))
        assert db.live_message_count("s1") == 3
        session = db.get_session("s1")
        assert session is not None and session["title"] == "retitled"
