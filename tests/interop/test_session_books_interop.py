"""Titles, token accounting and compression bookkeeping shared with the real hermes-agent
0.19.0 through one ``state.db`` (issue [H], item 3): what one side writes, the other reads
and respects (unique titles, a held lock), both directions. hermes-agent runs in its own venv,
one subprocess per step (see ``test_hermes_agent_interop.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_hermes_agent_interop import PEER_PYTHON, SKIP_REASON, peer

from hermes.errors import TitleInUseError
from hermes.state import SessionDB

pytestmark = pytest.mark.skipif(PEER_PYTHON is None, reason=SKIP_REASON)


def calls(path: Path, session_id: str, home: Path, *steps: tuple[Any, ...]) -> dict[str, Any]:
    """hermes-agent's ``SessionDB`` methods called in order: ``(method, *args)`` or
    ``(method, args, kwargs)`` with a dict last."""
    request = []
    for method, *rest in steps:
        kwargs = rest.pop() if rest and isinstance(rest[-1], dict) else {}
        request.append([method, rest, kwargs])
    return peer("calls", path, session_id, home, calls=request)


def test_titles_usage_and_locks_we_write_are_read_and_respected_by_hermes_agent(
    tmp_path: Path, hermes_home: Path
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("root", "cli", model="m1")
        db.set_session_title("root", "fingerprint scanner")
        db.end_session("root", "compression")
        db.create_session("tip", "cli", parent_session_id="root")
        db.set_session_title("tip", "fingerprint scanner")  # moves off the hidden predecessor
        db.update_token_counts("tip", input_tokens=120, output_tokens=30, model="m1",
                               billing_provider="openrouter", estimated_cost_usd=0.5,
                               api_call_count=2)
        db.record_auxiliary_usage("tip", "vision", model="gemini", input_tokens=7)
        db.record_compression_failure_cooldown("tip", 4e9, "timeout")
        db.set_compression_fallback_streak("tip", 2)
        assert db.try_acquire_compression_lock("tip", "ours", ttl_seconds=600.0)

    theirs = calls(
        path, "tip", hermes_home,
        ("get_session_title", "root"),
        ("resolve_session_by_title", "fingerprint scanner"),
        ("get_next_title_in_lineage", "fingerprint scanner"),
        ("get_compression_tip", "root"),
        ("get_compression_lineage", "tip"),
        ("get_compression_failure_cooldown", "tip"),
        ("get_compression_fallback_streak", "tip"),
        ("get_compression_lock_holder", "tip"),
        ("try_acquire_compression_lock", "tip", "theirs"),
        ("get_session", "tip"),
        ("set_session_title", "root", "fingerprint scanner"),
    )
    results = [r.get("ok", r.get("error")) for r in theirs["results"]]
    assert results[:5] == [None, "tip", "fingerprint scanner #2", "tip", ["root", "tip"]]
    cooldown = results[5]
    assert cooldown["cooldown_until"] == 4e9 and cooldown["error"] == "timeout"
    assert results[6:9] == [2, "ours", False]
    session = results[9]
    assert (session["input_tokens"], session["output_tokens"], session["api_call_count"]) == (120, 30, 2)
    assert (session["model"], session["billing_provider"]) == ("m1", "openrouter")
    assert session["estimated_cost_usd"] == pytest.approx(0.5)
    assert results[10] == "ValueError"  # the title is ours, and unique for it too
    usage = {(u["model"], u["task"]): (u["api_call_count"], u["input_tokens"])
             for u in theirs["model_usage"]}
    assert usage == {("m1", ""): (2, 120), ("gemini", "vision"): (1, 7)}


def test_titles_usage_and_locks_hermes_agent_writes_are_read_and_respected_here(
    tmp_path: Path, hermes_home: Path
) -> None:
    path = tmp_path / "state.db"
    theirs = calls(
        path, "s1", hermes_home,
        ("create_session", "s1", "cli", {"model": "m1"}),
        ("set_session_title", "s1", "my project"),
        ("create_session", "s2", "cli"),
        ("set_session_title", "s2", "my project #2"),
        ("update_token_counts", "s1", {"input_tokens": 50, "output_tokens": 5,
                                       "model": "m1", "api_call_count": 1}),
        ("update_token_counts", "s1", {"input_tokens": 25, "model": "m2",
                                       "billing_provider": "p2", "api_call_count": 1}),
        ("try_acquire_compression_lock", "s1", "theirs", {"ttl_seconds": 600.0}),
        ("record_compression_failure_cooldown", "s1", 4e9, "rate limited"),
    )
    assert all("ok" in r for r in theirs["results"]), theirs["results"]

    with SessionDB(path) as db:
        assert db.get_session_title("s1") == "my project"
        assert db.resolve_session_by_title("my project") == "s2"
        assert db.get_next_title_in_lineage("my project") == "my project #3"
        with pytest.raises(TitleInUseError):
            db.set_session_title("s2", "my project")
        assert db.try_acquire_compression_lock("s1", "ours") is False
        assert db.get_compression_lock_holder("s1") == "theirs"
        cooldown = db.get_compression_failure_cooldown("s1")
        assert cooldown is not None and cooldown["error"] == "rate limited"
        session = db.get_session("s1")
        assert session is not None
        assert (session["input_tokens"], session["output_tokens"], session["api_call_count"]) == (75, 5, 2)
        # We go on counting into the rows hermes-agent made.
        db.update_token_counts("s1", input_tokens=5, model="m2", billing_provider="p2",
                               api_call_count=1)
        db.release_compression_lock("s1", "theirs")

    after = calls(path, "s1", hermes_home, ("get_compression_lock_holder", "s1"))
    assert after["results"] == [{"ok": None}]
    usage = {(u["model"], u["billing_provider"]): (u["api_call_count"], u["input_tokens"])
             for u in after["model_usage"]}
    assert usage == {("m1", ""): (1, 50), ("m2", "p2"): (2, 30)}
