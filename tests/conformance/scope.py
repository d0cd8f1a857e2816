"""Which of hermes-agent's own SessionDB tests judge the public API, decided from their source.

A test is out of scope when it (or a helper, fixture or class it uses, transitively) reaches
into hermes-agent's internals, which a reimplementation has no reason to share:

* its private SQLite connection (``db._conn``) or any other private name of its module
  (``SessionDB._sanitize_fts5_query``, ``db._fts_enabled``, ``db._lock``, ...), including
  through ``getattr``/``monkeypatch.setattr`` with a private attribute name. Any private
  attribute read on anything but ``self``/``cls`` counts, a fake's of the test file's own too:
  the rule errs towards out of scope, and the committed list is there to be reviewed;
* its DDL text, ``SCHEMA_SQL``;
* a patch of the ``sqlite3`` module as hermes-agent's module sees it
  (``monkeypatch.setattr("hermes_state.sqlite3.connect", ...)``);
* a raw ``sqlite3`` connection of the test's own that writes the file (one that only reads
  it is fine: that is how a user inspects a file).

:func:`classify` reads the upstream (unported) test file and gives every test function
(``Class::test_name``, or ``test_name`` at module level) its reasons; no reason means in scope.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["UPSTREAM_MODULE", "classify", "out_of_scope"]

#: The module whose internals the rule looks for, under its upstream name.
UPSTREAM_MODULE = "hermes_state"

_CONNECTION_METHODS_THAT_RUN_SQL = {"execute", "executemany", "executescript"}
# Statements that never change the file; anything else through a raw connection is a write.
_READ_STATEMENT = re.compile(r"^\s*(SELECT|EXPLAIN|VALUES)\b", re.IGNORECASE)
_PRAGMA = re.compile(r"^\s*PRAGMA\b", re.IGNORECASE)
_TRANSACTION_CONTROL = re.compile(
    r"^\s*(BEGIN|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE)\b", re.IGNORECASE
)
_WITH_WRITE = re.compile(
    r"^\s*WITH\b.*\b(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE | re.DOTALL
)
_ATTRIBUTE_SETTERS = {"getattr", "setattr", "hasattr", "delattr"}
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def classify(source: str) -> dict[str, list[str]]:
    """Every test of the upstream file, in file order, with its sorted out-of-scope reasons."""
    module = _Module(ast.parse(source))
    return {test_id: sorted(module.reasons_of(node, cls)) for test_id, node, cls in module.tests()}


def out_of_scope(source: str) -> dict[str, str]:
    """The out-of-scope tests only, each with its reasons in one line."""
    return {test_id: "; ".join(reasons) for test_id, reasons in classify(source).items() if reasons}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _sql_writes(sql: str) -> bool:
    for statement in filter(str.strip, sql.split(";")):
        if _READ_STATEMENT.match(statement) or _TRANSACTION_CONTROL.match(statement):
            continue
        if _PRAGMA.match(statement):
            if "=" in statement:
                return True
            continue
        if statement.lstrip().upper().startswith("WITH") and not _WITH_WRITE.match(statement):
            continue
        return True
    return False


def _literal_sql(node: ast.expr) -> str | None:
    """The SQL text of a literal argument, or None when it is built at run time."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):  # f-string: its literal parts carry the statement kind
        return "".join(
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
    return None


@dataclass
class _Aliases:
    """How the test file names hermes-agent's module and what it imported from it."""

    modules: set[str] = field(default_factory=set)  # local names bound to the module
    imported: dict[str, str] = field(default_factory=dict)  # local name -> upstream name

    def collect(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == UPSTREAM_MODULE:
                        self.modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.ImportFrom) and node.module == UPSTREAM_MODULE:
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = alias.name


class _Module:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.aliases = _Aliases()
        self.aliases.collect(tree)
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.autouse = [f for f in self.functions.values() if _is_autouse_fixture(f)]
        # Module-level subclasses of sqlite3.Connection: calling one opens a raw connection.
        self.connection_classes: set[str] = set()
        for cls in self.classes.values():
            if _subclasses_connection(cls, self.connection_classes):
                self.connection_classes.add(cls.name)

    # -- what the tests are -------------------------------------------------

    def tests(self) -> Iterator[tuple[str, ast.FunctionDef, ast.ClassDef | None]]:
        """In file order, as pytest collects them."""
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                yield node.name, node, None
            elif (
                isinstance(node, ast.ClassDef)
                and node.name.startswith("Test")
                and self._method(node, "__init__") is None
            ):
                seen: set[str] = set()
                for owner in self._mro(node):
                    for method in owner.body:
                        if (
                            isinstance(method, ast.FunctionDef)
                            and method.name.startswith("test")
                            and method.name not in seen
                        ):
                            seen.add(method.name)
                            yield f"{node.name}::{method.name}", method, node

    def _mro(self, cls: ast.ClassDef) -> list[ast.ClassDef]:
        order = [cls]
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in self.classes:
                order += [c for c in self._mro(self.classes[base.id]) if c not in order]
        return order

    def _method(self, cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
        for owner in self._mro(cls):
            for node in owner.body:
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    return node
        return None

    # -- why a test is out of scope -------------------------------------------

    def reasons_of(self, test: ast.FunctionDef, cls: ast.ClassDef | None) -> set[str]:
        reasons: set[str] = set()
        pending: list[tuple[ast.AST, ast.ClassDef | None]] = [(test, cls)]
        pending += [(f, None) for f in self.autouse]
        if cls is not None:
            for owner in self._mro(cls):
                pending += [
                    (m, cls)
                    for m in owner.body
                    if isinstance(m, ast.FunctionDef)
                    and (_is_autouse_fixture(m) or m.name in ("setup_method", "teardown_method"))
                ]
                pending += [f for name in _usefixtures(owner) if (f := self._fixture(name, cls))]
        done: set[int] = set()
        while pending:
            node, owner = pending.pop()
            if id(node) in done:
                continue
            done.add(id(node))
            reasons |= self._direct_reasons(node)
            pending += self._uses(node, owner)
        return reasons

    def _uses(
        self, node: ast.AST, cls: ast.ClassDef | None
    ) -> list[tuple[ast.AST, ast.ClassDef | None]]:
        """Helpers, fixtures and classes of the test file that ``node`` refers to."""
        used: list[tuple[ast.AST, ast.ClassDef | None]] = []
        names: set[str] = set()
        if isinstance(node, ast.FunctionDef):
            names |= {a.arg for a in node.args.args + node.args.kwonlyargs}  # fixtures
            names |= _usefixtures(node)
        if isinstance(node, ast.ClassDef):
            names |= _usefixtures(node)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                names.add(sub.id)
            elif (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Name)
                and sub.value.id in ("self", "cls")
                and cls is not None
            ):
                method = self._method(cls, sub.attr)
                if method is not None:
                    used.append((method, cls))
        for name in names:
            if (fixture := self._fixture(name, cls)) is not None:
                used.append(fixture)
            if name in self.classes:
                used.append((self.classes[name], self.classes[name]))
        return used

    def _fixture(
        self, name: str, cls: ast.ClassDef | None
    ) -> tuple[ast.FunctionDef, ast.ClassDef | None] | None:
        """The fixture or helper function ``name`` as a test of ``cls`` sees it."""
        if cls is not None:
            method = self._method(cls, name)
            if method is not None and _is_fixture(method):
                return method, cls
        if name in self.functions:
            return self.functions[name], None
        return None

    def _direct_reasons(self, node: ast.AST) -> set[str]:
        reasons: set[str] = set()
        raw_connections, connect_callables = self._raw_connection_names(node)
        # A nested def or class is walked here too: its body is part of this test.
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute):
                reasons |= self._attribute_reasons(sub)
            elif isinstance(sub, ast.Name):
                upstream = self.aliases.imported.get(sub.id)
                if upstream is not None:
                    reasons |= self._upstream_name_reasons(upstream)
            elif isinstance(sub, ast.ImportFrom) and sub.module == UPSTREAM_MODULE:
                for alias in sub.names:
                    reasons |= self._upstream_name_reasons(alias.name)
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                reasons |= self._patch_target_reasons(sub.value)
            if isinstance(sub, ast.Call):
                reasons |= self._call_reasons(sub, raw_connections, connect_callables)
        return reasons

    def _attribute_reasons(self, node: ast.Attribute) -> set[str]:
        receiver = node.value
        if isinstance(receiver, ast.Name) and receiver.id in self.aliases.modules:
            return self._upstream_name_reasons(node.attr)
        if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
            return set()  # the test class's own helpers and state
        return _private_attribute_reasons(node.attr)

    def _upstream_name_reasons(self, name: str) -> set[str]:
        if name == "SCHEMA_SQL":
            return {"runs upstream's DDL text SCHEMA_SQL"}
        if name == "sqlite3":
            return {"patches the sqlite3 module as upstream's module sees it"}
        if _is_private(name):
            return {f"uses upstream's private {UPSTREAM_MODULE}.{name}"}
        return set()

    def _patch_target_reasons(self, text: str) -> set[str]:
        """A dotted string naming something inside the upstream module (a patch target)."""
        prefix = UPSTREAM_MODULE + "."
        if not _DOTTED_NAME.fullmatch(text) or not text.startswith(prefix):
            return set()
        reasons: set[str] = set()
        parts = text[len(prefix) :].split(".")
        reasons |= self._upstream_name_reasons(parts[0])
        for part in parts[1:]:
            reasons |= _private_attribute_reasons(part)
        return reasons

    def _call_reasons(
        self, call: ast.Call, raw_connections: set[str], connect_callables: set[str]
    ) -> set[str]:
        func = call.func
        if isinstance(func, ast.Name) and func.id in _ATTRIBUTE_SETTERS and len(call.args) >= 2:
            return self._named_attribute_reasons(call.args[0], call.args[1])
        if not isinstance(func, ast.Attribute):
            return set()
        if func.attr in ("setattr", "delattr") and len(call.args) >= 2:
            return self._named_attribute_reasons(call.args[0], call.args[1])
        if func.attr in _CONNECTION_METHODS_THAT_RUN_SQL and call.args:
            receiver = func.value
            through_raw = (isinstance(receiver, ast.Name) and receiver.id in raw_connections) or (
                isinstance(receiver, ast.Call) and _is_connect_call(receiver, connect_callables)
            )
            if through_raw:
                sql = _literal_sql(call.args[0])
                if sql is None or _sql_writes(sql):
                    return {"writes the file through a raw sqlite3 connection"}
        return set()

    def _named_attribute_reasons(self, target: ast.expr, name: ast.expr) -> set[str]:
        """``getattr(obj, "_x")``, ``monkeypatch.setattr(obj, "_x", ...)`` and the like."""
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            return set()
        if isinstance(target, ast.Name) and target.id in ("self", "cls"):
            return set()
        if isinstance(target, ast.Name) and target.id in self.aliases.modules:
            return self._upstream_name_reasons(name.value)
        return _private_attribute_reasons(name.value)

    def _raw_connection_names(self, node: ast.AST) -> tuple[set[str], set[str]]:
        """Local names bound to a raw ``sqlite3`` connection, and to ``sqlite3.connect`` itself."""
        connect_callables = set(self.connection_classes)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign) and _is_sqlite3_connect(sub.value):
                connect_callables |= {t.id for t in sub.targets if isinstance(t, ast.Name)}
            elif isinstance(sub, ast.ClassDef) and _subclasses_connection(sub, connect_callables):
                connect_callables.add(sub.name)
        connections: set[str] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign) and _is_connect_call(sub.value, connect_callables):
                connections |= {t.id for t in sub.targets if isinstance(t, ast.Name)}
            elif isinstance(sub, (ast.With, ast.AsyncWith)):
                for item in sub.items:
                    if _is_connect_call(item.context_expr, connect_callables) and isinstance(
                        item.optional_vars, ast.Name
                    ):
                        connections.add(item.optional_vars.id)
        return connections, connect_callables


def _private_attribute_reasons(attr: str) -> set[str]:
    if attr == "_conn":
        return {"uses upstream's private connection ._conn"}
    if _is_private(attr):
        return {f"uses upstream's private .{attr}"}
    return set()


def _is_sqlite3_connect(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "connect"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sqlite3"
    )


def _subclasses_connection(cls: ast.ClassDef, connection_classes: set[str]) -> bool:
    return any(
        (
            isinstance(b, ast.Attribute)
            and b.attr == "Connection"
            and isinstance(b.value, ast.Name)
            and b.value.id == "sqlite3"
        )
        or (isinstance(b, ast.Name) and b.id in connection_classes)
        for b in cls.bases
    )


def _is_connect_call(node: ast.expr, connect_callables: set[str]) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return _is_sqlite3_connect(func) or (
        isinstance(func, ast.Name) and func.id in connect_callables
    )


def _fixture_decorator(node: ast.FunctionDef) -> ast.expr | None:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "fixture":
            return decorator
        if isinstance(target, ast.Name) and target.id == "fixture":
            return decorator
    return None


def _is_fixture(node: ast.FunctionDef) -> bool:
    return _fixture_decorator(node) is not None


def _is_autouse_fixture(node: ast.FunctionDef) -> bool:
    decorator = _fixture_decorator(node)
    return isinstance(decorator, ast.Call) and any(
        k.arg == "autouse" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in decorator.keywords
    )


def _usefixtures(node: ast.FunctionDef | ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for decorator in node.decorator_list:
        if (
            isinstance(decorator, ast.Call)
            and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "usefixtures"
        ):
            names |= {
                a.value
                for a in decorator.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            }
    return names
