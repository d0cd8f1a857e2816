"""Living beside hermes-agent, which also installs a ``hermes`` command.

Two packages that install one console script leave whichever was installed last in
``bin/``; the other's ``hermes`` is gone without a word. This package's command is also
``hermes-gateway`` (a name no other package takes), and every run of it says so in one line
on stderr when the ``hermes`` on PATH, or a package in this environment, is another's.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from dataclasses import dataclass
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
    return sorted({script.owner for script in _hermes_scripts()
                   if not _is_ours(script.owner)})


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
    for declared in _hermes_scripts():
        if f"from {declared.module} import" in script:
            return CommandOnPath(path, declared.owner)
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


@dataclass(frozen=True)
class _Script:
    """A ``hermes`` console script a distribution declares: the module it imports, and whose
    it is (``"name version"``)."""

    module: str
    owner: str


@functools.cache  # one scan of the environment's distributions: once a process
def _hermes_scripts() -> tuple[_Script, ...]:
    """The ``hermes`` console scripts declared by the distributions on ``sys.path``, read
    from their ``*.dist-info/entry_points.txt`` (the files ``importlib.metadata`` reads;
    importing it would cost this command more than the whole scan: ~25 ms)."""
    found: dict[str, _Script] = {}
    for folder in dict.fromkeys(sys.path):
        try:
            entries = list(os.scandir(folder or "."))
        except OSError:
            continue
        for entry in entries:
            if not entry.name.endswith((".dist-info", ".egg-info")):
                continue
            module = _declared_module(Path(entry.path) / "entry_points.txt")
            if module is None:
                continue
            name, version = _name_and_version(Path(entry.path))
            # The first of a name on sys.path is the one imported, as importlib.metadata says.
            found.setdefault(name.lower().replace("_", "-"), _Script(module, f"{name} {version}"))
    return tuple(found.values())


def _declared_module(entry_points: Path) -> str | None:
    """The module of the ``hermes`` console script in an ``entry_points.txt``, if any."""
    try:
        text = entry_points.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif section == "console_scripts" and "=" in line:
            name, _, target = line.partition("=")
            if name.strip() == COMMAND:
                return target.split(":")[0].strip()
    return None


def _name_and_version(metadata_folder: Path) -> tuple[str, str]:
    """The distribution's name and version from its METADATA (PKG-INFO for an egg)."""
    fields: dict[str, str] = {}
    for file in ("METADATA", "PKG-INFO"):
        try:
            with open(metadata_folder / file, encoding="utf-8", errors="replace") as headers:
                for line in headers:
                    if not line.strip():
                        break  # the headers end at the first blank line
                    key, _, value = line.partition(":")
                    fields.setdefault(key.strip().lower(), value.strip())
        except OSError:
            continue
        break
    stem = metadata_folder.name.rsplit(".", 1)[0]
    name, _, version = stem.partition("-")
    return fields.get("name", name), fields.get("version", version.split("-")[0])


def _is_ours(description: str) -> bool:
    name = description.split()[0]
    return name.lower().replace("_", "-") == DISTRIBUTION
