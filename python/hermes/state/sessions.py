"""Session rows: create, read, update, end and reopen; token accounting; the coherence
guard's counts."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes._core import Delete, Insert, Select, Update
from hermes.state.face import AsyncFace, StoreFace, all_of, any_of, check_page, epoch, offloaded
from hermes.state.upkeep import remove_session_files

if TYPE_CHECKING:
    from hermes._core import _Filter as Filter

#: End reasons an intentional reset may overwrite: closes that recovery would undo.
_RECOVERABLE_END_REASONS = ("agent_close", "ws_orphan_reap")
#: An ended, untitled, empty TUI session older than this is a ghost.
_GHOST_AGE = 86400.0
#: A compression continuation that never made an API call this long is an orphan.
_ORPHAN_AGE = 7 * 86400.0


class Sessions(StoreFace):
    # ``self`` is positional-only in the methods taking ``**columns``: without it mypy
    # cannot give ``AsyncSessionDB``'s coroutines their signatures (a ``self=`` keyword
    # could be meant for ``**columns``).
    def create_session(
        self,
        /,
        session_id: str,
        source: str,
        user_id: str | None = None,
        model: str | None = None,
        model_config: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        parent_session_id: str | None = None,
        **columns: Any,
    ) -> str:
        """Creates the session row and returns its id.

        Creating an existing session is not an error: its columns that are
        still NULL are filled from this call, the others are kept. Extra
        keyword arguments name other ``sessions`` columns (``session_key``,
        ``chat_id``, ``title``, ...).
        """
        given: dict[str, Any] = {
            "user_id": user_id,
            "model": model,
            "model_config": dict(model_config) if model_config else None,
            "system_prompt": system_prompt,
            "parent_session_id": parent_session_id,
            **columns,
        }
        started_at = given.pop("started_at", None)
        self._store.create_session(
            session_id,
            source,
            {k: v for k, v in given.items() if v is not None},
            epoch(started_at) if started_at is not None else None,
        )
        return session_id

    def ensure_session(
        self, /, session_id: str, source: str = "unknown", model: str | None = None, **columns: Any
    ) -> str:
        """Same as :meth:`create_session`: makes sure the row exists."""
        return self.create_session(session_id, source, model=model, **columns)

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """Every column of the session row, or None if there is none."""
        return self._store.get_session(session_id)

    def live_message_count(self, session_id: str) -> int | None:
        """The session's live ``message_count`` (None if it does not exist).

        A single indexed read, microseconds: the gateway's coherence guard
        calls it on every turn.
        """
        return self._store.live_message_count(session_id)

    def own_appends(self, session_id: str) -> int:
        """Message rows this ``SessionDB`` committed to the session since it was opened.

        The gateway's guard compares it with the change of ``message_count``: a session
        that grew by more than this process wrote was written by another process too.
        """
        return self._store.own_appends(session_id)

    def foreign_commit_since_last_look(self) -> bool:
        """Whether another connection (process, CLI, cron) committed to this
        file since the previous call. Commits of this ``SessionDB`` do not count.
        """
        return self._store.foreign_commit_since_last_look()

    def update_session(self, /, session_id: str, **columns: Any) -> None:
        """Sets ``sessions`` columns; raises SessionNotFoundError if absent."""
        self._store.update_session(session_id, columns)

    def end_session(self, session_id: str, end_reason: str) -> None:
        """Marks the session ended now, with a reason (``"user_exit"``, ...).

        The first end wins: ending an ended session changes nothing (a compression split
        keeps its ``"compression"``); :meth:`reopen_session` first to end it anew.
        Appending a message to an ended session reopens it: a conversation that goes on
        (a resumed chat, the next message after a gateway restart) is not ended.
        """
        self._update_session_row(
            session_id,
            {"ended_at": time.time(), "end_reason": end_reason},
            also=("is null", "ended_at"),
        )

    def reopen_session(self, session_id: str) -> None:
        """Clears ``ended_at`` / ``end_reason`` so the session continues."""
        self._update_session_row(session_id, {"ended_at": None, "end_reason": None})

    def promote_to_session_reset(self, session_id: str, reason: str = "session_reset") -> bool:
        """Ends the session as an intentional reset (``reason``): a live session, or one
        closed by accident (``agent_close``, ``ws_orphan_reap``, which recovery would reopen).
        Any other end stays. True if the session was promoted, False otherwise (also
        when there is no such session).
        """
        if not session_id:
            return False
        promotable = any_of(("is null", "ended_at"), ("in", "end_reason", _RECOVERABLE_END_REASONS))
        where = all_of(("=", "id", session_id), promotable)
        [changed] = self._store.write(
            [Update("sessions", where, {"ended_at": time.time(), "end_reason": reason})]
        )
        return changed > 0

    def update_session_cwd(
        self,
        session_id: str,
        cwd: str,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
    ) -> None:
        """Records the session's working directory, and the git branch and repository
        root found there; an empty branch or root (a failed probe) keeps the one recorded.
        Without an id or a cwd it does nothing."""
        if not session_id or not cwd:
            return
        columns: dict[str, Any] = {"cwd": cwd}
        for column, value in (("git_branch", git_branch), ("git_repo_root", git_repo_root)):
            if value and value.strip():
                columns[column] = value.strip()
        self._update_session_row(session_id, columns)

    def backfill_repo_roots(self, cwd_to_root: Mapping[str, str]) -> None:
        """Records the git repository root of each cwd on the sessions there that have
        none yet (an empty root is skipped), all in one transaction."""
        rootless = any_of(("is null", "git_repo_root"), ("=", "git_repo_root", ""))
        ops = [
            Update("sessions", all_of(("=", "cwd", cwd), rootless), {"git_repo_root": root})
            for cwd, root in cwd_to_root.items()
            if cwd and root
        ]
        if ops:
            self._store.write(ops)

    def update_session_meta(
        self, session_id: str, model_config_json: str, model: str | None = None
    ) -> None:
        """Replaces the session's ``model_config`` (a JSON text) and, if given, its model."""
        columns: dict[str, Any] = {"model_config": model_config_json}
        if model is not None:
            columns["model"] = model
        self._update_session_row(session_id, columns)

    def update_system_prompt(self, session_id: str, system_prompt: str) -> None:
        """Stores the assembled system prompt of the session."""
        self._update_session_row(session_id, {"system_prompt": system_prompt})

    def update_session_model(self, session_id: str, model: str) -> None:
        """Sets the session's model after a switch (token updates only fill an empty one)."""
        self._update_session_row(session_id, {"model": model})

    def update_session_billing_route(
        self,
        session_id: str,
        *,
        provider: str,
        base_url: str,
        billing_mode: str | None = None,
    ) -> None:
        """Sets the session's billing provider and base URL (and mode, if given) after a
        switch, and clears its stored system prompt, whose header names the old route."""
        columns: dict[str, Any] = {
            "billing_provider": provider,
            "billing_base_url": base_url,
            "system_prompt": None,
        }
        if billing_mode is not None:
            columns["billing_mode"] = billing_mode
        self._update_session_row(session_id, columns)

    def update_token_counts(
        self,
        session_id: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model: str | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        actual_cost_usd: float | None = None,
        cost_status: str | None = None,
        cost_source: str | None = None,
        pricing_version: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
        api_call_count: int = 0,
        absolute: bool = False,
    ) -> None:
        """Adds one API call's usage to the session (``absolute=True``: sets the totals).

        Makes sure the row exists (source ``"unknown"``). The model and billing route are
        only filled where empty, except that the first call with usage replaces a
        requested route that a fallback served (one coherent pair); a switch is
        :meth:`update_session_model` / :meth:`update_session_billing_route`. Each added
        call is also counted per model and route in ``session_model_usage``, in the
        same transaction.
        """
        now = time.time()
        tokens = _token_columns(
            input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens
        )
        accounted = bool(
            any(tokens.values()) or api_call_count or estimated_cost_usd or actual_cost_usd
        )
        this: Filter = ("=", "id", session_id)
        ops: list[Insert | Update] = [
            Insert(
                "sessions", _fresh_session(session_id, now, model=model), on_conflict="fill_nulls"
            )
        ]
        if accounted and model and billing_provider:
            first_call = any_of(("is null", "api_call_count"), ("=", "api_call_count", 0))
            other_route = any_of(
                ("is null", "model"),
                ("!=", "model", model),
                ("is null", "billing_provider"),
                ("!=", "billing_provider", billing_provider),
            )
            route = {
                "model": model,
                "billing_provider": billing_provider,
                "billing_base_url": billing_base_url,
                "billing_mode": billing_mode,
            }
            ops.append(Update("sessions", all_of(this, first_call, other_route), route))
        fill = (
            {
                k: v
                for k, v in (
                    ("billing_provider", billing_provider),
                    ("billing_base_url", billing_base_url),
                    ("billing_mode", billing_mode),
                    ("model", model),
                )
                if v is not None
            }
            if accounted
            else {}
        )
        latest = {
            k: v
            for k, v in (
                ("cost_status", cost_status),
                ("cost_source", cost_source),
                ("pricing_version", pricing_version),
            )
            if v is not None
        }
        if absolute:
            totals: dict[str, Any] = {
                **tokens,
                "estimated_cost_usd": estimated_cost_usd or 0,
                "api_call_count": api_call_count,
                **latest,
            }
            if actual_cost_usd is not None:
                totals["actual_cost_usd"] = actual_cost_usd
            ops.append(Update("sessions", this, totals, fill_nulls=fill or None))
        else:
            added: dict[str, int | float] = {
                **tokens,
                "estimated_cost_usd": float(estimated_cost_usd or 0.0),
                "api_call_count": api_call_count,
            }
            if actual_cost_usd is not None:
                added["actual_cost_usd"] = float(actual_cost_usd)
            ops.append(Update("sessions", this, latest or None, add=added, fill_nulls=fill or None))
            if any(tokens.values()) or api_call_count or estimated_cost_usd:
                given = (model, billing_provider, billing_base_url, billing_mode)
                known = {} if all(given) else self._session_route(session_id)
                ops += _model_usage(
                    session_id,
                    now,
                    route=(
                        model or known.get("model") or "unknown",
                        billing_provider or known.get("billing_provider") or "",
                        billing_base_url or known.get("billing_base_url") or "",
                        billing_mode or known.get("billing_mode") or "",
                        "",
                    ),
                    counts={**tokens, "api_call_count": api_call_count},
                    costs=(estimated_cost_usd, actual_cost_usd),
                    latest={k: v for k, v in latest.items() if k != "pricing_version"},
                )
        self._store.write(ops)

    def _session_route(self, session_id: str) -> dict[str, Any]:
        """The session's model and billing route (empty without the session)."""
        rows = self._store.query(
            "sessions",
            columns=["model", "billing_provider", "billing_base_url", "billing_mode"],
            where=("=", "id", session_id),
        )
        return rows[0] if rows else {}

    def record_auxiliary_usage(
        self,
        session_id: str,
        task: str,
        *,
        model: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
    ) -> None:
        """Counts one auxiliary call (``task``: ``"vision"``, ``"compression"``, ...) in
        ``session_model_usage`` only, never in the session's totals (which the gateway
        overwrites with the main loop's). Its route is its own: what is not given stays
        ``"unknown"`` / empty. Makes sure the session row exists; without an id or a
        task it does nothing."""
        if not session_id or not task:
            return
        now = time.time()
        counts = _token_columns(
            input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens
        )
        self._store.write(
            [
                Insert("sessions", _fresh_session(session_id, now), on_conflict="fill_nulls"),
                *_model_usage(
                    session_id,
                    now,
                    route=(
                        model or "unknown",
                        billing_provider or "",
                        billing_base_url or "",
                        "",
                        task,
                    ),
                    counts={**counts, "api_call_count": 1},
                    costs=(estimated_cost_usd, None),
                    latest={},
                ),
            ]
        )

    def prune_empty_ghost_sessions(self, sessions_dir: Path | None = None) -> int:
        """Deletes the TUI's ghost sessions: ended, untitled, without a message and started
        over a day ago; and their transcript files in ``sessions_dir`` if given. Returns
        how many sessions it deleted."""
        ghost = all_of(
            ("=", "source", "tui"),
            ("is null", "title"),
            ("is not null", "ended_at"),
            ("<", "started_at", time.time() - _GHOST_AGE),
            ("not", ("in", "id", Select("messages", "session_id"))),
        )
        ids = [row["id"] for row in self._store.query("sessions", columns=["id"], where=ghost)]
        if not ids:
            return 0
        [deleted] = self._store.write([Delete("sessions", all_of(ghost, ("in", "id", ids)))])
        for session_id in ids:
            remove_session_files(sessions_dir, session_id)
        return deleted

    def finalize_orphaned_compression_sessions(self) -> int:
        """Ends (``end_reason="orphaned_compression"``, messages kept) the compression
        continuations left behind: started over a week ago under a parent ended by
        compression, with messages but no API call and never ended. Returns how many."""
        compressed = all_of(("=", "end_reason", "compression"), ("is not null", "ended_at"))
        orphan = all_of(
            ("=", "api_call_count", 0),
            ("is null", "end_reason"),
            ("is null", "ended_at"),
            ("<", "started_at", time.time() - _ORPHAN_AGE),
            ("in", "parent_session_id", Select("sessions", "id", compressed)),
            ("in", "id", Select("messages", "session_id")),
        )
        [ended] = self._store.write(
            [
                Update(
                    "sessions",
                    orphan,
                    {"ended_at": time.time(), "end_reason": "orphaned_compression"},
                )
            ]
        )
        return ended

    def list_sessions(
        self, source: str | None = None, limit: int = 50, offset: int = 0
    ) -> list[dict[str, Any]]:
        """Sessions, newest first, ``limit`` per page from ``offset``."""
        check_page(limit, offset)
        return self._store.list_sessions(source, limit, offset)


class AsyncSessions(AsyncFace):
    create_session = offloaded(Sessions.create_session)
    ensure_session = offloaded(Sessions.ensure_session)
    get_session = offloaded(Sessions.get_session)
    live_message_count = offloaded(Sessions.live_message_count)
    own_appends = offloaded(Sessions.own_appends)
    foreign_commit_since_last_look = offloaded(Sessions.foreign_commit_since_last_look)
    update_session = offloaded(Sessions.update_session)
    end_session = offloaded(Sessions.end_session)
    reopen_session = offloaded(Sessions.reopen_session)
    promote_to_session_reset = offloaded(Sessions.promote_to_session_reset)
    update_session_cwd = offloaded(Sessions.update_session_cwd)
    backfill_repo_roots = offloaded(Sessions.backfill_repo_roots)
    update_session_meta = offloaded(Sessions.update_session_meta)
    update_system_prompt = offloaded(Sessions.update_system_prompt)
    update_session_model = offloaded(Sessions.update_session_model)
    update_session_billing_route = offloaded(Sessions.update_session_billing_route)
    update_token_counts = offloaded(Sessions.update_token_counts)
    record_auxiliary_usage = offloaded(Sessions.record_auxiliary_usage)
    prune_empty_ghost_sessions = offloaded(Sessions.prune_empty_ghost_sessions)
    finalize_orphaned_compression_sessions = offloaded(
        Sessions.finalize_orphaned_compression_sessions
    )
    list_sessions = offloaded(Sessions.list_sessions)


def _token_columns(
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int,
    cache_write_tokens: int,
    reasoning_tokens: int,
) -> dict[str, int]:
    """One call's token counts by the column names of sessions and session_model_usage."""
    return {
        "input_tokens": input_tokens or 0,
        "output_tokens": output_tokens or 0,
        "cache_read_tokens": cache_read_tokens or 0,
        "cache_write_tokens": cache_write_tokens or 0,
        "reasoning_tokens": reasoning_tokens or 0,
    }


def _fresh_session(session_id: str, now: float, **columns: Any) -> dict[str, Any]:
    """A bare session row of unknown source, to make sure one exists (merged, never
    overwriting, into an existing row)."""
    return {
        "id": session_id,
        "source": "unknown",
        "started_at": now,
        **{k: v for k, v in columns.items() if v is not None},
    }


def _model_usage(
    session_id: str,
    now: float,
    *,
    route: tuple[str, str, str, str, str],
    counts: Mapping[str, int],
    costs: tuple[float | None, float | None],
    latest: Mapping[str, Any],
) -> list[Insert | Update]:
    """The writes adding one call's usage to its ``session_model_usage`` row (made if
    missing): one row per session, model, billing route and task."""
    key = dict(
        zip(
            ("session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task"),
            (session_id, *route),
            strict=True,
        )
    )
    estimated, actual = costs
    added: dict[str, int | float] = {
        **{k: v or 0 for k, v in counts.items()},
        "estimated_cost_usd": float(estimated or 0.0),
        "actual_cost_usd": float(actual or 0.0),
    }
    this_row = all_of(*[("=", column, value) for column, value in key.items()])
    return [
        Insert(
            "session_model_usage",
            {**key, "first_seen": now, "last_seen": now},
            on_conflict="ignore",
        ),
        Update("session_model_usage", this_row, {"last_seen": now, **latest}, add=added),
    ]
