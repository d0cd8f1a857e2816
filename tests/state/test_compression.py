"""Compression bookkeeping (``hermes/state/compression.py``) on a real ``state.db``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes.errors import SessionNotFoundError
from hermes.state import AsyncSessionDB, SessionDB


class Clock:
    """``time.time`` under the test's control (the store takes ``now`` from it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, now: float) -> None:
        self.now = now
        monkeypatch.setattr(time, "time", lambda: self.now)


def test_a_cooldown_runs_until_its_end_and_can_be_cleared(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    db.create_session("s1", "cli")
    clock = Clock(monkeypatch, 1000.0)
    db.record_compression_failure_cooldown("s1", 1060.0, "timeout")
    clock.now = 1015.0
    assert db.get_compression_failure_cooldown("s1") == {
        "cooldown_until": 1060.0, "remaining_seconds": 45.0, "error": "timeout"}
    clock.now = 1060.0
    assert db.get_compression_failure_cooldown("s1") is None
    db.record_compression_failure_cooldown("s1", 2000.0)
    db.clear_compression_failure_cooldown("s1")
    assert db.get_compression_failure_cooldown("s1") is None
    row = db.get_session("s1")
    assert row is not None and row["compression_failure_cooldown_until"] is None


def test_the_fallback_streak_is_never_negative(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    assert db.get_compression_fallback_streak("s1") == 0
    db.set_compression_fallback_streak("s1", 3)
    assert db.get_compression_fallback_streak("s1") == 3
    db.set_compression_fallback_streak("s1", -2)
    assert db.get_compression_fallback_streak("s1") == 0


def test_books_of_a_missing_session_read_empty_and_refuse_writes(db: SessionDB) -> None:
    assert db.get_compression_failure_cooldown("ghost") is None
    assert db.get_compression_fallback_streak("ghost") == 0
    for write in (lambda: db.record_compression_failure_cooldown("ghost", 1e12, "x"),
                  lambda: db.clear_compression_failure_cooldown("ghost"),
                  lambda: db.set_compression_fallback_streak("ghost", 1)):
        with pytest.raises(SessionNotFoundError, match="'ghost'"):
            write()
    assert db.get_session("ghost") is None


def test_a_lock_has_one_holder_until_released_or_expired(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch, 1000.0)
    assert db.try_acquire_compression_lock("s1", "a", ttl_seconds=10.0) is True
    assert db.try_acquire_compression_lock("s1", "a", ttl_seconds=10.0) is True  # still its own
    assert db.try_acquire_compression_lock("s1", "b", ttl_seconds=10.0) is False
    assert db.get_compression_lock_holder("s1") == "a"
    db.release_compression_lock("s1", "b")  # not b's to release
    assert db.get_compression_lock_holder("s1") == "a"
    clock.now = 1005.0
    assert db.refresh_compression_lock("s1", "a", ttl_seconds=10.0) is True  # now until 1015
    assert db.refresh_compression_lock("s1", "b", ttl_seconds=10.0) is False
    clock.now = 1012.0
    assert db.try_acquire_compression_lock("s1", "b") is False
    clock.now = 1016.0
    assert db.get_compression_lock_holder("s1") is None
    assert db.refresh_compression_lock("s1", "a") is False  # a lapsed lease is not renewed
    assert db.try_acquire_compression_lock("s1", "b", ttl_seconds=10.0) is True
    db.release_compression_lock("s1", "b")
    assert db.get_compression_lock_holder("s1") is None
    assert db.try_acquire_compression_lock("", "a") is False


_TAKE_LOCK = """
import sys
from hermes.state import SessionDB
db = SessionDB(sys.argv[1])
print(db.try_acquire_compression_lock("s1", sys.argv[2], ttl_seconds=60.0))
db.close()
"""


def test_a_lock_taken_by_another_process_is_refused_here(db: SessionDB, db_path: Path) -> None:
    def other(holder: str) -> str:
        return subprocess.run([sys.executable, "-c", _TAKE_LOCK, str(db_path), holder],
                              capture_output=True, text=True, check=True).stdout.strip()

    assert other("process-a") == "True"
    assert db.try_acquire_compression_lock("s1", "here") is False
    assert db.get_compression_lock_holder("s1") == "process-a"
    db.release_compression_lock("s1", "process-a")
    assert db.try_acquire_compression_lock("s1", "here") is True
    assert other("process-b") == "False"


def test_the_books_run_as_coroutines(db: SessionDB) -> None:
    adb = AsyncSessionDB(db)

    async def scenario() -> None:
        db.create_session("s1", "cli")
        assert await adb.try_acquire_compression_lock("s1", "a") is True
        assert await adb.get_compression_lock_holder("s1") == "a"
        await adb.release_compression_lock("s1", "a")
        await adb.set_compression_fallback_streak("s1", 1)
        assert await adb.get_compression_fallback_streak("s1") == 1

    asyncio.run(scenario())
