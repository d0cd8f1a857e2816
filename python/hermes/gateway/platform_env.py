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


def platform_environment(file_platforms: object,
                         environ: Mapping[str, str]) -> list[tuple[str, object, str]]:
    """The settings the environment gives, as ``(dotted key, value, origin)`` for the loader
    (``hermes.config``) to lay over the file's ``gateway.platforms`` (``file_platforms``, the
    raw mapping or ``None``). A platform the file does not name is enabled only by its
    credential's variable."""
    in_file = file_platforms if isinstance(file_platforms, dict) else {}
    settings: list[tuple[str, object, str]] = []
    # Platforms the file does not name: off unless a credential variable turns them on (or
    # their own ``..._ENABLED`` variable says, which then stands alone).
    switched: dict[str, tuple[bool, str]] = {}
    explicit: set[str] = set()
    for variable, platform, key in PLATFORM_ENVIRONMENT:
        text = environ.get(variable, "").strip()
        if not text:
            continue
        origin = f"environment variable {variable}"
        value: object = ([part.strip() for part in text.split(",") if part.strip()]
                         if key in _LISTS else text)
        settings.append((f"gateway.platforms.{platform}.{key}", value, origin))
        if key == "enabled":
            explicit.add(platform)
        elif platform not in in_file:
            on = variable in _ENABLING or switched.get(platform, (False, ""))[0]
            switched[platform] = (on, origin)
    settings += [(f"gateway.platforms.{platform}.enabled", on, origin)
                 for platform, (on, origin) in switched.items() if platform not in explicit]
    return settings
