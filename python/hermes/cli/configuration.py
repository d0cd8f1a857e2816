"""What a command runs with: ``hermes.config.load_config`` with the command's flags on top,
the gateway configuration for one platform, and the session database."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes.cli.failures import CommandError
from hermes.paths import store_exists

if TYPE_CHECKING:  # imported where used: `hermes --help` loads neither settings nor store
    from hermes.config import HermesConfig
    from hermes.gateway.config import GatewayConfig
    from hermes.state import SessionDB


def settings(args: argparse.Namespace, overrides: dict[str, object] | None = None
             ) -> HermesConfig:
    """The configuration with this command's flags applied; fails early (``ConfigError``)
    on an endpoint without a model name rather than on every message.

    --model and --base-url are exported to this process's environment: the gateway reads
    model settings afresh for each agent it builds (config.yaml, then the environment), and
    flags sit on top of both that way.
    """
    from hermes.config import load_config

    if args.model:
        os.environ["HERMES_MODEL"] = args.model
    if args.base_url:
        os.environ["HERMES_BASE_URL"] = args.base_url
    config = load_config({**store_flags(args), **(overrides or {})})
    config.model.resolved_name()
    return config


def store_flags(args: argparse.Namespace) -> dict[str, object]:
    """``--db`` and ``--database-url`` as overrides: either one wins over config.yaml and the
    environment (``--db`` over a configured ``database.url`` too); both at once is an error."""
    url = getattr(args, "database_url", None)
    if args.db and url:
        raise CommandError("--db and --database-url name two different stores; give one")
    return {"state_db": str(args.db) if args.db else None,
            "database.url": "" if args.db else url}


def gateway_config(config: HermesConfig, platform: str, extra: dict[str, Any], *,
                   only: bool) -> GatewayConfig:
    """The gateway's configuration with ``platform`` enabled and given ``extra`` settings;
    with ``only``, every other platform off (a terminal chat must not also open the port
    of a gateway that may be running beside it)."""
    from hermes.gateway.config import Platform, PlatformConfig

    gateway = config.gateway
    chosen = Platform(platform)
    configured = gateway.platforms.get(chosen, PlatformConfig())
    platforms = {} if only else dict(gateway.platforms)
    platforms[chosen] = dataclasses.replace(
        configured, enabled=True, extra={**configured.extra, **extra})
    return dataclasses.replace(gateway, platforms=platforms, state_db=config.store_location)


def store_location(args: argparse.Namespace) -> Path | str:
    """The session store of ``--db``, ``--database-url`` or the configuration."""
    from hermes.config import load_config

    return load_config(store_flags(args)).store_location


def open_db(args: argparse.Namespace) -> SessionDB:
    """The session store of ``--db``, ``--database-url`` or the configuration; a file that
    does not exist yet is an error (reading commands must not create an empty one)."""
    from hermes.state import SessionDB

    location = store_location(args)
    if not store_exists(location):
        raise CommandError(f"no session database at {location}; run the gateway or `hermes "
                           "chat` first, or pass --db or --database-url")
    return SessionDB(location)
