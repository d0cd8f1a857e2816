"""Full-text search over messages."""

from __future__ import annotations

from typing import Any

from hermes.state.face import AsyncFace, StoreFace, check_page, offloaded


class Search(StoreFace):
    def search_messages(
        self,
        query: str,
        source: str | None = None,
        session_id: str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Full-text search (FTS5 syntax: words, ``"phrases"``, ``OR``, ``NOT``,
        ``prefix*``) over content, tool names and tool calls, best match first.

        Each hit is the message row plus ``source``, ``title`` and a
        ``snippet`` with the match between ``>>>`` and ``<<<``. A malformed
        query raises ValueError saying how to fix it.
        """
        check_page(limit, offset)
        if not query.strip():
            raise ValueError("search query is empty; pass words to look for")
        return self._store.search(query, source, session_id, limit, offset)


class AsyncSearch(AsyncFace):
    search_messages = offloaded(Search.search_messages)
