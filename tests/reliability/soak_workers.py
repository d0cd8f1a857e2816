"""The other processes of the contention soak, each run as ``python -m reliability.soak_workers``.

``DB`` is the store's file, or its URL on the PostgreSQL leg.

``cron DB SECONDS OUT``
    a cron-like writer: appends to its own session and, every fourth time, to one of the
    gateway's conversations (found through ``gateway_routing``), with ``SessionDB`` as any
    script would; records each append's latency and where it went.
``reader DB SECONDS OUT``
    a reader: lists sessions, reads transcripts and searches, and checks on every read that the
    counter invariant held at some commit: ``message_count`` read before the rows <= rows <=
    ``message_count`` read after (messages are only appended, so this holds at every commit
    exactly when ``message_count`` equals the rows).

Each writes ``OUT`` (JSON) when its time is up. Any exception is recorded, never retried:
"no lock error reaches a user" means none may occur.
"""

from __future__ import annotations

import json
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from hermes.state import SessionDB


def cron(db_path: str, seconds: float) -> dict[str, Any]:
    db = SessionDB(db_path)
    db.create_session("cron-job", "cron")
    latencies: list[float] = []
    appended: dict[str, int] = {}
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        n += 1
        target = "cron-job"
        if n % 4 == 0:
            try:
                sessions = [json.loads(v)["session_id"]
                            for v in db.load_gateway_routing_entries().values()]
            except Exception:
                errors.append(traceback.format_exc())
                sessions = []
            if sessions:
                target = random.choice(sessions)
        batch = [{"role": "user", "content": f"cron {n} part {i}"}
                 for i in range(3 if n % 7 == 0 else 1)]
        started = time.perf_counter()
        try:
            if len(batch) == 1:
                db.append_message(target, "user", batch[0]["content"])
            else:
                db.append_messages(target, batch)
        except Exception:
            errors.append(traceback.format_exc())
            continue
        latencies.append((time.perf_counter() - started) * 1000)
        appended[target] = appended.get(target, 0) + len(batch)
        time.sleep(random.uniform(0.002, 0.02))
    db.close()
    return {"latencies_ms": latencies, "appended": appended, "errors": errors}


def reader(db_path: str, seconds: float) -> dict[str, Any]:
    db = SessionDB(db_path)
    reads = 0
    violations: list[str] = []
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            sessions = db.list_sessions(limit=50)
            for session in random.sample(sessions, min(3, len(sessions))):
                sid = session["id"]
                before = db.live_message_count(sid) or 0
                rows = db.get_messages(sid)
                after = db.live_message_count(sid) or 0
                reads += 1
                if not before <= len(rows) <= after:
                    violations.append(f"{sid}: message_count {before}..{after}, {len(rows)} rows")
            db.search_messages("cron OR done")
        except Exception:
            errors.append(traceback.format_exc())
        time.sleep(0.005)
    db.close()
    return {"reads": reads, "violations": violations, "errors": errors}


def main(argv: list[str]) -> int:
    role, db_path, seconds, out = argv
    result = {"cron": cron, "reader": reader}[role](db_path, float(seconds))
    Path(out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
