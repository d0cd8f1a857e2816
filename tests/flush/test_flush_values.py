"""Awkward values through the agent's flush: all stored, all read back
(substitute forms as documented in rust/src/encode.rs)."""

from __future__ import annotations

import base64
import datetime as dt
import logging
from decimal import Decimal
from typing import Any, Callable

import pytest

from hermes.state import SessionDB


def flush_one(db: SessionDB, agent_factory: Callable[..., Any], message: dict[str, Any]) -> dict[str, Any]:
    agent = agent_factory(db)
    assert agent._flush_messages_to_session_db([message]) is True
    [row] = db.get_messages("s1")
    session = db.get_session("s1")
    assert session is not None and session["message_count"] == 1
    return row


def test_content_none_and_parts(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    parts = [{"type": "text", "text": "what is this?"},
             {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png", "detail": "low"}}]
    agent = agent_factory(db)
    messages = [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                 "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "user", "content": parts}]
    assert agent._flush_messages_to_session_db(messages) is True
    conv = db.get_messages_as_conversation("s1")
    assert conv[0]["content"] is None
    assert conv[1]["content"] == parts and isinstance(conv[1]["content"], list)
    assert [m["content"] for m in db.get_messages("s1")] == [None, parts]


def test_lone_surrogates_are_replaced_not_fatal(db: SessionDB, agent_factory: Callable[..., Any],
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    message = {"role": "tool", "content": "\ud800abc", "tool_name": "web_\udfffsearch",
               "tool_calls": [{"arguments": "x\udc80y"}]}
    row = flush_one(db, agent_factory, message)
    for value in (row["content"], row["tool_name"], row["tool_calls"][0]["arguments"]):
        assert "\ufffd" in value
        value.encode("utf-8")  # valid text now
    assert row["content"].endswith("abc") and row["content"].startswith("\ufffd")
    assert row["tool_calls"][0]["arguments"].startswith("x") and row["tool_calls"][0]["arguments"].endswith("y")
    assert "surrogate" in caplog.text


def test_one_replacement_character_per_lone_surrogate(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    row = flush_one(db, agent_factory, {"role": "user", "content": "\ud800abc\udfff"})
    assert row["content"] == "\ufffdabc\ufffd"


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque thing>"


def test_values_json_cannot_hold_are_stored_in_documented_forms(
        db: SessionDB, agent_factory: Callable[..., Any], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    when = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.timezone.utc)
    args = {
        "object": Opaque(),
        "set": {"only"},
        "frozenset": frozenset({7}),
        "tuple": (1, "two"),
        "bytes": b"\x00\xffraw",
        "bytearray": bytearray(b"ba"),
        "datetime": when,
        "date": dt.date(2024, 5, 6),
        "decimal": Decimal("1.50"),
        "nan": float("nan"),
        "inf": float("-inf"),
        "big": 2**80,
        "keys": {1: "int key", None: "none key", (1, 2): "tuple key"},
    }
    message = {"role": "assistant", "content": None,
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}]}
    row = flush_one(db, agent_factory, message)
    got = row["tool_calls"][0]["function"]["arguments"]
    assert got["object"] == {"__repr__": "<Opaque thing>", "__type__": f"{__name__}.Opaque"}
    assert got["set"] == ["only"] and got["frozenset"] == [7] and got["tuple"] == [1, "two"]
    assert got["bytes"] == {"__bytes_b64__": base64.b64encode(b"\x00\xffraw").decode()}
    assert got["bytearray"] == {"__bytes_b64__": base64.b64encode(b"ba").decode()}
    assert got["datetime"] == when.isoformat() and got["date"] == "2024-05-06"
    assert got["decimal"] == {"__repr__": "Decimal('1.50')", "__type__": "decimal.Decimal"}
    assert got["nan"] == "NaN" and got["inf"] == "-Infinity"
    assert got["big"] == 2**80
    assert got["keys"] == {"1": "int key", "null": "none key", "(1, 2)": "tuple key"}
    session = db.get_session("s1")
    assert session is not None and session["tool_call_count"] == 1
    assert "substitute form" in caplog.text
    # and the conversation view decodes the same
    assert db.get_messages_as_conversation("s1")[0]["tool_calls"] == row["tool_calls"]


def test_non_json_in_reasoning_details_is_stored(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    row = flush_one(db, agent_factory, {"role": "assistant", "content": "ok",
                                        "reasoning_details": [{"sig": b"\x01", "at": dt.date(2020, 1, 2)}]})
    assert row["reasoning_details"] == [{"sig": {"__bytes_b64__": "AQ=="}, "at": "2020-01-02"}]


def test_cyclic_structure_is_stored_not_fatal(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    loop: list[Any] = ["start"]
    loop.append(loop)
    row = flush_one(db, agent_factory, {"role": "assistant", "content": None,
                                        "tool_calls": [{"id": "c", "function": {"arguments": loop}}]})
    assert "start" in str(row["tool_calls"])
    session = db.get_session("s1")
    assert session is not None and session["tool_call_count"] == 1


def nested(depth: int) -> list[Any]:
    deep: list[Any] = []
    inner = deep
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return deep


def test_nesting_up_to_100_levels_round_trips(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    calls = [{"id": "c", "function": {"name": "f", "arguments": nested(90)}}]
    row = flush_one(db, agent_factory, {"role": "assistant", "content": None, "tool_calls": calls})
    assert row["tool_calls"] == calls


def test_deeply_nested_tool_calls_read_back_as_json(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    """Deeper than 100 levels, the rest is stored in the documented
    ``{"__repr__", "__type__"}`` form, and the whole value still reads back as JSON."""

    deep_calls = [{"id": "c", "function": {"name": "f", "arguments": nested(150)}}]
    row = flush_one(db, agent_factory, {"role": "assistant", "content": None, "tool_calls": deep_calls})
    assert isinstance(row["tool_calls"], list)  # decoded, not a raw string
    level: Any = row["tool_calls"][0]["function"]["arguments"]
    while isinstance(level, list) and level:
        level = level[0]
    assert isinstance(level, dict) and level["__type__"] == "list"


def test_five_megabyte_tool_result(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    big = ("0123456789abcdef" * 65536) * 5  # 5 MiB
    row = flush_one(db, agent_factory, {"role": "tool", "content": big, "tool_call_id": "c1", "name": "cat"})
    assert len(row["content"]) == len(big) and row["content"] == big
    assert row["tool_name"] == "cat"


@pytest.mark.parametrize(
    "given, expected",
    [
        (1_700_000_123.456, 1_700_000_123.456),
        (1_700_000_000, 1_700_000_000.0),
        (dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc), 1_700_000_000.0),
        (dt.datetime(2023, 11, 14, 22, 13, 20, 500000), dt.datetime(2023, 11, 14, 22, 13, 20, 500000).timestamp()),
    ],
    ids=["float", "int", "aware-datetime", "naive-datetime"],
)
def test_timestamps(db: SessionDB, agent_factory: Callable[..., Any], given: Any, expected: float) -> None:
    row = flush_one(db, agent_factory, {"role": "user", "content": "t", "timestamp": given})
    assert row["timestamp"] == pytest.approx(expected, abs=1e-6)
    assert db.get_messages_as_conversation("s1")[0]["timestamp"] == pytest.approx(expected, abs=1e-6)


def test_missing_timestamp_is_now(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    import time

    before = time.time()
    row = flush_one(db, agent_factory, {"role": "user", "content": "t"})
    assert before - 1 <= row["timestamp"] <= time.time() + 1


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


def test_value_with_failing_repr_never_makes_the_flush_raise(
        db: SessionDB, agent_factory: Callable[..., Any], hermes_home: Any) -> None:
    agent = agent_factory(db)
    messages = [{"role": "user", "content": "before"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "arg": Unprintable()}]}]
    results = [agent._flush_messages_to_session_db(messages) for _ in range(4)]
    assert set(results) <= {True, False}
    spooled = (hermes_home / "sessions" / "s1.recovery.jsonl")
    stored = [m["content"] for m in db.get_messages("s1")]
    assert stored == ["before", None] or (spooled.exists() and "before" in spooled.read_text())
