"""Stateful fuzzing of the identity-deduplicated flush against a simple model (issue 7, item 5).

A hypothesis ``RuleBasedStateMachine`` drives ``AIAgent._flush_messages_to_session_db`` on an
agent built with ``object.__new__`` (SPEC §4), on a real state.db, with random:

* appends of new message dicts, of non-dict items, and of a reference already in the list;
* in-place edits, pops, list replacements (compaction: a new summary + a tail of the old
  list), re-insertion of a message that was removed earlier;
* new turns (history reloaded from the database as fresh dicts, as the gateway does);
* session switches (new or earlier sessions);
* the one-shot identity seed;
* real failures: another process holds ``BEGIN IMMEDIATE`` on the file (on PostgreSQL, another
  connection holds the store's tables locked) while the store has a 20 ms busy budget, so the
  flush fails exactly as under lock contention; after ``SPOOL_AFTER_FAILURES`` failures (or
  while a spool exists) the agent spools;
* re-flushes.

The model: a dict is written once per session the agent writes it to (SPEC §4: "flushed earlier
by this agent for this session", history and honoured seed objects never; "a change of
``session_id`` resets the tracker", so a return to an earlier session writes the live list there
again), in list order; a
failed flush commits nothing; spooled messages come back, before anything newer, at the next
successful flush. After every step the database must equal the model session by session
(contents in order, ``message_count``), and the spool files must hold exactly the model's spool.

25 examples in the normal run, 300 with ``HERMES_FULL=1`` (``HERMES_FUZZ_EXAMPLES``).
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hermes.agent.persistence import SPOOL_AFTER_FAILURES
from hermes.recovery import spool_path
from hermes.state import SessionDB
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support import postgres
from support.agents import agent_shell

from .harness import setting

_LOCKER = """
import sqlite3, sys
con = None
for line in sys.stdin:
    command, _, path = line.strip().partition(" ")
    if command == "lock":
        con = sqlite3.connect(path, isolation_level=None, timeout=10)
        con.execute("BEGIN IMMEDIATE")
    elif command == "unlock" and con is not None:
        con.execute("ROLLBACK")
        con.close()
        con = None
    print("ok", flush=True)
"""


class Locker:
    """Another process that takes and drops the write lock of a file on request (on the
    PostgreSQL leg, a connection locking the tables of the store standing for it)."""

    _process: subprocess.Popen[str] | None = None
    _on_the_server: postgres.TablesLocked | None = None

    @classmethod
    def lock(cls, path: Path) -> None:
        if postgres.ENABLED:
            cls._on_the_server = postgres.TablesLocked(postgres.store_url(path))
        else:
            cls.send(f"lock {path}")

    @classmethod
    def unlock(cls) -> None:
        if cls._on_the_server is not None:
            cls._on_the_server.release()
            cls._on_the_server = None
        else:
            cls.send("unlock")

    @classmethod
    def send(cls, command: str) -> None:
        if cls._process is None or cls._process.poll() is not None:
            cls._process = subprocess.Popen([sys.executable, "-c", _LOCKER], text=True,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            atexit.register(cls._process.kill)
        assert cls._process.stdin is not None and cls._process.stdout is not None
        cls._process.stdin.write(command + "\n")
        cls._process.stdin.flush()
        assert cls._process.stdout.readline().strip() == "ok"


_counter = itertools.count()


def message(role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": f"m{next(_counter)}"}


class FlushMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="hermes-fuzz-"))
        self.old_home = os.environ.get("HERMES_HOME")
        os.environ["HERMES_HOME"] = str(self.tmp / "home")
        self.path = self.tmp / "state.db"
        self.db = SessionDB(self.path, synchronous="NORMAL", busy_budget=0.02)
        self.agent = agent_shell(self.db, "s0", "fuzz")
        self.live: list[Any] = []
        self.history: list[Any] | None = None
        self.removed: list[dict[str, Any]] = []
        # the model
        self.sid = "s0"
        self.sessions = ["s0"]
        # The tracker: the session it tracks and what it knows is persisted there (objects
        # kept alive, as the tracker keeps them). SPEC §4: a change of session resets it, so
        # going back to an earlier session forgets what was written there.
        self.tracker_sid: str | None = None
        self.persisted: dict[int, Any] = {}
        self.stored: dict[str, list[str]] = {}
        self.spooled: dict[str, list[str]] = {}
        self.failures = 0
        self.row_for: str | None = None  # the session whose row the agent made sure of
        self.seed: tuple[str, set[int]] | None = None
        self.locked = False

    def teardown(self) -> None:
        if self.locked:
            Locker.unlock()
        self.db.close()
        if self.old_home is None:
            os.environ.pop("HERMES_HOME", None)
        else:
            os.environ["HERMES_HOME"] = self.old_home
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the live list --------------------------------------------------------------------

    @rule(role=st.sampled_from(["user", "assistant", "tool"]))
    def append(self, role: str) -> None:
        self.live.append(message(role))

    @rule(item=st.sampled_from(["text", None, 7, ("a", "tuple")]))
    def append_non_dict(self, item: Any) -> None:
        self.live.append(item)

    @precondition(lambda self: any(isinstance(m, dict) for m in self.live))
    @rule(data=st.data())
    def append_same_reference(self, data: st.DataObject) -> None:
        self.live.append(data.draw(st.sampled_from([m for m in self.live if isinstance(m, dict)])))

    @precondition(lambda self: any(isinstance(m, dict) for m in self.live))
    @rule(data=st.data())
    def edit_in_place(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from([m for m in self.live if isinstance(m, dict)]))
        target["content"] = f"{target['content']}e{next(_counter)}"

    @precondition(lambda self: bool(self.live))
    @rule()
    def pop(self) -> None:
        item = self.live.pop()
        if isinstance(item, dict):
            self.removed.append(item)

    # Within the tracker's memory of released dicts (1,024), a dict put back is recognised.
    @precondition(lambda self: bool(self.removed))
    @rule(data=st.data())
    def reinsert_removed(self, data: st.DataObject) -> None:
        self.live.append(data.draw(st.sampled_from(self.removed)))

    @rule(keep=st.integers(0, 4))
    def compact(self, keep: int) -> None:
        tail = self.live[len(self.live) - keep:] if keep else []
        self.live = [{"role": "system", "content": f"summary{next(_counter)}"}] + tail

    @rule()
    def new_turn(self) -> None:
        """As the gateway does: history loaded from the database (fresh dicts), plus the
        user's message; the history objects are passed as ``conversation_history``."""
        if self.locked:
            return
        history = [dict(m) for m in self.db.get_messages_as_conversation(self.sid)]
        self.history = history
        self.live = list(history) + [message()]

    @rule(data=st.data())
    def switch_session(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(self.sessions + [f"s{len(self.sessions)}"]))
        if sid not in self.sessions:
            self.sessions.append(sid)
        self.sid = sid
        self.agent.session_id = sid

    @precondition(lambda self: any(isinstance(m, dict) for m in self.live))
    @rule(data=st.data())
    def seed_identities(self, data: st.DataObject) -> None:
        dicts = [m for m in self.live if isinstance(m, dict)]
        chosen = data.draw(st.lists(st.sampled_from(dicts), min_size=1, max_size=3))
        ids = {id(m) for m in chosen}
        self.agent._flushed_db_message_ids = set(ids)
        self.agent._flushed_db_message_session_id = self.sid
        self.agent._last_flushed_db_idx = max(1, len(self.live))
        self.seed = (self.sid, ids)
        self.seed_objects = chosen  # kept alive: the seed names them by id()

    # -- failures -----------------------------------------------------------------------

    @precondition(lambda self: not self.locked)
    @rule()
    def lock(self) -> None:
        Locker.lock(self.path)
        self.locked = True

    @precondition(lambda self: self.locked)
    @rule()
    def unlock(self) -> None:
        Locker.unlock()
        self.locked = False

    # -- the flush ----------------------------------------------------------------------

    def pending(self) -> list[dict[str, Any]]:
        known = self.persisted if self.tracker_sid == self.sid else {}
        skip = {id(m) for m in self.history or []}
        if self.seed is not None and self.seed[0] == self.sid:
            skip |= self.seed[1]
        out: list[dict[str, Any]] = []
        seen: set[int] = set()
        for item in self.live:
            if isinstance(item, dict) and id(item) not in known and id(item) not in skip \
                    and id(item) not in seen:
                seen.add(id(item))
                out.append(item)
        return out

    def remember(self, written: list[dict[str, Any]]) -> None:
        if self.tracker_sid != self.sid:
            self.tracker_sid, self.persisted = self.sid, {}
        known = self.persisted
        for item in written + list(self.history or []):
            known[id(item)] = item
        if self.seed is not None and self.seed[0] == self.sid:
            for item in self.seed_objects:
                known[id(item)] = item
            self.seed = None

    @rule()
    def flush(self) -> None:
        pending = self.pending()
        result = self.agent._flush_messages_to_session_db(self.live, self.history)
        # Nothing to write (no new message, no spool to import, the session row known to
        # exist) succeeds even while the file is locked.
        needs_write = bool(pending or self.spooled.get(self.sid) or self.row_for != self.sid)
        if not self.locked or not needs_write:
            assert result is True
            self.row_for = self.sid
            self.stored.setdefault(self.sid, []).extend(self.spooled.pop(self.sid, []))
            self.stored[self.sid].extend(m["content"] for m in pending)
            self.remember(pending)
            self.failures = 0
            return
        assert result is False
        self.failures += 1
        if self.spooled.get(self.sid) or self.failures >= SPOOL_AFTER_FAILURES:
            self.spooled.setdefault(self.sid, []).extend(m["content"] for m in pending)
            self.remember(pending)

    # -- what must hold -------------------------------------------------------------------

    @invariant()
    def database_matches_the_model(self) -> None:
        for sid in self.sessions:
            rows = self.db.get_messages(sid)
            assert [r["content"] for r in rows] == self.stored.get(sid, []), sid
            session = self.db.get_session(sid)
            if session is not None:
                assert session["message_count"] == len(rows)

    @invariant()
    def spool_matches_the_model(self) -> None:
        for sid in self.sessions:
            path = spool_path(sid)
            lines: list[str] = []
            for part in sorted(path.parent.glob(path.name + "*")) if path.parent.is_dir() else []:
                if part.name.endswith(".rejected"):
                    continue
                lines += [json.loads(line)["message"]["content"]
                          for line in part.read_text().splitlines()]
            assert sorted(lines) == sorted(self.spooled.get(sid, [])), sid


FlushMachine.TestCase.settings = settings(
    max_examples=int(setting("fuzz_examples", 25, 300)), stateful_step_count=30,
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestFlushAgainstTheModel = FlushMachine.TestCase


# -- regressions found by the machine ---------------------------------------------------------


def test_a_removed_message_put_back_is_not_written_twice(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    with SessionDB(tmp_path / "state.db") as db:
        agent = agent_shell(db, "s0", "fuzz")
        once = {"role": "user", "content": "once"}
        live: list[Any] = [once]
        assert agent._flush_messages_to_session_db(live) is True
        live.pop()  # e.g. a retry takes the last message off ...
        assert agent._flush_messages_to_session_db(live) is True
        live.append(once)  # ... and puts the same dict back
        assert agent._flush_messages_to_session_db(live) is True
        assert [m["content"] for m in db.get_messages("s0")] == ["once"]


def test_a_seed_met_by_a_spooling_flush_with_nothing_new_is_used_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(Found by the machine on PostgreSQL; the agent's, not the backend's: a spooling flush
    that had nothing new left the seed standing, so a later seed replaced it unhonoured and
    the dict it named was spooled and written.)"""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    path = tmp_path / "state.db"
    with SessionDB(path, busy_budget=0.02) as db:
        agent = agent_shell(db, "s0", "fuzz")
        first = {"role": "user", "content": "first"}
        summary = {"role": "system", "content": "summary"}

        def seed(*known: dict[str, Any]) -> None:
            agent._flushed_db_message_ids = {id(m) for m in known}
            agent._flushed_db_message_session_id = "s0"
            agent._last_flushed_db_idx = 2

        assert agent._flush_messages_to_session_db([]) is True  # the session row
        Locker.lock(path)
        try:
            for _ in range(SPOOL_AFTER_FAILURES):  # the last one spools "first"
                assert agent._flush_messages_to_session_db([first]) is False
            live = [summary, first]
            seed(summary)  # a caller vouches for the summary
            assert agent._flush_messages_to_session_db(live) is False  # spools nothing new
            seed(first)
            assert agent._flush_messages_to_session_db(live) is False
        finally:
            Locker.unlock()
        assert agent._flush_messages_to_session_db(live) is True
        assert [m["content"] for m in db.get_messages("s0")] == ["first"]
