"""The gateway's routing entries (session key to session) and ``state_meta`` keys."""

from __future__ import annotations

from collections.abc import Sequence

from hermes.state.face import AsyncFace, StoreFace, offloaded


class Routing(StoreFace):
    def save_routing_entry(self, session_key: str, entry_json: str, scope: str = "") -> None:
        """Stores the gateway's entry for a session key (one transaction)."""
        self._store.save_routing(session_key, entry_json, scope)

    def load_routing_entries(self, scope: str = "") -> dict[str, str]:
        """Every session key's entry JSON in ``scope``."""
        return dict(self._store.load_routing(scope))

    def delete_routing_entries(self, session_keys: Sequence[str], scope: str = "") -> None:
        self._store.delete_routing(list(session_keys), scope)

    def get_meta(self, key: str) -> str | None:
        return self._store.get_meta(key)

    def set_meta(self, key: str, value: str) -> None:
        self._store.set_meta(key, value)


class AsyncRouting(AsyncFace):
    save_routing_entry = offloaded(Routing.save_routing_entry)
    load_routing_entries = offloaded(Routing.load_routing_entries)
    delete_routing_entries = offloaded(Routing.delete_routing_entries)
    get_meta = offloaded(Routing.get_meta)
    set_meta = offloaded(Routing.set_meta)
