"""Listings and counts: rich session pages with previews, cwd and cron-run lists, id search."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from hermes._core import Store
from hermes.state.face import AsyncFace, StoreFace, check_page, offloaded

if TYPE_CHECKING:
    from hermes._core import _Filter

#: The session columns a listing leaves out with ``compact_rows=True``: the payload-heavy blob
#: no list renders.
_COMPACT_EXCLUDED = frozenset({"system_prompt"})

#: What a compression root's row takes from its live tip when a listing projects it forward.
_TIP_FIELDS = (
    "id", "ended_at", "end_reason", "message_count", "tool_call_count", "title", "last_active",
    "preview", "model", "system_prompt", "cwd", "git_branch", "git_repo_root",
)

_LISTED: _Filter = ("=", "listed", 1)


class Lineage(Protocol):
    """The lineage methods of ``SessionDB`` (``titles.py``) that listing and export build on."""

    def get_compression_tip(self, session_id: str) -> str | None: ...

    def get_compression_lineage(self, session_id: str) -> list[str]: ...


def like_escape(text: str) -> str:
    """``text`` as a literal inside a LIKE pattern (``\\`` escapes, as the store's LIKE reads)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def cwd_prefix_filter(cwd_prefix: str) -> _Filter:
    """Sessions whose cwd is ``cwd_prefix`` or below it (``/`` or ``\\`` separated)."""
    prefix = cwd_prefix.rstrip("/\\") or cwd_prefix
    escaped = like_escape(prefix)
    under: list[_Filter] = [
        ("=", "cwd", prefix), ("like", "cwd", f"{escaped}/%"), ("like", "cwd", f"{escaped}\\\\%")
    ]
    return ("or", under)


def workspace_filter(needle: str) -> _Filter:
    """Sessions whose workspace (the git repo root, else the cwd) contains ``needle``,
    ignoring ASCII case: a part of its path, or its repo or project folder's name."""
    pattern = f"%{like_escape(needle.strip())}%"
    no_root: list[_Filter] = [("is null", "git_repo_root"), ("=", "git_repo_root", "")]
    cwd_only: list[_Filter] = [("or", no_root), ("like", "cwd", pattern)]
    either: list[_Filter] = [("like", "git_repo_root", pattern), ("and", cwd_only)]
    return ("or", either)


def sessions_by_last_active(
    store: Store, source: str | None, limit: int, offset: int
) -> list[dict[str, Any]]:
    """Every column of sessions (of ``source``, or all) plus ``last_active``, most recently
    active first."""
    check_page(limit, offset)
    return store.query(
        "sessions",
        columns=["*", "last_active"],
        where=("=", "source", source) if source else None,
        order_by=["-last_active", "-started_at", "-id"],
        limit=limit,
        offset=offset,
    )


def session_filter(
    *,
    source: str | None = None,
    exclude_sources: Sequence[str] | None = None,
    cwd_prefix: str | None = None,
    workspace: str | None = None,
    min_message_count: int = 0,
    include_archived: bool = False,
    archived_only: bool = False,
    listed_only: bool = False,
) -> _Filter:
    """The rows a listing or a count admits."""
    clauses: list[_Filter] = []
    if listed_only:
        clauses.append(_LISTED)
    if source:
        clauses.append(("=", "source", source))
    if exclude_sources:
        clauses.append(("not", ("in", "source", list(exclude_sources))))
    if cwd_prefix:
        clauses.append(cwd_prefix_filter(cwd_prefix))
    if workspace and workspace.strip():
        clauses.append(workspace_filter(workspace))
    if min_message_count > 0:
        clauses.append((">=", "message_count", min_message_count))
    if archived_only:
        clauses.append(("=", "archived", 1))
    elif not include_archived:
        clauses.append(("=", "archived", 0))
    return ("and", clauses)


class Listing(StoreFace):
    def _row_columns(self, compact_rows: bool) -> list[str]:
        if not compact_rows:
            return ["*"]
        return [c for c in self._store.columns("sessions") if c not in _COMPACT_EXCLUDED]

    def list_sessions_rich(
        self,
        source: str | None = None,
        exclude_sources: list[str] | None = None,
        cwd_prefix: str | None = None,
        limit: int = 20,
        offset: int = 0,
        include_children: bool = False,
        min_message_count: int = 0,
        project_compression_tips: bool = True,
        order_by_last_active: bool = False,
        include_archived: bool = False,
        archived_only: bool = False,
        id_query: str | None = None,
        search_query: str | None = None,
        compact_rows: bool = False,
        workspace: str | None = None,
    ) -> list[dict[str, Any]]:
        """A page of sessions with ``preview`` (the first user message, 60 characters) and
        ``last_active`` (the latest message, else the start).

        By default only what a picker shows: roots and branches, not sub-agent runs or
        compression continuations (``include_children=True`` lists every row), and a
        compressed conversation as one row carrying its live tip's id, counts, title and
        activity (``_lineage_root_id`` names the root; ``project_compression_tips=False``
        keeps the raw root). Newest start first, or with ``order_by_last_active=True`` by the
        latest activity along each compression chain; only that order honours ``id_query``
        (a case-insensitive substring of any id in the chain) and ``search_query`` (of any
        title or id in the chain, also with ``-``, ``_``, ``.`` and spaces removed from the
        title). ``compact_rows=True`` leaves out ``system_prompt``. ``workspace`` keeps the
        sessions whose git repo root (else cwd) contains it, ignoring ASCII case (``hermes
        sessions list --workspace``; hermes-agent's method has no such argument).
        """
        check_page(limit, offset)
        admitted = session_filter(
            source=source,
            exclude_sources=exclude_sources,
            cwd_prefix=cwd_prefix,
            workspace=workspace,
            min_message_count=min_message_count,
            include_archived=include_archived,
            archived_only=archived_only,
            listed_only=not include_children,
        )
        columns = [*self._row_columns(compact_rows), "preview", "last_active"]
        if order_by_last_active:
            matches: list[_Filter] = [admitted]
            id_needle = (id_query or "").strip().lower()
            search_needle = (search_query or "").strip().lower()
            if id_needle:
                matches.append(("like", "chain_ids", f"%{like_escape(id_needle)}%"))
            if search_needle:
                either: list[_Filter] = [
                    ("like", "chain_titles", f"%{like_escape(search_needle)}%"),
                    ("like", "chain_ids", f"%{like_escape(search_needle)}%"),
                ]
                compact_needle = re.sub(r"[\W_]+", "", search_needle)
                if compact_needle:
                    either.append(("like", "chain_titles_compact", f"%{like_escape(compact_needle)}%"))
                matches.append(("or", either))
            # The page's ids first, then their rows: sorting carries only the id and the key,
            # so previews and columns are built for the page, not for every admitted row.
            page = self._store.query(
                "sessions",
                columns=["id"],
                where=("and", matches),
                order_by=["-chain_last_active", "-started_at", "-id"],
                limit=limit,
                offset=offset,
            )
            ids = [r["id"] for r in page]
            found = {
                r["id"]: r
                for r in self._store.query("sessions", columns=columns, where=("in", "id", ids))
            }
            rows = [found[i] for i in ids if i in found]
        else:
            # By start alone, as hermes-agent orders: the start-time index gives the page in
            # order (equal starts in the order they were written), where a second key would
            # sort every row of the page again.
            rows = self._store.query(
                "sessions",
                columns=columns,
                where=admitted,
                order_by=["-started_at"],
                limit=limit,
                offset=offset,
            )
        if project_compression_tips and not include_children:
            rows = [self._projected(row, columns) for row in rows]
        return rows

    def _projected(self, row: dict[str, Any], columns: list[str]) -> dict[str, Any]:
        """A compression root's row with its live tip's identity and activity."""
        if row.get("end_reason") != "compression":
            return row
        tip_id = cast(Lineage, self).get_compression_tip(row["id"])
        if tip_id is None or tip_id == row["id"]:
            return row
        found = self._store.query("sessions", columns=columns, where=("=", "id", tip_id))
        if not found:
            return row
        tip = found[0]
        merged = dict(row)
        merged.update({key: tip[key] for key in _TIP_FIELDS if key in tip})
        merged["_lineage_root_id"] = row["id"]
        return merged

    def list_cron_job_runs(
        self, job_id: str, limit: int = 20, offset: int = 0
    ) -> list[dict[str, Any]]:
        """The run sessions of one cron job (ids ``cron_{job_id}_...``), newest first, shaped
        like :meth:`list_sessions_rich` rows. An id range, not a substring: the work is the
        page, not the job's whole history."""
        check_page(limit, offset)
        prefix = f"cron_{job_id}_"
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        runs: list[_Filter] = [("=", "source", "cron"), (">=", "id", prefix), ("<", "id", upper)]
        return self._store.query(
            "sessions",
            columns=["*", "preview", "last_active"],
            where=("and", runs),
            order_by=["-started_at", "-id"],
            limit=limit,
            offset=offset,
        )

    def distinct_session_cwds(self, include_archived: bool = False) -> list[dict[str, Any]]:
        """Each non-empty cwd of any session, with how many sessions used it and the latest
        end (or start) among them: the workspaces a person has worked in."""
        clauses: list[_Filter] = [("is not null", "cwd")]
        if not include_archived:
            clauses.append(("=", "archived", 0))
        rows = self._store.query(
            "sessions", columns=["cwd", "started_at", "ended_at"], where=("and", clauses)
        )
        found: dict[str, dict[str, Any]] = {}
        for row in rows:
            cwd = row["cwd"]
            if not str(cwd).strip():
                continue
            when = float(row["ended_at"] or row["started_at"] or 0)
            entry = found.setdefault(cwd, {"cwd": cwd, "sessions": 0, "last_active": when})
            entry["sessions"] += 1
            entry["last_active"] = max(entry["last_active"], when)
        return list(found.values())

    def search_sessions(
        self, source: str | None = None, limit: int = 20, offset: int = 0
    ) -> list[dict[str, Any]]:
        """Sessions (of ``source``, or all) with ``last_active``, most recently active first."""
        return sessions_by_last_active(self._store, source, limit, offset)

    def search_sessions_by_id(
        self, query: str, limit: int = 20, include_archived: bool = True
    ) -> list[dict[str, Any]]:
        """Listed sessions whose id, or any id along their compression chain, contains
        ``query`` (case-insensitively): exact matches first, then prefixes, then the rest,
        each by latest activity."""
        needle = (query or "").strip().lower()
        if not needle or limit <= 0:
            return []
        candidates = self.list_sessions_rich(
            limit=limit * 4,
            include_archived=include_archived,
            order_by_last_active=True,
            id_query=needle,
        )

        def rank(row: dict[str, Any]) -> int:
            ids = [str(v).lower() for v in (row.get("id"), row.get("_lineage_root_id")) if v]
            if needle in ids:
                return 0
            return 1 if any(i.startswith(needle) for i in ids) else 2

        return sorted(candidates, key=rank)[:limit]

    def session_count(
        self,
        source: str | None = None,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
        exclude_sources: list[str] | None = None,
    ) -> int:
        """How many sessions match; ``exclude_children=True`` counts what
        :meth:`list_sessions_rich` lists, so a page total and its rows agree."""
        return self._store.count(
            "sessions",
            session_filter(
                source=source,
                exclude_sources=exclude_sources,
                cwd_prefix=cwd_prefix,
                min_message_count=min_message_count,
                include_archived=include_archived,
                archived_only=archived_only,
                listed_only=exclude_children,
            ),
        )

    def message_count(self, session_id: str | None = None) -> int:
        """Message rows of the session (0 when it has none or does not exist), or of every
        session; rewound and archived rows count too. The gateway's guard reads
        :meth:`live_message_count` instead."""
        where: _Filter | None = ("=", "session_id", session_id) if session_id else None
        return self._store.count("messages", where)


class AsyncListing(AsyncFace):
    list_sessions_rich = offloaded(Listing.list_sessions_rich)
    list_cron_job_runs = offloaded(Listing.list_cron_job_runs)
    distinct_session_cwds = offloaded(Listing.distinct_session_cwds)
    search_sessions = offloaded(Listing.search_sessions)
    search_sessions_by_id = offloaded(Listing.search_sessions_by_id)
    session_count = offloaded(Listing.session_count)
    message_count = offloaded(Listing.message_count)
