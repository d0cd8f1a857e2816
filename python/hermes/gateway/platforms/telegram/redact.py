"""Keeping the bot token and the webhook secret out of the log.

The token is part of every Bot API URL (``/bot<token>/sendMessage``), so an error message that
quotes a URL would carry it. ``SecretFilter`` rewrites every record of the loggers it is
attached to, message and traceback alike, before any handler sees it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

REDACTED = "<redacted>"


class SecretFilter(logging.Filter):
    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self.redact(record.getMessage())
        record.args = None
        if record.exc_info:
            record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True
