"""The Telegram platform (``pip install 'hermes-gateway[telegram]'``: python-telegram-bot).

==============  ============================================================================
``adapter``     the adapter: long polling or webhook, the turn of one update, sending
``events``      a Telegram message as a ``MessageEvent``: chat types, session keys, mentions
``ledger``      which updates are done, on disk, so each is answered exactly once
``split``       replies cut into messages of at most 4096 UTF-16 units
``redact``      the bot token and webhook secret kept out of the log
==============  ============================================================================
"""

from __future__ import annotations

try:
    from hermes.gateway.platforms.telegram.adapter import TelegramAdapter
except ImportError as exc:  # python-telegram-bot is an optional dependency
    from hermes.errors import ConfigError

    raise ConfigError(f"the telegram platform needs python-telegram-bot ({exc}): "
                      "pip install 'hermes-gateway[telegram]'") from exc

__all__ = ["TelegramAdapter"]
