"""Handoffs: a session passed from one platform or agent to another, and its state."""

from __future__ import annotations

from hermes.state.face import AsyncFace, StoreFace


class Handoffs(StoreFace):
    pass


class AsyncHandoffs(AsyncFace):
    pass
