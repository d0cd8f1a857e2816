"""The conformance suite's own parts: the porter, the scope rule, the pytest plugin, the lists.

The suite itself (hermes-agent's tests against the wheel) runs in ``scripts/conformance``;
these check, without the network, that its machinery decides what it claims to.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conformance import __main__ as driver
from conformance import scope, upstream
from conformance.plugin import ConformancePlugin
from conformance.port import PortError, port_source

pytest_plugins = ["pytester"]


# -- the porter ------------------------------------------------------------------------


def test_port_maps_imports_and_patch_targets_and_nothing_else() -> None:
    upstream_text = textwrap.dedent('''\
        """Tests for hermes_state.py."""
        import json, hermes_state
        import hermes_state as hs
        from hermes_state import (
            SCHEMA_VERSION,
            SessionDB as DB,
        )
        from agent.tool_dispatch_helpers import make_tool_result_message
        import run_agent

        def test_x(monkeypatch):
            from gateway.session import SessionStore
            monkeypatch.setattr("hermes_state.sqlite3.connect", None)
            monkeypatch.setattr('agent.model_metadata.CONTEXT', 1)
            note = "hermes_state.sqlite3.connect stays: not a patch target"
            getattr(hs, "hermes_state.x", None)
        ''')
    expected = textwrap.dedent('''\
        """Tests for hermes_state.py."""
        import json, hermes.state as hermes_state
        import hermes.state as hs
        from hermes.state import (
            SCHEMA_VERSION,
            SessionDB as DB,
        )
        from hermes.agent.tool_dispatch_helpers import make_tool_result_message
        import hermes.agent as run_agent

        def test_x(monkeypatch):
            from hermes.gateway.session import SessionStore
            monkeypatch.setattr("hermes.state.sqlite3.connect", None)
            monkeypatch.setattr('hermes.agent.model_metadata.CONTEXT', 1)
            note = "hermes_state.sqlite3.connect stays: not a patch target"
            getattr(hs, "hermes_state.x", None)
        ''')
    assert port_source(upstream_text) == expected


def test_port_refuses_an_import_whose_binding_the_mapping_would_change() -> None:
    with pytest.raises(PortError, match=r"<upstream>:2: `import agent.model_metadata` binds"):
        port_source("import json\nimport agent.model_metadata\n")


# -- the scope rule --------------------------------------------------------------------

SCOPE_CASES = textwrap.dedent("""\
    import sqlite3
    import pytest
    import hermes_state
    from hermes_state import SCHEMA_SQL, SessionDB

    class _Tracing(sqlite3.Connection):
        pass

    @pytest.fixture()
    def db(tmp_path):
        yield SessionDB(db_path=tmp_path / "s.db")

    @pytest.fixture()
    def locked_db(db):
        with db._lock:
            yield db

    def _peek(db):
        return db._conn.execute("SELECT 1")

    def test_public(db):
        class Fake:
            def __init__(self):
                self._calls = 0
                self.calls = self._calls
        assert db.get_session("x") is None and Fake().calls == 0

    def test_conn(db):
        db._conn.execute("SELECT 1")

    def test_private_classmethod():
        SessionDB._sanitize_fts5_query("x")

    def test_private_by_name(db, monkeypatch):
        monkeypatch.setattr(db, "_fts_enabled", False)

    def test_private_module_name():
        hermes_state._helper()

    def test_schema_sql(tmp_path):
        assert "CREATE" in SCHEMA_SQL

    def test_patched_sqlite3(monkeypatch):
        monkeypatch.setattr("hermes_state.sqlite3.connect", None)

    def test_raw_read(tmp_path):
        conn = sqlite3.connect(tmp_path / "s.db")
        conn.execute("SELECT * FROM sessions")
        conn.execute("PRAGMA table_info(sessions)")

    def test_raw_write_in_with(tmp_path):
        with sqlite3.connect(tmp_path / "s.db") as conn:
            conn.execute("UPDATE sessions SET title = 'x'")

    def test_raw_pragma_write(tmp_path):
        conn = sqlite3.connect(tmp_path / "s.db")
        conn.execute("PRAGMA journal_mode=WAL")

    def test_raw_sql_built_at_run_time(tmp_path, sql):
        sqlite3.connect(tmp_path / "s.db").execute(sql)

    def test_raw_subclass_write(tmp_path):
        conn = _Tracing(tmp_path / "s.db")
        conn.executescript("SELECT 1; DELETE FROM messages")

    def test_through_fixture(locked_db):
        locked_db.get_session("x")

    def test_through_module_helper(db):
        _peek(db)

    class TestThroughMethods:
        @pytest.fixture()
        def seeded(self, db):
            return self._seed(db)

        def _seed(self, db):
            db._execute_write(lambda c: None)
            return db

        def test_uses_class_fixture(self, seeded):
            seeded.get_session("x")

        def test_public_in_class(self, db):
            db.get_session("x")

    @pytest.mark.usefixtures("locked_db")
    class TestUsesFixtures:
        def test_under_a_class_mark(self):
            pass
    """)


def test_scope_rule_gives_each_reach_into_internals_its_reason() -> None:
    conn = "uses upstream's private connection ._conn"
    raw_write = "writes the file through a raw sqlite3 connection"
    assert scope.classify(SCOPE_CASES) == {
        "test_public": [],
        "test_conn": [conn],
        "test_private_classmethod": ["uses upstream's private ._sanitize_fts5_query"],
        "test_private_by_name": ["uses upstream's private ._fts_enabled"],
        "test_private_module_name": ["uses upstream's private hermes_state._helper"],
        "test_schema_sql": ["runs upstream's DDL text SCHEMA_SQL"],
        "test_patched_sqlite3": ["patches the sqlite3 module as upstream's module sees it"],
        "test_raw_read": [],
        "test_raw_write_in_with": [raw_write],
        "test_raw_pragma_write": [raw_write],
        "test_raw_sql_built_at_run_time": [raw_write],
        "test_raw_subclass_write": [raw_write],
        "test_through_fixture": ["uses upstream's private ._lock"],
        "test_through_module_helper": [conn],
        "TestThroughMethods::test_uses_class_fixture": ["uses upstream's private ._execute_write"],
        "TestThroughMethods::test_public_in_class": [],
        "TestUsesFixtures::test_under_a_class_mark": ["uses upstream's private ._lock"],
    }


def test_an_autouse_fixture_that_reaches_internals_takes_every_test_out() -> None:
    source = SCOPE_CASES + textwrap.dedent("""\

        @pytest.fixture(autouse=True)
        def _everywhere(tmp_path):
            hermes_state.DEFAULT_DB_PATH = hermes_state._default()
        """)
    reasons = scope.classify(source)
    assert reasons["test_public"] == ["uses upstream's private hermes_state._default"]
    assert all(reasons.values())


# -- the plugin --------------------------------------------------------------------------

PLUGIN_CASES = textwrap.dedent("""\
    class Obj:
        pass

    def test_passes():
        assert True

    def test_known():
        assert Obj() is None

    def test_new_failure():
        raise KeyError("boom")

    def test_known_but_passes():
        assert True

    def test_internal():
        raise AssertionError("never runs")
    """)
PLUGIN_TESTS = [
    "test_passes",
    "test_known",
    "test_new_failure",
    "test_known_but_passes",
    "test_internal",
]


QUIET = ("-p", "no:cacheprovider")


@pytest.fixture(autouse=True)
def _no_third_party_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    # The inner runs need no plugin; loading hypothesis's alone costs seconds there.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def _plugin(
    known: dict[str, str] | None,
    min_pass_rate: float | None = None,
    out_of_scope: dict[str, str] | None = None,
) -> ConformancePlugin:
    return ConformancePlugin(
        tests=PLUGIN_TESTS,
        out_of_scope={"test_internal": "uses ._conn"} if out_of_scope is None else out_of_scope,
        known_failures=known,
        min_pass_rate=min_pass_rate,
    )


def test_plugin_skips_xfails_strictly_and_summarises(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_upstream=PLUGIN_CASES)
    plugin = _plugin({"test_known": "AssertionError", "test_known_but_passes": "was failing"})
    result = pytester.runpytest_inprocess(*QUIET, plugins=[plugin])
    result.assert_outcomes(passed=1, xfailed=1, failed=2, skipped=1)
    assert plugin.outcomes == {
        "test_passes": "passed",
        "test_known": "failed, known",
        "test_new_failure": "failed",
        "test_known_but_passes": "passed, but listed as known",
    }
    result.stdout.re_match_lines(
        [
            r"public-API cases\s+4",
            r"  passed\s+1  25\.0%",
            r"  failed, known\s+1  known_failures\.json",
            r"  failed, NOT known\s+1 ",
            r"  passed, but listed as known\s+1 ",
            r"out of scope \(internals\)\s+1  out_of_scope\.json",
            r"bar: off, report only",
        ],
        consecutive=True,
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_plugin_flags_list_entries_that_name_no_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_upstream="def test_passes():\n    assert True\n")
    plugin = ConformancePlugin(
        tests=["test_passes"],
        out_of_scope={"test_gone": "x"},
        known_failures={"test_also_gone": "x"},
    )
    result = pytester.runpytest_inprocess(*QUIET, plugins=[plugin])
    result.stdout.fnmatch_lines(
        [
            "LIST PROBLEM: test_gone: in out_of_scope.json but not a test of the file",
            "LIST PROBLEM: test_also_gone: in known_failures.json but not a test of the file",
        ]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_plugin_flags_a_test_the_scope_rule_never_saw(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_upstream="def test_unseen():\n    assert True\n")
    plugin = ConformancePlugin(tests=[], out_of_scope={}, known_failures={})
    result = pytester.runpytest_inprocess(*QUIET, plugins=[plugin])
    result.stdout.fnmatch_lines(["LIST PROBLEM: test_unseen: collected, but the scope rule*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.parametrize(
    ("bar", "verdict", "exit_code"),
    [
        (0.5, "bar 50%: met (1 of 2 pass)", pytest.ExitCode.OK),
        (0.95, "bar 95%: NOT met (1 of 2 pass)", pytest.ExitCode.TESTS_FAILED),
    ],
)
def test_plugin_applies_the_bar(
    pytester: pytest.Pytester, bar: float, verdict: str, exit_code: pytest.ExitCode
) -> None:
    pytester.makepyfile(test_upstream=PLUGIN_CASES)
    plugin = _plugin(
        {"test_known": "AssertionError"},
        min_pass_rate=bar,
        out_of_scope={"test_internal": "x", "test_new_failure": "x", "test_known_but_passes": "x"},
    )
    result = pytester.runpytest_inprocess(*QUIET, plugins=[plugin])
    result.stdout.fnmatch_lines([verdict])
    assert result.ret == exit_code


def test_update_run_records_each_failure_in_one_stable_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_upstream=PLUGIN_CASES)
    plugin = _plugin(None)
    pytester.runpytest_inprocess(*QUIET, plugins=[plugin])
    assert plugin.causes == {
        "test_known": "AssertionError: assert <test_upstream.Obj object at 0x…> is None",
        "test_new_failure": "KeyError: 'boom'",
    }
    assert {c for c, o in plugin.outcomes.items() if o == "failed"} == set(plugin.causes)


# -- the driver and the committed lists --------------------------------------------------


def test_committed_lists_are_test_id_to_reason_and_disjoint() -> None:
    out_of_scope = json.loads(driver.OUT_OF_SCOPE.read_text(encoding="utf-8"))
    known = json.loads(driver.KNOWN_FAILURES.read_text(encoding="utf-8"))
    for entries in (out_of_scope, known):
        assert isinstance(entries, dict) and entries
        assert all(isinstance(k, str) and isinstance(v, str) and v for k, v in entries.items())
    assert not {case.split("[", 1)[0] for case in known} & set(out_of_scope)


def test_a_bar_that_is_not_a_fraction_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HERMES_CONFORMANCE_MIN", "95")
    assert driver.main([]) == 2
    assert "HERMES_CONFORMANCE_MIN='95' is not a fraction in (0, 1]" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("ci", "exit_code", "says"),
    [
        ("", 0, "conformance: SKIPPED, cannot fetch the upstream tests"),
        ("true", 1, "conformance: FAILED, the upstream tests are needed in CI"),
    ],
)
def test_without_pypi_the_run_skips_except_in_ci(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    ci: str,
    exit_code: int,
    says: str,
) -> None:
    # A real pip run against an index on a loopback port nothing listens on.
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(driver, "CACHE_DIR", tmp_path / "cache")
    assert driver.main([]) == exit_code
    assert says in capsys.readouterr().err
    assert not (tmp_path / "cache" / upstream.SDIST_NAME).exists()


def test_a_cached_sdist_with_another_digest_is_refused(tmp_path: Path) -> None:
    (tmp_path / upstream.SDIST_NAME).write_bytes(b"not the release")
    with pytest.raises(RuntimeError, match="not the pinned .*delete it and run again"):
        upstream.read_test_file(tmp_path)
