"""SPEC §3 invariant, by property: whatever sequence of single and batch
appends hits whichever sessions (including batches that fail), each session's
``message_count`` equals its row count and ``tool_call_count`` the number of
tool calls stored, and the rows are exactly the successful appends, in order."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes.errors import SessionNotFoundError
from hermes.state import SessionDB

SESSIONS = ["s0", "s1", "s2"]

tool_counts = st.integers(min_value=0, max_value=3)
op = st.one_of(
    st.tuples(st.just("one"), st.sampled_from(SESSIONS), tool_counts),
    st.tuples(st.just("batch"), st.sampled_from(SESSIONS), st.lists(tool_counts, max_size=6)),
    st.tuples(st.just("missing"), st.just("ghost"), st.lists(tool_counts, min_size=1, max_size=4)),
    st.tuples(st.just("bad_item"), st.sampled_from(SESSIONS), st.lists(tool_counts, min_size=1, max_size=4)),
    st.tuples(st.just("recreate"), st.sampled_from(SESSIONS), st.just(0)),
)


def message(label: str, calls: int) -> dict[str, Any]:
    m: dict[str, Any] = {"role": "assistant" if calls else "user", "content": label}
    if calls:
        m["tool_calls"] = [{"id": f"{label}-{k}", "type": "function",
                            "function": {"name": "t", "arguments": "{}"}} for k in range(calls)]
    return m


def check(db: SessionDB, expected: dict[str, list[tuple[str, int]]]) -> None:
    for sid, rows in expected.items():
        session = db.get_session(sid)
        assert session is not None
        stored = db.get_messages(sid)
        assert session["message_count"] == len(stored) == len(rows)
        assert db.live_message_count(sid) == len(stored)
        assert session["tool_call_count"] == sum(len(m["tool_calls"] or []) for m in stored)
        assert [(m["content"], len(m["tool_calls"] or [])) for m in stored] == rows
    assert db.get_session("ghost") is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, max_size=25))
def test_counters_always_equal_rows(ops: list[tuple[str, str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB(Path(tmp) / "state.db", synchronous="NORMAL")
        try:
            expected: dict[str, list[tuple[str, int]]] = {s: [] for s in SESSIONS}
            for sid in SESSIONS:
                db.create_session(sid, "cli")
            for n, (kind, sid, arg) in enumerate(ops):
                if kind == "one":
                    m = message(f"{n}", arg)
                    db.append_message(sid, m["role"], m["content"], tool_calls=m.get("tool_calls"))
                    expected[sid].append((f"{n}", arg))
                elif kind == "batch":
                    ids = db.append_messages(sid, [message(f"{n}.{k}", c) for k, c in enumerate(arg)])
                    assert len(ids) == len(arg)
                    expected[sid].extend((f"{n}.{k}", c) for k, c in enumerate(arg))
                elif kind == "missing":
                    with pytest.raises(SessionNotFoundError):
                        db.append_messages(sid, [message(f"{n}.{k}", c) for k, c in enumerate(arg)])
                elif kind == "bad_item":
                    batch: list[Any] = [message(f"{n}.{k}", c) for k, c in enumerate(arg)]
                    batch.insert(len(batch) // 2, ["not", "a", "dict"])
                    with pytest.raises(TypeError):
                        db.append_messages(sid, batch)
                else:
                    db.create_session(sid, "other-source", title=None)
                check(db, expected)
        finally:
            db.close()
