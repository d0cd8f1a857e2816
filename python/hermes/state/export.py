"""Export and import of sessions (one, a lineage, all) as JSON-ready dicts."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from hermes._core import Append, Insert, Update
from hermes.errors import InvalidImportError
from hermes.state.face import AsyncFace, StoreFace, offloaded
from hermes.state.listing import Lineage, sessions_by_last_active

#: Limits of one :meth:`Export.import_sessions` call (hermes-agent's own).
IMPORT_MAX_SESSIONS = 500
IMPORT_MAX_MESSAGES_PER_SESSION = 10_000
IMPORT_MAX_TOTAL_MESSAGES = 50_000
IMPORT_MAX_SESSION_BYTES = 5 * 1024 * 1024
IMPORT_MAX_TOTAL_BYTES = 25 * 1024 * 1024

#: How many sessions :meth:`Export.export_all` exports at most.
EXPORT_ALL_LIMIT = 100_000

_SESSION_TEXT_FIELDS = (
    "source", "user_id", "model", "system_prompt", "end_reason", "cwd", "git_branch",
    "git_repo_root", "billing_provider", "billing_base_url", "billing_mode", "cost_status",
    "cost_source", "pricing_version", "title",
)
_SESSION_INT_FIELDS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens", "api_call_count",
)
_SESSION_FLOAT_FIELDS = ("ended_at", "estimated_cost_usd", "actual_cost_usd")
_MESSAGE_TEXT_FIELDS = (
    "tool_call_id", "tool_name", "effect_disposition", "finish_reason", "reasoning",
    "reasoning_content", "platform_message_id", "message_id",
)
_MESSAGE_JSON_FIELDS = ("reasoning_details", "codex_reasoning_items", "codex_message_items")


class Export(StoreFace):
    def export_session(self, session_id: str) -> dict[str, Any] | None:
        """The session row with its active ``messages`` (decoded); None if there is none."""
        session = self._store.get_session(session_id)
        if session is None:
            return None
        return {**session, "messages": self._store.get_messages(session_id)}

    def export_session_lineage(self, session_id: str) -> dict[str, Any] | None:
        """A compression lineage as one logical session: the newest segment's row with
        ``segments`` (each an :meth:`export_session`), ``lineage_session_ids``, every segment's
        ``messages`` in order and their ``message_count``; None if there is no such session."""
        lineage = cast(Lineage, self).get_compression_lineage(session_id)
        segments = [s for s in (self.export_session(sid) for sid in lineage) if s is not None]
        if not segments:
            return None
        messages = [m for segment in segments for m in segment["messages"]]
        return {
            **segments[-1],
            "segments": segments,
            "lineage_session_ids": [segment["id"] for segment in segments],
            "message_count": len(messages),
            "messages": messages,
        }

    def export_all(self, source: str | None = None) -> list[dict[str, Any]]:
        """Every session (of ``source``, or all; at most 100,000), most recently active first,
        each with its ``messages``: a backup, one JSON line per session."""
        sessions = sessions_by_last_active(self._store, source, EXPORT_ALL_LIMIT, 0)
        return [
            {**session, "messages": self._store.get_messages(session["id"])}
            for session in sessions
        ]

    def import_sessions(self, sessions: list[dict[str, Any]]) -> dict[str, Any]:
        """Imports sessions as :meth:`export_session` and :meth:`export_all` give them, all in
        one transaction or, when any entry is invalid, none.

        Returns ``ok``, ``imported``, ``skipped`` (ids that exist already), ``detached``
        (parents that are neither in the file nor in the import, or that would close a cycle:
        the child becomes a root), ``imported_ids``, ``skipped_ids`` and ``errors`` (each with
        ``index``, ``session_id`` and ``error``). Live runtime state (gateway routing,
        handoffs, rewinds) is not imported. More than 500 sessions raises
        :class:`~hermes.errors.InvalidImportError`; per entry, 10,000 messages and 5 MiB, in
        all 50,000 messages and 25 MiB.
        """
        if not isinstance(sessions, list):
            raise InvalidImportError(
                f"import_sessions takes a list of session dicts, not {type(sessions).__name__}"
            )
        if len(sessions) > IMPORT_MAX_SESSIONS:
            raise InvalidImportError(
                f"sessions must contain at most {IMPORT_MAX_SESSIONS} entries "
                f"(got {len(sessions)}); import them in batches"
            )
        entries, errors = _validated(sessions)
        if errors:
            return {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": errors}

        ids = [e[0]["id"] for e in entries]
        existing = {r["id"] for r in self._store.query("sessions", columns=["id"], where=("in", "id", ids))}
        now = time.time()
        ops: list[Insert | Append | Update] = []
        imported: list[str] = []
        wanted_parent: dict[str, str] = {}
        for session, messages in entries:
            sid = session["id"]
            if sid in existing:
                continue
            ops.append(Insert("sessions", _session_row(session, now)))
            if messages:
                ops.append(Append(sid, messages))
            parent = str(session.get("parent_session_id") or "").strip()
            if parent:
                wanted_parent[sid] = parent
            imported.append(sid)

        linked, detached = self._parents_to_link(wanted_parent, set(imported))
        ops += [
            Update("sessions", ("=", "id", child), {"parent_session_id": parent})
            for child, parent in linked.items()
        ]
        if ops:
            self._store.write(ops)
        skipped = [sid for sid in ids if sid in existing]
        return {
            "ok": True,
            "imported": len(imported),
            "skipped": len(skipped),
            "detached": detached,
            "imported_ids": imported,
            "skipped_ids": skipped,
            "errors": [],
        }

    def _parents_to_link(
        self, wanted: Mapping[str, str], imported: set[str]
    ) -> tuple[dict[str, str], int]:
        """Which imported children get their parent (one that exists, or comes in the same
        import, and closes no cycle), in import order, and how many are detached."""
        outside = {p for p in wanted.values() if p not in imported}
        known = {
            r["id"]: r["parent_session_id"]
            for r in self._store.query(
                "sessions", columns=["id", "parent_session_id"], where=("in", "id", sorted(outside))
            )
        }
        pending = dict(wanted)  # every link still wanted, as a walk for cycles must see them
        linked: dict[str, str] = {}
        for child, parent in wanted.items():
            if (parent in imported or parent in known) and not _closes_cycle(
                child, parent, pending, known
            ):
                linked[child] = parent
            else:
                del pending[child]  # only the closing edge goes: the rest of a chain stays
        return linked, len(wanted) - len(linked)


def _closes_cycle(
    child: str, parent: str, pending: Mapping[str, str], known: Mapping[str, str | None]
) -> bool:
    """Whether giving ``child`` the parent ``parent`` makes a loop, walking the links still
    wanted and the parents of existing sessions (whose own parents existed before: no new
    session is among their ancestors)."""
    seen = {child}
    current: str | None = parent
    while current:
        if current in seen:
            return True
        seen.add(current)
        current = pending[current] if current in pending else known.get(current)
    return False


def _session_row(session: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The ``sessions`` row of a validated import entry: counters start at 0 (the append moves
    them), no parent yet (linked after every row exists), runtime state left out."""
    row: dict[str, Any] = {
        "id": session["id"],
        "source": session.get("source") or "import",
        "model_config": session.get("model_config"),
        "started_at": _float_or_none(session.get("started_at")) or now,
        "archived": 1 if session.get("archived") else 0,
    }
    for field in _SESSION_TEXT_FIELDS[1:]:
        row[field] = session.get(field)
    for field in _SESSION_INT_FIELDS:
        row[field] = _int_or_zero(session.get(field))
    for field in _SESSION_FLOAT_FIELDS:
        row[field] = _float_or_none(session.get(field))
    return row


def _validated(
    sessions: Sequence[Any],
) -> tuple[list[tuple[dict[str, Any], list[dict[str, Any]]]], list[dict[str, Any]]]:
    """Each entry cleaned (session, messages), or the errors that refuse the whole import."""
    entries: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    total_messages = 0
    total_bytes = 0

    def refuse(index: int, session_id: str, error: str) -> None:
        item: dict[str, Any] = {"index": index, "error": error}
        if session_id:
            item = {"index": index, "session_id": session_id, "error": error}
        errors.append(item)

    for index, raw in enumerate(sessions):
        if not isinstance(raw, dict):
            refuse(index, "", "session must be an object")
            continue
        sid = str(raw.get("id") or "").strip()
        if not sid:
            refuse(index, "", "session id is required")
            continue
        if sid in seen:
            refuse(index, sid, "duplicate session id")
            continue
        messages = raw.get("messages") or []
        if not isinstance(messages, list):
            refuse(index, sid, "messages must be a list")
            continue
        if len(messages) > IMPORT_MAX_MESSAGES_PER_SESSION:
            refuse(index, sid, "messages exceeds the per-session import limit")
            continue
        if any(not isinstance(m, dict) for m in messages):
            refuse(index, sid, "messages must contain only objects")
            continue
        try:
            size = len(json.dumps(raw, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        except (TypeError, ValueError):
            refuse(index, sid, "session must be JSON serializable")
            continue
        if size > IMPORT_MAX_SESSION_BYTES:
            refuse(index, sid, "session exceeds the import size limit")
            continue
        total_bytes += size
        if total_bytes > IMPORT_MAX_TOTAL_BYTES:
            refuse(index, sid, "import exceeds the total size limit")
            continue
        try:
            session = _clean_session(raw, sid)
            clean_messages = [_clean_message(i, m) for i, m in enumerate(messages)]
        except ValueError as exc:
            refuse(index, sid, str(exc))
            continue
        total_messages += len(clean_messages)
        if total_messages > IMPORT_MAX_TOTAL_MESSAGES:
            refuse(index, sid, "messages exceeds the total import limit")
            continue
        seen.add(sid)
        entries.append((session, clean_messages))
    return entries, errors


def _clean_session(raw: Mapping[str, Any], session_id: str) -> dict[str, Any]:
    session = dict(raw)
    session["id"] = session_id
    session["model_config"] = _json_object_or_none(raw.get("model_config"), "model_config")
    session["parent_session_id"] = _text_or_none(raw.get("parent_session_id"), "parent_session_id")
    for field in _SESSION_TEXT_FIELDS:
        session[field] = _text_or_none(raw.get(field), field)
    return session


def _clean_message(index: int, raw: Mapping[str, Any]) -> dict[str, Any]:
    role = raw.get("role")
    if not isinstance(role, str) or not role:
        raise ValueError(f"messages[{index}].role must be a non-empty string")
    message = dict(raw)
    for field in _MESSAGE_TEXT_FIELDS:
        message[field] = _text_or_none(raw.get(field), field)
    token_count = raw.get("token_count")
    if token_count is not None:
        try:
            message["token_count"] = int(token_count)
        except (TypeError, ValueError) as exc:
            raise ValueError("token_count must be an integer") from exc
    for field in _MESSAGE_JSON_FIELDS:
        value = raw.get(field)
        if isinstance(value, str):
            try:
                message[field] = json.loads(value)
            except ValueError:
                pass  # kept as the text it is
    return {k: v for k, v in message.items() if v is not None and k not in ("message_id",)}


def _text_or_none(value: Any, field: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{field} must be a string")


def _json_object_or_none(value: Any, field: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{field} must be valid JSON") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{field} must be a JSON object")
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{field} must be JSON serializable") from exc
    return value


def _float_or_none(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _int_or_zero(value: Any) -> int:
    try:
        return 0 if value is None else int(value)
    except (TypeError, ValueError):
        return 0


class AsyncExport(AsyncFace):
    export_session = offloaded(Export.export_session)
    export_session_lineage = offloaded(Export.export_session_lineage)
    export_all = offloaded(Export.export_all)
    import_sessions = offloaded(Export.import_sessions)
