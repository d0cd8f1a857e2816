"""A real ``hermes`` gateway process whose platform is Telegram, on the fake Bot API server.

Its agent is the real one (``hermes.agent.AIAgent`` with the ``openai`` client), its model
the rule-based fake endpoint (``support.echo_model``). The token and the allowlist reach it
through the environment, under hermes-agent's names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.echo_model import EchoModel
from support.fake_telegram import FakeTelegram
from support.gateway_process import GatewayProcess

ALLOWED_USERS = "42,43"


class TelegramGatewayProcess(GatewayProcess):
    def __init__(self, home: Path, state_db: Path, telegram: FakeTelegram, model: EchoModel,
                 **gateway_settings: Any) -> None:
        super().__init__(home, state_db, **gateway_settings)
        self.telegram = telegram
        self.model = model

    def config(self) -> dict[str, Any]:
        return {
            "state_db": str(self.state_db),
            "model": {"name": "fake-model", "base_url": self.model.url, "api_key": "sk-fake",
                      "max_retries": 0},
            "gateway": {
                "platforms": {"telegram": {"extra": {
                    "base_url": self.telegram.url, "busy_poll_interval": 0.2,
                    "typing_interval": 1.0}}},
                **self.settings,
            },
        }

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "TELEGRAM_BOT_TOKEN": self.telegram.token,
                "TELEGRAM_ALLOWED_USERS": ALLOWED_USERS}

    def ready(self) -> bool:
        return "gateway running (telegram)" in self.log()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid
