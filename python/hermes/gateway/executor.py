"""The worker threads agent turns run on: daemon threads, so a stuck tool cannot pin the process.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits. An
agent blocked in a tool that ignores interrupts would then keep a stopped gateway alive
forever, after shutdown already gave it a bounded grace window and saved its transcript.
This pool's threads are daemons: once ``stop()`` is done, the process exits regardless.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

_T = TypeVar("_T")
_WorkItem = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreadPool(Executor):
    """A bounded pool that starts threads on demand, up to ``max_workers``."""

    def __init__(self, max_workers: int, name: str = "hermes-turn") -> None:
        self._max_workers = max_workers
        self._name = name
        self._work: queue.SimpleQueue[_WorkItem | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._shutdown = False

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        future: Future[_T] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot run new work: the gateway is shutting down")
            self._work.put((future, fn, args, kwargs))
            if self._idle:
                self._idle -= 1  # an idle thread will take it
            elif len(self._threads) < self._max_workers:
                thread = threading.Thread(target=self._serve, daemon=True,
                                          name=f"{self._name}-{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
        return future

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # the caller awaits it and decides
                    future.set_exception(exc)
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop accepting work; idle threads exit. Busy ones are only joined if ``wait``."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        while cancel_futures:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                thread.join()
