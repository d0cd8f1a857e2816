"""The gateway's session books: origins, peers, expiry finalisation, gateway session lists."""

from __future__ import annotations

from hermes.state.face import AsyncFace, StoreFace


class GatewaySessions(StoreFace):
    pass


class AsyncGatewaySessions(AsyncFace):
    pass
