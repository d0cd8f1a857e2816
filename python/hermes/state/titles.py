"""Titles and lineage: unique titles, a compression chain's root, tip and numbered names."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

from hermes._core import StateDbError, Update
from hermes.errors import InvalidTitleError, TitleInUseError
from hermes.state.face import AsyncFace, StoreFace, all_of, any_of, offloaded

if TYPE_CHECKING:
    from hermes._core import _Filter as Filter
from hermes.text import valid_text

# C0 controls but tab, newline and carriage return (whitespace, collapsed below), and DEL.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Invisible characters that reorder or hide text: zero-width marks, line/paragraph
# separators, bidirectional overrides and isolates, word joiners, the BOM, the object
# replacement and interlinear annotation marks.
_INVISIBLE = re.compile("[\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffc]")
_WHITESPACE = re.compile(r"\s+")
_NUMBERED = re.compile(r"^(.*?) #(\d+)$")
# A compression chain deeper than this is a cycle or damage, not a conversation.
_MAX_CHAIN = 100


def like_literal(text: str) -> str:
    """``text`` as a LIKE pattern that matches only itself (``%``, ``_`` and ``\\`` escaped)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class Titles(StoreFace):
    #: The longest title kept, in characters, once cleaned.
    MAX_TITLE_LENGTH: ClassVar[int] = 100

    @staticmethod
    def sanitize_title(title: str | None) -> str | None:
        """The title as it is stored: control and invisible characters removed, whitespace
        runs collapsed to one space, trimmed; None when nothing is left.

        Raises InvalidTitleError (a ValueError) when it is longer than MAX_TITLE_LENGTH.
        """
        if not title:
            return None
        cleaned = _INVISIBLE.sub("", _CONTROL.sub("", valid_text(title)))
        cleaned = _WHITESPACE.sub(" ", cleaned).strip()
        if not cleaned:
            return None
        if len(cleaned) > Titles.MAX_TITLE_LENGTH:
            raise InvalidTitleError(
                f"Title too long ({len(cleaned)} chars, max {Titles.MAX_TITLE_LENGTH}); "
                "shorten it"
            )
        return cleaned

    def set_session_title(self, session_id: str, title: str | None) -> bool:
        """Sets (an empty title: clears) the session's title; False if there is no session.

        Titles are unique: raises TitleInUseError (a ValueError) when another session has
        it, except a compression predecessor of this session, whose title moves here (it
        is hidden behind this continuation, so it could not be renamed to free the title).
        """
        return self._set_title(session_id, title, only_if_empty=False)

    def set_auto_title_if_empty(self, session_id: str, title: str | None) -> bool:
        """Sets a generated title only if the session has none (checked in the same
        transaction, so a rename made meanwhile wins); True if it was set."""
        return self._set_title(session_id, title, only_if_empty=True)

    def _set_title(self, session_id: str, title: str | None, *, only_if_empty: bool) -> bool:
        cleaned = self.sanitize_title(title)
        target: Filter = ("=", "id", session_id)
        if only_if_empty:
            target = all_of(target, ("is null", "title"))
        ops = [Update("sessions", target, {"title": cleaned})]
        if cleaned is not None:
            holder = self._title_holder(cleaned, session_id)
            if holder is not None:
                if not self._is_compression_ancestor(holder, session_id):
                    raise TitleInUseError(cleaned, session_id, holder)
                released = all_of(("=", "id", holder), ("=", "title", cleaned))
                ops.insert(0, Update("sessions", released, {"title": None}))
        try:
            changed = self._store.write(ops)
        except StateDbError:
            # Another writer took the title between the check and the write: the unique
            # index refused it, and nothing was written.
            holder = self._title_holder(cleaned, session_id) if cleaned else None
            if holder is None:
                raise
            raise TitleInUseError(cleaned or "", session_id, holder) from None
        return changed[-1] > 0

    def _title_holder(self, title: str, session_id: str) -> str | None:
        rows = self._store.query(
            "sessions",
            columns=["id"],
            where=all_of(("=", "title", title), ("!=", "id", session_id)),
            limit=1,
        )
        return str(rows[0]["id"]) if rows else None

    def _is_compression_ancestor(self, ancestor_id: str, session_id: str) -> bool:
        """Whether ``ancestor_id`` is reached from ``session_id`` by parent links whose
        parent ended by compression."""
        return ancestor_id in self._compression_ancestors(session_id)

    def _compression_ancestors(self, session_id: str) -> list[str]:
        """The compression predecessors of ``session_id``, nearest first."""
        chain: list[str] = []
        current = session_id
        for _ in range(_MAX_CHAIN):
            rows = self._store.query("sessions", columns=["parent_session_id"], where=("=", "id", current))
            parent = rows[0]["parent_session_id"] if rows else None
            if not parent or parent in chain or parent == session_id:
                break
            ended = self._store.query(
                "sessions",
                columns=["id"],
                where=all_of(("=", "id", parent), ("=", "end_reason", "compression")),
            )
            if not ended:
                break
            chain.append(parent)
            current = parent
        return chain

    def get_session_title(self, session_id: str) -> str | None:
        """The session's title (None without one, or without the session)."""
        rows = self._store.query("sessions", columns=["title"], where=("=", "id", session_id))
        return rows[0]["title"] if rows else None

    def get_session_by_title(self, title: str) -> dict[str, Any] | None:
        """The session row with exactly this title, or None."""
        rows = self._store.query("sessions", where=("=", "title", title), limit=1)
        return rows[0] if rows else None

    def resolve_session_by_title(self, title: str) -> str | None:
        """The id of the latest continuation of a title: the newest ``"<title> #N"``
        session if there is one, else the session titled exactly so, else None."""
        numbered = self._store.query(
            "sessions",
            columns=["id"],
            where=("like", "title", f"{like_literal(title)} #%"),
            order_by=["-started_at", "-id"],
            limit=1,
        )
        if numbered:
            return str(numbered[0]["id"])
        exact = self.get_session_by_title(title)
        return str(exact["id"]) if exact else None

    def get_next_title_in_lineage(self, base_title: str) -> str:
        """The title for the next continuation: ``"<base> #N"`` with N one above the highest
        taken (the unnumbered original counts as #1), or the base itself if it is free.
        A numbered ``base_title`` counts from its base."""
        numbered = _NUMBERED.match(base_title)
        base = numbered.group(1) if numbered else base_title
        lineage = any_of(("=", "title", base), ("like", "title", f"{like_literal(base)} #%"))
        taken = self._store.query("sessions", columns=["title"], where=lineage)
        if not taken:
            return base
        highest = 1
        for row in taken:
            number = _NUMBERED.match(row["title"])
            if number:
                highest = max(highest, int(number.group(2)))
        return f"{base} #{highest + 1}"


class AsyncTitles(AsyncFace):
    set_session_title = offloaded(Titles.set_session_title)
    set_auto_title_if_empty = offloaded(Titles.set_auto_title_if_empty)
    get_session_title = offloaded(Titles.get_session_title)
    get_session_by_title = offloaded(Titles.get_session_by_title)
    resolve_session_by_title = offloaded(Titles.resolve_session_by_title)
    get_next_title_in_lineage = offloaded(Titles.get_next_title_in_lineage)
