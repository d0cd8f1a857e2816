"""Ports an upstream test file to this package by the SPEC §2 import mapping, and nothing else.

``hermes_state`` -> ``hermes.state``, ``run_agent`` -> ``hermes.agent``, ``agent[.X]`` ->
``hermes.agent[.X]``, ``gateway[.X]`` -> ``hermes.gateway[.X]``: in ``import`` statements and
in the string targets of ``monkeypatch.setattr`` / ``delattr`` / ``mock.patch``. The edit is
made on the syntax tree's source positions, so code, comments and strings that merely mention a
module stay as they are. A form the mapping cannot express keeps its meaning only by a rename
(``import agent.x`` binds ``agent``), so it is refused with :class:`PortError` rather than
guessed at.
"""

from __future__ import annotations

import ast
import re

__all__ = ["PortError", "map_module", "port_source"]

_MAPPING = {
    "hermes_state": "hermes.state",
    "run_agent": "hermes.agent",
    "agent": "hermes.agent",
    "gateway": "hermes.gateway",
}
_PATCHERS = {"setattr", "delattr", "patch"}
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class PortError(ValueError):
    """The upstream file uses an import form the mapping cannot port faithfully."""


def map_module(name: str) -> str | None:
    """The module's name in this package, or None when the mapping leaves it alone."""
    top, dot, rest = name.partition(".")
    mapped = _MAPPING.get(top)
    return None if mapped is None else mapped + dot + rest


def port_source(source: str, filename: str = "<upstream>") -> str:
    """The ported text of ``source``; raises PortError (naming the line) on an unportable form.

    Line numbers stay those of the upstream file, so a traceback points at the same line there.
    """
    tree = ast.parse(source, filename)
    lines = source.split("\n")  # as ast counts lines (str.splitlines also splits at \f, ...)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def span(node: ast.stmt | ast.expr) -> tuple[int, int]:
        # ast columns are UTF-8 byte offsets into their line.
        def at(lineno: int, col: int) -> int:
            return starts[lineno - 1] + len(lines[lineno - 1].encode()[:col].decode())

        return at(node.lineno, node.col_offset), at(
            node.end_lineno or node.lineno, node.end_col_offset or 0
        )

    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            start, end = span(node)
            replacement = _ported_import(node, source[start:end], filename)
        elif isinstance(node, ast.Call) and (target := _patch_target(node)) is not None:
            start, end = span(target)
            replacement = _ported_patch_target(target, source[start:end], filename)
        else:
            continue
        if replacement is not None:
            edits.append((start, end, replacement))
    ported = source
    for start, end, text in sorted(edits, reverse=True):
        ported = ported[:start] + text + ported[end:]
    return ported


def _ported_import(node: ast.Import | ast.ImportFrom, text: str, filename: str) -> str | None:
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        mapped = map_module(module) if node.level == 0 else None
        if mapped is None:
            return None
        keyword = re.match(r"from\s+", text)
        if keyword is None or not text[keyword.end() :].startswith(module):
            raise PortError(f"{filename}:{node.lineno}: cannot find the module name in {text!r}")
        return text[: keyword.end()] + mapped + text[keyword.end() + len(module) :]
    if not any(map_module(a.name) for a in node.names):
        return None
    parts = []
    for alias in node.names:
        mapped = map_module(alias.name)
        if mapped is None:
            parts.append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
        elif alias.asname is not None or "." not in alias.name:
            parts.append(f"{mapped} as {alias.asname or alias.name}")
        else:
            top = alias.name.split(".")[0]
            raise PortError(
                f"{filename}:{node.lineno}: `import {alias.name}` binds `{top}`, which {mapped} "
                "cannot; map the name it binds in the porter"
            )
    return "import " + ", ".join(parts)


def _patch_target(call: ast.Call) -> ast.Constant | None:
    """The string first argument of a ``setattr``/``delattr``/``patch`` call, if it has one."""
    func = call.func
    name = (
        func.attr
        if isinstance(func, ast.Attribute)
        else func.id
        if isinstance(func, ast.Name)
        else None
    )
    if name not in _PATCHERS or not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first
    return None


def _ported_patch_target(target: ast.Constant, text: str, filename: str) -> str | None:
    value = target.value
    if not (isinstance(value, str) and _DOTTED_NAME.fullmatch(value) and "." in value):
        return None
    top, _, rest = value.partition(".")
    mapped = map_module(top)
    if mapped is None:
        return None
    if value not in text:
        raise PortError(
            f"{filename}:{target.lineno}: cannot rewrite the patch target {text}; "
            "it must be one plain string literal"
        )
    return text.replace(value, f"{mapped}.{rest}", 1)
