"""Deletion and upkeep: deleting, pruning and archiving sessions, vacuum, automatic maintenance."""

from __future__ import annotations

from hermes.state.face import AsyncFace, StoreFace


class Upkeep(StoreFace):
    pass


class AsyncUpkeep(AsyncFace):
    pass
