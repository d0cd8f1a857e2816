"""Export and import of sessions (one, a lineage, all) as JSON-ready dicts."""

from __future__ import annotations

from hermes.state.face import AsyncFace, StoreFace


class Export(StoreFace):
    pass


class AsyncExport(AsyncFace):
    pass
