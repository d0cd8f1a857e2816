"""Runs inside the peer venv (hermes-agent 0.19.0 installed) on behalf of
``test_hermes_agent_interop.py``: one JSON request on stdin, one JSON answer
on stdout. It only calls hermes-agent's public ``hermes_state.SessionDB`` and
its agent's ``run_agent.AIAgent._flush_messages_to_session_db``.

Requests (``op``):

* ``read``: the session as hermes-agent sees it: ``conversation``
  (``get_messages_as_conversation``), ``message_count`` and
  ``tool_call_count`` (``get_session``), ``rows`` (active rows counted in SQL);
* ``append``: ``append_message`` for each message (its per-message API);
* ``flush``: its agent's flush of a live list (its real write path),
  creating the session first if needed;
* ``search``: ``search_messages(query)`` session ids of the hits;
* ``calls``: each ``[method, args, kwargs]`` of ``calls`` on its ``SessionDB``, in order:
  ``results`` holds ``{"ok": value}`` or ``{"error": exception type name}`` for each, and
  ``model_usage`` the session's ``session_model_usage`` rows (read in SQL);
* ``serve``: stays up on one ``SessionDB`` and answers one JSON line per JSON line on stdin
  until stdin closes, so its writes can land within milliseconds of ours. A line holds
  ``sql``, ``calls`` or both, run in that order: ``sql`` is ``[statement, params]`` pairs run
  on a ``sqlite3`` connection of its own, as another program's code would, in one ``BEGIN
  IMMEDIATE`` transaction (answered with ``rows``, each statement's rows, or ``error``);
  ``calls`` as above (answered with ``results``).

Every request names ``db`` (the state.db path) and ``session_id``.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any


def _rows(db: str, session_id: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(
            conn.execute(
                "SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 1", (session_id,)
            ).fetchone()[0]
        )
    finally:
        conn.close()


def _model_usage(db: str, session_id: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        rows = conn.execute(
            "SELECT * FROM session_model_usage WHERE session_id = ? ORDER BY model, task",
            (session_id,),
        ).fetchall()
        return [dict(row) for row in rows]
    finally:
        conn.close()


def _call(db: Any, method: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"ok": getattr(db, method)(*args, **kwargs)}
    except Exception as exc:  # the answer says which error; the test decides
        return {"error": type(exc).__name__}


def _serve(db: Any, path: str, lines: Any, out: Any) -> None:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        for line in lines:
            req = json.loads(line)
            answer: dict[str, Any] = {}
            if "sql" in req:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    answer["rows"] = [conn.execute(sql, params).fetchall() for sql, params in req["sql"]]
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:  # the answer says which error; the test decides
                    conn.execute("ROLLBACK")
                    answer["error"] = f"{type(exc).__name__}: {exc}"
            if "calls" in req:
                answer["results"] = [_call(db, *call) for call in req["calls"]]
            out.write(json.dumps(answer) + "\n")
            out.flush()
    finally:
        conn.close()


def _state(db: Any, path: str, session_id: str) -> dict[str, Any]:
    session = db.get_session(session_id) or {}
    return {
        "conversation": db.get_messages_as_conversation(session_id),
        "message_count": session.get("message_count"),
        "tool_call_count": session.get("tool_call_count"),
        "source": session.get("source"),
        "rows": _rows(path, session_id),
    }


def main() -> None:
    req = json.loads(sys.stdin.readline())  # one line: ``serve`` reads on after it
    out = sys.stdout
    sys.stdout = sys.stderr  # keep stdout for the answer alone

    import hermes_state

    path, sid = req["db"], req["session_id"]
    db = hermes_state.SessionDB(Path(path))
    try:
        op = req["op"]
        answer: dict[str, Any] = {}
        if op == "append":
            if db.get_session(sid) is None:
                db.create_session(sid, req.get("source", "cli"))
            answer["ids"] = [
                db.append_message(
                    sid,
                    m["role"],
                    content=m.get("content"),
                    tool_name=m.get("tool_name"),
                    tool_calls=m.get("tool_calls"),
                    tool_call_id=m.get("tool_call_id"),
                )
                for m in req["messages"]
            ]
        elif op == "flush":
            import run_agent

            if db.get_session(sid) is None:
                db.create_session(sid, req.get("source", "cli"))
            agent = object.__new__(run_agent.AIAgent)
            agent._session_db = db
            agent._session_db_created = True
            agent.session_id = sid
            agent.platform = "cli"
            agent._session_messages = []
            agent._last_flushed_db_idx = 0
            agent._flushed_db_message_ids = set()
            agent._flushed_db_message_session_id = None
            history = db.get_messages_as_conversation(sid)
            live = history + req["messages"]
            agent._flush_messages_to_session_db(live, history)
        elif op == "search":
            answer["hits"] = sorted({h["session_id"] for h in db.search_messages(req["query"])})
        elif op == "calls":
            answer["results"] = [_call(db, *call) for call in req["calls"]]
            answer["model_usage"] = _model_usage(path, sid)
        elif op == "serve":
            _serve(db, path, sys.stdin, out)
            return
        elif op != "read":
            raise SystemExit(f"unknown op {op!r}")
        answer.update(_state(db, path, sid))
    finally:
        db.close()
    out.write(json.dumps(answer))


if __name__ == "__main__":
    main()
