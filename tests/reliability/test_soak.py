"""Contention soak (issue 7, item 3): four processes on one state.db.

* a gateway process (real ``AIAgent``, scripted model) answering three conversations that send
  multi-round turns back to back;
* the CLI, as a user runs it: ``hermes sessions list`` and ``hermes sessions show <chat>``, one
  process after another;
* a cron-like writer appending through ``SessionDB`` to its own session and to the gateway's
  conversations (which also makes the gateway's coherence guard rebuild cached agents);
* another reader listing, reading and searching, checking the counter invariant on every read.

For 10 s in the normal run, 60 s with ``HERMES_FULL=1`` (``HERMES_SOAK_SECONDS`` overrides).
Held: no lock error (or any other) reaches a user — every reply is the scripted answer, every
CLI run exits 0 with nothing on stderr, the writer and the reader never see an exception, the
gateway logs no failed flush — and the counts are exact: every session's ``message_count``
equals its rows, each conversation holds exactly its turns plus the writer's rows for it, the
writer's session exactly what it wrote. Flush latencies (p50/p99/max) go to the figures, never
into an assert.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hermes.state import SessionDB
from support.processes import PACKAGE_ROOT, TESTS_DIR

from .harness import (
    consistency_problems,
    entry_for,
    hermes_cli,
    json_lines,
    launch,
    percentile,
    post,
    setting,
    store_of,
    write_figures,
)
from .rounds_agent import marker, parse_command
from .test_kill9 import script

pytestmark = pytest.mark.asyncio

CHATS = ("g0", "g1", "g2")


def worker(role: str, db: Path, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([PACKAGE_ROOT, TESTS_DIR])}
    return subprocess.Popen([sys.executable, "-m", "reliability.soak_workers", role, store_of(db),
                             str(seconds), str(out)], env=env)


def summary(values: list[float]) -> dict[str, Any]:
    return {"count": len(values), "p50_ms": percentile(values, 0.50),
            "p90_ms": percentile(values, 0.90), "p99_ms": percentile(values, 0.99),
            "max_ms": max(values, default=None)}


async def test_four_processes_on_one_file(tmp_path: Path) -> None:
    seconds = setting("soak_seconds", 10, 60)
    home, db_path = tmp_path / "home", tmp_path / "state.db"
    gateway = launch(home, db_path)
    replies: dict[str, str | None] = {}
    commands: dict[str, str] = {}
    cli_runs: list[tuple[list[str], int, str]] = []
    try:
        cron = worker("cron", db_path, seconds, tmp_path / "cron.json")
        reader = worker("reader", db_path, seconds, tmp_path / "reader.json")
        deadline = time.monotonic() + seconds

        async def converse(http: aiohttp.ClientSession, chat: str) -> None:
            n = 0
            while time.monotonic() < deadline:
                tag = f"{chat}x{n}"
                commands[tag] = f"turn {tag} rounds={1 + n % 3}"
                status, reply = await post(http, gateway, chat, commands[tag])
                assert status == 200, reply
                replies[tag] = reply
                n += 1

        def cli_loop() -> None:
            n = 0
            while time.monotonic() < deadline:
                args = (["sessions", "list", "--db", str(db_path)] if n % 2 == 0 else
                        ["sessions", "show", CHATS[n % 3], "--db", str(db_path)])
                done = hermes_cli(home, *args)
                cli_runs.append((args, done.returncode, done.stderr))
                n += 1

        async with aiohttp.ClientSession() as http:
            await asyncio.gather(asyncio.to_thread(cli_loop),
                                 *(converse(http, chat) for chat in CHATS))
        for process in (cron, reader):
            assert await asyncio.to_thread(process.wait, seconds + 60) == 0
        assert await asyncio.to_thread(gateway.stop) == 0, gateway.log()
    finally:
        gateway.kill()

    cron_result = json.loads((tmp_path / "cron.json").read_text())
    reader_result = json.loads((tmp_path / "reader.json").read_text())
    gateway_flushes = [float(r) for r in json_lines(home / "flush_ms.log")]  # type: ignore[arg-type]
    problems: list[str] = []
    wrong = {tag: reply for tag, reply in replies.items()
             if reply != f"done {tag} | seen: {commands[tag]}"}
    if wrong:
        problems.append(f"replies that are not the scripted answer: {wrong}")
    failed_cli = [run for run in cli_runs if run[1] != 0 or run[2].strip()]
    if failed_cli:
        problems.append(f"CLI runs that failed: {failed_cli[:3]}")
    for name, result in (("cron writer", cron_result), ("reader", reader_result)):
        if result["errors"]:
            problems.append(f"{name} errors: {result['errors'][:3]}")
    if reader_result["violations"]:
        problems.append(f"counter invariant seen broken: {reader_result['violations'][:5]}")
    log = gateway.log()
    for sign in ("flush failed", "locked", "Traceback"):
        if sign in log:
            problems.append(f"the gateway log says {sign!r}")

    with SessionDB(db_path) as db:
        appended: dict[str, int] = cron_result["appended"]
        own = [m["content"] for m in db.get_messages("cron-job")]
        if len(own) != appended.get("cron-job", 0):
            problems.append(f"cron-job holds {len(own)} rows, the writer wrote "
                            f"{appended.get('cron-job', 0)}")
        for chat in CHATS:
            entry = entry_for(db, chat)
            assert entry is not None
            rows = db.get_messages(entry.session_id)
            crons = [r for r in rows if str(r.get("content", "")).startswith("cron ")]
            if len(crons) != appended.get(entry.session_id, 0):
                problems.append(f"{chat}: {len(crons)} writer rows, the writer wrote "
                                f"{appended.get(entry.session_id, 0)}")
            names = [marker(r) for r in rows if r["role"] != "session_meta" and r not in crons]
            expected = [m for tag in commands if tag.startswith(chat + "x")
                        for m in script(tag, int(parse_command(commands[tag])[1]["rounds"]))]  # type: ignore[index]
            if names != expected:
                problems.append(f"{chat}: turns stored as {Counter(names) - Counter(expected)} "
                                f"extra / {Counter(expected) - Counter(names)} missing")
    problems += consistency_problems(db_path)

    write_figures("soak", {
        "seconds": seconds, "problems": problems,
        "gateway_turns": len(replies), "cli_runs": len(cli_runs),
        "cron_appends": len(cron_result["latencies_ms"]),
        "cron_rows": sum(cron_result["appended"].values()),
        "reader_checked_reads": reader_result["reads"],
        "gateway_flush_latency": summary(gateway_flushes),
        "cron_append_latency": summary(cron_result["latencies_ms"]),
    })
    assert not problems, "\n".join(problems)
