"""Runs the benchmark workloads against ONE system, in this interpreter.

``benches/run.py`` keeps one serving process per system (``hermes`` in our
interpreter, the peers in the peer venv; ``benchlib.protocol``) and sends it
one workload at a time (``run(workload, sync, kwargs)``), so that all systems
run each workload back to back, round after round.

    python benches/driver.py --serve SYSTEM CONFIG_JSON

SYSTEM is ``hermes`` (ours), ``upstream`` (hermes-agent 0.19.0), ``openai``
(OpenAI Agents SDK ``SQLiteSession``) or ``langgraph`` (``SqliteSaver``).
Every system gets the same messages (``benches/workload.py``), a fresh file
per workload, WAL, and ``PRAGMA synchronous`` = SYNC on every connection
that writes. Raw samples (nanoseconds) are returned; ``run.py`` computes the
statistics the same way for all (``benchlib.stats``).

Each system is driven the way its users drive it:

* ``hermes``: ``hermes.agent.AIAgent._flush_messages_to_session_db(live)`` on
  an ``object.__new__`` agent over ``hermes.state.SessionDB(path, synchronous=SYNC)``;
* ``upstream``: ``run_agent.AIAgent._flush_messages_to_session_db(live)`` on
  an ``object.__new__`` agent over its ``hermes_state.SessionDB``, whose
  connection gets ``PRAGMA synchronous=SYNC``;
* ``openai``: ``await SQLiteSession.add_items(new)`` (file-backed), every
  thread-local connection with ``PRAGMA synchronous=SYNC``;
* ``langgraph``: ``SqliteSaver.put(...)`` of a checkpoint whose state is the
  ``messages`` list (the whole list, as a messages state is stored).

On PostgreSQL (``CONFIG_JSON`` names a ``postgres`` server URL; ``run.py
--postgres``) every workload gets a fresh database on that server instead of
a file, created with ``synchronous_commit`` on (FULL) or off (NORMAL) as its
default (``benchlib.postgres``), and the systems are:

* ``hermes``: the same agent flush over ``SessionDB(url, synchronous=SYNC)``;
* ``openai``: ``await SQLAlchemySession.add_items(new)`` on an asyncpg engine
  (``postgresql+asyncpg://``), one engine and event loop per thread;
* ``langgraph``: ``PostgresSaver.put(...)`` on a psycopg ``ConnectionPool``
  (autocommit, ``prepare_threshold=0``, ``dict_row``, as its docs set it up).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib and the other benches

import workload  # noqa: E402
from benchlib import postgres, protocol  # noqa: E402

ns = time.perf_counter_ns


class Unsupported(Exception):
    """The system has no API for this workload."""


# -- systems -----------------------------------------------------------------


class System:
    """One open store. ``conversation(sid)`` returns a Conversation."""

    name = "?"

    def __init__(self, path: Path, sync: str) -> None:
        self.path = path
        self.sync = sync

    def conversation(self, sid: str) -> "Conversation":
        raise NotImplementedError

    def load(self, sid: str) -> list[Any]:
        raise NotImplementedError

    def count(self, sid: str) -> int:
        raise Unsupported

    def seed(self, sid: str, msgs: list[dict[str, Any]]) -> None:
        """Writes a whole conversation at once (unmeasured seeding of the search workload)."""
        raise Unsupported("no message search")

    def search(self, query: str) -> int:
        """Runs one message search (20 hits at most); returns the number of hits."""
        raise Unsupported("no message search")

    table = "messages"
    seed_whole = False

    def finish(self, sids: list[str]) -> int:
        """Closes the store, then counts the rows stored for ``sids`` (a check
        that every write landed). Counted after closing: the stdlib sqlite3 is
        a second SQLite in our process, and two copies must not share an open
        file (their POSIX locks do not see each other)."""
        self.close()
        return sum(
            _sqlite_rows(self.path, f"SELECT COUNT(*) FROM {self.table} WHERE session_id = ?", sid)
            for sid in sids
        )

    def settle(self) -> None:
        """Waits for work the store left for after its commits; timed after a workload so
        deferred work is charged to it. Only ours defers any (its search index)."""

    def fast(self) -> "_Fast":
        """A context in which writes need not be durable (unmeasured seeding)."""
        return _Fast(None)

    def close(self) -> None:
        pass


class _Fast:
    def __init__(self, set_sync: Callable[[str], None] | None, restore: str = "FULL") -> None:
        self.set_sync, self.restore = set_sync, restore

    def __enter__(self) -> None:
        if self.set_sync:
            self.set_sync("OFF")

    def __exit__(self, *exc: object) -> None:
        if self.set_sync:
            self.set_sync(self.restore)


class Conversation:
    """One conversation's writer: ``flush(live, new)`` persists a turn."""

    def flush(self, live: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
        raise NotImplementedError


def _sqlite_rows(path: Path, sql: str, *args: Any) -> int:
    import sqlite3

    conn = sqlite3.connect(str(path))
    try:
        return int(conn.execute(sql, args).fetchone()[0])
    finally:
        conn.close()


class Hermes(System):
    name = "hermes"

    def __init__(self, path: Path, sync: str) -> None:
        super().__init__(path, sync)
        from hermes.state import SessionDB

        self.db = SessionDB(path, synchronous=sync)  # type: ignore[arg-type]

    def conversation(self, sid: str) -> Conversation:
        from hermes.agent import AIAgent

        self.db.create_session(sid, "cli")
        agent = object.__new__(AIAgent)
        agent._session_db = self.db
        agent._session_db_created = True
        agent.session_id = sid
        agent.platform = "cli"
        return _AgentConversation(agent)

    def load(self, sid: str) -> list[Any]:
        return self.db.get_messages_as_conversation(sid)

    def count(self, sid: str) -> int:
        return self.db.live_message_count(sid)  # type: ignore[return-value]

    def settle(self) -> None:
        # A search first indexes every row still pending, then queries (no hit here).
        self.db.search_messages('"settle-probe-no-such-words"')

    def seed(self, sid: str, msgs: list[dict[str, Any]]) -> None:
        self.db.create_session(sid, "cli")
        self.db.append_messages(sid, msgs)

    def search(self, query: str) -> int:
        return len(self.db.search_messages(query, limit=20))

    def close(self) -> None:
        self.db.close()


class _AgentConversation(Conversation):
    def __init__(self, agent: Any) -> None:
        self.agent = agent

    def flush(self, live: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
        if self.agent._flush_messages_to_session_db(live) is False:
            raise RuntimeError("flush returned False")


class Upstream(System):
    name = "upstream"

    def __init__(self, path: Path, sync: str) -> None:
        super().__init__(path, sync)
        import hermes_state

        self.db = hermes_state.SessionDB(path)
        self._set_sync(sync)

    def _set_sync(self, level: str) -> None:
        with self.db._lock:
            self.db._conn.execute(f"PRAGMA synchronous={level}")

    def fast(self) -> _Fast:
        return _Fast(self._set_sync, self.sync)

    def conversation(self, sid: str) -> Conversation:
        import run_agent

        self.db.create_session(sid, "cli")
        agent = object.__new__(run_agent.AIAgent)
        agent._session_db = self.db
        agent._session_db_created = True
        agent.session_id = sid
        agent.platform = "cli"
        agent._session_messages = []
        agent._last_flushed_db_idx = 0
        agent._flushed_db_message_ids = set()
        agent._flushed_db_message_session_id = None
        return _UpstreamConversation(agent)

    def load(self, sid: str) -> list[Any]:
        return self.db.get_messages_as_conversation(sid)

    def count(self, sid: str) -> int:
        # Its gateway's coherence guard reads the session row.
        row = self.db.get_session(sid)
        return int(row["message_count"]) if row else 0

    def close(self) -> None:
        self.db.close()


class _UpstreamConversation(_AgentConversation):
    def flush(self, live: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
        # Its flush swallows errors (logs a warning); run.py checks the rows.
        self.agent._flush_messages_to_session_db(live)


class OpenAI(System):
    name = "openai"
    table = "agent_messages"

    def __init__(self, path: Path, sync: str) -> None:
        super().__init__(path, sync)
        from agents import SQLiteSession

        level = {"level": sync}

        class Session(SQLiteSession):  # type: ignore[misc]
            """SQLiteSession whose every connection runs at the measured level."""

            def _get_connection(self):  # type: ignore[no-untyped-def]
                conn = super()._get_connection()
                if getattr(self._local, "sync", None) != level["level"]:
                    conn.execute(f"PRAGMA synchronous={level['level']}")
                    self._local.sync = level["level"]
                return conn

        self._level = level
        self._cls = Session
        self._loops = threading.local()
        self._sessions: dict[str, Any] = {}

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop = getattr(self._loops, "loop", None)
        if loop is None:
            loop = self._loops.loop = asyncio.new_event_loop()
        return loop

    def run(self, coro: Any) -> Any:
        return self._loop().run_until_complete(coro)

    def session(self, sid: str) -> Any:
        if sid not in self._sessions:
            self._sessions[sid] = self._cls(sid, str(self.path))
        return self._sessions[sid]

    def fast(self) -> _Fast:
        def set_level(level: str) -> None:
            self._level["level"] = level

        return _Fast(set_level, self.sync)

    def conversation(self, sid: str) -> Conversation:
        session = self.session(sid)
        system = self

        class Conv(Conversation):
            def flush(self, live: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
                system.run(session.add_items(new))

        return Conv()

    def load(self, sid: str) -> list[Any]:
        return self.run(self.session(sid).get_items())  # type: ignore[no-any-return]



class LangGraph(System):
    name = "langgraph"
    seed_whole = True

    def __init__(self, path: Path, sync: str) -> None:
        super().__init__(path, sync)
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        self.conn = sqlite3.connect(str(path), check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()
        self._set_sync(sync)

    def _set_sync(self, level: str) -> None:
        with self.saver.lock:
            self.conn.execute(f"PRAGMA synchronous={level}")

    def fast(self) -> _Fast:
        return _Fast(self._set_sync, self.sync)

    def conversation(self, sid: str) -> Conversation:
        from langgraph.checkpoint.base import empty_checkpoint

        saver = self.saver
        state = {"config": {"configurable": {"thread_id": sid, "checkpoint_ns": ""}}, "step": 0}

        class Conv(Conversation):
            def flush(self, live: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
                state["step"] += 1
                step = state["step"]
                checkpoint = empty_checkpoint()
                checkpoint["channel_values"] = {"messages": live}
                checkpoint["channel_versions"] = {"messages": step}
                state["config"] = saver.put(
                    state["config"],
                    checkpoint,
                    {"source": "loop", "step": step, "parents": {}},
                    {"messages": step},
                )

        return Conv()

    def load(self, sid: str) -> list[Any]:
        config = {"configurable": {"thread_id": sid, "checkpoint_ns": ""}}
        got = self.saver.get_tuple(config)
        return list(got.checkpoint["channel_values"]["messages"]) if got else []

    def finish(self, sids: list[str]) -> int:
        n = sum(len(self.load(sid)) for sid in sids)
        self.close()
        return n

    def close(self) -> None:
        self.conn.close()


class _OnServer(System):
    """A system on a PostgreSQL database (``self.path`` is its URL): its rows are counted
    there, by ``psql``, after it closed."""

    key = "session_id"

    def finish(self, sids: list[str]) -> int:
        self.close()
        return postgres.rows(str(self.path), self.table, self.key, sids)


class HermesPostgres(_OnServer, Hermes):
    name = "hermes"

    def settle(self) -> None:
        # A search indexes what is pending first, for at most the busy budget, then answers
        # from the index as it is: searched (for no session, so only the indexing is charged)
        # until the pending list, read on the server, is empty.
        while True:
            self.db.search_messages('"settle-probe-no-such-words"', session_id="settle-probe-no-such-session")
            if not postgres.scalar(str(self.path), "SELECT COUNT(*) FROM hermes_search_pending"):
                break


class OpenAIPostgres(_OnServer):
    name = "openai"
    table = "agent_messages"

    def __init__(self, path: Path, sync: str) -> None:
        super().__init__(path, sync)
        from agents.extensions.memory import SQLAlchemySession

        self._cls = SQLAlchemySession
        self._local = threading.local()
        self._opened: list[tuple[asyncio.AbstractEventLoop, Any]] = []
        # Its tables, once, before any thread races to create them.
        self.run(SQLAlchemySession("setup", engine=self._thread().engine, create_tables=True).get_items())

    def _thread(self) -> Any:
        """This thread's event loop and engine (asyncpg connections belong to the loop that made them)."""
        local = self._local
        if not hasattr(local, "loop"):
            from sqlalchemy.ext.asyncio import create_async_engine

            local.loop = asyncio.new_event_loop()
            local.engine = create_async_engine(str(self.path).replace("postgresql://", "postgresql+asyncpg://", 1))
            local.sessions = {}
            self._opened.append((local.loop, local.engine))
        return local

    def run(self, coro: Any) -> Any:
        return self._thread().loop.run_until_complete(coro)

    def session(self, sid: str) -> Any:
        sessions = self._thread().sessions
        if sid not in sessions:
            sessions[sid] = self._cls(sid, engine=self._thread().engine)
        return sessions[sid]

    def conversation(self, sid: str) -> Conversation:
        system = self

        class Conv(Conversation):
            def flush(self, live: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
                system.run(system.session(sid).add_items(new))

        return Conv()

    def load(self, sid: str) -> list[Any]:
        return self.run(self.session(sid).get_items())  # type: ignore[no-any-return]

    def close(self) -> None:
        for loop, engine in self._opened:
            loop.run_until_complete(engine.dispose())
            loop.close()
        self._opened.clear()


class LangGraphPostgres(_OnServer, LangGraph):
    name = "langgraph"

    def __init__(self, path: Path, sync: str) -> None:
        System.__init__(self, path, sync)
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        self.pool = ConnectionPool(
            str(self.path), max_size=20, open=True,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        )
        self.saver = PostgresSaver(self.pool)
        self.saver.setup()

    def fast(self) -> _Fast:
        return _Fast(None)

    def finish(self, sids: list[str]) -> int:
        return LangGraph.finish(self, sids)

    def close(self) -> None:
        self.pool.close()


SYSTEMS: dict[str, type[System]] = {
    "hermes": Hermes,
    "upstream": Upstream,
    "openai": OpenAI,
    "langgraph": LangGraph,
}
#: The same systems on a PostgreSQL server (hermes-agent has no PostgreSQL store).
SYSTEMS_POSTGRES: dict[str, type[System]] = {
    "hermes": HermesPostgres,
    "openai": OpenAIPostgres,
    "langgraph": LangGraphPostgres,
}


# -- workloads ---------------------------------------------------------------


class Bench:
    def __init__(self, system: str, sync: str, config: dict[str, Any]) -> None:
        self.system_name = system
        #: The server's URL (a database of it to create the workloads' ones from), or "".
        self.server = config.get("postgres", "")
        self.cls = (SYSTEMS_POSTGRES if self.server else SYSTEMS)[system]
        self.sync = sync
        self.config = config
        self.databases: list[str] = []
        self.root = Path(tempfile.mkdtemp(prefix=f"bench-{system}-", dir=config.get("workdir")))
        os.environ["HERMES_HOME"] = str(self.root / "home")
        self.pool = workload.messages(0, config.get("pool", 10_200))
        self._n = 0

    def open(self) -> System:
        self._n += 1
        if self.server:
            url = postgres.fresh_database(self.server, f"bench_{self.system_name}", self.sync)
            self.databases.append(url)
            return self.cls(url, self.sync)  # type: ignore[arg-type]
        path = self.root / f"db{self._n}" / "state.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        return self.cls(path, self.sync)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def discard_databases(self) -> None:
        """Deletes the files of the workloads run so far: LangGraph's growth to 100k
        alone leaves ~17 GB (a checkpoint holds the whole history), too much to keep
        for every round."""
        for db in self.root.glob("db*"):
            shutil.rmtree(db, ignore_errors=True)
        for url in self.databases:
            postgres.drop_database(self.server, url)
        self.databases.clear()

    @staticmethod
    def seeded(system: System) -> None:
        """Ends an unmeasured seeding: the store's deferred work is done, and
        the kernel has written back the seeding's files (sync(2)), so neither
        the one nor the other runs during the measured calls that follow."""
        system.settle()
        os.sync()

    def msgs(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Fresh dicts (identity matters to the flush) for messages start..stop."""
        if stop <= len(self.pool):
            return [dict(m) for m in self.pool[start:stop]]
        return workload.messages(start, stop)

    # growth: a conversation growing in turns of `turn` messages
    def growth(self, turn: int, total: int, budget_s: float, pause_s: float = 0.0) -> dict[str, Any]:
        """``pause_s``: untimed idle time after each flush, where an agent waits for its model
        (seconds in real use); 0 is back to back, the worst case for deferred work."""
        system = self.open()
        sid = f"growth-{turn}"
        conv = system.conversation(sid)
        live: list[dict[str, Any]] = []
        pending = self.msgs(0, total)
        samples: list[int] = []
        start = time.monotonic()
        capped = False
        gc.collect()
        for at in range(0, total, turn):
            new = pending[at : at + turn]
            live.extend(new)
            t0 = ns()
            conv.flush(live, new)
            samples.append(ns() - t0)
            if time.monotonic() - start > budget_s and at + turn < total:
                capped = True
                break
            if pause_s:
                time.sleep(pause_s)
        t0 = ns()
        system.settle()
        settle = ns() - t0
        rows = system.finish([sid])
        return {
            "turn": turn,
            "messages": len(live),
            "target": total,
            "capped": capped,
            "rows": rows,
            "flush_ns": samples,
            "settle_ns": settle,
            "pause_s": pause_s,
        }

    # noop: re-flushing a live list with nothing new
    def noop(self, size: int, reps: int) -> dict[str, Any]:
        if self.system_name not in ("hermes", "upstream"):
            raise Unsupported("no flush-the-live-list API: callers pass only new items")
        system = self.open()
        conv = system.conversation("noop")
        live = self.msgs(0, size)
        with system.fast():
            conv.flush(live, live)
        self.seeded(system)
        samples = []
        gc.collect()
        for _ in range(reps):
            t0 = ns()
            conv.flush(live, [])
            samples.append(ns() - t0)
        rows = system.finish(["noop"])
        return {"messages": size, "rows": rows, "flush_ns": samples}

    # concurrent: N threads, each flushing its own conversation
    def concurrent(self, threads: int, turns: int, turn: int, budget_s: float) -> dict[str, Any]:
        system = self.open()
        convs = [system.conversation(f"conv-{i}") for i in range(threads)]
        per = turns * turn
        pending = [self.msgs(i * per, (i + 1) * per) for i in range(threads)]
        samples: list[list[int]] = [[] for _ in range(threads)]
        errors: list[str] = []
        barrier = threading.Barrier(threads + 1)
        deadline = [0.0]

        def worker(i: int) -> None:
            live: list[dict[str, Any]] = []
            barrier.wait()
            try:
                for at in range(0, per, turn):
                    new = pending[i][at : at + turn]
                    live.extend(new)
                    t0 = ns()
                    convs[i].flush(live, new)
                    samples[i].append(ns() - t0)
                    if time.monotonic() > deadline[0]:
                        break
            except Exception as exc:  # reported, not fatal to the run
                errors.append(f"{type(exc).__name__}: {exc}")

        pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        gc.collect()
        deadline[0] = time.monotonic() + budget_s
        t0 = ns()
        barrier.wait()
        for t in pool:
            t.join()
        flushed = ns() - t0  # every turn durable
        system.settle()  # deferred work counts in the wall time
        wall = ns() - t0
        written = sum(len(s) for s in samples) * turn
        rows = system.finish([f"conv-{i}" for i in range(threads)])
        return {
            "threads": threads,
            "turn": turn,
            "messages": written,
            "rows": rows,
            "wall_ns": wall,
            "flushed_ns": flushed,
            "flush_ns": [x for s in samples for x in s],
            "errors": errors[:5],
            "error_count": len(errors),
        }

    # multiproc: N processes, each its own store on one file, its own conversation
    def multiproc(self, procs: int, turns: int, turn: int) -> dict[str, Any]:
        import subprocess

        system = self.open()  # creates the file and schema before the writers race
        path = system.path
        system.finish([])
        go = path.with_name("go")
        children = []
        for i in range(procs):
            cmd = [sys.executable, __file__, "--writer", self.system_name, self.sync, str(path),
                   f"proc-{i}", str(i * turns * turn), str(turns), str(turn), str(go)]
            children.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
        try:
            for c in children:
                assert c.stdout is not None
                said = c.stdout.readline().strip()
                if said != "ready":
                    raise RuntimeError(f"a writer failed to start (exit {c.wait()}): {said[:200]}")
            t0 = ns()
            go.touch()
            answers = [json.loads(c.communicate()[0] or "{}") for c in children]
            wall = ns() - t0
        finally:
            for c in children:  # none left waiting for a start that will not come
                if c.poll() is None:
                    c.kill()
                    c.wait()
        written = sum(len(a.get("flush_ns", [])) for a in answers) * turn
        sids = [f"proc-{i}" for i in range(procs)]
        check = self.cls(path, self.sync)
        counts = [check.count(sid) for sid in sids] if self.system_name in ("hermes", "upstream") else []
        rows = check.finish(sids)
        return {
            "procs": procs,
            "turn": turn,
            "messages": written,
            "rows": rows,
            "counts_ok": sum(counts) == rows if counts else None,
            "wall_ns": wall,
            "flush_ns": [x for a in answers for x in a.get("flush_ns", [])],
            "errors": [a["error"] for a in answers if "error" in a][:5],
            "error_count": sum(1 for a in answers if "error" in a),
        }

    # reads: load a transcript, and the live message-count read (the guard)
    def reads(self, size: int, loads: int, counts: int) -> dict[str, Any]:
        system = self.open()
        conv = system.conversation("reads")
        live = self.msgs(0, size)
        with system.fast():
            for at in range(0, size, 1000):
                conv.flush(live[: at + 1000], live[at : at + 1000])
        self.seeded(system)
        gc.collect()
        load_ns = []
        loaded = 0
        for _ in range(loads):
            t0 = ns()
            got = system.load("reads")
            load_ns.append(ns() - t0)
            loaded = len(got)
            del got
        count_ns: list[int] = []
        count_value = None
        try:
            for _ in range(counts):
                t0 = ns()
                count_value = system.count("reads")
                count_ns.append(ns() - t0)
        except Unsupported:
            count_ns = []
        system.finish([])
        return {
            "messages": size,
            "loaded": loaded,
            "load_ns": load_ns,
            "count_ns": count_ns,
            "count_value": count_value,
        }

    # scaling: flush latency and load time as the transcript grows
    def scaling(self, sizes: list[int], flushes: int, loads: int, budget_s: float) -> list[dict[str, Any]]:
        system = self.open()
        conv = system.conversation("scaling")
        live: list[dict[str, Any]] = []
        points = []
        start = time.monotonic()
        for size in sizes:
            with system.fast():
                while len(live) < size:
                    # A checkpointer's cost depends only on the list it is
                    # given: one put of the whole list seeds it.
                    step = size - len(live) if system.seed_whole else min(1000, size - len(live))
                    new = self.msgs(len(live), len(live) + step)
                    live.extend(new)
                    conv.flush(live, new)
            self.seeded(system)
            flush_ns = []
            gc.collect()
            for i in range(flushes):
                new = self.msgs(len(live), len(live) + 20)
                live.extend(new)
                t0 = ns()
                conv.flush(live, new)
                flush_ns.append(ns() - t0)
                if i >= 2 and time.monotonic() - start > budget_s:
                    break
            load_ns = []
            for i in range(loads):
                t0 = ns()
                got = system.load("scaling")
                load_ns.append(ns() - t0)
                del got
                if i >= 0 and time.monotonic() - start > budget_s:
                    break
            points.append({"size": size, "flush_ns": flush_ns, "load_ns": load_ns})
            if time.monotonic() - start > budget_s:
                points[-1]["capped"] = True
                break
        rows = system.finish(["scaling"])
        return [*points, {"rows": rows, "messages": len(live)}]


    # search: queries over many conversations' messages (seeded unmeasured)
    def search(self, messages: int, sessions: int, queries: dict[str, list[str]], budget_s: float,
               least: int = 3) -> dict[str, Any]:
        system = self.open()
        per = messages // sessions
        system.search("warm-up")  # Unsupported before any seeding when it has no search
        t0 = ns()
        for i in range(sessions):
            system.seed(f"s{i:05d}", workload.messages(i * per, (i + 1) * per))
        seed_ns = ns() - t0
        t0 = ns()
        self.seeded(system)
        settle_ns = ns() - t0
        kinds: dict[str, Any] = {}
        for kind, qs in queries.items():
            samples, hits = [], []
            start = time.monotonic()
            gc.collect()
            for i, q in enumerate(qs):
                t0 = ns()
                hits.append(system.search(q))
                samples.append(ns() - t0)
                if i + 1 >= least and time.monotonic() - start > budget_s:
                    break
            kinds[kind] = {"ns": samples, "hits": hits, "queries": len(qs)}
        rows = system.finish([f"s{i:05d}" for i in range(sessions)])
        return {"messages": sessions * per, "rows": rows, "seed_ns": seed_ns, "settle_ns": settle_ns, "kinds": kinds}


def run_one(bench: Bench, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    method = getattr(bench, name.split(":")[0])
    gc.collect()
    try:
        return method(**kwargs)  # type: ignore[no-any-return]
    except Unsupported as exc:
        return {"unsupported": str(exc) or "no API for this workload"}
    except Exception as exc:  # a peer failing is a finding, not a crash
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        bench.discard_databases()


class Server:
    """The worker side of ``benchlib.protocol``: one ``Bench`` per ``synchronous`` level."""

    def __init__(self, system: str, config: dict[str, Any]) -> None:
        self.system, self.config = system, config
        self.benches: dict[str, Bench] = {}

    def run(self, workload: str, sync: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """One workload's raw samples (or ``{"unsupported"|"error": ...}``, a finding)."""
        if sync not in self.benches:
            self.benches[sync] = Bench(self.system, sync, self.config)
        return run_one(self.benches[sync], workload, kwargs)

    def close(self) -> None:
        for bench in self.benches.values():
            bench.cleanup()


def writer(system: str, sync: str, path: str, sid: str, start: int, turns: int, turn: int, go: str) -> None:
    """One process of the ``multiproc`` workload."""
    os.environ.setdefault("HERMES_HOME", str(Path(path).parent / "home"))
    out = sys.stdout
    sys.stdout = sys.stderr
    # Setup is not timed: another writer's setup holding the lock (OpenAI's
    # sets journal_mode on a connection of its own) is waited out.
    for attempt in range(50):
        try:
            store = SYSTEMS[system](Path(path), sync)
            conv = store.conversation(sid)
            break
        except Exception as exc:  # the peers raise their own lock errors
            if "locked" not in str(exc) or attempt == 49:
                raise
            time.sleep(0.05)
    pending = workload.messages(start, start + turns * turn)
    out.write("ready\n")
    out.flush()
    give_up = time.monotonic() + 120
    while not Path(go).exists():
        if time.monotonic() > give_up:
            raise SystemExit("no start signal in 120 s")
        time.sleep(0.001)
    live: list[dict[str, Any]] = []
    samples: list[int] = []
    answer: dict[str, Any] = {}
    try:
        for at in range(0, len(pending), turn):
            new = pending[at : at + turn]
            live.extend(new)
            t0 = ns()
            conv.flush(live, new)
            samples.append(ns() - t0)
    except Exception as exc:
        answer["error"] = f"{type(exc).__name__}: {exc}"
    store.close()
    answer["flush_ns"] = samples
    out.write(json.dumps(answer))


def main() -> None:
    if sys.argv[1] == "--writer":
        a = sys.argv[2:]
        writer(a[0], a[1], a[2], a[3], int(a[4]), int(a[5]), int(a[6]), a[7])
    elif sys.argv[1] == "--serve":
        protocol.serve(Server(sys.argv[2], json.loads(sys.argv[3])), sys.argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
