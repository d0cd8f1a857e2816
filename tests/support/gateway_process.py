"""Run a real ``hermes`` gateway process on loopback and talk to it.

Each process gets its own ``HERMES_HOME`` (its config, port file, ``.clean_shutdown``) and
may share one ``state.db`` with others through the config's ``state_db``. Its agent is the
scripted one (``support.scripted_agent``); its platform is ``support.loopback_adapter``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from support import postgres
from support.processes import child_env

_MAIN = ("import logging, sys; "
         "logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s %(message)s'); "
         "from hermes.gateway.run import run_gateway; sys.exit(run_gateway())")


class GatewayProcess:
    def __init__(self, home: Path, state_db: Path, **gateway_settings: Any) -> None:
        self.home = home
        self.state_db = state_db
        self.port_file = home / "port"
        self.outbox = home / "outbox.jsonl"
        self.build_log = home / "builds.log"
        self.log_path = home / "gateway.log"
        self.settings = {"drain_timeout": 1.0, "interrupt_grace": 0.5, **gateway_settings}
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def config(self) -> dict[str, Any]:
        """The process's ``config.yaml``; on the PostgreSQL leg its store is the one that
        stands for ``state_db`` there (``support/postgres.py``)."""
        database = {"database": {"url": postgres.store_url(self.state_db)}} \
            if postgres.ENABLED else {}
        return {
            **database,
            "state_db": str(self.state_db),
            "gateway": {
                "agent_factory": "support.scripted_agent:build_agent",
                "platforms": {"webhook": {
                    "enabled": True,
                    "adapter": "support.loopback_adapter:LoopbackAdapter",
                    "extra": {"port_file": str(self.port_file), "outbox": str(self.outbox)},
                }},
                **self.settings,
            },
        }

    def environment(self) -> dict[str, str]:
        return child_env(self.home, HERMES_TEST_BUILD_LOG=str(self.build_log))

    def ready(self) -> bool:
        """Whether the started process serves (its adapter wrote its port)."""
        if not self.port_file.exists():
            return False
        self.port = int(self.port_file.read_text())
        return True

    def start(self, timeout: float = 20.0) -> GatewayProcess:
        self.home.mkdir(parents=True, exist_ok=True)
        self.port_file.unlink(missing_ok=True)
        (self.home / "config.yaml").write_text(yaml.safe_dump(self.config()))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-c", _MAIN],
                                            env=self.environment(), stdout=log,
                                            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gateway did not come up; its log:\n{self.log()}")
            time.sleep(0.05)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def builds(self) -> list[str]:
        """Session ids of the agents this home's processes built, in order."""
        if not self.build_log.exists():
            return []
        return [line.split()[1] for line in self.build_log.read_text().splitlines()]

    async def send(self, http: aiohttp.ClientSession, chat_id: str, text: str,
                   **fields: Any) -> str | None:
        payload = {"chat_id": chat_id, "user_id": chat_id, "text": text, **fields}
        async with http.post(f"http://127.0.0.1:{self.port}/message", json=payload) as response:
            response.raise_for_status()
            reply: str | None = (await response.json())["reply"]
            return reply

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then wait for the exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise RuntimeError(f"gateway ignored SIGTERM; its log:\n{self.log()}") from None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
