"""JSON columns (``tool_calls``, content parts, reasoning details) read back as Python objects.

Another writer can store any text in them, so a load decodes exactly RFC 8259 JSON, the same
as ``json.loads`` does, and keeps anything else as the raw text (never failing the load).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes.state import SessionDB

# Text without lone surrogates: JSON text (UTF-8) cannot carry them.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
SCALARS = (st.none() | st.booleans() | TEXT
           | st.integers(min_value=-(2**63), max_value=2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=30,
)


def store_tool_calls(path: Path, docs: list[str]) -> None:
    """Inserts one assistant row per doc, from another process (as another writer would;
    a second SQLite in this process would drop our file locks)."""
    script = ("import json, sqlite3, sys\n"
              "con = sqlite3.connect(sys.argv[1], timeout=10)\n"
              "for doc in json.load(sys.stdin):\n"
              "    con.execute(\"INSERT INTO messages (session_id, role, tool_calls, timestamp,"
              " active) VALUES ('s', 'assistant', ?, 0, 1)\", (doc,))\n"
              "con.commit()\n")
    subprocess.run([sys.executable, "-c", script, str(path)], input=json.dumps(docs),
                   text=True, check=True)


def decoded_as_rfc_json(doc: str) -> Any:
    """What a load returns for ``doc``: ``json.loads(doc)`` when the doc is RFC 8259 JSON
    (CPython's decoder also takes NaN, Infinity and lone surrogates), else the doc itself. Integers past
    64 bits come back as floats."""
    try:
        value = json.loads(doc)
    except ValueError:
        return doc

    def rfc(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError
        if isinstance(v, str) and any("\ud800" <= c <= "\udfff" for c in v):
            raise ValueError  # a lone surrogate: not a character
        if isinstance(v, bool) or v is None:
            return v
        if isinstance(v, int):
            return v if -(2**63) <= v < 2**64 else float(v)
        if isinstance(v, list):
            return [rfc(x) for x in v]
        if isinstance(v, dict):
            return {rfc(k): rfc(x) for k, x in v.items()}
        return v

    try:
        return rfc(value)
    except ValueError:
        return doc


def loaded(db: SessionDB) -> list[Any]:
    return [m.get("tool_calls") for m in db.get_messages_as_conversation("s")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(VALUES, min_size=1, max_size=10), ascii_only=st.booleans(),
       spaced=st.booleans())
def test_json_from_another_writer_decodes_as_json_loads_does(
    tmp_path_factory: pytest.TempPathFactory, values: list[Any], ascii_only: bool, spaced: bool
) -> None:
    path = tmp_path_factory.mktemp("json") / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        docs = [json.dumps(v, ensure_ascii=ascii_only, indent=1 if spaced else None)
                for v in values]
        store_tool_calls(path, docs)
        got = loaded(db)
    assert got == [json.loads(d) for d in docs]
    # Same types too (1 and 1.0 compare equal).
    assert json.dumps(got) == json.dumps([json.loads(d) for d in docs])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=VALUES, cuts=st.lists(st.tuples(st.integers(0, 200), st.sampled_from(
    ['"', "\\", "{", "}", "[", "]", ",", ":", "-", "0", "1e", ".", "\n", "\x01", " ", "\\u",
     "\\ud800", "tru", "nul", "\u00e9", "", "NaN", "Infinity"])), min_size=1, max_size=3))
def test_damaged_json_is_kept_as_text_and_never_fails_the_load(
    tmp_path_factory: pytest.TempPathFactory, value: Any, cuts: list[tuple[int, str]]
) -> None:
    doc = json.dumps(value)
    for at, piece in cuts:
        doc = doc[:at] + piece + doc[at + 1:]
    path = tmp_path_factory.mktemp("damaged") / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        store_tool_calls(path, [doc])
        [got] = loaded(db)
    expected = decoded_as_rfc_json(doc)
    assert got == expected
    assert json.dumps(got) == json.dumps(expected)


@pytest.mark.parametrize(("doc", "expected"), [
    ('[{"a": "\\ud83d\\ude80 \\u00e9\\n\\t\\"\\\\\\/"}]', [{"a": "🚀 é\n\t\"\\/"}]),
    ('["\u00e9\\n", "a\\n\u00e9", "a\\u00e9b"]', ["\u00e9\n", "a\n\u00e9", "a\u00e9b"]),
    ('{"k": 1, "k": 2}', {"k": 2}),
    ("18446744073709551616", 18446744073709551616.0),
    ("-0", 0),
    ("1E+2", 100.0),
    ('"\\ud800"', '"\\ud800"'),         # a lone surrogate is not a character
    ('"tab\there"', '"tab\there"'),     # control characters only escaped
    ("[1,]", "[1,]"),
    ("01", "01"),
    ("1e999", "1e999"),                 # past a double
    ("NaN", "NaN"),
    ("[] x", "[] x"),
    ("", None),                        # empty: no tool calls
])
def test_edges_of_json(db: SessionDB, db_path: Path, doc: str, expected: Any) -> None:
    db.create_session("s", "cli")
    store_tool_calls(db_path, [doc])
    [got] = loaded(db)
    assert got == expected and type(got) is type(expected)


def test_nesting_is_bounded(db: SessionDB, db_path: Path) -> None:
    db.create_session("s", "cli")
    deep_ok = "[" * 128 + "]" * 128
    too_deep = "[" * 129 + "]" * 129
    store_tool_calls(db_path, [deep_ok, too_deep])
    ok, refused = loaded(db)
    depth = 0
    while isinstance(ok, list) and ok:
        ok, depth = ok[0], depth + 1
    assert depth == 127 and ok == []
    assert refused == too_deep
