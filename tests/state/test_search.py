"""``search_messages`` and the search index upkeep (``hermes/state/search.py``) against a
real ``state.db``: whatever a person types runs, CJK text is found, the filters and the
context of each hit, and a damaged index rebuilt from the messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hermes.errors import DatabaseClosedError, SearchQueryError
from hermes.state import SessionDB
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def tool_call(n: int, name: str) -> dict[str, Any]:
    return {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}


@pytest.fixture
def searchable(db: SessionDB) -> SessionDB:
    db.create_session("a", "cli", title="Alpha")
    db.create_session("b", "telegram")
    db.append_message("a", "user", "the quick brown fox jumps over the lazy dog")
    db.append_message("a", "assistant", None, tool_calls=[tool_call(1, "read_file")])
    db.append_message("a", "tool", "tool output text", tool_name="web_search", tool_call_id="call_1")
    db.append_message("b", "user", "sleeping foxes dream of brown bread")
    db.append_message("b", "assistant", "elephants remember everything")
    return db


FOX = "the quick brown fox jumps over the lazy dog"
BREAD = "sleeping foxes dream of brown bread"


@pytest.mark.parametrize(
    "query, expected",
    [
        ("quick", {FOX}),
        ("brown", {FOX, BREAD}),
        ('"brown fox"', {FOX}),
        ('"fox brown"', set()),
        ("eleph*", {"elephants remember everything"}),
        ("fox*", {FOX, BREAD}),
        ("quick OR elephants", {FOX, "elephants remember everything"}),
        ("brown NOT bread", {FOX}),
        ("brown AND bread", {BREAD}),
        ("web_search", {"tool output text"}),
        ("read_file", {None}),
        ("nothingmatches", set()),
    ],
)
def test_the_query_syntax_a_person_means(searchable: SessionDB, query: str,
                                         expected: set[Any]) -> None:
    hits = searchable.search_messages(query)
    assert {h["content"] for h in hits} == expected
    assert len(hits) == len(expected)


@pytest.mark.parametrize(
    "query, expected",
    [
        # Punctuation FTS5 reads as syntax separates words or is dropped.
        ("quick:brown", {FOX}),
        ("(quick", {FOX}),
        ("quick+", {FOX}),
        ("{lazy}", {FOX}),
        ('"brown', {FOX, BREAD}),
        ('say "lazy', {FOX} - {FOX}),
        # Operators with a term on one side only are dropped.
        ("brown AND", {FOX, BREAD}),
        ("OR quick", {FOX}),
        ("NOT bread", {BREAD}),
        ("quick AND OR fox", {FOX}),
        # Words joined by punctuation are a phrase.
        ("lazy-dog", {FOX}),
        ("dog.lazy", set()),
        # Nothing to look for.
        ("", set()), ("   ", set()), ("***", set()), ("AND OR NOT", set()), ("%", set()),
    ],
)
def test_whatever_a_person_types_runs(searchable: SessionDB, query: str,
                                      expected: set[Any]) -> None:
    assert {h["content"] for h in searchable.search_messages(query)} == expected


SOUP = ['"', "*", "(", ")", "^", ":", "+", "-", "AND", "OR", "NOT", "NEAR(", "brown", "fox*",
        "记忆", "完成率", "안녕", "%", "_", "\\", "'", "\x00", "\ud800", " "]


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=40) | st.lists(st.sampled_from(SOUP), max_size=8).map(" ".join))
def test_any_text_runs_or_raises_a_search_query_error(searchable: SessionDB, query: str) -> None:
    try:
        hits = searchable.search_messages(query)
    except SearchQueryError:
        return
    assert all(hit["session_id"] in ("a", "b") and isinstance(hit["snippet"], str)
               for hit in hits)


@pytest.mark.parametrize("query", ["C++", "chat-send", "TODO: fix", "P2.2", "ada@example.com",
                                   "it's", "C#", "NOT docker", "100%"])
def test_the_searches_of_issue_20_find_their_message(db: SessionDB, query: str) -> None:
    db.create_session("s", "cli")
    text = f"notes: we looked at {query} today"
    db.append_message("s", "user", text)
    db.append_message("s", "user", "unrelated")
    assert [h["content"] for h in db.search_messages(query)] == [text]


def test_a_hit_has_the_message_its_session_a_snippet_and_context(searchable: SessionDB) -> None:
    [hit] = searchable.search_messages("quick")
    assert hit["session_id"] == "a" and hit["role"] == "user" and isinstance(hit["id"], int)
    assert hit["source"] == "cli" and hit["title"] == "Alpha"
    assert set(hit) >= {"timestamp", "tool_name", "model", "session_started"}
    assert ">>>quick<<<" in hit["snippet"]
    assert hit["context"] == [{"role": "user", "content": FOX},
                              {"role": "assistant", "content": ""}]


def test_context_is_the_neighbours_in_the_session_clipped(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.create_session("s2", "cli")
    db.append_message("s1", "user", "before " + "x" * 300)
    db.append_message("s2", "user", "other session")
    db.append_message("s1", "assistant", [{"type": "text", "text": "needle"},
                                          {"type": "image_url", "image_url": {"url": "u"}}])
    db.append_message("s2", "user", "other session again")
    db.append_message("s1", "user", [{"type": "image_url", "image_url": {"url": "u"}}])
    [hit] = db.search_messages("needle")
    assert hit["context"] == [
        {"role": "user", "content": ("before " + "x" * 300)[:200]},
        {"role": "assistant", "content": "needle"},
        {"role": "user", "content": "[multimodal content]"},
    ]


def test_a_session_filter_finds_its_rows_among_other_sessions_and_long_lists_filter_too(
    tmp_path: Path,
) -> None:
    db = SessionDB(tmp_path / "state.db")
    db.create_session("a", "cli")
    db.create_session("b", "telegram")
    for n in range(3):
        db.append_message("a", "user", f"heron {n} 北京")
        db.append_message("b", "user", f"heron {n} 北京")
    assert {h["id"] for h in db.search_messages("heron", session_id="a")} == {1, 3, 5}
    assert {h["id"] for h in db.search_messages("北京", session_id="b")} == {2, 4, 6}
    many = [f"source-{n}" for n in range(100)] + ["telegram"]
    assert {h["session_id"] for h in db.search_messages("heron", source_filter=many)} == {"b"}
    assert {h["session_id"] for h in db.search_messages("heron", exclude_sources=many)} == {"a"}
    found = db.search_messages("北京", source_filter=many, role_filter=["user", "tool"])
    assert {h["session_id"] for h in found} == {"b"}


def test_filters_sources_roles_session_and_a_page(searchable: SessionDB) -> None:
    def sessions(**filters: Any) -> list[str]:
        return sorted(h["session_id"] for h in searchable.search_messages("brown", **filters))

    assert sessions() == ["a", "b"]
    assert sessions(source_filter=["telegram"]) == ["b"]
    assert sessions(source_filter=["telegram", "cli"]) == ["a", "b"]
    assert sessions(source_filter=[]) == []
    assert sessions(exclude_sources=["telegram"]) == ["a"]
    assert sessions(role_filter=["assistant"]) == []
    assert sessions(role_filter=[]) == ["a", "b"]
    assert sessions(session_id="a") == ["a"]
    assert len(searchable.search_messages("brown", limit=1)) == 1
    assert len(searchable.search_messages("brown", limit=1, offset=1)) == 1
    assert searchable.search_messages("brown", limit=1, offset=2) == []
    with pytest.raises(ValueError, match="limit=-1"):
        searchable.search_messages("brown", limit=-1)


def test_sort_by_time_newest_or_oldest_first(db: SessionDB) -> None:
    db.create_session("s", "cli")
    for n, when in enumerate([300.0, 100.0, 200.0]):
        db.append_message("s", "user", f"deploy number {n}", timestamp=when)
    times = lambda sort: [h["timestamp"] for h in db.search_messages("deploy", sort=sort)]
    assert times("newest") == [300.0, 200.0, 100.0]
    assert times(" OLDEST ") == [100.0, 200.0, 300.0]
    assert sorted(times("by relevance")) == [100.0, 200.0, 300.0]


def test_rewound_rows_are_hidden_unless_asked_for(db: SessionDB, db_path: Path,
                                                 write_sql: Any) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "kept docker")
    db.append_message("s", "user", "rewound docker")
    db.append_message("s", "user", "compacted docker")
    assert len(db.search_messages("docker")) == 3  # indexed before the other writer's update
    write_sql(db_path, "BEGIN; UPDATE messages SET active = 0 WHERE content LIKE 'rewound%'; "
                       "UPDATE messages SET active = 0, compacted = 1 WHERE content LIKE 'compacted%'; "
                       "COMMIT;")
    found = {h["content"] for h in db.search_messages("docker")}
    assert found == {"kept docker", "compacted docker"}
    assert len(db.search_messages("docker", include_inactive=True)) == 3


@pytest.mark.parametrize(
    "query, expected",
    [
        ("记忆断裂", {"昨天和其他Agent的聊天记录，记忆断裂问题复现了"}),   # trigram index
        ("聊天", {"昨天和其他Agent的聊天记录，记忆断裂问题复现了"}),       # substring, 2 chars
        ("Agent的", {"昨天和其他Agent的聊天记录，记忆断裂问题复现了"}),
        ("100%完成", {"达成100%完成率"}),                                  # % is a character
        ("完成率", {"达成100%完成率", "达成100完成率是目标"}),
        ("达成 NOT 目标", {"达成100%完成率"}),
        ("안녕", {"안녕하세요 반갑습니다"}),
        ("こんにちは", {"こんにちは世界"}),
        ("断裂连接", set()),
    ],
)
def test_chinese_japanese_and_korean_text_is_found(db: SessionDB, query: str,
                                                   expected: set[str]) -> None:
    db.create_session("s", "cli")
    for text in ["昨天和其他Agent的聊天记录，记忆断裂问题复现了", "达成100%完成率",
                 "达成100完成率是目标", "안녕하세요 반갑습니다", "こんにちは世界", "plain English"]:
        db.append_message("s", "user", text)
    hits = db.search_messages(query)
    assert {h["content"] for h in hits} == expected
    assert all(query.split()[0] in h["snippet"] for h in hits)


def test_a_file_without_the_trigram_index_gets_it_filled(db_path: Path, sql: Any,
                                                         write_sql: Any) -> None:
    with SessionDB(db_path) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "记忆断裂问题")
    write_sql(db_path, "DROP TABLE messages_fts_trigram;")
    with SessionDB(db_path) as db:
        assert [h["content"] for h in db.search_messages("记忆断裂")] == ["记忆断裂问题"]
    assert sql(db_path, "SELECT COUNT(*) FROM messages_fts_trigram") == [(1,)]


def test_optimize_and_rebuild_keep_every_hit(searchable: SessionDB) -> None:
    before = searchable.search_messages("brown")
    assert searchable.optimize_fts() == 2
    assert searchable.search_messages("brown") == before
    assert searchable.rebuild_fts() == 2
    assert searchable.search_messages("brown") == before


def test_rebuild_recovers_a_damaged_index(db: SessionDB, db_path: Path, write_sql: Any) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "the walrus speaks")
    assert db.search_messages("walrus")
    write_sql(db_path, "BEGIN; DELETE FROM messages_fts; DELETE FROM messages_fts_trigram; COMMIT;")
    assert db.search_messages("walrus") == []
    assert db.rebuild_fts() == 2
    assert [h["content"] for h in db.search_messages("walrus")] == ["the walrus speaks"]
    assert [h["content"] for h in db.search_messages("walrus speaks")] == ["the walrus speaks"]


def test_search_and_upkeep_on_a_closed_db_raise_clearly(db: SessionDB) -> None:
    db.close()
    with pytest.raises(DatabaseClosedError):
        db.optimize_fts()
    with pytest.raises(DatabaseClosedError):
        db.search_messages("x")
