"""Loading the replaceable parts named in configuration ("package.module:attribute").

Adapters and the agent factory are named by dotted path so that a deployment (or a test
running real gateway processes) can plug its own in without code changes here.
"""

from __future__ import annotations

import importlib

from hermes.errors import ConfigError


def load_dotted(path: str, what: str) -> object:
    """Import ``module:attribute``; a ``ConfigError`` says which setting ``what`` was wrong."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"{what} {path!r} must be written 'package.module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what} {path!r}: cannot import {module_name} ({exc}); "
                          "check the name and that it is installed") from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError(f"{what} {path!r}: {module_name} has no {attribute}") from None
