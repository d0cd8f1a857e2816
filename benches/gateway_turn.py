"""The gateway's per-turn overhead, ours vs hermes-agent 0.19.0, side by side in one run.

    python benches/gateway_turn.py [--quick] [--n N] [--rounds R] [--out PATH]

The harness is the second seed's (``tests/seeds/test_first_turn_session_meta_rebaseline.py``):
a REAL ``SessionDB`` (file-backed, WAL), the runner's real
``_handle_message_with_agent(event, source, session_key, generation)``, ``_run_agent``
stubbed to return a canned result at once, a live agent cache and lock, ``dotenv``,
``_resolve_runtime_agent_kwargs`` and ``get_model_context_length`` stubbed, and a
``session_store`` whose ``append_to_transcript`` forwards non-``skip_db`` writes to the real
database with ``db.append_message(session_id, role, content)``, exactly as the seed does.
The session store and the hooks are ``MagicMock``s as in the seed, but the methods a turn
calls (``get_or_create_session``, ``load_transcript``, ``has_platform_message_id``,
``update_session``, ``append_to_transcript``, ``hooks.emit``, ``_run_agent``) are plain
functions returning the same values, so the mock machinery (~10 us a call) does not blur the
overhead being measured; ``--mock-harness`` uses the seed's ``MagicMock``/``AsyncMock``
methods as they are.

Systems, each in its own process (a worker of ``benchlib.protocol``), both kept alive for
the whole run:

* ``hermes`` (this interpreter): ``hermes.gateway.run.GatewayRunner`` +
  ``hermes.state.SessionDB(path, synchronous=SYNC)`` behind ``hermes.state.AsyncSessionDB``;
* ``upstream`` (the peer venv): hermes-agent 0.19.0's ``gateway.run.GatewayRunner``
  + ``hermes_state.SessionDB(path)`` behind ``hermes_state.AsyncSessionDB``, its single
  connection set to ``PRAGMA synchronous=SYNC`` (read back to check).

Workloads, at ``synchronous`` FULL and NORMAL:

* ``first``: a first turn of a fresh conversation each iteration (new session row, new key,
  empty transcript): the gateway writes the ``session_meta`` row, one commit (fsync'd at
  FULL). The session rows are created beforehand, a block of 50 at a time, so no harness
  commit runs right before a timed turn. Series: ``turn``; ``meta``, that turn's own
  ``session_meta`` commit, timed inside the forwarding stub where it runs; ``rest``, turn
  minus that commit (paired per iteration): everything but the write. After each block of
  50 turns, in the same process, 50 single commits of each floor: one small row appended by
  the system's own ``SessionDB.append_message`` to an existing session (``commit``) and a
  bare ``sqlite3`` ``BEGIN IMMEDIATE; INSERT; COMMIT`` in WAL mode (``bare``), each on its
  own file. Blocks keep the floors under the same disk conditions as the turns without the
  per-iteration alternation that slows the turns' thread hops; still, ``turn / meta`` (same
  iteration, same file) is the ratio that survives a disk hiccup, ``turn / commit`` may not.
* ``steady``: turn 2+ of one conversation (3-row transcript: ``session_meta``, user,
  assistant; the agent's two new rows go through with ``skip_db=True``): no database write,
  so it is the pure overhead (transcript load, guard read, re-baseline, hooks, thread hops).

Each cell: warm-up iterations discarded, then N timed ones (``perf_counter_ns`` around the
awaited call, inside one event loop). Rounds alternate which system goes first; the summary
pools the rounds and the JSON keeps each round, so their spread shows the noise (2 cores,
shared with other engineers' test runs: the load average is recorded before and after).
After every cell a check confirms the harness did what the seed asserts (one ``session_meta``
row per first turn, cache snapshot == live ``message_count``, agent never rebuilt).

Afterwards ours runs each cell once more instrumented (``breakdown_ours`` in the JSON): the
pieces ``hermes.gateway.turn.handle_with_agent`` awaits and every ``asyncio.to_thread`` hop
(latency vs work done in the thread) are wrapped and timed, without changing the code.

Writes ``target/bench/results/gateway_turn.json`` (``--publish``: ``benches/results/``, where
``benches/report.py`` finds it for BENCHMARKS.md; ``--out PATH``: there) and prints a table.
Other modes: ``--breakdown SYNC`` (only the instrumented run of ours), ``--profile
WORKLOAD:SYNC:SYSTEM`` (cProfile of one cell to ``--out``, default
``target/bench/results/gateway_turn.prof``), ``--mock-harness``. A default run takes about 45 s.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib and the other benches

from benchlib import paths, protocol  # noqa: E402
from benchlib.machine import code_identity, loadavg, machine  # noqa: E402
from benchlib.render import table  # noqa: E402
from benchlib.stats import percentile, summary  # noqa: E402

ns = time.perf_counter_ns

SYNCS = ("FULL", "NORMAL")
WORKLOADS = ("first", "steady")
CANNED_TOOLS = [{"name": "noop"}]
SERIES = ("turn_ns", "meta_ns", "rest_ns", "commit_ns", "bare_ns")
BLOCK = 50  # first turns and floor commits alternate in blocks of this many


# ============================================================================ worker side


class Harness:
    """One system's runner on the seed's harness, over one real SessionDB file."""

    def __init__(
        self, system: str, path: Path, sync: str, home: Path, mock_harness: bool
    ) -> None:
        from unittest.mock import AsyncMock, MagicMock

        self.system, self.sync = system, sync
        fake_dotenv = types.ModuleType("dotenv")
        fake_dotenv.load_dotenv = lambda *args, **kwargs: None  # type: ignore[attr-defined]
        sys.modules["dotenv"] = fake_dotenv
        if system == "hermes":
            from hermes.agent import model_metadata
            from hermes.gateway import run
            from hermes.gateway.config import GatewayConfig, Platform
            from hermes.gateway.platforms.base import MessageEvent
            from hermes.gateway.session import SessionEntry, SessionSource
            from hermes.state import AsyncSessionDB, SessionDB

            self.db = SessionDB(db_path=path, synchronous=sync)  # type: ignore[arg-type]
        else:
            from agent import model_metadata  # type: ignore[no-redef]
            from gateway import run  # type: ignore[no-redef]
            from gateway.config import GatewayConfig, Platform  # type: ignore[no-redef]
            from gateway.platforms.base import MessageEvent  # type: ignore[no-redef]
            from gateway.session import SessionEntry, SessionSource  # type: ignore[no-redef]
            from hermes_state import AsyncSessionDB, SessionDB  # type: ignore[no-redef]

            self.db = SessionDB(db_path=path)
            set_upstream_sync(self.db, sync)
        self.SessionEntry, self.SessionSource, self.MessageEvent = (
            SessionEntry,
            SessionSource,
            MessageEvent,
        )
        self.Platform = Platform

        run._hermes_home = home
        run._resolve_runtime_agent_kwargs = lambda: {"api_key": "fake"}
        model_metadata.get_model_context_length = lambda *_a, **_kw: 100_000

        runner = run.GatewayRunner(GatewayConfig())
        runner.adapters = {}
        runner._running_agents = {}
        runner._running_agents_ts = {}
        runner._pending_messages = {}
        runner._pending_approvals = {}
        runner._is_user_authorized = lambda _source: True
        runner._set_session_env = lambda _context: None
        runner._handle_active_session_busy_message = AsyncMock(return_value=False)
        runner._session_db = AsyncSessionDB(self.db)
        runner._recover_telegram_topic_thread_id = lambda _source: None
        runner._cache_session_source = lambda _key, _source: None
        runner._is_session_run_current = lambda _key, _gen: True
        runner._begin_session_run_generation = lambda _key: 1
        runner._reply_anchor_for_event = lambda _event: None
        runner._get_guild_id = lambda _event: None
        runner._should_send_voice_reply = lambda *_a, **_kw: False
        runner.hooks = MagicMock()
        runner._agent_cache = {}
        runner._agent_cache_lock = threading.Lock()
        runner.session_store = MagicMock()
        self.runner = runner

        db = self.db
        self.entry: Any = None
        self.history: list[dict[str, Any]] = []
        self.db_writes = 0
        self.last_write_ns = 0

        def append(
            session_id: str, message: dict[str, Any], skip_db: bool = False
        ) -> None:
            if not skip_db:
                t0 = ns()
                db.append_message(
                    session_id=session_id,
                    role=message.get("role", "unknown"),
                    content=message.get("content"),
                )
                self.last_write_ns = (
                    ns() - t0
                )  # the turn's own commit, timed where it runs
                # Counted once written: ours may first try on the loop, give up at once
                # (WriterBusyError: the indexer held the writer) and write from a thread.
                self.db_writes += 1

        store = runner.session_store
        if mock_harness:  # the seed's MagicMock/AsyncMock methods, as they are
            store.get_or_create_session.side_effect = lambda _source: self.entry
            store.load_transcript.side_effect = lambda _sid: list(self.history)
            store.has_platform_message_id.return_value = False
            store.update_session = MagicMock()
            store.append_to_transcript = MagicMock(side_effect=append)
            runner.hooks.emit = AsyncMock()
            runner._run_agent = AsyncMock(side_effect=lambda *_a, **_kw: self.result())
        else:  # plain functions, same values
            store.get_or_create_session = lambda _source: self.entry
            store.load_transcript = lambda _sid: list(self.history)
            store.has_platform_message_id = lambda *_a, **_kw: False
            store.update_session = lambda *_a, **_kw: None
            store.append_to_transcript = append

            async def emit(*_a: Any, **_kw: Any) -> None:
                return None

            async def run_agent(*_a: Any, **_kw: Any) -> dict[str, Any]:
                return self.result()

            runner.hooks.emit = emit
            runner._run_agent = run_agent
        self.release_lease = getattr(runner, "_release_turn_lease", None)
        self.agent = object()
        self.source = SessionSource(
            platform=Platform.TELEGRAM,
            chat_id="-1001",
            chat_type="group",
            user_id="12345",
        )

    # -- the canned agent result (fresh each turn: a runner may annotate it) --

    def result(self) -> dict[str, Any]:
        prior = [
            {"role": m["role"], "content": m.get("content")}
            for m in self.history
            if m.get("role") != "session_meta"
        ]
        return {
            "final_response": "Hi there!",
            "messages": prior
            + [
                {"role": "user", "content": "hello world"},
                {"role": "assistant", "content": "Hi there!"},
            ],
            "tools": list(CANNED_TOOLS),
            "history_offset": len(prior),
            "last_prompt_tokens": 0,
        }

    def event(self) -> Any:
        return self.MessageEvent(
            text="hello world", source=self.source, message_id="msg-1"
        )

    def start_conversation(
        self, session_id: str, key: str, create: bool = True
    ) -> None:
        if create:
            self.db.create_session(session_id, source="telegram")
        now = dt.datetime.now()
        self.entry = self.SessionEntry(
            session_key=key,
            session_id=session_id,
            created_at=now,
            updated_at=now,
            platform=self.Platform.TELEGRAM,
            chat_type="group",
        )
        self.history = []
        with self.runner._agent_cache_lock:
            self.runner._agent_cache[key] = (self.agent, "sig", self.live(session_id))

    def live(self, session_id: str) -> int:
        row = self.db.get_session(session_id)
        return row.get("message_count", 0) if row else 0

    def snapshot(self, key: str) -> tuple[Any, int]:
        with self.runner._agent_cache_lock:
            cached = self.runner._agent_cache[key]
        return cached[0], cached[2]

    async def turn(self, key: str) -> int:
        event = self.event()
        t0 = ns()
        await self.runner._handle_message_with_agent(event, self.source, key, 1)
        took = ns() - t0
        if self.release_lease is not None:
            # Upstream takes a per-session turn lease inside _handle_message_with_agent and
            # releases it in its caller's (_handle_message's) finally; do the caller's part,
            # untimed, as ours releases its per-conversation slot in its caller too.
            self.release_lease(key, 1)
        return took

    def close(self) -> None:
        self.db.close()


def set_upstream_sync(db: Any, level: str) -> None:
    with db._lock:
        db._conn.execute(f"PRAGMA synchronous={level}")
        got = db._conn.execute("PRAGMA synchronous").fetchone()[0]
    if got != {"FULL": 2, "NORMAL": 1}[level]:
        raise RuntimeError(
            f"upstream connection reports synchronous={got}, wanted {level}"
        )


class Bare:
    """The floor: one small row, ``BEGIN IMMEDIATE; INSERT; COMMIT``, WAL, bare sqlite3."""

    def __init__(self, path: Path, sync: str) -> None:
        self.conn = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False
        )
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={sync}")
        self.conn.execute(
            "CREATE TABLE m (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT,"
            " content TEXT, timestamp REAL)"
        )

    def commit(self) -> int:
        t0 = ns()
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(
            "INSERT INTO m (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            ("floor", "user", "hi", time.time()),
        )
        self.conn.execute("COMMIT")
        return ns() - t0

    def close(self) -> None:
        self.conn.close()


class Server:
    """One system's side of ``benchlib.protocol``: each workload a method."""

    def __init__(self, system: str, mock_harness: bool) -> None:
        self.system = system
        self.mock_harness = mock_harness
        self.root = Path(tempfile.mkdtemp(prefix=f"gwturn-{system}-"))
        os.environ["HERMES_HOME"] = str(self.root / "home")
        (self.root / "home").mkdir()
        self._n = 0

    def fresh(self, name: str) -> Path:
        self._n += 1
        d = self.root / f"{self._n:03d}-{name}"
        d.mkdir()
        return d / "state.db"

    def harness(self, sync: str) -> Harness:
        return Harness(
            self.system,
            self.fresh("turns"),
            sync,
            self.root / "home",
            self.mock_harness,
        )

    # first turns, interleaved with the two single-commit floors
    def first(self, sync: str, n: int, warmup: int) -> dict[str, Any]:
        h = self.harness(sync)
        floor_db = h.db.__class__(
            db_path=self.fresh("commit"),
            **({"synchronous": sync} if self.system == "hermes" else {}),
        )
        if self.system != "hermes":
            set_upstream_sync(floor_db, sync)
        floor_db.create_session("floor", source="cli")
        bare = Bare(self.fresh("bare"), sync)
        turn, commit, bare_ns, meta, rest = [], [], [], [], []
        bad: list[str] = []

        async def go() -> None:
            i = 0
            while i < warmup + n:
                # A block of first turns, then as many single commits of each floor.
                block = range(i, min(i + BLOCK, warmup + n))
                # The block's session rows first, so no harness commit (an fsync at FULL)
                # runs right before a timed turn.
                for j in block:
                    h.db.create_session(f"first-{j}", source="telegram")
                for j in block:
                    sid, key = f"first-{j}", f"agent:main:telegram:group:-1001:{j}"
                    h.start_conversation(sid, key, create=False)
                    writes = h.db_writes
                    t = await h.turn(key)
                    agent, snap = h.snapshot(key)
                    live = h.live(sid)
                    if not (
                        live == 1
                        and snap == live
                        and agent is h.agent
                        and h.db_writes == writes + 1
                    ):
                        bad.append(
                            f"{sid}: live={live} snapshot={snap} writes="
                            f"{h.db_writes - writes} rebuilt={agent is not h.agent}"
                        )
                    with h.runner._agent_cache_lock:
                        del h.runner._agent_cache[key]
                    if j >= warmup:
                        turn.append(t)
                        meta.append(h.last_write_ns)
                        rest.append(t - h.last_write_ns)
                for j in block:
                    t0 = ns()
                    floor_db.append_message("floor", "user", "hi")
                    c = ns() - t0
                    if j >= warmup:
                        commit.append(c)
                for j in block:
                    b = bare.commit()
                    if j >= warmup:
                        bare_ns.append(b)
                i = block.stop

        gc.collect()
        asyncio.run(go())
        h.close()
        floor_db.close()
        bare.close()
        return {
            "turn_ns": turn,
            "commit_ns": commit,
            "bare_ns": bare_ns,
            "meta_ns": meta,
            "rest_ns": rest,
            "bad": bad[:5],
            "bad_count": len(bad),
        }

    # turn 2+ of one conversation
    def steady(self, sync: str, n: int, warmup: int) -> dict[str, Any]:
        h = self.harness(sync)
        sid, key = "steady", "agent:main:telegram:group:-1001:12345"
        h.start_conversation(sid, key)
        samples: list[int] = []
        bad: list[str] = []

        async def go() -> None:
            await h.turn(key)  # turn 1: session_meta
            h.history = [
                {
                    "role": "session_meta",
                    "content": {
                        "tools": ["noop"],
                        "model": None,
                        "platform": "telegram",
                    },
                },
                {"role": "user", "content": "hello world"},
                {"role": "assistant", "content": "Hi there!"},
            ]
            writes = h.db_writes
            for i in range(warmup + n):
                t = await h.turn(key)
                if i >= warmup:
                    samples.append(t)
            agent, snap = h.snapshot(key)
            live = h.live(sid)
            if not (
                live == 1 and snap == 1 and agent is h.agent and h.db_writes == writes
            ):
                bad.append(
                    f"live={live} snapshot={snap} writes={h.db_writes - writes} "
                    f"rebuilt={agent is not h.agent}"
                )

        gc.collect()
        asyncio.run(go())
        h.close()
        return {"turn_ns": samples, "bad": bad, "bad_count": len(bad)}

    def profile(self, workload: str, sync: str, n: int, out: str) -> dict[str, Any]:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        got = getattr(self, workload)(sync, n, 20)
        prof.disable()
        prof.dump_stats(out)
        return {"ok": True, "p50_us": percentile(got["turn_ns"], 0.5) / 1e3}

    def breakdown(
        self, workload: str, sync: str, n: int, warmup: int
    ) -> dict[str, Any]:
        """Ours only: where a turn's time goes, by wrapping (not changing) the pieces
        ``hermes.gateway.turn.handle_with_agent`` awaits. Adds a few us of wrapper cost."""
        from hermes.gateway import run, session

        acc: dict[str, list[int]] = {}

        def note(name: str, took: int) -> None:
            acc.setdefault(name, []).append(took)

        def wrap_async(owner: Any, attr: str, name: str) -> None:
            fn = getattr(owner, attr)

            async def timed(*a: Any, **kw: Any) -> Any:
                t0 = ns()
                try:
                    return await fn(*a, **kw)
                finally:
                    note(name, ns() - t0)

            setattr(owner, attr, timed)

        # A turn reaches the store through AsyncSessionStore.call (a thread hop) when it must
        # commit or read much; otherwise on the loop (call_here, not timed apart).
        wrap_async(session.AsyncSessionStore, "call", "session.py:AsyncSessionStore.call")
        wrap_async(
            run.GatewayRunner,
            "_refresh_agent_cache_message_count",
            "run.py:GatewayRunner._refresh_agent_cache_message_count",
        )
        original_to_thread = asyncio.to_thread

        async def to_thread(func: Any, *a: Any, **kw: Any) -> Any:
            inside = [0]

            def call() -> Any:
                t0 = ns()
                try:
                    return func(*a, **kw)
                finally:
                    inside[0] = ns() - t0

            t0 = ns()
            try:
                return await original_to_thread(call)
            finally:
                note(
                    "asyncio.to_thread: hop (total - work in thread)",
                    ns() - t0 - inside[0],
                )
                note("asyncio.to_thread: work in thread", inside[0])
                note(
                    f"  of which {getattr(func, '__qualname__', func)} (in thread)",
                    inside[0],
                )

        asyncio.to_thread = to_thread  # type: ignore[assignment]
        try:
            got = getattr(self, workload)(sync, n, warmup)
        finally:
            asyncio.to_thread = original_to_thread  # type: ignore[assignment]
        turns = len(got["turn_ns"]) + warmup + (1 if workload == "steady" else 0)

        async def hops() -> list[int]:
            out = []
            for _ in range(n):
                t0 = ns()
                await asyncio.to_thread(int)
                out.append(ns() - t0)
            return out

        bare_hop = asyncio.run(hops())
        turn = summary(got["turn_ns"], "us")
        return {
            "turn_p50_us": turn["p50_us"],
            "turn_mean_us": turn["mean_us"],
            "per_turn_mean_us": {k: sum(v) / turns / 1e3 for k, v in acc.items()},
            "per_call_p50_us": {k: percentile(v, 0.5) / 1e3 for k, v in acc.items()},
            "calls_per_turn": {k: len(v) / turns for k, v in acc.items()},
            "bare_to_thread_p50_us": percentile(bare_hop, 0.5) / 1e3,
            "bad_count": got["bad_count"],
        }

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# ============================================================================ driver side


def cell_stats(samples: list[int]) -> dict[str, Any]:
    """One cell's samples: the one summary, in µs, and turns per second."""
    return {**summary(samples, "us"), "turns_per_s": len(samples) * 1e9 / sum(samples)}


def serving(python: str, system: str, mock_harness: bool) -> protocol.Worker:
    """A worker of ``Server`` for ``system`` in ``python``."""
    args = ["--worker", system, *(["--mock-harness"] if mock_harness else [])]
    return protocol.Worker(python, Path(__file__).resolve(), *args, name=system)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", choices=["hermes", "upstream"], help=argparse.SUPPRESS)
    ap.add_argument(
        "--mock-harness",
        action="store_true",
        help="use the seed's MagicMock/AsyncMock methods as they are",
    )
    ap.add_argument("--quick", action="store_true", help="100 turns a cell, 1 round")
    ap.add_argument(
        "--n", type=int, default=1000, help="timed turns per cell and round"
    )
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2)
    protocol.add_peers_argument(ap)
    paths.add_output_arguments(ap, "benches/results/gateway_turn.json (BENCHMARKS.md shows it)")
    ap.add_argument(
        "--profile",
        metavar="WORKLOAD:SYNC:SYSTEM",
        help="cProfile one cell instead (e.g. steady:NORMAL:hermes), to --out",
    )
    ap.add_argument(
        "--breakdown",
        metavar="SYNC",
        help="ours only: time the pieces of a turn (first and steady) at SYNC",
    )
    args = ap.parse_args()
    if args.worker:
        protocol.serve(Server(args.worker, args.mock_harness), args.worker)
        return
    out_file = args.out or paths.results_dir(args.publish) / ("gateway_turn.prof" if args.profile else "gateway_turn.json")
    if args.quick:
        args.n, args.rounds, args.warmup = 100, 1, 20
    if args.breakdown:
        proc = serving(sys.executable, "hermes", args.mock_harness)
        for workload in WORKLOADS:
            out = proc.call(
                "breakdown",
                workload=workload,
                sync=args.breakdown,
                n=args.n,
                warmup=args.warmup,
            )
            print(
                f"{workload} {args.breakdown}: turn p50 {out['turn_p50_us']:.0f} us, "
                f"mean {out['turn_mean_us']:.0f} us; a bare asyncio.to_thread hop p50 "
                f"{out['bare_to_thread_p50_us']:.0f} us"
            )
            for name, us in sorted(
                out["per_turn_mean_us"].items(), key=lambda kv: -kv[1]
            ):
                print(
                    f"  {us:7.1f} us/turn  {out['calls_per_turn'][name]:4.1f} calls/turn  "
                    f"p50 {out['per_call_p50_us'][name]:6.1f} us/call  {name}"
                )
        proc.close()
        return
    if args.profile:
        workload, sync, system = args.profile.split(":")
        python = sys.executable if system == "hermes" else protocol.peers_python(args.peers_python)
        proc = serving(python, system, args.mock_harness)
        out_file.parent.mkdir(parents=True, exist_ok=True)
        print(
            proc.call(
                "profile",
                workload=workload,
                sync=sync,
                n=args.n,
                out=str(out_file.resolve()),
            )
        )
        proc.close()
        return
    peers = protocol.peers_python(args.peers_python)
    if not peers:
        sys.exit("no peer venv (hermes-agent 0.19.0): benches/setup_peers.sh failed, see above")

    started = time.time()
    load_before = loadavg()
    procs = {
        "hermes": serving(sys.executable, "hermes", args.mock_harness),
        "upstream": serving(peers, "upstream", args.mock_harness),
    }
    rounds: list[dict[str, Any]] = []
    pooled: dict[str, dict[str, list[int]]] = {}
    try:
        for r in range(args.rounds):
            order = ["hermes", "upstream"] if r % 2 == 0 else ["upstream", "hermes"]
            this: dict[str, Any] = {
                "order": order,
                "load": loadavg()[0],
                "cells": {},
            }
            for workload in WORKLOADS:
                for sync in SYNCS:
                    for system in order:
                        t0 = time.monotonic()
                        out = procs[system].call(
                            workload, sync=sync, n=args.n, warmup=args.warmup
                        )
                        if out["bad_count"]:
                            sys.exit(
                                f"harness check failed ({system} {workload} {sync}): "
                                f"{out['bad']}"
                            )
                        for series in SERIES:
                            if series not in out:
                                continue
                            cell = f"{workload}:{sync}:{system}:{series[:-3]}"
                            pooled.setdefault(cell, []).extend(out[series])  # type: ignore[arg-type]
                            this["cells"][cell] = cell_stats(out[series])
                        print(
                            f"round {r + 1} {workload:6} {sync:6} {system:8} "
                            f"p50 {percentile(out['turn_ns'], 0.5) / 1e3:9.1f} us "
                            f"({time.monotonic() - t0:.1f} s)",
                            file=sys.stderr,
                            flush=True,
                        )
            rounds.append(this)
        # Ours, instrumented (separately: the wrappers cost a few us): where a turn's time goes.
        breakdown = {
            f"{workload}:{sync}": procs["hermes"].call(
                "breakdown",
                workload=workload,
                sync=sync,
                n=min(args.n, 300),
                warmup=args.warmup,
            )
            for workload in WORKLOADS
            for sync in SYNCS
        }
    finally:
        for proc in procs.values():
            proc.close()
    load_after = loadavg()

    cells = {cell: cell_stats(s) for cell, s in pooled.items()}  # type: ignore[arg-type]

    def p50(cell: str) -> float:
        return cells[cell]["p50_us"]

    ratios: dict[str, Any] = {}
    for workload in WORKLOADS:
        for sync in SYNCS:
            ours, up = (
                cells[f"{workload}:{sync}:hermes:turn"],
                cells[f"{workload}:{sync}:upstream:turn"],
            )
            ratios[f"{workload}:{sync}"] = {
                "turns_per_s_ours_over_upstream": ours["turns_per_s"]
                / up["turns_per_s"],
                "p50_upstream_over_ours": up["p50_us"] / ours["p50_us"],
                "p99_upstream_over_ours": up["p99_us"] / ours["p99_us"],
            }
    for sync in SYNCS:
        ratios[f"first:{sync}"].update(
            {
                "first_turn_p50_over_its_own_meta_commit_p50": p50(
                    f"first:{sync}:hermes:turn"
                )
                / p50(f"first:{sync}:hermes:meta"),
                "upstream_first_turn_p50_over_its_own_meta_commit_p50": p50(
                    f"first:{sync}:upstream:turn"
                )
                / p50(f"first:{sync}:upstream:meta"),
                "turn_minus_meta_commit_p50_upstream_over_ours": p50(
                    f"first:{sync}:upstream:rest"
                )
                / p50(f"first:{sync}:hermes:rest"),
                "first_turn_p50_over_our_commit_p50": p50(f"first:{sync}:hermes:turn")
                / p50(f"first:{sync}:hermes:commit"),
                "first_turn_p50_over_bare_commit_p50": p50(f"first:{sync}:hermes:turn")
                / p50(f"first:{sync}:hermes:bare"),
                "upstream_first_turn_p50_over_its_commit_p50": p50(
                    f"first:{sync}:upstream:turn"
                )
                / p50(f"first:{sync}:upstream:commit"),
                "our_commit_p50_over_bare_commit_p50": p50(
                    f"first:{sync}:hermes:commit"
                )
                / p50(f"first:{sync}:hermes:bare"),
            }
        )
    # Stability: each round's p50 per turn cell, and how far apart the rounds are.
    spread = {}
    for cell in cells:
        values = [rd["cells"][cell]["p50_us"] for rd in rounds if cell in rd["cells"]]
        spread[cell] = {
            "p50_us_by_round": values,
            "max_over_min": max(values) / min(values) if min(values) else None,
        }
    targets = {
        "NORMAL >= 10x turns/s (first)": ratios["first:NORMAL"][
            "turns_per_s_ours_over_upstream"
        ]
        >= 10,
        "NORMAL >= 10x turns/s (steady)": ratios["steady:NORMAL"][
            "turns_per_s_ours_over_upstream"
        ]
        >= 10,
        "FULL first turn <= 1.3x its own session_meta commit": ratios["first:FULL"][
            "first_turn_p50_over_its_own_meta_commit_p50"
        ]
        <= 1.3,
        "FULL first turn <= 1.3x one fsync'd commit (ours)": ratios["first:FULL"][
            "first_turn_p50_over_our_commit_p50"
        ]
        <= 1.3,
        "FULL first turn <= 1.3x one fsync'd commit (bare sqlite3)": ratios[
            "first:FULL"
        ]["first_turn_p50_over_bare_commit_p50"]
        <= 1.3,
    }
    doc = {
        "bench": "gateway_turn",
        "command": " ".join(["python", "benches/gateway_turn.py", *sys.argv[1:]]),
        "utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wall_s": round(time.time() - started, 1),
        "machine": {
            **machine(Path(tempfile.gettempdir())),
            "load_before": load_before,
            "load_after": load_after,
            "workers": {k: p.info for k, p in procs.items()},
        },
        "code": code_identity(sys.executable),
        "config": {
            "n": args.n,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "harness": "mock" if args.mock_harness else "plain",
        },
        "summary": cells,
        "ratios": ratios,
        "targets": targets,
        "rounds": rounds,
        "spread": spread,
        "breakdown_ours": breakdown,
    }
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(doc, indent=1) + "\n")
    print(render(doc))
    print(f"\nwrote {out_file} ({doc['wall_s']} s)")


def render(doc: dict[str, Any]) -> str:
    s, r = doc["summary"], doc["ratios"]
    rows = []
    for workload in WORKLOADS:
        for sync in SYNCS:
            for system in ("hermes", "upstream"):
                for series in ("turn", "meta", "rest", "commit", "bare"):
                    cell = f"{workload}:{sync}:{system}:{series}"
                    if cell not in s or (series == "bare" and system == "upstream"):
                        continue
                    label = {
                        "turn": f"**{system}** turn",
                        "meta": f"{system}: the turn's session_meta commit",
                        "rest": f"{system}: turn minus that commit",
                        "commit": f"{system} floor: 1-row append_message",
                        "bare": "floor: bare sqlite3 1-row commit",
                    }[series]
                    by_round = ", ".join(
                        f"{v:.0f}" for v in doc["spread"][cell]["p50_us_by_round"]
                    )
                    c = s[cell]
                    rows.append([workload, sync, label, f"{c['turns_per_s']:,.0f}", f"{c['p50_us']:,.0f}",
                                 f"{c['p99_us']:,.0f}", by_round])
    header = ["workload", "sync", "series", "turns/s (ops/s)", "p50 µs", "p99 µs", "rounds' p50 µs"]
    lines = table(header, rows, right=(3, 4, 5))
    for key, v in r.items():
        lines.append(f"{key}: " + ", ".join(f"{k}={x:.2f}" for k, x in v.items()))
    lines.append("")
    for k, ok in doc["targets"].items():
        lines.append(f"target {k}: {'MET' if ok else 'MISSED'}")
    for cell, b in doc.get("breakdown_ours", {}).items():
        lines.append(
            f"\nours {cell}, instrumented: turn p50 {b['turn_p50_us']:.0f} us; "
            f"a bare asyncio.to_thread hop p50 {b['bare_to_thread_p50_us']:.0f} us"
        )
        for name, us in sorted(b["per_turn_mean_us"].items(), key=lambda kv: -kv[1]):
            lines.append(
                f"  {us:7.1f} us/turn (mean)  {b['calls_per_turn'][name]:4.1f}/turn  "
                f"p50 {b['per_call_p50_us'][name]:6.1f} us/call  {name}"
            )
    m = doc["machine"]
    cores = m.get("nproc", m.get("cpus"))  # "cpus" in runs before benchlib.machine
    lines.append(
        f"load average {m['load_before'][0]:.2f} -> {m['load_after'][0]:.2f} "
        f"on {cores} cores"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
