"""The daemon worker pool agent turns run on."""

from __future__ import annotations

import threading
import time

from hermes.gateway.executor import DaemonThreadPool


def test_runs_work_on_bounded_daemon_threads() -> None:
    pool = DaemonThreadPool(max_workers=2)
    gate = threading.Event()
    names: list[str] = []

    def work(n: int) -> int:
        names.append(threading.current_thread().name)
        assert threading.current_thread().daemon
        gate.wait(5)
        return n * 2

    futures = [pool.submit(work, n) for n in range(4)]
    time.sleep(0.1)
    assert len(set(names)) == 2  # two threads busy, the rest waits
    gate.set()
    assert [f.result(5) for f in futures] == [0, 2, 4, 6]
    assert pool.submit(lambda: "reused").result(5) == "reused"
    pool.shutdown()


def test_exceptions_reach_the_caller_and_shutdown_cancels() -> None:
    pool = DaemonThreadPool(max_workers=1)
    failed = pool.submit(lambda: 1 / 0)
    assert isinstance(failed.exception(5), ZeroDivisionError)
    gate, running = threading.Event(), threading.Event()

    def block() -> bool:
        running.set()
        return gate.wait(5)

    blocker = pool.submit(block)
    assert running.wait(5)
    waiting = pool.submit(lambda: "never")
    pool.shutdown(wait=False, cancel_futures=True)
    assert waiting.cancelled()
    gate.set()
    assert blocker.result(5) is True
    try:
        pool.submit(lambda: None)
    except RuntimeError as exc:
        assert "shutting down" in str(exc)
    else:
        raise AssertionError("submit after shutdown must fail")
