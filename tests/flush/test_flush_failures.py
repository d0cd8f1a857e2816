"""SPEC §4 failure modes, each on a real file: locked past the budget, read-only,
full disk, corrupt, deleted. Each time: False returned, nothing committed, the
tracker unchanged (the next flush writes the same messages exactly once), the
cause logged. Repeated failure spools to ``$HERMES_HOME/sessions``; the spool is
re-imported idempotently."""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.agents import assert_exact, contents

from hermes.errors import ReadOnlyDatabaseError
from hermes.recovery import claimed_path, recover_all
from hermes.state import SessionDB


def msg(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": text}


def pending(agent: Any, messages: list[Any]) -> list[Any]:
    return [m["content"] for m in agent._db_flush_tracker.pending(agent.session_id, messages)]


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING)
    return caplog


def fail_once_then_recover(agent: Any, messages: list[Any], logs: pytest.LogCaptureFixture,
                           committed: Callable[[], list[Any]], cause: str) -> None:
    """The common contract of one failed flush."""
    tracked = len(agent._db_flush_tracker)
    before = copy.deepcopy(messages)
    logs.clear()
    assert agent._flush_messages_to_session_db(messages) is False
    assert cause.lower() in logs.text.lower(), logs.text
    assert committed() == ["m0"]
    assert len(agent._db_flush_tracker) == tracked
    assert pending(agent, messages) == [m["content"] for m in messages[1:]]
    assert messages == before


# -- locked --------------------------------------------------------------------------------


def test_locked_past_the_budget(tmp_path: Path, hermes_home: Path, agent_factory: Callable[..., Any],
                                hold_write_lock: Any, logs: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path, busy_budget=0.2)
    agent = agent_factory(db)
    messages = [msg("m0")]
    assert agent._flush_messages_to_session_db(messages) is True
    messages += [msg("m1"), msg("m2", "assistant")]
    with hold_write_lock(path):
        start = time.monotonic()
        fail_once_then_recover(agent, messages, logs, lambda: contents(db), cause="lock")
        assert 0.2 <= time.monotonic() - start < 5
        messages.append(msg("m3"))  # the conversation goes on meanwhile
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, ["m0", "m1", "m2", "m3"])
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, ["m0", "m1", "m2", "m3"])
    db.close()


def test_failed_flush_keeps_the_seed(tmp_path: Path, hermes_home: Path, agent_factory: Callable[..., Any],
                                     hold_write_lock: Any) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path, busy_budget=0.1)
    db.create_session("s1", "cli")
    old = [msg("o1"), msg("o2")]
    seed = {id(m) for m in old}
    agent = agent_factory(db, _session_db_created=True, _flushed_db_message_ids=seed,
                          _flushed_db_message_session_id="s1", _last_flushed_db_idx=2)
    messages = old + [msg("n1")]
    with hold_write_lock(path):
        assert agent._flush_messages_to_session_db(messages) is False
    assert agent._flushed_db_message_ids == seed  # not consumed by a failure
    assert agent._flush_messages_to_session_db(messages) is True
    assert agent._flushed_db_message_ids == set()
    assert_exact(db, ["n1"])
    db.close()


# -- read-only --------------------------------------------------------------------------------


def chattr(flag: str, *paths: Path) -> bool:
    return all(subprocess.run(["chattr", flag, str(p)], capture_output=True).returncode == 0
               for p in paths)


@contextlib.contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    """Makes files immutable (the kernel refuses every write, even root's)."""
    if not shutil.which("chattr"):
        pytest.skip("chattr(1) is not available to make the file read-only for root")
    if not chattr("+i", *paths):
        chattr("-i", *paths)
        pytest.skip("this filesystem does not support the immutable attribute")
    try:
        yield
    finally:
        chattr("-i", *paths)


def test_read_only_file(tmp_path: Path, hermes_home: Path, agent_factory: Callable[..., Any],
                        logs: pytest.LogCaptureFixture) -> None:
    # Tests run as root, which ignores file modes: the immutable attribute is a
    # refusal root cannot bypass. (Not the -shm: SQLite maps it, and a refused
    # page fault would be SIGBUS, not an error.)
    path = tmp_path / "state.db"
    db = SessionDB(path)
    agent = agent_factory(db)
    messages = [msg("m0")]
    assert agent._flush_messages_to_session_db(messages) is True
    messages += [msg("m1"), msg("m2")]
    with immutable(path, path.with_name("state.db-wal")):
        fail_once_then_recover(agent, messages, logs, lambda: contents(db), cause=str(path))
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, ["m0", "m1", "m2"])
    db.close()


def test_read_only_file_is_reported_as_read_only(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    db.create_session("s1", "cli")
    try:
        with immutable(path, path.with_name("state.db-wal")):
            with pytest.raises(ReadOnlyDatabaseError):
                db.append_message("s1", "user", "refused")
    finally:
        db.close()


# -- full disk ---------------------------------------------------------------------------------


def test_full_disk(mount_tmpfs: Callable[..., Path], hermes_home: Path, agent_factory: Callable[..., Any],
                   logs: pytest.LogCaptureFixture) -> None:
    mnt = mount_tmpfs("small", "2m")
    db = SessionDB(mnt / "state.db")
    agent = agent_factory(db)
    messages = [msg("m0")]
    assert agent._flush_messages_to_session_db(messages) is True
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    try:
        while True:
            os.write(fd, b"\0")
    except OSError:
        pass
    os.close(fd)
    big = "lorem ipsum dolor " * 20000  # 360 kB, more than any free page in the WAL
    messages += [msg(big, "tool"), msg("m2")]
    try:
        fail_once_then_recover(agent, messages, logs, lambda: [c if c != big else "big" for c in contents(db)],
                               cause="full")
    finally:
        filler.unlink()
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(db, ["m0", big, "m2"])
    db.close()


# -- corrupt -----------------------------------------------------------------------------------


def test_corrupt_file(tmp_path: Path, hermes_home: Path, agent_factory: Callable[..., Any],
                      logs: pytest.LogCaptureFixture, sql: Any) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    agent = agent_factory(db)
    messages = [msg("m0")]
    assert agent._flush_messages_to_session_db(messages) is True
    db.close()
    [(root,)] = sql(path, "SELECT rootpage FROM sqlite_master WHERE name = 'messages'")
    [(page_size,)] = sql(path, "PRAGMA page_size")
    good = path.read_bytes()
    offset = (root - 1) * page_size
    with open(path, "r+b") as f:  # the messages table's root page is garbage now
        f.seek(offset)
        f.write(b"\xa5" * page_size)
    damaged = SessionDB(path)
    agent._session_db = damaged
    messages += [msg("m1"), msg("m2")]
    tracked = len(agent._db_flush_tracker)
    logs.clear()
    assert agent._flush_messages_to_session_db(messages) is False
    assert "malformed" in logs.text or "damaged" in logs.text, logs.text
    assert len(agent._db_flush_tracker) == tracked
    assert pending(agent, messages) == ["m1", "m2"]
    damaged.close()
    # restored from the backup, and the store reopened
    path.write_bytes(good)
    restored = SessionDB(path)
    agent._session_db = restored
    assert contents(restored) == ["m0"]
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(restored, ["m0", "m1", "m2"])
    restored.close()


# -- deleted, spooled, recovered ----------------------------------------------------------------


def spool_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_deleted_file_then_spool_then_recover_all(tmp_path: Path, hermes_home: Path,
                                                  agent_factory: Callable[..., Any],
                                                  logs: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    agent = agent_factory(db, platform="telegram")
    messages = [msg("m0")]
    assert agent._flush_messages_to_session_db(messages) is True
    os.remove(path)
    messages += [msg("m1"), {"role": "assistant", "content": None,
                             "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"b": b"x"}}}]}]
    spool = hermes_home / "sessions" / "s1.recovery.jsonl"
    before = copy.deepcopy(messages)
    for attempt in (1, 2):
        logs.clear()
        assert agent._flush_messages_to_session_db(messages) is False
        assert "deleted or replaced" in logs.text, logs.text
        assert not spool.exists(), f"spooled after {attempt} failure(s)"
        assert pending(agent, messages) == ["m1", None]
    messages.append(msg("m3"))
    assert agent._flush_messages_to_session_db(messages) is False  # third failure: spooled
    assert spool.is_file()
    assert stat.S_IMODE(spool.stat().st_mode) == 0o600
    lines = spool_lines(spool)
    assert [line["message"]["content"] for line in lines] == ["m1", None, "m3"]
    assert {line["session_id"] for line in lines} == {"s1"}
    assert {line["source"] for line in lines} == {"telegram"}
    assert str(spool) in logs.text
    assert pending(agent, messages) == []  # handed to the spool, not written twice
    messages.append(msg("m4"))
    assert agent._flush_messages_to_session_db(messages) is False  # still broken: behind the spool
    # The failed import attempt claimed the older spool (renamed it); m4 started a new one.
    claimed = claimed_path(spool)
    assert [line["message"]["content"] for line in spool_lines(claimed)] == ["m1", None, "m3"]
    assert [line["message"]["content"] for line in spool_lines(spool)] == ["m4"]
    assert messages[:len(before)] == before
    saved = claimed.read_bytes()
    db.close()

    fresh = SessionDB(path)  # the operator starts a new file and recovers
    report = recover_all(fresh)
    assert report.written == 4 and report.failed == {}
    assert_exact(fresh, ["m1", None, "m3", "m4"])
    assert fresh.get_messages("s1")[1]["tool_calls"][0]["function"]["name"] == "f"
    assert not spool.exists() and not claimed.exists()
    assert recover_all(fresh).written == 0
    claimed.write_bytes(saved)  # as if we crashed between the commit and the unlink
    again = recover_all(fresh)
    assert again.written == 0 and again.failed == {}
    assert_exact(fresh, ["m1", None, "m3", "m4"])

    agent._session_db = fresh  # and the agent carries on without rewriting anything
    messages.append(msg("m5"))
    assert agent._flush_messages_to_session_db(messages) is True
    assert_exact(fresh, ["m1", None, "m3", "m4", "m5"])
    fresh.close()


def test_next_successful_flush_imports_the_spool_first(tmp_path: Path, hermes_home: Path,
                                                       agent_factory: Callable[..., Any],
                                                       hold_write_lock: Any,
                                                       logs: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path, busy_budget=0.05)
    agent = agent_factory(db)
    messages = [msg("m0")]
    assert agent._flush_messages_to_session_db(messages) is True
    spool = hermes_home / "sessions" / "s1.recovery.jsonl"
    with hold_write_lock(path):
        for i in (1, 2, 3):
            messages.append(msg(f"m{i}"))
            assert agent._flush_messages_to_session_db(messages) is False
        assert spool.is_file()
        messages.append(msg("m4"))
        assert agent._flush_messages_to_session_db(messages) is False
    messages.append(msg("m5"))
    logs.clear()
    assert agent._flush_messages_to_session_db(messages) is True  # lock gone: spool, then the rest
    assert not spool.exists()
    assert_exact(db, ["m0", "m1", "m2", "m3", "m4", "m5"])
    assert agent._flush_messages_to_session_db(messages) is True
    assert recover_all(db).written == 0
    assert_exact(db, ["m0", "m1", "m2", "m3", "m4", "m5"])
    db.close()


def test_lines_spooled_during_an_import_are_not_lost(tmp_path: Path, hermes_home: Path,
                                                     hold_write_lock: Any) -> None:
    import threading

    from hermes.recovery import spool, spool_path

    path = tmp_path / "state.db"
    db = SessionDB(path, busy_budget=10)
    db.create_session("s1", "cli")
    spool("s1", "cli", [msg("m1")])
    reports: list[Any] = []
    with hold_write_lock(path):
        importer = threading.Thread(target=lambda: reports.append(recover_all(db)))
        importer.start()  # reads the file, then waits for the write lock
        time.sleep(0.3)
        spool("s1", "cli", [msg("m2")])  # a live agent spools behind it meanwhile
    importer.join(timeout=30)
    assert reports and reports[0].failed == {}
    left = spool_lines(spool_path("s1")) if spool_path("s1").exists() else []
    assert contents(db) + [line["message"]["content"] for line in left] == ["m1", "m2"]
    db.close()


@pytest.mark.parametrize("bad_line", [b'{"session_id": "s1"}', b"42", b"\xff\xfe not utf-8"],
                         ids=["no-message-key", "not-an-object", "not-utf8"])
def test_damaged_spool_never_makes_the_flush_raise(db: SessionDB, hermes_home: Path,
                                                   agent_factory: Callable[..., Any], bad_line: bytes) -> None:
    spool_file = hermes_home / "sessions" / "s1.recovery.jsonl"
    spool_file.parent.mkdir()
    good = json.dumps({"session_id": "s1", "source": "cli", "message": msg("spooled")}).encode()
    spool_file.write_bytes(good + b"\n" + bad_line + b"\n")
    agent = agent_factory(db)
    messages = [msg("new")]
    results = [agent._flush_messages_to_session_db(messages) for _ in range(2)]
    assert set(results) <= {True, False}
    if True in results:
        assert "new" in contents(db)
