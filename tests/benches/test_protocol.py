"""The benchmarks' one worker protocol (benches/benchlib/protocol.py), with real
worker processes: the first line describes the interpreter, each request gets its
answer, a failing request fails alone, and the worker ends when told to."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

BENCHES = Path(__file__).resolve().parents[2] / "benches"
sys.path.insert(0, str(BENCHES))

from benchlib.protocol import Worker, WorkerError  # noqa: E402

SERVER = f"""
import os, sys, time
sys.path.insert(0, {str(BENCHES)!r})
from benchlib import protocol

class Server:
    def add(self, a, b):
        print("a chatty line on stdout")  # must not reach the protocol
        return a + b
    def fail(self):
        raise ValueError("no such thing")
    def env(self, name):
        return os.environ.get(name)
    def slow(self, seconds):
        time.sleep(seconds)
        return seconds
    def _private(self):
        return "must not be reachable"
    def close(self):
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "closed"), "w") as f:
            f.write("closed")

protocol.serve(Server(), sys.argv[1])
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "server.py"
    path.write_text(textwrap.dedent(SERVER))
    return path


def test_requests_get_answers_and_a_failure_fails_alone(script: Path) -> None:
    worker = Worker(sys.executable, script, "plain", name="plain")
    try:
        assert worker.info["system"] == "plain"
        assert worker.info["python"] == sys.version.split()[0]
        assert worker.call("add", a=2, b=3) == 5
        with pytest.raises(WorkerError, match="plain: ValueError: no such thing"):
            worker.call("fail")
        with pytest.raises(WorkerError, match="no operation '_private'"):
            worker.call("_private")
        with pytest.raises(WorkerError, match="no operation 'missing'"):
            worker.call("missing")
        assert worker.call("add", a=[1], b=[2]) == [1, 2]  # still serving
    finally:
        worker.close()
    assert worker.proc.returncode == 0


def test_two_workers_run_at_once_with_send_and_receive(script: Path) -> None:
    a = Worker(sys.executable, script, "a", name="a")
    b = Worker(sys.executable, script, "b", name="b")
    try:
        a.send("slow", seconds=0.2)
        b.send("slow", seconds=0.1)
        assert (b.receive(), a.receive()) == (0.1, 0.2)
    finally:
        a.close()
        b.close()


def test_another_interpreter_does_not_inherit_this_ones_pythonpath(
    script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "ours"))
    other = tmp_path / "python"  # another path to an interpreter, as a venv's is
    other.symlink_to(sys.executable)
    same, elsewhere = (Worker(sys.executable, script, "x", name="same"),
                       Worker(str(other), script, "x", name="other"))
    try:
        assert same.call("env", name="PYTHONPATH") == str(tmp_path / "ours")
        assert elsewhere.call("env", name="PYTHONPATH") is None
    finally:
        same.close()
        elsewhere.close()


def test_a_worker_that_dies_is_reported_not_waited_for(tmp_path: Path) -> None:
    script = tmp_path / "dies.py"
    script.write_text("import sys; sys.exit(3)\n")
    with pytest.raises(WorkerError, match=r"dies: the worker exited \(exit 3\)"):
        Worker(sys.executable, script, name="dies")


def test_close_ends_a_worker_and_runs_its_close(script: Path, tmp_path: Path) -> None:
    worker = Worker(sys.executable, script, "x", name="x")
    pid = worker.proc.pid
    assert not (tmp_path / "closed").exists()
    worker.close()
    assert worker.proc.returncode == 0
    assert (tmp_path / "closed").read_text() == "closed"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
