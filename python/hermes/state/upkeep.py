"""Deletion and upkeep: deleting, pruning and archiving sessions, vacuum, automatic maintenance."""

from __future__ import annotations

import glob
import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes._core import Delete, Select, Update
from hermes.state.face import AsyncFace, StoreFace, offloaded
from hermes.state.listing import cwd_prefix_filter, like_escape

if TYPE_CHECKING:
    from hermes._core import _Filter

logger = logging.getLogger(__name__)

#: SQLite binds at most 32766 values in one statement; a bulk delete names its sessions in
#: chunks of this many, all in the same transaction.
_IDS_PER_STATEMENT = 10_000

#: The ``state_meta`` key holding when automatic maintenance last ran.
LAST_AUTO_PRUNE_KEY = "last_auto_prune"

#: The columns :meth:`Upkeep.list_prune_candidates` returns.
_CANDIDATE_COLUMNS = [
    "id", "source", "title", "model", "started_at", "ended_at", "message_count", "archived",
]

_EMPTY_CLAUSES: list[_Filter] = [
    ("=", "message_count", 0), ("is not null", "ended_at"), ("=", "archived", 0)
]
_EMPTY_SWEEP: _Filter = ("and", _EMPTY_CLAUSES)


def remove_session_files(sessions_dir: Path | None, session_id: str) -> None:
    """Deletes a session's transcript files in ``sessions_dir`` (``{id}.json``, ``{id}.jsonl``,
    ``request_dump_{id}_*.json``), best effort: a file system error never fails the delete
    that came first. An id that could name a path outside the folder is left alone."""
    if sessions_dir is None or not session_id or "/" in session_id or "\\" in session_id:
        return
    folder = Path(sessions_dir)
    doomed = [folder / f"{session_id}.json", folder / f"{session_id}.jsonl"]
    doomed += [Path(p) for p in glob.glob(str(folder / f"request_dump_{glob.escape(session_id)}_*.json"))]
    for path in doomed:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            logger.warning("could not remove %s: %s", path, exc)


def _chunks(ids: Sequence[str]) -> Iterable[list[str]]:
    for start in range(0, len(ids), _IDS_PER_STATEMENT):
        yield list(ids[start : start + _IDS_PER_STATEMENT])


def prune_filter(
    *,
    started_before: float | None = None,
    started_after: float | None = None,
    source: str | None = None,
    title_like: str | None = None,
    end_reason: str | None = None,
    cwd_prefix: str | None = None,
    min_messages: int | None = None,
    max_messages: int | None = None,
    archived: bool | None = None,
    model_like: str | None = None,
    provider: str | None = None,
    user_id: str | None = None,
    chat_id: str | None = None,
    chat_type: str | None = None,
    branch_like: str | None = None,
    min_tokens: int | None = None,
    max_tokens: int | None = None,
    min_cost: float | None = None,
    max_cost: float | None = None,
    min_tool_calls: int | None = None,
    max_tool_calls: int | None = None,
) -> _Filter:
    """The ended sessions a prune or a bulk archive selects; every filter given must hold.

    ``title_like`` / ``model_like`` / ``branch_like`` are case-insensitive substrings;
    ``provider`` (of ``billing_provider``) is exact but case-insensitive; the other strings are
    exact. Tokens are input + output, cost is the actual else the estimated USD.
    ``archived``: None both, True only archived, False only not archived. An unknown keyword
    is a TypeError, as for any call.
    """
    clauses: list[_Filter] = [("is not null", "ended_at")]
    for column, bound, op in (
        ("started_at", started_before, "<"),
        ("started_at", started_after, ">="),
        ("message_count", min_messages, ">="),
        ("message_count", max_messages, "<="),
        ("total_tokens", min_tokens, ">="),
        ("total_tokens", max_tokens, "<="),
        ("cost_usd", min_cost, ">="),
        ("cost_usd", max_cost, "<="),
        ("tool_call_count", min_tool_calls, ">="),
        ("tool_call_count", max_tool_calls, "<="),
    ):
        if bound is not None:
            clauses.append(_compare(op, column, bound))
    for column, exact in (
        ("source", source), ("end_reason", end_reason), ("user_id", user_id),
        ("chat_id", chat_id), ("chat_type", chat_type),
    ):
        if exact:
            clauses.append(("=", column, exact))
    for column, part in (("title", title_like), ("model", model_like), ("git_branch", branch_like)):
        if part:
            clauses.append(("like", column, f"%{like_escape(part)}%"))
    if provider:
        clauses.append(("like", "billing_provider", like_escape(provider)))
    if cwd_prefix:
        clauses.append(cwd_prefix_filter(cwd_prefix))
    if archived is not None:
        clauses.append(("=", "archived", int(archived)))
    return ("and", clauses)


def _compare(op: str, column: str, bound: float) -> _Filter:
    if op == "<":
        return ("<", column, bound)
    if op == "<=":
        return ("<=", column, bound)
    return (">=", column, bound)


class Upkeep(StoreFace):
    def _delete_sessions(
        self, session_ids: Sequence[str], *, with_delegates: bool, still: _Filter | None = None
    ) -> list[str]:
        """Deletes the sessions (and with ``with_delegates`` their delegate runs, recursively)
        with their messages in one transaction, orphaning their other children; returns the ids
        deleted. ``still`` is checked again inside the transaction for each session."""
        ids = list(dict.fromkeys(session_ids))
        delegates = self._delegate_runs_of(ids) if with_delegates else []
        doomed = [*delegates, *ids]
        ops: list[Update | Delete] = []
        for chunk in _chunks(doomed):
            among: _Filter = ("in", "id", chunk)
            if still is not None:
                among = ("and", [among, still])
            ops.append(Update("sessions", ("in", "parent_session_id", chunk), {"parent_session_id": None}))
            ops.append(Delete("messages", ("in", "session_id", chunk)))
            ops.append(Delete("sessions", among))
        existed = set(
            row["id"] for chunk in _chunks(doomed)
            for row in self._store.query("sessions", columns=["id"], where=("in", "id", chunk))
        )
        if not existed:
            return []
        self._store.write(ops)
        return [sid for sid in doomed if sid in existed]

    def _delegate_runs_of(self, parent_ids: Sequence[str]) -> list[str]:
        """The delegate runs (``model_config._delegate_from``) of the sessions, and theirs."""
        found = set(parent_ids)
        frontier = list(parent_ids)
        runs: list[str] = []
        while frontier:
            nxt: list[str] = []
            for chunk in _chunks(frontier):
                marked_child: list[_Filter] = [
                    ("in", "parent_session_id", chunk), ("is not null", "delegate_from")
                ]
                either: list[_Filter] = [("in", "delegate_from", chunk), ("and", marked_child)]
                rows = self._store.query("sessions", columns=["id"], where=("or", either))
                nxt += [r["id"] for r in rows if r["id"] not in found]
            found.update(nxt)
            runs += nxt
            frontier = nxt
        return runs

    def delete_session(self, session_id: str, sessions_dir: Path | None = None) -> bool:
        """Deletes the session and its messages; False when there is no such session.

        Its delegate runs go with it; its other children (branches, continuations) stay, as
        roots. With ``sessions_dir``, the transcript files of every deleted session go too.
        """
        deleted = self._delete_sessions([session_id], with_delegates=True)
        for sid in deleted:
            remove_session_files(sessions_dir, sid)
        return session_id in deleted

    def delete_sessions(self, session_ids: Sequence[str], sessions_dir: Path | None = None) -> int:
        """Deletes each listed session as :meth:`delete_session` does, all in one transaction;
        returns how many existed. Unknown ids, duplicates and non-strings are skipped."""
        wanted = [sid for sid in session_ids if isinstance(sid, str) and sid]
        if not wanted:
            return 0
        deleted = self._delete_sessions(wanted, with_delegates=True)
        for sid in deleted:
            remove_session_files(sessions_dir, sid)
        return len(set(wanted) & set(deleted))

    def delete_session_if_empty(self, session_id: str, sessions_dir: Path | None = None) -> bool:
        """Deletes the session only if it never gained content: no message rows, no title, no
        child session. Checked and deleted in one statement, so a message another writer adds
        meanwhile keeps it. True if it was deleted."""
        has_messages = Select("messages", "session_id", ("=", "session_id", session_id))
        has_children = Select("sessions", "parent_session_id", ("=", "parent_session_id", session_id))
        empty: list[_Filter] = [
            ("=", "id", session_id),
            ("is null", "title"),
            ("not", ("in", "id", has_messages)),
            ("not", ("in", "id", has_children)),
        ]
        [deleted] = self._store.write([Delete("sessions", ("and", empty))])
        if deleted:
            remove_session_files(sessions_dir, session_id)
        return deleted > 0

    def count_empty_sessions(self) -> int:
        """Ended, not archived sessions without messages: what :meth:`delete_empty_sessions`
        deletes."""
        return self._store.count("sessions", _EMPTY_SWEEP)

    def delete_empty_sessions(self, sessions_dir: Path | None = None) -> int:
        """Deletes every ended, not archived session without messages (a live one or an
        archived one is never touched), orphaning their children; returns how many."""
        ids = [r["id"] for r in self._store.query("sessions", columns=["id"], where=_EMPTY_SWEEP)]
        deleted = self._delete_sessions(ids, with_delegates=False, still=_EMPTY_SWEEP)
        gone = self._missing(deleted)
        for sid in gone:
            remove_session_files(sessions_dir, sid)
        return len(gone)

    def _missing(self, session_ids: Sequence[str]) -> list[str]:
        """Those of the sessions that no longer exist."""
        present = set(
            row["id"] for chunk in _chunks(session_ids)
            for row in self._store.query("sessions", columns=["id"], where=("in", "id", chunk))
        )
        return [sid for sid in session_ids if sid not in present]

    def list_prune_candidates(
        self, /, older_than_days: float | None = None, source: str | None = None, **filters: Any
    ) -> list[dict[str, Any]]:
        """What :meth:`prune_sessions` or :meth:`archive_sessions` with the same arguments
        would touch, oldest first, changing nothing (``id``, ``source``, ``title``, ``model``,
        ``started_at``, ``ended_at``, ``message_count``, ``archived``)."""
        return self._store.query(
            "sessions",
            columns=_CANDIDATE_COLUMNS,
            where=_prune_where(older_than_days, source, filters),
            order_by=["started_at", "id"],
        )

    def archive_sessions(
        self, /, older_than_days: float | None = None, source: str | None = None, **filters: Any
    ) -> int:
        """Archives every matching session with its compression lineage (``archived``
        defaults to False: only rows not archived yet, so a repeat is a no-op); deletes
        nothing. Returns how many matched."""
        filters.setdefault("archived", False)
        rows = self.list_prune_candidates(older_than_days, source, **filters)
        for row in rows:
            self.set_session_archived(row["id"], True)
        return len(rows)

    def prune_sessions(
        self,
        /,
        older_than_days: float | None = 90,
        source: str | None = None,
        sessions_dir: Path | None = None,
        **filters: Any,
    ) -> int:
        """Deletes ended sessions started more than ``older_than_days`` days ago (None: any
        age), of ``source`` if given, that match every keyword filter (see
        :func:`prune_filter`; ``started_before`` overrides the age), in one transaction.
        Children outside the selection are orphaned, not deleted. Returns how many."""
        where = _prune_where(older_than_days, source, filters)
        ids = [r["id"] for r in self._store.query("sessions", columns=["id"], where=where)]
        deleted = self._delete_sessions(ids, with_delegates=False)
        for sid in deleted:
            remove_session_files(sessions_dir, sid)
        return len(deleted)

    def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Archives (hides from listings, keeping every message) or brings back the session
        and its whole compression lineage, so a still-visible root cannot bring a hidden
        conversation back. False when there is no such session."""
        lineage = self._compression_lineage_of(session_id)
        [changed] = self._store.write(
            [Update("sessions", ("in", "id", lineage), {"archived": int(archived)})]
        )
        return changed > 0

    def _compression_lineage_of(self, session_id: str) -> list[str]:
        """The session, its ancestors through parents that ended ``compression``, and its
        descendants through such parents."""
        lineage = {session_id}
        current = session_id
        while True:
            rows = self._store.query("sessions", columns=["parent_session_id"], where=("=", "id", current))
            parent = rows[0]["parent_session_id"] if rows else None
            if parent is None or parent in lineage:
                break
            ended = self._store.query("sessions", columns=["end_reason"], where=("=", "id", parent))
            if not ended or ended[0]["end_reason"] != "compression":
                break
            lineage.add(parent)
            current = parent
        frontier = [session_id]
        while frontier:
            ending: list[_Filter] = [("in", "id", frontier), ("=", "end_reason", "compression")]
            parents = [r["id"] for r in self._store.query("sessions", columns=["id"], where=("and", ending))]
            if not parents:
                break
            children = self._store.query(
                "sessions", columns=["id"], where=("in", "parent_session_id", parents)
            )
            frontier = [r["id"] for r in children if r["id"] not in lineage]
            lineage.update(frontier)
        return sorted(lineage)

    def vacuum(self) -> int:
        """Gives the space of deleted rows back to the file system: a truncating WAL
        checkpoint, then ``VACUUM``, which rewrites the file (seconds per 100 MB) and needs
        every other writer to be idle. The search indexes are merged first (as
        :meth:`optimize_fts` does), so that the space their deleted rows held goes too;
        returns how many there are."""
        optimized = self._store.search_index_upkeep("optimize")
        self._store.vacuum()
        return optimized

    def maybe_auto_prune_and_vacuum(
        self,
        retention_days: int = 90,
        min_interval_hours: int = 24,
        vacuum: bool = True,
        sessions_dir: Path | None = None,
    ) -> dict[str, Any]:
        """Startup maintenance, at most once per ``min_interval_hours`` across processes (the
        time is kept in ``state_meta``): prunes ended sessions older than ``retention_days``,
        then vacuums if any went and ``vacuum`` is set. Never raises: returns ``skipped``,
        ``pruned``, ``vacuumed``, and ``error`` when something failed."""
        result: dict[str, Any] = {"skipped": False, "pruned": 0, "vacuumed": False}
        try:
            now = time.time()
            last = self._store.get_meta(LAST_AUTO_PRUNE_KEY)
            try:
                if last is not None and now - float(last) < min_interval_hours * 3600:
                    result["skipped"] = True
                    return result
            except ValueError:
                pass  # an unreadable marker counts as no earlier run
            result["pruned"] = self.prune_sessions(
                older_than_days=retention_days, sessions_dir=sessions_dir
            )
            if vacuum and result["pruned"] > 0:
                try:
                    self.vacuum()
                    result["vacuumed"] = True
                except Exception as exc:  # the prune stands; the file is only larger
                    logger.warning("state.db VACUUM failed: %s", exc)
            self._store.set_meta(LAST_AUTO_PRUNE_KEY, str(now))
        except Exception as exc:  # maintenance must never stop a start-up
            logger.warning("state.db automatic maintenance failed: %s", exc)
            result["error"] = str(exc)
        return result


def _prune_where(older_than_days: float | None, source: str | None, filters: dict[str, Any]) -> _Filter:
    if filters.get("started_before") is None and older_than_days is not None:
        filters = {**filters, "started_before": time.time() - older_than_days * 86400}
    return prune_filter(source=source, **filters)


class AsyncUpkeep(AsyncFace):
    delete_session = offloaded(Upkeep.delete_session)
    delete_sessions = offloaded(Upkeep.delete_sessions)
    delete_session_if_empty = offloaded(Upkeep.delete_session_if_empty)
    count_empty_sessions = offloaded(Upkeep.count_empty_sessions)
    delete_empty_sessions = offloaded(Upkeep.delete_empty_sessions)
    list_prune_candidates = offloaded(Upkeep.list_prune_candidates)
    archive_sessions = offloaded(Upkeep.archive_sessions)
    prune_sessions = offloaded(Upkeep.prune_sessions)
    set_session_archived = offloaded(Upkeep.set_session_archived)
    vacuum = offloaded(Upkeep.vacuum)
    maybe_auto_prune_and_vacuum = offloaded(Upkeep.maybe_auto_prune_and_vacuum)
