"""The command line at scale (issue [I]): ``hermes sessions list | stats | search | export |
prune --older-than 90`` on one ``state.db`` of 100,000 sessions, ours beside hermes-agent
0.19.0's own ``hermes sessions`` on the same file.

    python benches/cli.py [--quick] [--sessions N] [--publish | --out PATH]

The file: 100,000 sessions of 5 messages (``benches/workload.py``), started over the last
180 days, every one ended, four platforms; written by our ``SessionDB`` (hermes-agent writes
~1k messages/s: its own 500k rows would take minutes, and the rows are the same either way),
then opened once by hermes-agent (its first open adds its indexes and its trigram search
index) and once by us, unmeasured, so that both find the file as they leave it.

Each measurement is one whole command in a fresh process, as a person runs it: interpreter
start, imports, opening the file, the work, exit (``--help`` of each is shown for the start
alone). Output goes to /dev/null; stdin is /dev/null (``prune --yes``). Every ``prune`` runs on
its own fresh copy of the file. ``export`` writes every session as JSONL to a file (ours
``-o FILE``, hermes-agent's ``export FILE``: the same one-session-a-line form). Ours also runs once in a pseudo-terminal, to record whether
its progress display appeared (it must, for anything over a second: it shows after 0.5 s).
hermes-agent has no ``sessions search`` command.

Writes ``cli.json`` (``cli-quick.json``) into ``target/bench/results/`` (``--publish``:
``benches/results/``, which ``benches/report.py`` renders into BENCHMARKS.md) and prints the
Markdown section. A full run takes ~45 minutes here, most of it the prunes (eight of 50k sessions)
and the exports; ``--quick`` (10k sessions) a few minutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib and the other benches

from benchlib import paths, record, protocol  # noqa: E402
from benchlib.render import ratio, table  # noqa: E402

RESULTS = paths.PUBLISHED_RESULTS / "cli.json"
DAY = 86400.0
SOURCES = ("cli", "telegram", "local", "api_server")
#: command name -> (our argv, hermes-agent's argv or None, our progress display's words)
COMMANDS: dict[str, tuple[list[str], list[str] | None, str]] = {
    "start (--help)": (["sessions", "--help"], ["sessions", "--help"], ""),
    "list": (["sessions", "list"], ["sessions", "list"], "reading sessions"),
    "stats": (["sessions", "stats"], ["sessions", "stats"], "counting sessions"),
    "search": (["sessions", "search", "deploy"], None, "searching"),
    "export (every session, jsonl)": (["sessions", "export", "-o", "{scratch}/ours.jsonl"],
                                      ["sessions", "export", "{scratch}/theirs.jsonl"],
                                      "exporting"),
    "prune --older-than 90": (["sessions", "prune", "--older-than", "90", "--yes"],
                              ["sessions", "prune", "--older-than", "90", "--yes"],
                              "deleting"),
}
DESTRUCTIVE = {"prune --older-than 90"}


def log(message: str, started: float) -> None:
    print(f"cli [{time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)


def build(path: Path, sessions: int) -> dict[str, Any]:
    """The store: ``sessions`` ended sessions of 5 messages, started over 180 days."""
    import workload

    from hermes.state import SessionDB

    now = time.time()
    t0 = time.perf_counter()
    with SessionDB(path, synchronous="NORMAL", busy_budget=600) as db:
        for n in range(sessions):
            started = now - (n / sessions) * 180 * DAY
            session_id = f"s{n:06d}"
            db.create_session(session_id, SOURCES[n % len(SOURCES)], started_at=started,
                              model="bench-model")
            db.append_messages(session_id, workload.messages(n * 5, n * 5 + 5))
            # After the append, which reopens an ended session.
            db.update_session(session_id, ended_at=started + 600, end_reason="session_reset")
    return {"sessions": sessions, "messages": sessions * 5, "seconds": time.perf_counter() - t0,
            "bytes": path.stat().st_size}


def copy_store(src: Path, home: Path) -> Path:
    """A fresh copy of the store as ``home/state.db`` (where hermes-agent looks)."""
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    for suffix in ("", "-wal"):
        if Path(f"{src}{suffix}").exists():
            shutil.copyfile(f"{src}{suffix}", home / f"state.db{suffix}")
    return home / "state.db"


def environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HERMES_", "OPENAI_", "API_SERVER_"))}
    env.update({"HERMES_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"})
    return env


def timed_run(argv: list[str], home: Path) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=environment(home), stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return seconds


def shows_progress(argv: list[str], home: Path, words: str) -> bool:
    """Whether the command, run on a terminal, showed its progress display."""
    import pexpect

    child = pexpect.spawn(argv[0], argv[1:], env=environment(home), encoding="utf-8",
                          timeout=600, dimensions=(40, 200))
    output = child.read()
    child.close()
    return words in output


def measure(store: Path, scratch: Path, ours: list[str], upstream: list[str] | None,
            rounds: int, started: float) -> dict[str, Any]:
    """Each command's runs, the two programs interleaved (ours first in even rounds, theirs
    first in odd ones: A B B A ...), so that a change in the shared machine's load falls on
    both."""
    results: dict[str, Any] = {}
    for name, (our_args, their_args, words) in COMMANDS.items():
        argvs: dict[str, list[str]] = {}
        homes: dict[str, Path] = {}
        for system, prefix, args in (("hermes", ours, our_args), ("upstream", upstream, their_args)):
            if prefix is None or args is None:
                continue
            homes[system] = scratch / f"home-{system}"
            db = copy_store(store, homes[system])
            argvs[system] = [*prefix, *(arg.replace("{scratch}", str(scratch)) for arg in args),
                             *(["--db", str(db)] if system == "hermes" and
                               name != "start (--help)" else [])]
        times: dict[str, list[float]] = {system: [] for system in argvs}
        for round_number in range(rounds):
            order = list(argvs) if round_number % 2 == 0 else list(reversed(argvs))
            for system in order:
                if name in DESTRUCTIVE:
                    copy_store(store, homes[system])
                times[system].append(timed_run(argvs[system], homes[system]))
        row: dict[str, Any] = {}
        for system, runs in times.items():
            row[system] = {"median_s": statistics.median(runs), "runs_s": runs}
            log(f"{name}: {system} {statistics.median(runs):.2f} s", started)
        if "hermes" in argvs and words:
            copy_store(store, homes["hermes"])
            row["hermes"]["progress_shown"] = shows_progress(argvs["hermes"], homes["hermes"],
                                                             words)
        results[name] = row
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10k sessions, 2 rounds")
    ap.add_argument("--sessions", type=int, default=0, help="sessions in the store")
    ap.add_argument("--rounds", type=int, default=0, help="runs of each command (default 4)")
    protocol.add_peers_argument(ap)
    paths.add_output_arguments(ap, "benches/results/cli[-quick].json")
    args = ap.parse_args()
    started = time.monotonic()
    sessions = args.sessions or (10_000 if args.quick else 100_000)
    rounds = args.rounds or (2 if args.quick else 4)
    peers = protocol.peers_python(args.peers_python)
    upstream = [str(Path(peers).parent / "hermes")] if peers else None
    ours = [sys.executable, "-m", "hermes.cli"]
    scratch = Path(tempfile.mkdtemp(prefix="hermes-cli-bench-"))
    doc = record.start("cli", args.quick, scratch)
    doc["rounds"] = rounds
    try:
        store = scratch / "store" / "state.db"
        store.parent.mkdir()
        log(f"building {sessions} sessions", started)
        doc["store"] = build(store, sessions)
        if peers:
            log("hermes-agent opens the file once (its indexes)", started)
            subprocess.run([peers, "-c", "import sys, hermes_state; from pathlib import Path; "
                            "hermes_state.SessionDB(Path(sys.argv[1])).close()", str(store)],
                           env=environment(store.parent), check=True)
        subprocess.run([*ours, "sessions", "stats", "--db", str(store)], env=environment(
            store.parent), stdout=subprocess.DEVNULL, check=True)
        doc["store"]["bytes_prepared"] = store.stat().st_size
        doc["results"] = measure(store, scratch, ours, upstream, rounds, started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return record.conclude(doc, started, args, RESULTS.stem, render)


# -- rendering (stdlib only: benches/report.py imports this module) ------------


def _seconds(entry: dict[str, Any] | None) -> str:
    return "—" if not entry else f"{entry['median_s']:.2f} s"


def render(doc: dict[str, Any]) -> str:
    store = doc["store"]
    rows = []
    for name, row in doc["results"].items():
        ours, theirs = row.get("hermes"), row.get("upstream")
        progress = ours.get("progress_shown") if ours else None
        rows.append([name, _seconds(ours), _seconds(theirs),
                     ratio(theirs["median_s"], ours["median_s"]) if ours and theirs else "—",
                     "—" if progress is None else ("yes" if progress else "no")])
    lines = [
        "## The command line at scale (issue [I])",
        "",
        f"A separate run: `{doc['command']}` at {doc['utc']} ({doc['wall_s']} s; load "
        f"{doc['loadavg_start']} -> {doc['loadavg_end']}). One `state.db` of "
        f"{store['sessions']:,} ended sessions ({store['messages']:,} messages, "
        f"{store['bytes_prepared'] / 1e6:.0f} MB once both programs had opened it), started over "
        "180 days. Each figure is the median wall time of a whole command in a fresh process "
        f"({doc['rounds']} runs, the two programs interleaved A B B A; the machine was shared "
        "with other work, see the load above), start and exit included; each prune on a fresh "
        "copy "
        "(about half the sessions are older than 90 days). `start` is the interpreter and the "
        "imports alone, a part of every figure that no progress display can cover. `progress "
        "shown` says whether ours, run in a pseudo-terminal, showed its progress display, which "
        "appears once the command's work has taken 0.5 s. hermes-agent has no `sessions "
        "search`. `export` writes every session as JSONL, one a line, to a file (both "
        "programs' same form). Script: `benches/cli.py` (`make bench-cli`).",
        "",
        *table(["command", "hermes (ours)", "hermes-agent 0.19.0", "hermes-agent ÷ hermes",
                "progress shown"], rows, right=(1, 2, 3)),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
