"""Running ``hermes gateway run`` as a real process for end-to-end tests."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from support.processes import child_env



def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def hermes_env(home: Path, **variables: str) -> dict[str, str]:
    return child_env(home, **variables)


def run_cli(home: Path, *args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermes.cli", *args], env=hermes_env(
        home, **variables), capture_output=True, text=True, timeout=60)


class GatewayProcess:
    """``hermes gateway run`` on a free loopback port, stopped with SIGINT like a person would."""

    def __init__(self, home: Path, *args: str, **variables: str) -> None:
        self.home = home
        self.port = free_port()
        self.log = home / "gateway.log"
        self._command = [sys.executable, "-m", "hermes.cli", "-v", "gateway", "run",
                         "--port", str(self.port), *args]
        self._env = hermes_env(home, **variables)
        self.process: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> GatewayProcess:
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(self._command, env=self._env, stdout=log,
                                            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the gateway exited early:\n{self.output()}")
            try:
                status, _ = request(self.port, "GET", "/health")
                if status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.__exit__()
        raise AssertionError(f"the gateway did not become healthy:\n{self.output()}")

    def __exit__(self, *exc: object) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.returncode = self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the gateway did not stop on SIGINT:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def request(port: int, method: str, path: str, body: bytes | None = None,
            headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
    """One HTTP request; returns the status and the decoded JSON body."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method,
                                 headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")
