"""A ``postgresql://`` store from Python: ``SessionDB(url)``, ``HERMES_DATABASE_URL``,
``database.url`` in config.yaml and ``--database-url``, on the real test server that
``scripts/postgres`` starts (skipped, saying so, without one)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from support import postgres

from hermes.cli import main
from hermes.config import load_config
from hermes.paths import shown_location
from hermes.state import SessionDB

needs_server = pytest.mark.skipif(not os.environ.get("HERMES_TEST_POSTGRES_URL"),
                                  reason="no test server: run under scripts/postgres")


def with_password(url: str) -> str:
    """``url`` with a password in its user info (the test server trusts any)."""
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:s3cret@{host}"


@needs_server
def test_a_session_db_on_a_url_writes_and_reads_and_never_shows_the_password() -> None:
    url = with_password(postgres.fresh_store())
    with SessionDB(url) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello\x00there")
        assert "s3cret" not in repr(db) and "s3cret" not in db.location
        assert db.location == shown_location(url)
    with SessionDB(url) as again:
        assert [m["content"] for m in again.get_messages("s1")] == ["hello\x00there"]
        assert again.get_session("s1")["message_count"] == 1


def test_the_url_comes_from_the_environment_over_the_file(
        hermes_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (hermes_home / "config.yaml").write_text(
        "database:\n  url: postgresql://file@h/db\n", encoding="utf-8")
    assert load_config().store_location == "postgresql://file@h/db"
    assert load_config().gateway.state_db == "postgresql://file@h/db"
    monkeypatch.setenv("HERMES_DATABASE_URL", "postgresql://env@h/db")
    assert load_config().store_location == "postgresql://env@h/db"
    monkeypatch.setenv("HERMES_DATABASE_URL", "")
    (hermes_home / "config.yaml").write_text("", encoding="utf-8")
    assert load_config().store_location == hermes_home / "state.db"


def test_shown_locations_drop_only_the_password() -> None:
    assert shown_location("postgresql://u:p@ss@h:5/db?sslmode=require") == \
        "postgresql://u@h:5/db?sslmode=require"
    assert shown_location("postgresql://h/db") == "postgresql://h/db"
    assert shown_location(Path("/a/state.db")) == "/a/state.db"


@needs_server
def test_sessions_commands_take_a_database_url(
        hermes_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = postgres.fresh_store()
    with SessionDB(url) as db:
        db.create_session("s-pg", "cli")
        db.append_message("s-pg", "user", "on the server")
    assert main(["sessions", "list", "--database-url", url]) == 0
    out = capsys.readouterr().out
    assert "s-pg" in out
    assert not (hermes_home / "state.db").exists(), "no file was created beside it"
    assert main(["sessions", "list", "--database-url", url, "--db", "x.db"]) == 1
    assert "give one" in capsys.readouterr().err


@needs_server
def test_a_closed_store_holds_no_server_connection() -> None:
    # Closing ends the connections at once, not when the object is garbage: a test run (or
    # a gateway) that keeps closed stores referenced must not run the server out of them.
    url = postgres.fresh_store() + "&application_name=hermes_closing"
    db = SessionDB(url)
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "hello")
    assert db.get_messages("s1")
    assert postgres.connections_named("hermes_closing") >= 2, "a writer and a reader"
    db.close()
    assert postgres.connections_named("hermes_closing", settle_at_most=0) == 0
    assert db.location  # still referenced


@needs_server
def test_a_burst_of_reads_keeps_a_bounded_pool_open() -> None:
    url = postgres.fresh_store() + "&application_name=hermes_burst"
    with SessionDB(url) as db:
        db.create_session("s1", "cli")
        db.append_messages("s1", [{"role": "user", "content": f"m{i}"} for i in range(200)])
        start = threading.Barrier(24)
        loaded: list[int] = []

        def read() -> None:
            start.wait()
            for _ in range(5):
                loaded.append(len(db.get_messages("s1")))

        readers = [threading.Thread(target=read) for _ in range(24)]
        for thread in readers:
            thread.start()
        for thread in readers:
            thread.join()
        assert loaded == [200] * 120
        open_now = postgres.connections_named("hermes_burst", settle_at_most=9)
        assert open_now <= 9, "8 idle readers and the writer"
