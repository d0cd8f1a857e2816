"""Which Telegram updates are done, kept on disk, so a restart answers each exactly once.

Telegram redelivers every update until ``getUpdates`` is called with an offset above it (or,
in webhook mode, until our HTTP answer is a 2xx). One offset confirms everything below it, so
an update can only be confirmed once it and every update before it are *done*: answered and
the answer sent, or deliberately ignored. Turns run concurrently across chats, so a finished
update often waits for a slower one below it; if the process dies then, Telegram sends it
again. The ledger remembers, on disk, the updates done but not yet confirmed (and the offset
that confirms the rest), so a redelivered update that was done is skipped rather than
answered twice.

The file is ``$HERMES_HOME/platforms/telegram/<bot id>.json``, replaced atomically and
fsync'd on every change (``save``) before the offset it names is ever sent to Telegram.
In webhook mode updates may arrive out of order, so no offset is derived there: the ledger
keeps the most recent ``WEBHOOK_MEMORY`` done ids instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from hermes.paths import hermes_home

logger = logging.getLogger(__name__)

#: Done update ids remembered in webhook mode (Telegram retries a delivery for hours, not for
#: thousands of updates).
WEBHOOK_MEMORY = 1024


def ledger_path(bot_id: int) -> Path:
    return hermes_home() / "platforms" / "telegram" / f"{bot_id}.json"


class UpdateLedger:
    """In-memory state of the update stream plus its durable copy.

    ``begin`` claims an update for handling (``False``: it is done or being handled already),
    ``finish`` marks it done, ``save`` makes the state durable; ``offset`` is the confirming
    offset as of the last save, the only one that may be sent to Telegram.
    """

    def __init__(self, path: Path, *, ordered: bool) -> None:
        self.path = path
        self._ordered = ordered  # polling: ids arrive in order, an offset can be derived
        self._in_flight: set[int] = set()
        self._abandoned: set[int] = set()  # given up unfinished: never confirmed by us
        self._done: dict[int, None] = {}  # insertion-ordered set
        self._next = 0  # the lowest id not known to be done (polling mode)
        self._version = 0
        self._saved_version = 0
        self._durable_offset = 0
        self._save_lock = asyncio.Lock()
        self._load()

    @property
    def offset(self) -> int:
        """The ``getUpdates`` offset that confirms exactly the updates durably done."""
        return self._durable_offset

    def begin(self, update_id: int) -> bool:
        if update_id in self._in_flight or update_id in self._done or (
                self._ordered and update_id < self._next):
            return False
        self._in_flight.add(update_id)
        return True

    def finish(self, update_id: int) -> None:
        self._in_flight.discard(update_id)
        self._done[update_id] = None
        self._advance()
        self._version += 1

    def forget(self, update_id: int) -> None:
        """Give up an update without finishing it (the gateway is stopping): Telegram sends
        it again to the next process."""
        self._in_flight.discard(update_id)
        self._abandoned.add(update_id)

    @property
    def busy(self) -> bool:
        return bool(self._in_flight)

    def _advance(self) -> None:
        if self._ordered:
            lowest_open = min(self._in_flight | self._abandoned, default=None)
            highest_done = max(self._done, default=self._next - 1)
            self._next = lowest_open if lowest_open is not None else max(
                self._next, highest_done + 1)
            self._done = {i: None for i in sorted(self._done) if i >= self._next}
        else:
            while len(self._done) > WEBHOOK_MEMORY:
                del self._done[next(iter(self._done))]

    async def save(self) -> None:
        """Write the state as it is now (or a later one) to disk, durably; returns once it is.
        A failed write is logged and retried by the next save: until then the offset stays
        where it was, so Telegram redelivers rather than loses."""
        wanted = self._version
        async with self._save_lock:
            if self._saved_version >= wanted:
                return
            version, offset, done = self._version, self._next, list(self._done)
            try:
                await asyncio.to_thread(_write_atomically, self.path,
                                        {"offset": offset, "done": done})
            except OSError as exc:
                logger.error("cannot record Telegram's answered updates in %s (%s); updates "
                             "already answered may be answered again after a restart",
                             self.path, exc.strerror or exc)
                return
            self._saved_version = version
            self._durable_offset = offset

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            offset = int(data.get("offset", 0))
            done = [int(i) for i in data.get("done", [])]
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            logger.warning("ignoring the unreadable Telegram ledger %s (%s); an update that "
                           "was answered just before the last stop may be answered again",
                           self.path, exc)
            return
        self._next = self._durable_offset = max(offset, 0) if self._ordered else 0
        self._done = dict.fromkeys(_newest(done, WEBHOOK_MEMORY))


def _newest(ids: Iterable[int], keep: int) -> list[int]:
    return sorted(set(ids))[-keep:]


def _write_atomically(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_suffix(".tmp")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
