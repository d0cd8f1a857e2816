"""The api_server's stored responses (``hermes.state.responses``) on a real ``state.db``:
kept across reopening, read and deleted only by their caller, an id stored once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hermes.errors import HermesError
from hermes.state import AsyncSessionDB, SessionDB

CONVERSATION = [{"role": "user", "content": "hi ✅"}, {"role": "assistant", "content": "hello"}]


def test_a_response_is_kept_and_reached_by_its_caller_only(db_path: Path) -> None:
    with SessionDB(db_path) as db:
        db.save_response("resp_1", "key:a", {"id": "resp_1", "status": "completed"},
                         CONVERSATION, session_id="api-1", previous_response_id="resp_0")
        with pytest.raises(HermesError):
            db.save_response("resp_1", "key:b", {}, [])  # an id is stored once
        assert db.get_response("resp_1", "key:b") is None
        assert not db.delete_response("resp_1", "key:b")
        assert db.response_count() == 1
    with SessionDB(db_path) as db:
        stored = db.get_response("resp_1", "key:a")
        assert stored is not None
        assert (stored.id, stored.caller, stored.session_id, stored.previous_response_id) == (
            "resp_1", "key:a", "api-1", "resp_0")
        assert stored.response == {"id": "resp_1", "status": "completed"}
        assert stored.conversation == CONVERSATION
        assert stored.created_at > 0
        assert db.delete_response("resp_1", "key:a")
        assert db.get_response("resp_1", "key:a") is None
        assert db.response_count() == 0


def test_the_table_is_ours_and_created_in_an_existing_file(db_path: Path, sql: Any,
                                                           write_sql: Any) -> None:
    # A file made before the table existed (as hermes-agent's own file is) gets it on open.
    write_sql(db_path, "CREATE TABLE unrelated (x)")
    with SessionDB(db_path) as db:
        db.save_response("resp_2", "anonymous", {}, [])
    names = {row[0] for row in sql(db_path, "SELECT name FROM sqlite_master")}
    assert {"hermes_responses", "unrelated", "sessions"} <= names


def test_async_session_db_offloads_the_same_methods(db_path: Path) -> None:
    async def run() -> None:
        db = AsyncSessionDB(SessionDB(db_path))
        await db.save_response("resp_3", "key:a", {"id": "resp_3"}, CONVERSATION)
        stored = await db.get_response("resp_3", "key:a")
        assert stored is not None and stored.conversation == CONVERSATION
        assert await db.response_count() == 1
        assert await db.delete_response("resp_3", "key:a")
        await db.close()

    asyncio.run(run())
