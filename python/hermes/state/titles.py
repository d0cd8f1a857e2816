"""Titles and lineage: unique titles, a compression chain's root, tip and numbered names."""

from __future__ import annotations

from hermes.state.face import AsyncFace, StoreFace


class Titles(StoreFace):
    pass


class AsyncTitles(AsyncFace):
    pass
