"""What a command runs with: ``hermes.config.load_config`` with the command's flags on top,
the gateway configuration for one platform, and the session database."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes.cli.failures import CommandError
from hermes.config import HermesConfig, load_config

if TYPE_CHECKING:  # imported where used: `hermes --help` should not load the gateway
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
    if args.model:
        os.environ["HERMES_MODEL"] = args.model
    if args.base_url:
        os.environ["HERMES_BASE_URL"] = args.base_url
    config = load_config({"state_db": str(args.db) if args.db else None, **(overrides or {})})
    config.model.resolved_name()
    return config


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
    return dataclasses.replace(gateway, platforms=platforms, state_db=config.db_path)


def db_path(args: argparse.Namespace) -> Path:
    """The session database of ``--db`` or the configuration."""
    path: Path = args.db or load_config().db_path
    return path


def open_db(args: argparse.Namespace) -> SessionDB:
    """The session database of ``--db`` or the configuration; one that does not exist yet is
    an error (reading commands must not create an empty one)."""
    from hermes.state import SessionDB

    path = db_path(args)
    if not path.exists():
        raise CommandError(f"no session database at {path}; run the gateway or `hermes chat` "
                           "first, or pass --db")
    return SessionDB(path)
