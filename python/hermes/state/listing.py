"""Listings and counts: rich session pages with previews, cwd and cron-run lists, id search."""

from __future__ import annotations

from hermes.state.face import AsyncFace, StoreFace


class Listing(StoreFace):
    pass


class AsyncListing(AsyncFace):
    pass
