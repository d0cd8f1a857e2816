"""``hermes doctor`` and ``hermes --version``: which package this command is, and which home
directory, database and port it uses, so that a user with hermes-agent installed too can tell
the two apart (README: Next to hermes-agent)."""

from __future__ import annotations

import argparse
import os
import sys

from hermes import SCHEMA_VERSION, SQLITE_VERSION, __version__
from hermes.cli import coexistence
from hermes.cli.arguments import Commands
from hermes.cli.failures import FAILED
from hermes.cli.output import print_text
from hermes.errors import ConfigError
from hermes.paths import hermes_home


def version() -> str:
    return (f"{coexistence.DISTRIBUTION} {__version__} "
            f"(SQLite {SQLITE_VERSION}, schema_version {SCHEMA_VERSION})")


def add_commands(commands: Commands) -> None:
    doctor = commands.add_parser(
        "doctor", help="say which package, home directory, database and port are in use")
    doctor.set_defaults(handler=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    import platform

    from hermes.config import config_path, load_config

    rows: list[tuple[str, str]] = [
        ("package", version()),
        ("python", f"{sys.executable} ({platform.python_implementation()} {platform.python_version()})"),
        ("command", _command()),
        ("home", f"{hermes_home()} ({_home_source()})"),
    ]
    status = 0
    path = config_path()
    try:
        config = load_config()
    except ConfigError as exc:
        rows.append(("config", f"{path}: {' '.join(str(exc).split())}"))
        status = FAILED
    else:
        rows += [
            ("config", f"{path}" if path.exists() else f"{path} (not there: the defaults)"),
            ("database", f"{config.db_path}" + ("" if config.db_path.exists()
                                                else " (not created yet)")),
            ("gateway", f"http://{config.api_server.host}:{config.api_server.port}"),
        ]
    others = coexistence.other_distributions()
    rows.append(("also here", ", ".join(others) if others else "no other package's `hermes`"))
    width = max(len(name) for name, _ in rows)
    print_text(*(f"{name:<{width}}  {value}" for name, value in rows))
    return status


def _command() -> str:
    on_path = coexistence.command_on_path()
    if on_path.path is None:
        where = "`hermes` is not on PATH"
    else:
        where = f"`hermes` on PATH is {on_path.path} ({on_path.owner or 'another package'})"
    return f"{where}; this package is also `{coexistence.OWN_COMMAND}` and `python -m hermes`"


def _home_source() -> str:
    if os.environ.get("HERMES_HOME", "").strip():
        return "$HERMES_HOME"
    return "the default; hermes-agent's too: state.db is shared, config.yaml is not"
