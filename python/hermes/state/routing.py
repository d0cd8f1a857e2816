"""The gateway's routing entries (session key to session) and ``state_meta`` keys."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hermes._core import Delete, Insert
from hermes.state.face import AsyncFace, StoreFace, offloaded

if TYPE_CHECKING:
    from hermes._core import _Filter as Filter


class Routing(StoreFace):
    """``gateway_routing`` holds one row per session key: the gateway's serialized entry for
    it, in a ``scope`` (hermes-agent passes its sessions directory, so two gateways with
    different directories never share entries)."""

    def save_gateway_routing_entry(
        self, session_key: str, entry_json: str, *, scope: str = ""
    ) -> None:
        """Stores (or replaces) the entry for a session key; an empty key or entry is ignored."""
        if session_key and entry_json:
            self._store.write([_routing_row(scope, session_key, entry_json, time.time())])

    def replace_gateway_routing_entries(
        self, entries: Mapping[str, str], *, scope: str = ""
    ) -> None:
        """Makes ``entries`` the whole of ``scope``'s routing, in one transaction: keys not
        in ``entries`` are removed, other scopes are left alone. Pairs with an empty key or
        entry are skipped."""
        now = time.time()
        self._store.write(
            [Delete("gateway_routing", ("=", "scope", scope))]
            + [_routing_row(scope, k, v, now) for k, v in entries.items() if k and v]
        )

    def load_gateway_routing_entries(self, *, scope: str = "") -> dict[str, str]:
        """Every session key's entry JSON in ``scope``."""
        rows = self._store.query(
            "gateway_routing",
            columns=["session_key", "entry_json"],
            where=("=", "scope", scope),
            order_by=["session_key"],
        )
        return {row["session_key"]: row["entry_json"] for row in rows}

    def delete_gateway_routing_entries(
        self, session_keys: Sequence[str], *, scope: str = ""
    ) -> None:
        """Removes the entries of ``session_keys`` in ``scope`` (absent keys are no error)."""
        if session_keys:
            in_scope: Filter = ("=", "scope", scope)
            keys: Filter = ("in", "session_key", list(session_keys))
            self._store.write([Delete("gateway_routing", ("and", [in_scope, keys]))])

    def get_meta(self, key: str) -> str | None:
        """The ``state_meta`` value of ``key``, None when it has none."""
        return self._store.get_meta(key)

    def set_meta(self, key: str, value: str) -> None:
        """Sets (or replaces) the ``state_meta`` value of ``key``."""
        self._store.set_meta(key, value)


def _routing_row(scope: str, session_key: str, entry_json: str, now: float) -> Insert:
    return Insert(
        "gateway_routing",
        {"scope": scope, "session_key": session_key, "entry_json": entry_json, "updated_at": now},
        on_conflict="replace",
    )


class AsyncRouting(AsyncFace):
    save_gateway_routing_entry = offloaded(Routing.save_gateway_routing_entry)
    replace_gateway_routing_entries = offloaded(Routing.replace_gateway_routing_entries)
    load_gateway_routing_entries = offloaded(Routing.load_gateway_routing_entries)
    delete_gateway_routing_entries = offloaded(Routing.delete_gateway_routing_entries)
    get_meta = offloaded(Routing.get_meta)
    set_meta = offloaded(Routing.set_meta)
