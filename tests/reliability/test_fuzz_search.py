"""Fuzzing full-text search queries (issue 7, item 5).

``SessionDB.search_messages`` gets arbitrary text and FTS5-flavoured soup (quotes, ``*``,
``NEAR``, ``AND``/``OR``/``NOT``, parentheses, ``^``, column filters, lone surrogates, NUL).
Held (issue 20): whatever a person types, the search runs — it returns hits (each a message row
with its session's source, a snippet and context) and never raises — and the database is
unchanged and usable afterwards. Chinese, Japanese and Korean text is in the mix, so the trigram
and substring routes get the same soup. The CLI's ``hermes sessions search`` exits 0 on it,
never with a traceback.

300 examples in the normal run, 3000 with ``HERMES_FULL=1`` (``HERMES_SEARCH_EXAMPLES``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hermes.state import SessionDB
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .harness import hermes_cli, setting

TOKENS = ['"', "'", "*", "(", ")", "^", ":", "+", "-", "{", "}", ",", ".", "NEAR", "NEAR(",
          "AND", "OR", "NOT", "content:", "messages_fts:", "rowid", "docker", "kube", "hello",
          "\ud800", "\x00", "\u2028", "\\", "%", "_", ";", "--", "/*", "' OR 1=1 --",
          "\"); DROP TABLE messages; --", " ", "记忆", "断裂", "日本語", "안녕", "こんにちは"]
queries = st.text(max_size=40) | st.text(st.characters(min_codepoint=0x3000, max_codepoint=0xAC10),
                                          max_size=8) | st.lists(st.sampled_from(TOKENS), min_size=1, max_size=8).map(
    " ".join) | st.lists(st.sampled_from(TOKENS) | st.text(max_size=3), max_size=8).map("".join)


@pytest.fixture(scope="module")
def searchable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionDB]:
    path = tmp_path_factory.mktemp("search") / "state.db"
    db = SessionDB(path)
    db.create_session("s1", "telegram")
    for text in ["hello docker world", "kubernetes pods", "NEAR the AND gate", "ünïcödé 日本語",
                 "quote \" inside", "a:b c*d (e)"]:
        db.append_message("s1", "user", text)
    db.append_message("s1", "assistant", None, tool_calls=[
        {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}])
    yield db
    db.close()


@settings(max_examples=int(setting("search_examples", 300, 3000)), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(query=queries, limit=st.integers(0, 30), offset=st.integers(0, 5))
def test_any_query_returns_hits_and_never_raises(searchable: SessionDB, query: str,
                                                 limit: int, offset: int) -> None:
    hits = searchable.search_messages(query, limit=limit, offset=offset)
    assert isinstance(hits, list) and len(hits) <= limit
    for hit in hits:
        assert hit["session_id"] == "s1" and hit["source"] == "telegram"
        assert isinstance(hit["snippet"], str) and hit["context"]
    session = searchable.get_session("s1")
    assert session is not None and session["message_count"] == 7
    assert len(searchable.get_messages("s1")) == 7


@pytest.mark.parametrize("query", ['"unbalanced', "NEAR(", "AND", "docker OR", "(((",
                                   "' OR 1=1 --", "content:", "\u2028"])
def test_the_cli_searches_any_query_without_a_traceback(tmp_path: Path, query: str) -> None:
    db_path = tmp_path / "state.db"
    with SessionDB(db_path) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello docker")
    done = hermes_cli(tmp_path, "sessions", "search", query, "--db", str(db_path))
    assert done.returncode == 0, done
    assert "Traceback" not in done.stderr, done.stderr


def test_a_storage_failure_is_not_reported_as_a_bad_query(tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    db = SessionDB(db_path)
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "hello")
    for suffix in ("", "-wal", "-shm"):
        os.unlink(f"{db_path}{suffix}")
    try:
        db.search_messages("hello")
    except ValueError as exc:
        raise AssertionError(f"a storage failure reported as a bad query: {exc}") from None
    except Exception:
        pass
    finally:
        db.close()
