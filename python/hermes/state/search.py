"""Full-text search over messages, and upkeep of the search indexes."""

from __future__ import annotations

from typing import Any

from hermes.state.face import AsyncFace, StoreFace, check_page, offloaded
from hermes.state.messages import message_text

#: How much of a neighbouring message a hit's ``context`` shows.
_CONTEXT_CHARS = 200

#: Columns of the store's hits that become the ``context`` list.
_NEIGHBOUR_COLUMNS = ("before_id", "after_id", "before_role", "before_content",
                      "after_role", "after_content", "hit_rank")


def _preview(content: Any) -> str:
    """A message's content as plain text, for a hit's context."""
    return message_text(content)[:_CONTEXT_CHARS]


def _with_context(hit: dict[str, Any]) -> dict[str, Any]:
    """The hit with ``context``: the messages before it, itself and after it in its session."""
    context = []
    if hit["before_id"] is not None:
        context.append({"role": hit["before_role"], "content": _preview(hit["before_content"])})
    context.append({"role": hit["role"], "content": _preview(hit["content"])})
    if hit["after_id"] is not None:
        context.append({"role": hit["after_role"], "content": _preview(hit["after_content"])})
    for column in _NEIGHBOUR_COLUMNS:
        del hit[column]
    hit["context"] = context
    return hit


class Search(StoreFace):
    def search_messages(
        self,
        query: str,
        source_filter: list[str] | None = None,
        exclude_sources: list[str] | None = None,
        role_filter: list[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        sort: str | None = None,
        include_inactive: bool = False,
        *,
        session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Messages matching ``query``, best match first (``sort="newest"`` or ``"oldest"``:
        by time), over content, tool names and tool calls.

        Any text runs: words (all must match), ``"exact phrases"``, ``OR``, ``NOT``, ``AND``
        between terms, ``prefix*``; other punctuation separates words (``chat-send`` finds
        the phrase "chat send"). Chinese, Japanese and Korean text is found by substring.
        Filters: sessions of ``source_filter``, not of ``exclude_sources``, messages of
        ``role_filter``, of one ``session_id``. Rewound rows are left out unless
        ``include_inactive``; compaction-archived rows are found.

        Each hit has the message's ``id``, ``session_id``, ``role``, ``content``,
        ``timestamp``, ``tool_name``, its session's ``source``, ``model``, ``title`` and
        ``session_started``, a ``snippet`` with the match between ``>>>`` and ``<<<``, and
        ``context``: the messages before and after it in its session, and itself, as
        ``{"role", "content"}`` (the first 200 characters).
        """
        check_page(limit, offset)
        hits = self._store.search(
            query, sources=source_filter, exclude_sources=exclude_sources, roles=role_filter,
            session_id=session_id, sort=sort, include_inactive=include_inactive, limit=limit,
            offset=offset)
        return [_with_context(hit) for hit in hits]

    def optimize_fts(self) -> int:
        """Merges each search index into one segment (smaller, faster, same results);
        returns how many indexes there are."""
        return self._store.search_index_upkeep("optimize")

    def rebuild_fts(self) -> int:
        """Indexes every message afresh from the messages themselves (the recovery for a
        damaged search index); returns how many indexes were rebuilt."""
        return self._store.search_index_upkeep("rebuild")


class AsyncSearch(AsyncFace):
    search_messages = offloaded(Search.search_messages)
    optimize_fts = offloaded(Search.optimize_fts)
    rebuild_fts = offloaded(Search.rebuild_fts)
