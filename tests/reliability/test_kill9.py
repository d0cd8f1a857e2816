"""kill -9 at random points (issue 7, item 1).

A real gateway process (``hermes.gateway.run.run_gateway``, loopback platform) runs the real
``AIAgent`` with a scripted multi-round tool-calling model (``reliability.rounds_agent``) for
two conversations at once, and is SIGKILLed at a random moment. After every kill, with the
process dead, ``state.db`` is checked against the agent's own fsync'd log of what each
successful flush made durable:

* every message a flush reported durable is in state.db exactly once;
* no row of any conversation is duplicated, and each turn's rows are a prefix of that turn's
  script in order (user, call r0, result r0, ..., done) — nothing partial, nothing reordered;
* a turn whose reply reached the client is complete;
* ``message_count`` equals the active rows of every session, the word index has one entry per
  row, and SQLite's integrity check passes.

Then the gateway is restarted and the conversations go on: the first message after a restart
must reach the model with the right note — the resume note ("the gateway stopped
unexpectedly") when the boot flags the conversation (``resume_recent_window`` > 0), otherwise
the tool-tail note exactly when the stored transcript ends in a tool result, otherwise none —
and the continued turns must duplicate nothing (checked after the next kill).

Trials alternate ``resume_recent_window`` between the default and 0, so both notes occur.
3 trials in the normal run, 50 with ``HERMES_FULL=1`` (``HERMES_KILL_TRIALS`` overrides).
"""

from __future__ import annotations

import asyncio
import random
import signal
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hermes.gateway.resume import CLEAN_SHUTDOWN_MARKER, TOOL_TAIL_NOTE, resume_note
from hermes.state import SessionDB

from .harness import (
    FULL,
    consistency_problems,
    entry_for,
    json_lines,
    launch,
    post,
    setting,
    write_figures,
)
from .rounds_agent import marker, parse_command

pytestmark = pytest.mark.asyncio

CHATS = ("a", "b")


def script(tag: str, rounds: int) -> list[str]:
    """The markers of a complete turn, in order."""
    steps = [f"user {tag}"]
    for k in range(rounds):
        steps += [f"call {tag} r{k}", f"result {tag} r{k}"]
    return steps + [f"done {tag}"]


@dataclass
class Ledger:
    """What the client side knows: every command sent, and the replies that came back."""

    commands: dict[str, str] = field(default_factory=dict)  # tag -> command line
    order: dict[str, list[str]] = field(default_factory=dict)  # chat -> tags in send order
    replies: dict[str, str | None] = field(default_factory=dict)  # tag -> reply
    #: per trial and chat, the note the first message after the restart must carry
    expected_notes: dict[tuple[int, str], tuple[str, ...]] = field(default_factory=dict)
    first_tag: dict[tuple[int, str], str] = field(default_factory=dict)


@dataclass
class Figures:
    trials: int = 0
    kill_delays: list[float] = field(default_factory=list)
    phases: Counter[str] = field(default_factory=Counter)
    db_ahead_of_log: set[str] = field(default_factory=set)
    durable_checked: set[str] = field(default_factory=set)
    rows_checked: int = 0
    without_meta: set[str] = field(default_factory=set)
    turns_sent: int = 0
    turns_answered: int = 0
    notes: Counter[str] = field(default_factory=Counter)
    notes_checked: int = 0
    openai_violations: list[str] = field(default_factory=list)


async def drive(http: aiohttp.ClientSession, gateway: Any, chat: str, trial: int,
                ledger: Ledger, rng: random.Random) -> None:
    """Send turns of the conversation one after another until cancelled (or the gateway dies)."""
    for k in range(1000):
        tag = f"{chat}{trial}x{k}"
        command = f"turn {tag} rounds={rng.randint(1, 4)} ms={rng.randint(0, 20)}"
        ledger.commands[tag] = command
        ledger.order.setdefault(chat, []).append(tag)
        ledger.first_tag.setdefault((trial, chat), tag)
        try:
            status, reply = await post(http, gateway, chat, command)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return  # the process died under the request
        if status != 200:
            raise AssertionError(f"{command}: HTTP {status} {reply}\n{gateway.log()}")
        ledger.replies[tag] = reply


async def warmed_up(home: Path, gateway: Any) -> None:
    """Until this gateway process has made its first flush durable."""
    pid = gateway.process.pid
    for _ in range(1000):
        if any(r["pid"] == pid for r in json_lines(home / "durable.log")):
            return
        await asyncio.sleep(0.01)


def durable_markers(home: Path) -> set[str]:
    return {m for record in json_lines(home / "durable.log") for m in record["markers"]}


def check_conversation(db: SessionDB, chat: str, ledger: Ledger, durable: set[str],
                       figures: Figures) -> tuple[list[str], str | None]:
    """Problems with one conversation's transcript; also where its turn in flight stood."""
    problems: list[str] = []
    entry = entry_for(db, chat)
    mine = {m for m in durable if m.split(" ", 2)[1].startswith(chat)}
    if entry is None:
        return ([f"{chat}: durable messages {sorted(mine)} but no routing entry"] if mine
                else []), None
    rows = db.get_messages(entry.session_id)
    session = db.get_session(entry.session_id)
    assert session is not None
    figures.rows_checked = max(figures.rows_checked, len(rows))
    if session["message_count"] != len(rows):
        problems.append(f"{chat}: message_count {session['message_count']} != {len(rows)} rows")
    names = [marker(row) for row in rows]
    metas = [row for row in rows if row["role"] == "session_meta"]
    # One session_meta row, written when the first turn ends; a kill inside the first turn
    # leaves none (later turns have history, so none is added: see RELIABILITY.md).
    if len(metas) > 1:
        problems.append(f"{chat}: {len(metas)} session_meta rows")
    if not metas and rows:
        figures.without_meta.add(entry.session_id)
    strays = [(row["role"], row.get("content")) for row, name in zip(rows, names)
              if name is None and row["role"] != "session_meta"]
    if strays:
        problems.append(f"{chat}: rows no script wrote: {strays}")
    written = [n for n in names if n is not None]
    duplicates = [n for n, c in Counter(written).items() if c > 1]
    if duplicates:
        problems.append(f"{chat}: duplicated rows {duplicates}")
    missing = sorted(mine - set(written))
    if missing:
        problems.append(f"{chat}: flushed (durable) but not in state.db: {missing}")
    figures.durable_checked |= mine
    figures.db_ahead_of_log |= set(written) - mine

    # Turn by turn, in the order they were sent: a prefix of the script, contiguous.
    by_tag: dict[str, list[str]] = {}
    sequence: list[str] = []
    for name in written:
        tag = name.split(" ")[1]
        if not sequence or sequence[-1] != tag:
            sequence.append(tag)
        by_tag.setdefault(tag, []).append(name)
    if len(sequence) != len(set(sequence)):
        problems.append(f"{chat}: turns interleaved in the transcript: {sequence}")
    sent = ledger.order.get(chat, [])
    if [t for t in sent if t in by_tag] != sequence:
        problems.append(f"{chat}: transcript order {sequence} is not the send order {sent}")
    for tag, got in by_tag.items():
        parsed = parse_command(ledger.commands.get(tag, ""))
        assert parsed is not None, tag
        full = script(tag, int(parsed[1]["rounds"]))
        if got != full[:len(got)]:
            problems.append(f"{chat}: turn {tag} stored as {got}, not a prefix of {full}")
        if tag in ledger.replies and got != full:
            problems.append(f"{chat}: turn {tag} was answered but is stored incomplete: {got}")
    for tag in ledger.replies:
        if tag.startswith(chat) and tag not in by_tag:
            problems.append(f"{chat}: answered turn {tag} is not stored")

    # Where the turn in flight stood when the process died.
    last_sent = sent[-1] if sent else None
    if last_sent is None or last_sent not in by_tag:
        phase = "before the user row of the next turn"
    else:
        last = by_tag[last_sent][-1].split(" ")[0]
        phase = {"user": "after the user row", "call": "after a tool call, in the tool",
                 "result": "after a tool result, before the model's next reply",
                 "done": "after the final answer"}[last]
    return problems, phase


def expected_note(db: SessionDB, chat: str, window: float) -> tuple[str, ...] | None:
    """The notes (any one of them) the next message of ``chat`` may reach the model with,
    once a gateway with ``resume_recent_window=window`` boots without ``.clean_shutdown``;
    None when the conversation has no entry yet."""
    entry = entry_for(db, chat)
    if entry is None:
        return None
    if entry.resume_pending:
        return (resume_note(entry.resume_reason) + "\n\n",)
    if window > 0:  # the boot flags every conversation active within the window
        return (resume_note("restart_interrupted") + "\n\n",)
    rows = [m for m in db.get_messages_as_conversation(entry.session_id)
            if m["role"] != "session_meta"]
    # A transcript that ends mid-turn carries the cut-off note even without a flag.
    if rows and (rows[-1]["role"] == "tool"
                 or (rows[-1]["role"] == "assistant" and rows[-1].get("tool_calls"))):
        return (TOOL_TAIL_NOTE + "\n\n",)
    return ("",)


def check_notes(home: Path, trial: int, ledger: Ledger, figures: Figures) -> list[str]:
    """The first message of each conversation in ``trial`` reached the model with its note."""
    sent: dict[str, str] = {}
    for record in json_lines(home / "requests.log"):
        if record["tag"]:
            sent.setdefault(record["tag"], record["sent"])
    problems = []
    for chat in CHATS:
        notes = ledger.expected_notes.get((trial, chat))
        tag = ledger.first_tag.get((trial, chat))
        if notes is None or tag is None or tag not in sent:
            continue  # a new conversation, or killed before its first model call
        figures.notes_checked += 1
        got = next((n for n in notes if sent[tag] == n + ledger.commands[tag]), None)
        if got is None:
            problems.append(f"trial {trial}, {chat}: the model got {sent[tag]!r}, expected one "
                            f"of the notes {notes!r} before {ledger.commands[tag]!r}")
            continue
        figures.notes["resume" if got.startswith("[System note: your previous turn")
                      else "tool tail" if got else "none"] += 1
    return problems


async def test_kill_9_at_random_points_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    trials = int(setting("kill_trials", 3, 50))
    seed = int(setting("kill_seed", random.randrange(1 << 30), random.randrange(1 << 30)))
    rng = random.Random(seed)
    home, state_db = tmp_path / "home", tmp_path / "state.db"
    ledger, figures = Ledger(), Figures()
    problems: list[str] = []
    gateway = None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            for trial in range(trials + 1):
                window = 120.0 if trial % 2 == 0 else 0.0
                gateway = launch(home, state_db, resume_recent_window=window)
                drivers = [asyncio.ensure_future(drive(http, gateway, chat, trial, ledger, rng))
                           for chat in CHATS]
                if trial == trials:  # the last round: no kill, a clean stop
                    await asyncio.sleep(0.5)
                    for task in drivers:
                        task.cancel()
                    await asyncio.gather(*drivers, return_exceptions=True)
                    await asyncio.sleep(0.3)  # let a turn cut off by the cancel finish
                    assert await asyncio.to_thread(gateway.stop) == 0, gateway.log()
                else:
                    # One kill in five lands anywhere from the start (agent builds, first
                    # turns); the others once the turns are flowing, so most land mid-turn.
                    if rng.random() >= 0.2:
                        await warmed_up(home, gateway)
                    delay = rng.uniform(0.0, 0.8)
                    figures.kill_delays.append(round(delay, 3))
                    await asyncio.sleep(delay)
                    assert gateway.process is not None and gateway.process.poll() is None, (
                        gateway.log())
                    gateway.process.send_signal(signal.SIGKILL)
                    await asyncio.to_thread(gateway.process.wait)
                    await asyncio.gather(*drivers, return_exceptions=True)
                    figures.trials += 1

                durable = durable_markers(home)
                with SessionDB(state_db) as db:
                    for chat in CHATS:
                        found, phase = check_conversation(db, chat, ledger, durable, figures)
                        problems += [f"trial {trial}: {p}" for p in found]
                        if phase is not None and trial < trials:
                            figures.phases[phase] += 1
                        next_window = 120.0 if (trial + 1) % 2 == 0 else 0.0
                        note = expected_note(db, chat, next_window)
                        if note is not None:
                            ledger.expected_notes[(trial + 1, chat)] = note
                problems += [f"trial {trial}: {p}" for p in consistency_problems(state_db)]
                if trial > 0:
                    problems += check_notes(home, trial, ledger, figures)
                assert not problems, "\n".join(problems)
            assert (home / CLEAN_SHUTDOWN_MARKER).exists()
    finally:
        if gateway is not None:
            gateway.kill()
        figures.turns_sent = len(ledger.commands)
        figures.turns_answered = len(ledger.replies)
        figures.openai_violations = sorted({v for r in json_lines(home / "requests.log")
                                            for v in r["violations"]})
        write_figures("kill9", {
            "seed": seed, "trials": figures.trials, "problems": problems,
            "kill_delay_s": {"min": min(figures.kill_delays, default=None),
                             "max": max(figures.kill_delays, default=None)},
            "kill_landed": dict(figures.phases),
            "durable_messages_checked": len(figures.durable_checked),
            "rows_committed_but_not_yet_logged": len(figures.db_ahead_of_log),
            "largest_transcript_checked": figures.rows_checked,
            "sessions_without_session_meta": len(figures.without_meta),
            "turns_sent": figures.turns_sent, "turns_answered": figures.turns_answered,
            "notes_checked": figures.notes_checked, "notes": dict(figures.notes),
            "requests_breaking_openai_tool_rules": len(figures.openai_violations),
            "openai_violation_examples": figures.openai_violations[:5],
        })
    assert FULL or trials >= 3
