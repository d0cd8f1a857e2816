"""Titles and lineage: unique titles, a compression chain's root, tip and numbered names."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, ClassVar

from hermes._core import StateDbError, Update
from hermes.errors import InvalidTitleError, TitleInUseError
from hermes.state.face import MAX_LINEAGE, AsyncFace, StoreFace, all_of, any_of, offloaded
from hermes.state.listing import like_escape
from hermes.text import valid_text

if TYPE_CHECKING:
    from hermes._core import _Filter as Filter

# C0 controls but tab, newline and carriage return (whitespace, collapsed below), and DEL.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Invisible characters that reorder or hide text: zero-width marks, line/paragraph
# separators, bidirectional overrides and isolates, word joiners, the BOM, the object
# replacement and interlinear annotation marks.
_INVISIBLE = re.compile("[\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffc]")
_WHITESPACE = re.compile(r"\s+")
_NUMBERED = re.compile(r"^(.*?) #(\d+)$")
# How far a resume follows the newest children looking for the latest messages.
_MAX_RESUME_WALK = 32
# What a continuation candidate is ranked by.
_CHILD_COLUMNS = [
    "id",
    "source",
    "model_config",
    "end_reason",
    "ended_at",
    "started_at",
    "last_active",
]


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
                f"Title too long ({len(cleaned)} chars, max {Titles.MAX_TITLE_LENGTH}); shorten it"
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
        for _ in range(MAX_LINEAGE):
            rows = self._store.query(
                "sessions", columns=["parent_session_id"], where=("=", "id", current)
            )
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
            where=("like", "title", f"{like_escape(title)} #%"),
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
        lineage = any_of(("=", "title", base), ("like", "title", f"{like_escape(base)} #%"))
        taken = self._store.query("sessions", columns=["title"], where=lineage)
        if not taken:
            return base
        highest = 1
        for row in taken:
            number = _NUMBERED.match(row["title"])
            if number:
                highest = max(highest, int(number.group(2)))
        return f"{base} #{highest + 1}"

    def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        """The id itself if there is such a session, else the one session whose id starts
        with it; None when none does or several do."""
        if self._store.count("sessions", ("=", "id", session_id_or_prefix)):
            return session_id_or_prefix
        rows = self._store.query(
            "sessions",
            columns=["id"],
            where=("like", "id", f"{like_escape(session_id_or_prefix)}%"),
            order_by=["-started_at"],
            limit=2,
        )
        return str(rows[0]["id"]) if len(rows) == 1 else None

    def get_compression_tip(self, session_id: str) -> str | None:
        """The latest continuation of the session's compression chain: from each session
        ended by compression, to its child that continues it (not a branch, a subagent or a
        tool run; one itself compressed or still live before a closed one, then the most
        recently active). The id itself when nothing continues it."""
        current = session_id
        seen = {current}
        for _ in range(MAX_LINEAGE):
            if not self._store.count(
                "sessions", all_of(("=", "id", current), ("=", "end_reason", "compression"))
            ):
                return current
            children = self._store.query(
                "sessions", columns=_CHILD_COLUMNS, where=("=", "parent_session_id", current)
            )
            continuing = [c for c in children if not _is_side_child(c)]
            if not continuing:
                return current
            # Stable sorts: the last key is the first one.
            continuing.sort(key=lambda c: str(c["id"]), reverse=True)
            continuing.sort(
                key=lambda c: (_continuation_rank(c), -c["last_active"], -c["started_at"])
            )
            tip = str(continuing[0]["id"])
            if tip in seen:
                return current
            seen.add(tip)
            current = tip
        return current

    def get_compression_lineage(self, session_id: str) -> list[str]:
        """The ids of the session's compression chain, oldest first, from its first
        predecessor to the continuation after it (through every later one while they were
        compressed). ``[session_id]`` for a session outside any chain (a branch, say), ``[]``
        when there is no such session."""
        session = self._store.get_session(session_id)
        if session is None:
            return []
        if _is_branch(session):
            return [session_id]
        root = session
        ancestors = {root["id"]}
        while (parent := self._compression_parent(root)) is not None and parent[
            "id"
        ] not in ancestors:
            root = parent
            ancestors.add(root["id"])
        lineage = [str(root["id"])]
        current = root
        while current.get("end_reason") == "compression":
            children = self._store.query(
                "sessions", where=("=", "parent_session_id", current["id"]), order_by=["started_at"]
            )
            following = next((c for c in children if not _is_branch(c)), None)
            if following is None or following["id"] in lineage:
                break
            lineage.append(str(following["id"]))
            current = following
        return lineage if session_id in lineage else [session_id]

    def get_conversation_root(self, session_id: str) -> str:
        """The first session up the session's parent links (compression predecessors and
        the sessions that spawned subagents alike): the conversation's one stable id. The id
        itself when it has no parent."""
        return self._parent_chain(session_id)[0]

    def resolve_resume_session_id(self, session_id: str) -> str:
        """The session a resume of ``session_id`` should load: from the tip of its
        compression chain, down the newest children (not branches, subagents or tool runs),
        the last one holding messages; the id itself if none of them has any."""
        if not session_id:
            return session_id
        start = self.get_compression_tip(session_id) or session_id
        current, holding = start, None
        seen = {current}
        for _ in range(_MAX_RESUME_WALK):
            if self._store.query(
                "messages", columns=["id"], where=("=", "session_id", current), limit=1
            ):
                holding = current
            children = self._store.query(
                "sessions",
                columns=["id", "source", "model_config"],
                where=("=", "parent_session_id", current),
                order_by=["-started_at", "-id"],
            )
            child = next((c for c in children if not _is_side_child(c)), None)
            if child is None or child["id"] in seen:
                break
            current = str(child["id"])
            seen.add(current)
        return holding if holding is not None else start

    def _compression_parent(self, session: dict[str, Any]) -> dict[str, Any] | None:
        """The session's parent if it continues it after a compression (a branch does not)."""
        parent_id = session.get("parent_session_id")
        if not parent_id or _is_branch(session):
            return None
        parent = self._store.get_session(parent_id)
        return parent if parent is not None and parent.get("end_reason") == "compression" else None


def _model_config(row: dict[str, Any]) -> dict[str, Any]:
    raw = row.get("model_config")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def _is_branch(row: dict[str, Any]) -> bool:
    """A ``/branch`` copy of its parent, not a continuation."""
    return _model_config(row).get("_branched_from") is not None


def _is_side_child(row: dict[str, Any]) -> bool:
    """A child that does not continue its parent's conversation: a branch, a subagent
    (``_delegate_from``) or a tool's own session."""
    config = _model_config(row)
    return (
        config.get("_branched_from") is not None
        or config.get("_delegate_from") is not None
        or row.get("source") == "tool"
    )


def _continuation_rank(row: dict[str, Any]) -> int:
    """Compressed itself first (the chain goes on), then live, then closed otherwise."""
    if row.get("end_reason") == "compression":
        return 0
    return 1 if row.get("ended_at") is None else 2


class AsyncTitles(AsyncFace):
    set_session_title = offloaded(Titles.set_session_title)
    set_auto_title_if_empty = offloaded(Titles.set_auto_title_if_empty)
    get_session_title = offloaded(Titles.get_session_title)
    get_session_by_title = offloaded(Titles.get_session_by_title)
    resolve_session_by_title = offloaded(Titles.resolve_session_by_title)
    get_next_title_in_lineage = offloaded(Titles.get_next_title_in_lineage)
    resolve_session_id = offloaded(Titles.resolve_session_id)
    get_compression_tip = offloaded(Titles.get_compression_tip)
    get_compression_lineage = offloaded(Titles.get_compression_lineage)
    get_conversation_root = offloaded(Titles.get_conversation_root)
    resolve_resume_session_id = offloaded(Titles.resolve_resume_session_id)
