"""The agent cache rules: signature, coherence guard, LRU cap, idle sweep, re-baseline."""

from __future__ import annotations

import threading
import time

import pytest

from hermes.config import HermesConfig, ModelConfig
from hermes.gateway.agent_cache import AgentCache, CacheEntry, agent_signature


def _cache(capacity: int = 8, idle_ttl: float = 60.0) -> tuple[AgentCache, dict[str, CacheEntry]]:
    entries: dict[str, CacheEntry] = {}
    return AgentCache(entries, threading.Lock(), {}, {}, capacity=capacity,
                      idle_ttl=idle_ttl), entries


def test_signature_is_stable_and_hides_secrets() -> None:
    kwargs = {"model": "m", "api_key": "sk-secret", "base_url": "http://x",
              "config": HermesConfig(model=ModelConfig(name="m", api_key="sk-secret"))}
    assert agent_signature(kwargs) == agent_signature(dict(reversed(list(kwargs.items()))))
    assert "sk-secret" not in repr(agent_signature(kwargs))
    for change in ({"model": "n"}, {"api_key": "sk-other"}, {"base_url": "http://y"},
                   {"config": HermesConfig(model=ModelConfig(name="m", api_key="sk-new"))}):
        assert agent_signature({**kwargs, **change}) != agent_signature(kwargs)


def test_reuse_needs_same_signature_session_and_count() -> None:
    cache, _ = _cache()
    agent = object()
    cache.put("k", agent, "sig", 4, "s1", busy=())
    assert cache.checkout("k", "sig", "s1", 4) == (agent, [])
    assert cache.checkout("k", "sig", "s1", None) == (agent, [])  # unknown count: reuse
    assert cache.checkout("k", "sig", "s1", 5) == (None, [agent])  # another process wrote
    assert cache.checkout("k", "sig", "s1", 4) == (None, [])  # and it is gone


def test_rebaseline_absorbs_only_this_process_writes() -> None:
    cache, entries = _cache()
    agent = object()
    cache.put("k", agent, "sig", 4, "s1", busy=(), own=10)
    # The turn wrote 3 rows (own 10 -> 13) and the count moved by 3: re-baselined.
    assert cache.rebaseline("k", "s1", 7, own=13)
    assert entries["k"][2] == 7
    # The next turn wrote 2 rows, but the count moved by 3: another process wrote
    # during the turn, so the snapshot stays behind and the guard fires next time.
    assert not cache.rebaseline("k", "s1", 10, own=15)
    assert entries["k"][2] == 7
    assert cache.checkout("k", "sig", "s1", 10) == (None, [agent])


def test_rebaseline_without_own_counts_trusts_the_live_count() -> None:
    cache, entries = _cache()
    entries["k"] = (object(), "sig", 0)  # an entry made elsewhere, as the seeds do
    assert cache.rebaseline("k", "s1", 1, own=1)
    assert entries["k"][2] == 1


@pytest.mark.parametrize(("signature", "session_id"), [("other", "s1"), ("sig", "s2")])
def test_changed_settings_or_session_evict(signature: str, session_id: str) -> None:
    cache, _ = _cache()
    agent = object()
    cache.put("k", agent, "sig", 0, "s1", busy=())
    assert cache.checkout("k", signature, session_id, 0) == (None, [agent])


def test_three_tuple_entries_are_understood() -> None:
    cache, entries = _cache()
    agent = object()
    entries["k"] = (agent, "sig", 2)
    assert cache.checkout("k", "sig", "any", 2) == (agent, [])
    assert cache.rebaseline("k", "any", 3)
    assert entries["k"] == (agent, "sig", 3)


def test_rebaseline_leaves_other_sessions_alone() -> None:
    cache, entries = _cache()
    cache.put("k", "agent", "sig", 1, "s1", busy=())
    assert not cache.rebaseline("k", "s2", 9)
    assert not cache.rebaseline("missing", "s1", 9)
    assert cache.rebaseline("k", "s1", 5)
    assert entries["k"] == ("agent", "sig", 5, "s1")


def test_lru_cap_skips_busy_conversations() -> None:
    cache, entries = _cache(capacity=2)
    cache.put("a", "A", "sig", 0, "sa", busy=())
    cache.put("b", "B", "sig", 0, "sb", busy=())
    cache.checkout("a", "sig", "sa", 0)  # a is now the most recently used
    assert cache.put("c", "C", "sig", 0, "sc", busy=()) == ["B"]
    assert list(entries) == ["a", "c"]
    assert cache.put("d", "D", "sig", 0, "sd", busy={"a", "c"}) == []  # all busy: over the cap
    assert len(entries) == 3


def test_idle_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    cache, entries = _cache(idle_ttl=10)
    cache.put("old", "OLD", "sig", 0, "s1", busy=())
    cache.put("busy", "BUSY", "sig", 0, "s2", busy=())
    later = time.monotonic() + 11
    monkeypatch.setattr(time, "monotonic", lambda: later)
    cache.put("new", "NEW", "sig", 0, "s3", busy=())
    assert cache.sweep_idle(busy={"busy"}) == ["OLD"]
    assert set(entries) == {"busy", "new"}


def test_evict_only_the_given_agent_and_clear() -> None:
    cache, entries = _cache()
    cache.put("k", "A", "sig", 0, "s", busy=())
    assert cache.evict("k", "B") is None and "k" in entries
    assert cache.evict("k", "A") == "A" and not entries
    cache.put("k", "A", "sig", 0, "s", busy=())
    assert cache.evict("k") == "A"
    cache.put("x", "X", "sig", 0, "s", busy=())
    assert cache.clear() == ["X"] and not entries
