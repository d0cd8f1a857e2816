"""An agent whose "model" is a script, for driving real gateway turns without a model.

Injected with ``GatewayConfig.agent_factory = "support.scripted_agent:build_agent"``. It uses
the package's real transcript persistence (``TranscriptPersistence``), but, like the upstream
agent the shutdown seed was written against, it flushes only when a turn ends: a turn cut off
inside its tool call is then durable only if the gateway's shutdown flush writes it.

The script, keyed by the last line of the user message (notes the gateway prepends come first):

* ``block:<path>`` — one tool round whose tool writes ``<path>.started`` and then waits until
  ``<path>`` exists, ignoring interrupts (the worst case for shutdown);
* ``sleep:<seconds>`` — one tool round that sleeps, stopping early when interrupted;
* anything else — no tools.

The reply is ``echo: <the whole user message> [history=<n>]``, so a test sees exactly what the
gateway handed the agent. Builds are counted in ``BUILDS`` and, when ``HERMES_TEST_BUILD_LOG``
names a file, appended to it as ``<pid> <session_id>`` lines (for tests of real processes).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from hermes.agent.conversation import inbound_message_id
from hermes.agent.persistence import TranscriptPersistence
from hermes.state import SessionDB

BUILDS: list[str] = []
#: While set to an Event, a build waits for it (after setting ``BUILDING``): a test can act
#: while an agent is being built.
BUILD_GATE: threading.Event | None = None
BUILDING = threading.Event()
_running_lock = threading.Lock()
_running: dict[str, int] = {}
#: Highest number of turns seen running at once for one session (must stay 1).
MAX_CONCURRENT_PER_SESSION: dict[str, int] = {}


def build_agent(*, session_id: str, session_db: SessionDB | None, platform: str,
                **runtime: Any) -> ScriptedAgent:
    BUILDS.append(session_id)
    if BUILD_GATE is not None:
        BUILDING.set()
        BUILD_GATE.wait()
    log = os.environ.get("HERMES_TEST_BUILD_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()} {session_id}\n")
    return ScriptedAgent(session_id=session_id, session_db=session_db, platform=platform,
                         model=runtime.get("model") or "scripted")


class ScriptedAgent(TranscriptPersistence):
    def __init__(self, *, session_id: str, session_db: SessionDB | None, platform: str,
                 model: str) -> None:
        self.session_id = session_id
        self._session_db = session_db
        self.platform = platform
        self.model = model
        self._session_messages = []
        self.turns = 0

    def run_conversation(self, user_message: str, conversation_history: list[dict[str, Any]]
                         | None = None, task_id: str | None = None,
                         persist_user_message: str | None = None) -> dict[str, Any]:
        # persist_user_message is accepted for the runner's call shape; this scripted agent
        # stores the text it was given, notes included, which the tests read back.
        sid = self.session_id or ""
        with _running_lock:
            _running[sid] = _running.get(sid, 0) + 1
            MAX_CONCURRENT_PER_SESSION[sid] = max(MAX_CONCURRENT_PER_SESSION.get(sid, 0),
                                                  _running[sid])
        try:
            return self._turn(user_message, conversation_history or [])
        finally:
            with _running_lock:
                _running[sid] -= 1

    def _turn(self, user_message: str, history: list[dict[str, Any]]) -> dict[str, Any]:
        self.turns += 1
        user: dict[str, Any] = {"role": "user", "content": user_message}
        if inbound_message_id.get():  # as the real agent does, for redelivery checks
            user["platform_message_id"] = inbound_message_id.get()
        messages = list(history) + [user]
        self._session_messages = messages
        # Like the upstream agent: the loaded history is known to be stored (the one-shot
        # identity seed of SPEC §4), so no flush — the gateway's shutdown flush included —
        # writes it again.
        self._flushed_db_message_ids = {id(m) for m in history}
        self._flushed_db_message_session_id = self.session_id
        self._last_flushed_db_idx = len(history)
        command = user_message.strip().splitlines()[-1] if user_message.strip() else ""
        interrupted = False
        if command.startswith(("block:", "sleep:")):
            name, _, argument = command.partition(":")
            call_id = f"call_{self.turns}"
            messages.append({"role": "assistant", "content": "", "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": name, "arguments": json.dumps({"arg": argument})}}]})
            output = self._block(Path(argument)) if name == "block" else self._sleep(float(argument))
            messages.append({"role": "tool", "tool_call_id": call_id, "tool_name": name,
                             "content": output})
            interrupted = self.is_interrupted
        if interrupted:
            self.clear_interrupt()
            reply = "interrupted"
        else:
            reply = f"echo: {user_message} [history={len(history)}]"
        messages.append({"role": "assistant", "content": reply})
        persisted = self._flush_messages_to_session_db(messages, history)
        return {
            "final_response": reply, "messages": messages, "history_offset": len(history),
            "tools": [{"type": "function", "function": {"name": "block"}}], "model": self.model,
            "last_prompt_tokens": len(messages), "completed": not interrupted,
            "interrupted": interrupted, "agent_persisted": bool(persisted),
            "session_id": self.session_id,
        }

    def _block(self, release: Path) -> str:
        Path(f"{release}.started").touch()
        while not release.exists():  # deliberately deaf to interrupts
            time.sleep(0.02)
        return "released"

    def _sleep(self, seconds: float) -> str:
        if self._interrupt_flag().wait(seconds):
            return "stopped early"
        return "slept"
