"""The api_server's stored ``/v1/responses`` answers, in ``state.db``'s ``hermes_responses``.

A table of ours, created when absent; hermes-agent neither reads nor writes it (it keeps its
own responses in a separate ``response_store.db``). A row is one response as the client got it
(``response``), the conversation a response chained from it continues (``conversation``: the
chain's messages through this response's answer), and the caller it belongs to: every read
and delete names the caller, so another caller's response is as absent as an unknown one.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Final

from hermes._core import Delete, Insert
from hermes.state.face import AsyncFace, StoreFace, offloaded

_TABLE: Final = "hermes_responses"


@dataclass(frozen=True)
class StoredResponse:
    """One stored response (see the module docstring)."""

    id: str
    caller: str
    session_id: str | None
    previous_response_id: str | None
    created_at: float
    response: dict[str, Any]
    conversation: list[dict[str, Any]]


class Responses(StoreFace):
    def save_response(
        self,
        response_id: str,
        caller: str,
        response: dict[str, Any],
        conversation: list[dict[str, Any]],
        *,
        session_id: str | None = None,
        previous_response_id: str | None = None,
    ) -> None:
        """Stores a response (one transaction); an id already stored is an error."""
        self._store.write([Insert(_TABLE, {
            "id": response_id, "caller": caller, "session_id": session_id,
            "previous_response_id": previous_response_id, "created_at": time.time(),
            "response_json": json.dumps(response, ensure_ascii=False),
            "conversation_json": json.dumps(conversation, ensure_ascii=False),
        })])

    def get_response(self, response_id: str, caller: str) -> StoredResponse | None:
        """The caller's response ``response_id``; ``None`` if absent or another caller's."""
        rows = self._store.query(_TABLE, where=_owned(response_id, caller), limit=1)
        if not rows:
            return None
        row = rows[0]
        return StoredResponse(
            id=row["id"], caller=row["caller"], session_id=row["session_id"],
            previous_response_id=row["previous_response_id"],
            created_at=float(row["created_at"]), response=json.loads(row["response_json"]),
            conversation=json.loads(row["conversation_json"]),
        )

    def delete_response(self, response_id: str, caller: str) -> bool:
        """Deletes the caller's response; False if it had none of that id."""
        [deleted] = self._store.write([Delete(_TABLE, _owned(response_id, caller))])
        return deleted == 1

    def response_count(self) -> int:
        """How many responses are stored, every caller's."""
        return self._store.count(_TABLE)


def _owned(response_id: str, caller: str) -> Any:
    return ("and", [("=", "id", response_id), ("=", "caller", caller)])


class AsyncResponses(AsyncFace):
    save_response = offloaded(Responses.save_response)
    get_response = offloaded(Responses.get_response)
    delete_response = offloaded(Responses.delete_response)
    response_count = offloaded(Responses.response_count)
