"""The chat platforms' environment variables, under hermes-agent's names.

They override the ``gateway.platforms`` section of ``config.yaml`` key by key, as every other
environment variable overrides the file. A platform's credential in the environment enables
the platform (``TELEGRAM_BOT_TOKEN`` is enough to start the Telegram adapter), unless the file
says ``enabled: false``; other variables never enable a platform the file does not name. Lists (``TELEGRAM_ALLOWED_USERS``) are comma-separated.

Secrets read here (the bot token, webhook secrets) go into ``PlatformConfig.token`` and
``PlatformConfig.extra``, which ``PlatformConfig`` keeps out of its ``repr``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: (variable, platform, key): ``key`` is a ``PlatformConfig`` field or ``extra.<name>``.
PLATFORM_ENVIRONMENT: tuple[tuple[str, str, str], ...] = (
    ("TELEGRAM_BOT_TOKEN", "telegram", "token"),
    ("TELEGRAM_ALLOWED_USERS", "telegram", "allowed_users"),
    ("TELEGRAM_ALLOWED_CHATS", "telegram", "allowed_chats"),
    ("TELEGRAM_ALLOW_ALL_USERS", "telegram", "extra.allow_all_users"),
    ("TELEGRAM_REQUIRE_MENTION", "telegram", "extra.require_mention"),
    ("TELEGRAM_REPLY_TO_MODE", "telegram", "extra.reply_to_mode"),
    ("TELEGRAM_WEBHOOK_URL", "telegram", "extra.webhook_url"),
    ("TELEGRAM_WEBHOOK_PORT", "telegram", "extra.webhook_port"),
    ("TELEGRAM_WEBHOOK_SECRET", "telegram", "extra.webhook_secret"),
    ("WEBHOOK_ENABLED", "webhook", "enabled"),
    ("WEBHOOK_PORT", "webhook", "extra.port"),
    ("WEBHOOK_SECRET", "webhook", "extra.secret"),
)
#: Variables whose presence enables their platform.
_ENABLING = frozenset({"TELEGRAM_BOT_TOKEN"})
_LISTS = frozenset({"allowed_users", "allowed_chats"})


def overlay_platform_environment(platforms: object, environ: Mapping[str, str]) -> object:
    """``platforms`` (the raw ``gateway.platforms`` mapping of the file, or ``None``) with the
    environment's values laid over it. Returns ``platforms`` itself when no variable is set
    or when it is not a mapping (the loader then reports the file's mistake)."""
    if not isinstance(platforms, dict) and platforms is not None:
        return platforms
    in_file: dict[Any, Any] = platforms or {}
    chosen = [(variable, platform, key) for variable, platform, key in PLATFORM_ENVIRONMENT
              if environ.get(variable, "").strip()]
    if not chosen:
        return platforms
    result: dict[str, Any] = {name: dict(settings) if isinstance(settings, dict) else settings
                              for name, settings in in_file.items()}
    for platform in {platform for _, platform, _ in chosen} - set(result):
        result[platform] = {"enabled": False}  # named by the environment only
    for variable, platform, key in chosen:
        settings = result[platform]
        if not isinstance(settings, dict):
            continue  # the loader reports "platforms.<name> must be a mapping"
        value: object = environ[variable].strip()
        if key in _LISTS:
            value = [part.strip() for part in str(value).split(",") if part.strip()]
        if key.startswith("extra."):
            extra = settings.get("extra")
            extra = dict(extra) if isinstance(extra, dict) else {}
            extra[key.removeprefix("extra.")] = value
            settings["extra"] = extra
        else:
            settings[key] = value
        if variable in _ENABLING and "enabled" not in (in_file.get(platform) or {}):
            settings["enabled"] = True
    return result
