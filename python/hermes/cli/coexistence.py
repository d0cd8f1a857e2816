"""Living beside hermes-agent, which also installs a ``hermes`` command.

Two packages that install one console script leave whichever was installed last in
``bin/``; the other's ``hermes`` is gone without a word. This package's command is also
``hermes-gateway`` (a name no other package takes), and every run of it says so in one line
on stderr when the ``hermes`` on PATH, or a package in this environment, is another's.
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

DISTRIBUTION = "hermes-gateway"
COMMAND = "hermes"
OWN_COMMAND = "hermes-gateway"
_OWN_MODULE = "hermes.cli"


@dataclass(frozen=True)
class CommandOnPath:
    """The ``hermes`` that a shell would run: its file and, when it can be told, the
    distribution (``"name version"``) whose console script it is."""

    path: Path | None
    owner: str | None

    @property
    def is_ours(self) -> bool:
        return self.owner is not None and _is_ours(self.owner)


def other_distributions() -> list[str]:
    """``"name version"`` of every other distribution in this environment that declares a
    ``hermes`` console script (hermes-agent's ``hermes_cli.main:main``, say)."""
    return sorted({_describe(point) for point in _hermes_scripts()
                   if not _is_ours(_describe(point))})


def command_on_path() -> CommandOnPath:
    found = shutil.which(COMMAND)
    if found is None:
        return CommandOnPath(None, None)
    path = Path(found)
    try:
        script = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return CommandOnPath(path, None)
    # A console script imports its entry point's module: pip and uv write
    # `from <module> import <function>`.
    for point in _hermes_scripts():
        if f"from {point.module} import" in script:
            return CommandOnPath(path, _describe(point))
    if f"from {_OWN_MODULE} import" in script:  # ours, from an environment not this one
        return CommandOnPath(path, DISTRIBUTION)
    return CommandOnPath(path, None)


def shadow_note() -> str | None:
    """One line saying which ``hermes`` is whose, when another package's is in play; None when
    ``hermes`` is this package's and no other package declares it."""
    on_path = command_on_path()
    others = other_distributions()
    if on_path.path is not None and not on_path.is_ours:
        whose = on_path.owner or "another package"
        return (f"note: `hermes` on PATH ({on_path.path}) runs {whose}, not {DISTRIBUTION}; "
                f"run this package as `{OWN_COMMAND}` (or `python -m hermes`)")
    if others:
        return (f"note: {', '.join(others)} is installed here too and its `hermes` command is "
                f"replaced by {DISTRIBUTION}'s; this package is also `{OWN_COMMAND}`; "
                "see `hermes doctor`")
    return None


@functools.cache  # a scan of every installed distribution's metadata (~3 ms): once a process
def _hermes_scripts() -> tuple[EntryPoint, ...]:
    return tuple(entry_points(group="console_scripts", name=COMMAND))


def _is_ours(description: str) -> bool:
    name = description.split()[0]
    return name.lower().replace("_", "-") == DISTRIBUTION


def _describe(point: EntryPoint) -> str:
    dist = point.dist
    return f"{dist.name} {dist.version}" if dist is not None else point.value
