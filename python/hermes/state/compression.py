"""Compression bookkeeping: failure cooldowns, the fallback streak, compression locks."""

from __future__ import annotations

from hermes.state.face import AsyncFace, StoreFace


class CompressionBooks(StoreFace):
    pass


class AsyncCompressionBooks(AsyncFace):
    pass
