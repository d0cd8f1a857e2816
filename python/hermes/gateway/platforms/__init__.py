"""Platform adapters: the shipped ones and how a configured one is constructed."""

from __future__ import annotations

from hermes.errors import ConfigError
from hermes.gateway.config import Platform, PlatformConfig
from hermes.gateway.platforms.base import BasePlatformAdapter
from hermes.gateway.plugins import load_dotted

#: The adapters this package ships, by platform; any other platform needs ``adapter:``.
BUILTIN_ADAPTERS: dict[Platform, str] = {
    Platform.API_SERVER: "hermes.gateway.platforms.api_server:APIServerAdapter",
    Platform.LOCAL: "hermes.gateway.platforms.local:LocalAdapter",
    Platform.TELEGRAM: "hermes.gateway.platforms.telegram:TelegramAdapter",
    Platform.WEBHOOK: "hermes.gateway.platforms.webhook:WebhookAdapter",
}


def create_adapter(platform: Platform, config: PlatformConfig) -> BasePlatformAdapter:
    """Build the adapter configured for ``platform`` (imported only when enabled)."""
    path = config.adapter or BUILTIN_ADAPTERS.get(platform)
    if path is None:
        raise ConfigError(f"platform {platform.value} has no built-in adapter; set "
                          f"gateway.platforms.{platform.value}.adapter to 'module:Class'")
    cls = load_dotted(path, f"adapter of platform {platform.value}")
    if not (isinstance(cls, type) and issubclass(cls, BasePlatformAdapter)):
        raise ConfigError(f"adapter {path!r} of platform {platform.value} is not a "
                          "BasePlatformAdapter subclass")
    return cls(config, platform)
