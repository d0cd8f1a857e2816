"""The gateway's routing index and ``state_meta`` against a real ``state.db``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from hermes.errors import DatabaseLockedError
from hermes.state import SessionDB


def test_replacing_a_scopes_entries_removes_the_others_and_leaves_other_scopes(
    db: SessionDB,
) -> None:
    db.save_gateway_routing_entry("k1", '{"a": 1}')
    db.save_gateway_routing_entry("k2", '{"b": 2}')
    db.save_gateway_routing_entry("k1", '{"c": 3}', scope="other")
    db.replace_gateway_routing_entries({"k2": '{"b": 3}', "k3": "{}", "": "{}", "k4": ""})
    assert db.load_gateway_routing_entries() == {"k2": '{"b": 3}', "k3": "{}"}
    assert db.load_gateway_routing_entries(scope="other") == {"k1": '{"c": 3}'}
    db.replace_gateway_routing_entries({}, scope="other")
    assert db.load_gateway_routing_entries(scope="other") == {}


def test_an_empty_key_or_entry_is_not_saved_and_scope_is_keyword_only(db: SessionDB) -> None:
    db.save_gateway_routing_entry("", "{}")
    db.save_gateway_routing_entry("k", "")
    db.delete_gateway_routing_entries([])
    assert db.load_gateway_routing_entries() == {}
    with pytest.raises(TypeError):
        db.load_gateway_routing_entries("scope")  # type: ignore[misc]


def test_a_replace_under_a_held_lock_changes_nothing(
    tmp_path: Path, hold_write_lock: Callable[[Path], AbstractContextManager[Any]]
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path, busy_budget=0.2) as db:
        db.save_gateway_routing_entry("k1", "{}")
        with hold_write_lock(path), pytest.raises(DatabaseLockedError):
            db.replace_gateway_routing_entries({"k2": "{}"})
        assert db.load_gateway_routing_entries() == {"k1": "{}"}


def test_meta_values_are_set_replaced_and_kept_across_opens(db_path: Path, db: SessionDB) -> None:
    assert db.get_meta("k") is None
    db.set_meta("k", "v1")
    db.set_meta("k", "v2")
    with SessionDB(db_path) as again:
        assert again.get_meta("k") == "v2"
