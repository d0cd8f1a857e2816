"""The filters of ``hermes sessions prune | archive | export``: flags, their values as the
store's keyword filters (``SessionDB.list_prune_candidates``, ``prune_sessions``,
``archive_sessions``), a sentence saying what they select, and the table of what matched.

A point in time is a duration back from now (``30m``, ``5h``, ``2d``, ``1w``; a bare number
is days, as hermes-agent's ``--older-than 90``) or a date and time (``2026-07-05``,
``2026-07-05 14:30``; local time unless it names a zone).
"""

from __future__ import annotations

import argparse
import re
import time
from datetime import datetime
from typing import Any

from hermes.cli.failures import UsageError
from hermes.cli.output import Column, print_table, print_text, when

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|"
                       r"h|hrs?|hours?|d|days?|w|wks?|weeks?)?")

#: flag attribute -> (store keyword, how ``describe`` says it)
_MATCHES: dict[str, tuple[str, str]] = {
    "source": ("source", "source {!r}"),
    "title": ("title_like", "title contains {!r}"),
    "end_reason": ("end_reason", "end reason {!r}"),
    "cwd": ("cwd_prefix", "cwd under {!r}"),
    "min_messages": ("min_messages", "at least {} messages"),
    "max_messages": ("max_messages", "at most {} messages"),
    "model": ("model_like", "model contains {!r}"),
    "provider": ("provider", "provider {!r}"),
    "user": ("user_id", "user {!r}"),
    "chat_id": ("chat_id", "chat {!r}"),
    "chat_type": ("chat_type", "chat type {!r}"),
    "branch": ("branch_like", "git branch contains {!r}"),
    "min_tokens": ("min_tokens", "at least {} tokens"),
    "max_tokens": ("max_tokens", "at most {} tokens"),
    "min_cost": ("min_cost", "cost at least ${}"),
    "max_cost": ("max_cost", "cost at most ${}"),
    "min_tool_calls": ("min_tool_calls", "at least {} tool calls"),
    "max_tool_calls": ("max_tool_calls", "at most {} tool calls"),
}
_TIME_FLAGS = ("older_than", "before", "newer_than", "after")


def add_filter_flags(parser: argparse.ArgumentParser, older_than_help: str, *,
                     asks: bool = True) -> None:
    """hermes-agent's filter flags and ``--dry-run``; and ``--yes`` for a command that
    ``asks`` before it changes anything."""
    parser.add_argument("--older-than", metavar="AGE", help=older_than_help)
    parser.add_argument("--newer-than", metavar="AGE",
                        help="only sessions started within the last AGE (5h, 2d) or after a "
                             "date")
    parser.add_argument("--before", metavar="TIME",
                        help="only sessions started before TIME (5h ago, or 2026-07-05 14:30)")
    parser.add_argument("--after", metavar="TIME",
                        help="only sessions started at or after TIME")
    parser.add_argument("--source", help="only this platform (api_server, telegram, ...)")
    parser.add_argument("--title", help="only titles containing this (any case)")
    parser.add_argument("--end-reason", help="only sessions ended for this reason")
    parser.add_argument("--cwd", help="only sessions whose working directory is under this")
    parser.add_argument("--min-messages", type=int, metavar="N")
    parser.add_argument("--max-messages", type=int, metavar="N")
    parser.add_argument("--model", help="only models whose name contains this (any case)")
    parser.add_argument("--provider", help="only sessions billed through this provider")
    parser.add_argument("--user", help="only this user id")
    parser.add_argument("--chat-id", help="only this chat or channel id")
    parser.add_argument("--chat-type", help="only this chat type (dm, group, ...)")
    parser.add_argument("--branch", help="only git branches containing this (any case)")
    parser.add_argument("--min-tokens", type=int, metavar="N", help="input + output tokens")
    parser.add_argument("--max-tokens", type=int, metavar="N", help="input + output tokens")
    parser.add_argument("--min-cost", type=float, metavar="USD")
    parser.add_argument("--max-cost", type=float, metavar="USD")
    parser.add_argument("--min-tool-calls", type=int, metavar="N")
    parser.add_argument("--max-tool-calls", type=int, metavar="N")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the sessions it would work on, and do nothing")
    if asks:
        parser.add_argument("--yes", "-y", action="store_true",
                            help="do it without asking (needed when stdin is not a terminal)")


def has_filters(args: argparse.Namespace) -> bool:
    return any(getattr(args, name) is not None for name in (*_TIME_FLAGS, *_MATCHES))


def store_filters(args: argparse.Namespace, now: float | None = None) -> dict[str, Any]:
    """The flags as the store's keyword filters. ``--older-than``/``--before`` bound the start
    from above, ``--newer-than``/``--after`` from below; two flags on one bound: the tighter
    wins. An empty window is a ``UsageError``."""
    now = time.time() if now is None else now
    uppers = [point_in_time(getattr(args, name), name, now)
              for name in ("older_than", "before") if getattr(args, name) is not None]
    lowers = [point_in_time(getattr(args, name), name, now)
              for name in ("newer_than", "after") if getattr(args, name) is not None]
    before = min(uppers) if uppers else None
    after = max(lowers) if lowers else None
    if before is not None and after is not None and after >= before:
        raise UsageError(f"the window is empty: sessions started after {_when(after)} and "
                         f"before {_when(before)}; widen --after/--newer-than or "
                         "--before/--older-than")
    filters: dict[str, Any] = {
        # The bounds above are the whole age filter: no implied 90-day cut-off.
        "older_than_days": None, "started_before": before, "started_after": after}
    for flag, (keyword, _) in _MATCHES.items():
        filters[keyword] = getattr(args, flag)
    return filters


def point_in_time(value: str, flag: str, now: float) -> float:
    """``value`` (a duration back from ``now``, or a date) as epoch seconds."""
    text = value.strip().lower()
    duration = _DURATION.fullmatch(text)
    if duration:
        amount, unit = float(duration.group(1)), duration.group(2) or "d"
        return now - amount * _UNIT_SECONDS[unit[0]]
    try:
        return datetime.fromisoformat(value.strip()).timestamp()
    except ValueError:
        option = "--" + flag.replace("_", "-")
        raise UsageError(f"{option} {value!r} is neither a duration nor a date; write e.g. "
                         "30m, 5h, 2d, 1w, 90 (days) or 2026-07-05 14:30") from None


def describe(filters: dict[str, Any]) -> str:
    """What the filters select, for the preview and the question."""
    parts = []
    if filters.get("started_before") is not None:
        parts.append(f"started before {_when(filters['started_before'])}")
    if filters.get("started_after") is not None:
        parts.append(f"started after {_when(filters['started_after'])}")
    for keyword, wording in _MATCHES.values():
        if filters.get(keyword) is not None:
            parts.append(wording.format(filters[keyword]))
    return ", ".join(parts) or "every ended session"


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M")


def print_matches(rows: list[dict[str, Any]], title: str, *, limit: int | None) -> None:
    """The sessions the filters matched (``limit`` of them, and how many more)."""
    shown = rows if limit is None else rows[:limit]
    print_table(title, [Column("id", is_id=True), Column("started"), Column("source"),
                        Column("model"), Column("messages"), Column("title")],
                [[row["id"], when(row.get("started_at")), row.get("source") or "",
                  row.get("model") or "", str(row.get("message_count") or 0),
                  row.get("title") or ""]
                 for row in shown])
    if len(rows) > len(shown):
        print_text(f"... and {len(rows) - len(shown)} more")
