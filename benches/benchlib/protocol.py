"""One way to keep a serving process per system and send it work.

A worker is a script, run in the system's own interpreter (ours, or the peer
venv's), that calls ``serve(target, system)``. It first writes one JSON line
describing its interpreter (``machine.interpreter``), then answers each request
line ``{"op": NAME, **kwargs}`` with one line: ``{"ok": target.NAME(**kwargs)}``,
or ``{"error": "Type: message"}`` when the call raised (the traceback goes to the
worker's stderr). ``{"op": "quit"}`` or the end of its stdin ends it. The
orchestrator's side is ``Worker``: ``call`` sends one request and returns its
answer; ``send`` and ``receive`` apart let several workers run at once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from .machine import interpreter
from .paths import BENCHES


class WorkerError(RuntimeError):
    """A worker failed a request, or exited."""


def serve(target: Any, system: str) -> None:
    """Answers requests on stdin with ``target``'s public methods until told to
    quit; then calls ``target.close()`` if it has one."""
    out = sys.stdout
    sys.stdout = sys.stderr  # a chatty import or print must not corrupt the protocol
    try:
        out.write(json.dumps(interpreter(system)) + "\n")
        out.flush()
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            op = request.pop("op")
            if op == "quit":
                break
            try:
                if op.startswith("_") or not callable(getattr(target, op, None)):
                    raise AttributeError(f"{type(target).__name__} has no operation {op!r}")
                answer = {"ok": getattr(target, op)(**request)}
            except Exception as exc:  # a failing system is a finding, not a crash
                traceback.print_exc()
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            out.write(json.dumps(answer) + "\n")
            out.flush()
    finally:
        close = getattr(target, "close", None)
        if callable(close):
            close()


class Worker:
    """A serving process: ``python script *args``, whose first line is ``info``."""

    def __init__(self, python: str, script: Path, *args: str, name: str) -> None:
        env = dict(os.environ)
        if os.path.abspath(python) != os.path.abspath(sys.executable):
            env.pop("PYTHONPATH", None)  # another venv must not see this one's packages
        self.name = name
        self.proc = subprocess.Popen(
            [python, str(script), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tempfile.gettempdir(),
        )
        self.info: dict[str, Any] = self._line()

    def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise WorkerError(f"{self.name}: the worker exited (exit {self.proc.wait()}); its stderr says why")
        return json.loads(line)  # type: ignore[no-any-return]

    def send(self, op: str, **kwargs: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **kwargs}) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> Any:
        """The answer to the oldest request not yet received; raises ``WorkerError`` if it failed."""
        answer = self._line()
        if "error" in answer:
            raise WorkerError(f"{self.name}: {answer['error']}")
        return answer["ok"]

    def call(self, op: str, **kwargs: Any) -> Any:
        self.send(op, **kwargs)
        return self.receive()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def peers_python(given: str = "") -> str:
    """The peer venv's interpreter (hermes-agent 0.19.0, the OpenAI Agents SDK,
    LangGraph, matplotlib, pytest-benchmark): ``given``, else
    ``$HERMES_PEERS_PYTHON``, else the one ``benches/setup_peers.sh`` builds or finds
    up to date (it honours ``$PEERS_DIR``). "" when it cannot be built."""
    given = given or os.environ.get("HERMES_PEERS_PYTHON", "")
    if given:
        return given
    proc = subprocess.run(["bash", str(BENCHES / "setup_peers.sh")], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"peers: setup failed, the peers are skipped:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return ""
    return proc.stdout.strip().splitlines()[-1]


def add_peers_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--peers-python", default="",
                    help="the peer venv's python (default: $HERMES_PEERS_PYTHON, else benches/setup_peers.sh)")
