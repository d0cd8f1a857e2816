"""The GIL is released while a flush writes: other Python threads keep running."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

from hermes.state import SessionDB


def spin_rate(seconds: float) -> float:
    """Increments per second of the counter loop below, running alone."""
    count = 0
    stop = threading.Event()

    def counter() -> None:
        nonlocal count
        while not stop.is_set():
            count += 1

    t = threading.Thread(target=counter)
    start = time.perf_counter()
    t.start()
    time.sleep(seconds)
    stop.set()
    t.join()
    return count / (time.perf_counter() - start)


def test_python_thread_keeps_running_during_a_100k_message_flush(
        tmp_path: Path, hermes_home: Path, agent_factory: Callable[..., Any]) -> None:
    db = SessionDB(tmp_path / "state.db", synchronous="NORMAL")
    agent = agent_factory(db)
    messages = [{"role": "user" if i % 2 else "assistant", "content": f"message {i}"}
                for i in range(100_000)]
    alone = spin_rate(0.2)

    count = 0
    stop = threading.Event()
    inside = threading.Event()
    during: list[int] = []

    def counter() -> None:
        nonlocal count
        while not stop.is_set():
            count += 1

    def flush() -> None:
        inside.set()
        during.append(count)
        result = agent._flush_messages_to_session_db(messages)
        during.append(count)
        assert result is True

    spinner = threading.Thread(target=counter)
    spinner.start()
    try:
        start = time.perf_counter()
        flusher = threading.Thread(target=flush)
        flusher.start()
        flusher.join(timeout=120)
        elapsed = time.perf_counter() - start
    finally:
        stop.set()
        spinner.join()
    assert inside.is_set() and len(during) == 2
    advanced = during[1] - during[0]
    # With the GIL held for the whole flush the counter could only move at the
    # interpreter's switch points before/after the call; released for the SQL
    # it runs at (a fair share of) full speed for most of the flush. The bar is
    # low (a twentieth of its speed alone) so that other processes taking the
    # cores meanwhile do not fail it; a held GIL leaves the counter near zero.
    assert advanced > 0.05 * alone * elapsed, (
        f"counter advanced {advanced} in {elapsed:.2f}s; alone it does {alone:.0f}/s")
    session = db.get_session("s1")
    assert session is not None and session["message_count"] == 100_000
    assert len(agent._db_flush_tracker) == 100_000
    # the no-op re-flush of the same list writes nothing
    assert agent._flush_messages_to_session_db(messages) is True
    assert db.live_message_count("s1") == 100_000
    db.close()
