"""SPEC §4: the identity-deduplicated flush, rule by rule, against a real ``state.db``."""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable

import pytest
from support.agents import assert_exact, contents

from hermes.agent import AIAgent
from hermes.state import SessionDB


def msg(text: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": text, **extra}


# -- the basics -------------------------------------------------------------------------


def test_flush_writes_new_dicts_in_order_and_creates_the_session(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db, "s1", platform="telegram")
    messages = [msg("q1"), msg("a1", "assistant"), msg("q2")]
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, ["q1", "a1", "q2"])
    session = db.get_session("s1")
    assert session is not None and session["source"] == "telegram"
    assert agent._session_db_created is True
    assert agent._last_flushed_db_idx == 3
    assert agent._flushed_db_message_session_id == "s1"


def test_flush_on_a_constructed_aiagent(db: SessionDB, hermes_home: Path) -> None:
    agent = AIAgent(session_id="built", session_db=db, platform="discord")
    agent._session_messages.extend([msg("hello"), msg("hi!", "assistant")])
    assert agent._flush_messages_to_session_db(agent._session_messages) is True
    assert agent._flush_messages_to_session_db(agent._session_messages) is True
    assert_exact(db, ["hello", "hi!"], "built")
    session = db.get_session("built")
    assert session is not None and session["source"] == "discord"


def test_return_values(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    messages = [msg("x")]
    assert agent_factory(None, "s1")._flush_messages_to_session_db(messages) is None
    disabled = agent_factory(db, "s1", _persist_disabled=True)
    assert disabled._flush_messages_to_session_db(messages) is None
    assert db.get_session("s1") is None
    agent = agent_factory(db, "s1")
    assert agent._flush_messages_to_session_db(messages) is True
    assert agent._flush_messages_to_session_db(messages) is True  # nothing new is still success
    assert agent._flush_messages_to_session_db([]) is True
    assert_exact(db, ["x"])


def test_flush_accepts_a_tuple_and_never_touches_the_list(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db)
    a, b = msg("a"), msg("b")
    assert agent._flush_messages_to_session_db((a, b)) is True
    messages = [a, b, msg("c")]
    snapshot = list(messages)
    assert agent._flush_messages_to_session_db(messages) is True
    assert messages == snapshot and all(x is y for x, y in zip(messages, snapshot))
    assert_exact(db, ["a", "b", "c"])


# -- rule 2: conversation_history -------------------------------------------------------------


def test_history_objects_are_skipped_now_and_later(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    db.create_session("s1", "cli")
    history = [msg("old q"), msg("old a", "assistant")]
    db.append_messages("s1", history)  # history was loaded from the database
    agent = agent_factory(db, "s1", _session_db_created=True)
    messages = list(history) + [msg("new q"), msg("new a", "assistant")]
    assert agent._flush_messages_to_session_db(messages, conversation_history=history) is True
    assert_exact(db, ["old q", "old a", "new q", "new a"])
    messages.append(msg("later"))
    assert agent._flush_messages_to_session_db(messages) is True  # no history this time
    assert agent._flush_messages_to_session_db(list(messages)) is True  # a copy
    assert_exact(db, ["old q", "old a", "new q", "new a", "later"])


def test_history_is_by_identity_not_equality(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    history = [msg("same")]
    agent = agent_factory(db)
    twin = dict(history[0])  # equal, but a different object: a new message
    assert agent._flush_messages_to_session_db(history + [twin], conversation_history=history) is True
    assert_exact(db, ["same"])


# -- rule 3: the one-shot seed ------------------------------------------------------------------


def seeded_agent(agent_factory: Callable[..., Any], db: SessionDB, persisted: list[dict[str, Any]], *,
                 seed_session: str | None = "s1", idx: int | None = None) -> Any:
    return agent_factory(db, "s1", _flushed_db_message_ids={id(m) for m in persisted},
                         _flushed_db_message_session_id=seed_session,
                         _last_flushed_db_idx=len(persisted) if idx is None else idx)


def test_seed_is_honoured_then_cleared(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    old = [msg("o1"), msg("o2", "assistant")]
    agent = seeded_agent(agent_factory, db, old)
    messages = old + [msg("n1")]
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, ["n1"])
    assert agent._flushed_db_message_ids == set()
    # the seeded objects stay known after the seed is gone, also through a copy
    messages.append(msg("n2"))
    assert agent._flush_messages_to_session_db(list(messages)) is True
    assert_exact(db, ["n1", "n2"])


@pytest.mark.parametrize("seed_session, idx", [("other", None), (None, None), ("s1", 0)],
                         ids=["other-session", "no-session", "idx-zero"])
def test_seed_is_ignored_unless_its_conditions_hold(db: SessionDB, agent_factory: Callable[..., Any],
                                                   seed_session: str | None, idx: int | None) -> None:
    old = [msg("o1"), msg("o2")]
    agent = seeded_agent(agent_factory, db, old, seed_session=seed_session, idx=idx)
    assert agent._flush_messages_to_session_db(old + [msg("n1")]) is True
    assert_exact(db, ["o1", "o2", "n1"])


def test_seed_ids_of_other_objects_do_not_hide_new_messages(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    unrelated = [msg("elsewhere")]
    agent = seeded_agent(agent_factory, db, unrelated)
    assert agent._flush_messages_to_session_db([msg("a"), msg("b")]) is True
    assert_exact(db, ["a", "b"])


# -- rule 1 and session changes ----------------------------------------------------------------


def test_repeated_flushes_write_once(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db)
    messages = [msg(f"m{i}") for i in range(10)]
    for _ in range(5):
        assert agent._flush_messages_to_session_db(messages) is True
    messages += [msg("m10"), msg("m11")]
    for _ in range(5):
        assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, [f"m{i}" for i in range(12)])


def test_eight_threads_flushing_at_once_write_once(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db)
    messages = [msg(f"m{i}") for i in range(200)]
    barrier = threading.Barrier(8)
    results: list[Any] = []

    def exit_path() -> None:
        barrier.wait()
        for _ in range(5):
            results.append(agent._flush_messages_to_session_db(messages))

    threads = [threading.Thread(target=exit_path) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == [True] * 40
    assert_exact(db, [f"m{i}" for i in range(200)])


def test_flushes_racing_a_growing_list_write_each_message_once(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db)
    messages: list[dict[str, Any]] = []
    stop = threading.Event()
    results: list[Any] = []

    def flusher() -> None:
        while not stop.is_set():
            results.append(agent._flush_messages_to_session_db(messages))

    threads = [threading.Thread(target=flusher) for _ in range(8)]
    for t in threads:
        t.start()
    for i in range(300):
        messages.append(msg(f"m{i}"))
        if i % 50 == 0:
            threading.Event().wait(0.005)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert agent._flush_messages_to_session_db(messages) is True
    assert set(results) <= {True}
    assert_exact(db, [f"m{i}" for i in range(300)])


def test_session_change_resets_tracking(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db, "s1")
    messages = [msg("a"), msg("b")]
    assert agent._flush_messages_to_session_db(messages) is True
    # what compaction / a session split does: new id, its row created by the caller
    db.create_session("s2", "cli", parent_session_id="s1")
    agent.session_id = "s2"
    messages.append(msg("c"))
    assert agent._flush_messages_to_session_db(messages) is True
    assert agent._db_flush_tracker.session_id == "s2"
    assert_exact(db, ["a", "b"], "s1")
    assert_exact(db, ["a", "b", "c"], "s2")
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, ["a", "b", "c"], "s2")
    # and back: s1 gets what it had not seen, once
    agent.session_id = "s1"
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, ["a", "b", "a", "b", "c"], "s1")


def test_session_change_creates_the_new_session_row(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db, "s1")
    messages = [msg("a")]
    assert agent._flush_messages_to_session_db(messages) is True
    agent.session_id = "s2"
    messages.append(msg("b"))
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, ["a", "b"], "s2")


# -- list replacement ------------------------------------------------------------------------


def test_compaction_list_replacement(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db)
    messages = [msg(f"m{i}") for i in range(10)]
    assert agent._flush_messages_to_session_db(messages) is True
    compacted = [msg("summary of m0-m5", "system")] + messages[6:] + [msg("n1"), msg("n2")]
    agent._session_messages = compacted
    assert agent._flush_messages_to_session_db(compacted) is True
    expected = [f"m{i}" for i in range(10)] + ["summary of m0-m5", "n1", "n2"]
    assert_exact(db, expected)
    copied = list(compacted) + [msg("n3")]
    assert agent._flush_messages_to_session_db(copied) is True
    assert agent._flush_messages_to_session_db(copied[:]) is True
    assert_exact(db, expected + ["n3"])


def test_in_place_edits_of_the_live_list(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db)
    messages = [msg(f"m{i}") for i in range(6)]
    assert agent._flush_messages_to_session_db(messages) is True
    messages.insert(0, msg("head"))        # a new dict before known ones
    messages[3] = msg("replaced")          # one replaced in place (m2 leaves the list)
    del messages[4]                        # m3 removed
    messages.append(msg("tail"))
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, [f"m{i}" for i in range(6)] + ["head", "replaced", "tail"])
    messages[:] = messages[:3]             # truncated in place ...
    messages += [msg("after-truncation")]  # ... then grown again
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, [f"m{i}" for i in range(6)] + ["head", "replaced", "tail", "after-truncation"])


@pytest.mark.parametrize("position", [0, 1, 63, 64, 65, 127, 128, 250, 298, 299])
def test_a_dict_replaced_anywhere_in_a_long_list_is_written(
        db: SessionDB, agent_factory: Callable[..., Any], position: int) -> None:
    # The unchanged part of the list is compared in blocks of 64 pointers:
    # a replacement at any place, block edges included, must be seen.
    agent = agent_factory(db)
    messages = [msg(f"m{i}") for i in range(300)]
    assert agent._flush_messages_to_session_db(messages) is True
    messages[position] = msg("replaced")
    assert agent._flush_messages_to_session_db(messages) is True
    messages.append(msg("after"))
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, [f"m{i}" for i in range(300)] + ["replaced", "after"])


def test_duplicate_references_in_one_list_write_once(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db)
    m = msg("twice")
    assert agent._flush_messages_to_session_db([m, msg("x"), m]) is True
    assert_exact(db, ["twice", "x"])


def test_freed_addresses_reused_by_new_dicts_are_written(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db)
    flushed_ids: set[int] = set()
    reused = 0
    expected: list[str] = []
    # More dicts than the tracker keeps recognised after release (1,024), so that
    # released addresses really are handed out again.
    for round_ in range(400):
        messages = [msg(f"r{round_}-{j}") for j in range(4)]
        reused += len({id(m) for m in messages} & flushed_ids)
        flushed_ids |= {id(m) for m in messages}
        expected += [f"r{round_}-{j}" for j in range(4)]
        assert agent._flush_messages_to_session_db(messages) is True
        del messages

    assert reused > 0, "CPython never reused an address: the scenario was not exercised"
    assert_exact(db, expected)


def test_popped_message_address_cannot_hide_its_successor(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db)
    messages = [msg("q"), msg("draft", "assistant")]
    expected = ["q", "draft"]
    for i in range(100):
        assert agent._flush_messages_to_session_db(messages) is True
        messages.pop()

        messages.append(msg(f"v{i}", "assistant"))  # very likely at the popped dict's old address
        expected.append(f"v{i}")
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, expected)


def test_tracker_does_not_grow_when_the_list_is_replaced(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db)
    messages = [msg(f"m{i}") for i in range(1000)]
    assert agent._flush_messages_to_session_db(messages) is True
    assert len(agent._db_flush_tracker) == 1000
    short = messages[-3:] + [msg("n1"), msg("n2")]
    del messages
    assert agent._flush_messages_to_session_db(short) is True
    assert len(agent._db_flush_tracker) <= len(short)
    for i in range(20):
        short = short[-2:] + [msg(f"x{i}")]
        assert agent._flush_messages_to_session_db(short) is True
        assert len(agent._db_flush_tracker) <= 3
    session = db.get_session("s1")
    assert session is not None and session["message_count"] == 1000 + 2 + 20


# -- what is never written, and what is never touched --------------------------------------------


def test_caller_dicts_are_never_modified(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db, "s1")
    history = [msg("h")]
    messages = history + [
        msg("plain"),
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}],
         "reasoning_details": [{"x": 1}], "timestamp": 12.5},
        {"role": "tool", "content": [{"type": "text", "text": "parts"}], "tool_call_id": "c1",
         "name": "t"},
        {"role": "assistant", "content": "scaffold", "_ephemeral": True},
        {"role": "user", "content": "\ud800 surrogate"},
    ]
    before = copy.deepcopy(messages)
    keys = [list(m) for m in messages]
    inner = [m.get("tool_calls") for m in messages]
    assert agent._flush_messages_to_session_db(messages, conversation_history=history) is True
    assert agent._flush_messages_to_session_db(messages) is True
    assert messages == before
    assert [list(m) for m in messages] == keys
    assert all(a is b for a, b in zip(inner, (m.get("tool_calls") for m in messages)))
    stored = contents(db)
    assert stored[:3] == ["plain", None, [{"type": "text", "text": "parts"}]]
    assert len(stored) == 4 and stored[3].endswith(" surrogate") and "\ud800" not in stored[3]


def test_non_dict_items_are_skipped(db: SessionDB, agent_factory: Callable[..., Any]) -> None:
    agent = agent_factory(db)
    messages: list[Any] = [
        None, "a string", 42, ("role", "user"), ["role", "user"],
        MappingProxyType({"role": "user", "content": "proxy"}),
        msg("real"), OrderedDict(role="user", content="ordered"),
    ]
    assert agent._flush_messages_to_session_db(messages) is True
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, ["real", "ordered"])


@pytest.mark.parametrize("flag", ["_ephemeral", "_empty_recovery_synthetic", "_empty_terminal_sentinel"])
def test_scaffolding_is_never_written(db: SessionDB, agent_factory: Callable[..., Any], flag: str) -> None:
    agent = agent_factory(db)
    messages = [msg("q"), {"role": "assistant", "content": "(empty, retrying)", flag: True},
                msg("kept", "assistant", **{flag: False})]
    assert agent._flush_messages_to_session_db(messages) is True
    assert agent._flush_messages_to_session_db(list(messages)) is True
    messages.append(msg("next"))
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, ["q", "kept", "next"])
    assert agent._drop_trailing_empty_response_scaffolding([msg("a"), {"content": "", flag: True}]) == 1


def test_group_commit_fifty_agents_in_threads(tmp_path: Path, hermes_home: Path, agent_factory: Callable[..., Any]) -> None:
    """A gateway's shape: 50 conversations flushing at once through one SessionDB.
    One of them has no session row and fails alone."""
    db = SessionDB(tmp_path / "state.db")
    agents = [agent_factory(db, f"conv-{i}", platform="gateway") for i in range(50)]
    broken = agent_factory(db, "missing-row", _session_db_created=True)
    barrier = threading.Barrier(51)
    results: dict[str, list[Any]] = {}

    def run(agent: Any) -> None:
        messages: list[dict[str, Any]] = []
        out = results.setdefault(agent.session_id, [])
        barrier.wait()
        # the broken one stops before repeated failure would spool (and heal) it
        for turn in range(1 if agent is broken else 8):
            messages += [msg(f"{agent.session_id}:{turn}:q"), msg(f"{agent.session_id}:{turn}:a", "assistant")]
            out.append(agent._flush_messages_to_session_db(messages))
            out.append(agent._flush_messages_to_session_db(messages))

    threads = [threading.Thread(target=run, args=(a,)) for a in agents + [broken]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for agent in agents:
        assert results[agent.session_id] == [True] * 16
        assert_exact(db, [f"{agent.session_id}:{t}:{k}" for t in range(8) for k in "qa"], agent.session_id)
    assert results["missing-row"] == [False] * 2
    assert db.get_session("missing-row") is None
    db.close()
