"""The pytest plugin that turns the ported upstream file into the conformance suite.

It skips the out-of-scope tests with their reason, marks the known failures
``xfail(strict=True)`` (so a test that starts passing fails the run until it is taken off the
list), checks that both lists name tests that exist, records every case's outcome and the
one-line cause of each failure, and ends with a summary and, when a bar is set, the verdict.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Generator, Mapping
from dataclasses import dataclass, field

import pytest

__all__ = ["ConformancePlugin", "case_id", "one_line_cause"]

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_TMP_PATH = re.compile(r"/tmp/pytest-of-[^/\s]+/pytest-\d+/[^\s'\")]+")
_LONG_FLOAT = re.compile(r"\b\d+\.\d{4,}\b")
_CAUSE_MAX = 200


def case_id(item: pytest.Item) -> str:
    """``Class::test_name[params]``: the node id without the file."""
    return item.nodeid.split("::", 1)[1]


def one_line_cause(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    """``Type: first line of the message``, without what differs from run to run."""
    message = str(excinfo.value).strip().splitlines()
    text = f"{excinfo.typename}: {message[0]}" if message else excinfo.typename
    text = _LONG_FLOAT.sub("<float>", _TMP_PATH.sub("<tmp>", _ADDRESS.sub("0x…", text)))
    return text if len(text) <= _CAUSE_MAX else text[: _CAUSE_MAX - 1] + "…"


@dataclass
class ConformancePlugin:
    """``known_failures=None`` is the update run: nothing is xfailed, every failure recorded."""

    tests: Collection[str]  # every test function the scope rule saw
    out_of_scope: Mapping[str, str]
    known_failures: Mapping[str, str] | None
    min_pass_rate: float | None = None
    known_failures_file: str = "known_failures.json"  # named in the summary

    outcomes: dict[str, str] = field(default_factory=dict)  # case id -> outcome, in run order
    causes: dict[str, str] = field(default_factory=dict)  # case id -> first failure's cause
    problems: list[str] = field(default_factory=list)  # lists that disagree with the file
    public_cases: set[str] = field(default_factory=set)
    out_of_scope_cases: set[str] = field(default_factory=set)
    verdict: str = ""

    # -- collection ---------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)  # before -k/-m deselect: the checks see every case
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        functions = set()
        for item in items:
            case = case_id(item)
            function = case.split("[", 1)[0]
            functions.add(function)
            if function not in self.tests:
                self.problems.append(
                    f"{case}: collected, but the scope rule (scope.py) never saw it"
                )
            if function in self.out_of_scope:
                self.out_of_scope_cases.add(case)
                item.add_marker(
                    pytest.mark.skip(reason=f"out of scope: {self.out_of_scope[function]}")
                )
                continue
            self.public_cases.add(case)
            if self.known_failures is not None and case in self.known_failures:
                item.add_marker(pytest.mark.xfail(reason=self.known_failures[case], strict=True))
        self.problems += [
            f"{name}: in out_of_scope.json but not a test of the file"
            for name in self.out_of_scope
            if name not in functions
        ]
        for case in self.known_failures or {}:
            if case.split("[", 1)[0] in self.out_of_scope:
                self.problems.append(f"{case}: in {self.known_failures_file} but out of scope")
            elif case not in self.public_cases:
                self.problems.append(
                    f"{case}: in {self.known_failures_file} but not a test of the file"
                )

    # -- outcomes -------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        case = case_id(item)
        if case not in self.public_cases:
            return report
        failed = call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception)
        if failed and case not in self.causes:
            assert call.excinfo is not None
            self.causes[case] = one_line_cause(call.excinfo)
        previous = self.outcomes.get(case)
        if previous in ("failed", "failed, known", "passed, but listed as known"):
            return report
        if failed:
            known = self.known_failures is not None and case in self.known_failures
            self.outcomes[case] = "failed, known" if known else "failed"
        elif report.skipped:
            self.outcomes[case] = "skipped by the test"
        elif report.when == "call":
            xpassed = report.failed and "XPASS(strict)" in str(report.longrepr)
            self.outcomes[case] = "passed, but listed as known" if xpassed else "passed"
        return report

    # -- the end ----------------------------------------------------------------------

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.problems:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        passed = self.count("passed")
        public = len(self.public_cases)
        if self.min_pass_rate is None:
            self.verdict = "bar: off, report only (HERMES_CONFORMANCE_MIN=0.95 turns it on)"
        elif len(self.outcomes) < public:
            self.verdict = (
                f"bar {self.min_pass_rate:.0%}: not judged, only "
                f"{len(self.outcomes)} of {public} public cases ran"
            )
        elif passed >= self.min_pass_rate * public:
            self.verdict = f"bar {self.min_pass_rate:.0%}: met ({passed} of {public} pass)"
        else:
            self.verdict = f"bar {self.min_pass_rate:.0%}: NOT met ({passed} of {public} pass)"
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes.values() if o == outcome)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        write = terminalreporter.write_line
        terminalreporter.section("conformance: hermes-agent 0.19.0 tests/test_hermes_state.py")
        public = len(self.public_cases)
        passed = self.count("passed")
        rows = [
            ("public-API cases", public, ""),
            ("  passed", passed, f"{passed / public:.1%}" if public else ""),
            ("  failed, known", self.count("failed, known"), self.known_failures_file),
            (
                "  failed, NOT known",
                self.count("failed"),
                "fix, or list with --update-known-failures",
            ),
            (
                "  passed, but listed as known",
                self.count("passed, but listed as known"),
                f"take them off {self.known_failures_file}",
            ),
            ("  skipped by the test", self.count("skipped by the test"), ""),
            ("  not run (deselected)", public - len(self.outcomes), ""),
            ("out of scope (internals)", len(self.out_of_scope_cases), "out_of_scope.json"),
        ]
        for label, number, note in rows:
            if number or not label.startswith("  ") or label == "  passed":
                write(f"{label:<30}{number:5d}  {note}".rstrip())
        for problem in self.problems:
            write(f"LIST PROBLEM: {problem}", red=True)
        write(self.verdict)
