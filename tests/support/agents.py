"""Shells of our ``AIAgent`` for flush tests, and what a test reads back from the store."""

from __future__ import annotations

from typing import Any

from hermes.agent import AIAgent
from hermes.state import SessionDB


def agent_shell(db: SessionDB | None, session_id: str | None = "s1",
                platform: str | None = "cli", **attrs: Any) -> Any:
    """An ``AIAgent`` made with ``object.__new__``, carrying only the attributes SPEC §4
    lists (plus any overrides), as the upstream regression tests build one."""
    agent = object.__new__(AIAgent)
    agent._session_db = db
    agent._session_db_created = False
    agent.session_id = session_id
    agent.platform = platform
    agent._session_messages = []
    agent._last_flushed_db_idx = 0
    agent._flushed_db_message_ids = set()
    agent._flushed_db_message_session_id = None
    for name, value in attrs.items():
        setattr(agent, name, value)
    return agent


def contents(db: SessionDB, sid: str = "s1") -> list[Any]:
    return [m["content"] for m in db.get_messages(sid)]


def assert_exact(db: SessionDB, expected: list[Any], sid: str = "s1") -> None:
    """The session holds exactly ``expected`` in order and its counter agrees."""
    assert contents(db, sid) == expected
    session = db.get_session(sid)
    assert session is not None and session["message_count"] == len(expected)
