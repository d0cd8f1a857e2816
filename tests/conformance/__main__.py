"""The conformance suite: hermes-agent 0.19.0's own SessionDB tests against the installed wheel.

    scripts/conformance                           # the run (scripts/test runs it too)
    scripts/conformance -k title                  # extra arguments go to pytest
    scripts/conformance --update-known-failures   # re-run, rewrite known_failures.json
    scripts/conformance --update-out-of-scope     # rewrite out_of_scope.json from the rule

Steps: fetch the sdist (cached in target/upstream/, SHA-256 pinned), classify its
tests/test_hermes_state.py with the scope rule and check the rule against the committed
out_of_scope.json, port the file by the SPEC §2 import mapping into target/conformance/, and
run it with pytest and :class:`~conformance.plugin.ConformancePlugin`.

``HERMES_CONFORMANCE_MIN`` (a fraction, e.g. 0.95) overrides :data:`MIN_PASS_RATE`, the share
of public cases that must pass. Without PyPI the run is skipped, saying so, unless ``CI=true``.

``HERMES_TEST_STORE=postgresql`` (under ``scripts/postgres``) is the PostgreSQL leg: every
``SessionDB`` the tests open on a path opens a fresh store on the test server instead
(``tests/support/postgres.py``), and its known failures are ``known_failures_postgresql.json``
(the tests that look at the ``state.db`` file itself cannot pass there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path

import pytest
from support import postgres

from conformance import scope, upstream
from conformance.plugin import ConformancePlugin
from conformance.port import port_source

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT_OF_SCOPE = HERE / "out_of_scope.json"
KNOWN_FAILURES = HERE / (
    "known_failures_postgresql.json" if postgres.ENABLED else "known_failures.json"
)
CACHE_DIR = ROOT / "target" / "upstream"
WORK_DIR = ROOT / "target" / "conformance"

#: The bar (issue [H]): the share of public-API cases that must pass, on either backend.
MIN_PASS_RATE: float | None = 0.95


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/conformance",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--update-known-failures",
        action="store_true",
        help="run every public test and rewrite known_failures.json",
    )
    parser.add_argument(
        "--update-out-of-scope",
        action="store_true",
        help="rewrite out_of_scope.json from the scope rule (review the diff)",
    )
    args, pytest_args = parser.parse_known_args(argv)
    if args.update_known_failures and pytest_args:
        parser.error("--update-known-failures runs every test: it takes no pytest arguments")
    try:
        min_pass_rate = _min_pass_rate()
        source = upstream.read_test_file(CACHE_DIR)
    except upstream.UpstreamUnavailable as error:
        if os.environ.get("CI") == "true":
            print(
                f"conformance: FAILED, the upstream tests are needed in CI: {error}",
                file=sys.stderr,
            )
            return 1
        print(f"conformance: SKIPPED, cannot fetch the upstream tests ({error})", file=sys.stderr)
        return 0
    except ValueError as error:
        print(f"conformance: {error}", file=sys.stderr)
        return 2

    tests = scope.classify(source)
    rule = scope.out_of_scope(source)
    if args.update_out_of_scope:
        _write(OUT_OF_SCOPE, rule)
    listed = _read(OUT_OF_SCOPE)
    if listed != rule:
        _explain_disagreement(rule, listed)
        return 1

    WORK_DIR.mkdir(parents=True, exist_ok=True)
    test_file = WORK_DIR / "test_hermes_state.py"
    test_file.write_text(port_source(source, upstream.TEST_FILE), encoding="utf-8")
    ini = WORK_DIR / "pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")  # so no config of ours applies

    plugin = ConformancePlugin(
        tests=tests,
        out_of_scope=listed,
        known_failures=None if args.update_known_failures else _read(KNOWN_FAILURES),
        min_pass_rate=min_pass_rate,
        known_failures_file=KNOWN_FAILURES.name,
    )
    on_the_server = postgres.stores_on_the_server() if postgres.ENABLED else nullcontext()
    with tempfile.TemporaryDirectory(prefix="hermes-conformance-") as home, on_the_server:
        # A test that opens the default state.db must not touch the user's.
        os.environ["HERMES_HOME"] = home
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the file needs no plugin
        os.chdir(WORK_DIR)
        status = pytest.main(
            [
                str(test_file),
                "-c",
                str(ini),
                "--rootdir",
                str(WORK_DIR),
                "-p",
                "no:cacheprovider",
                "-q",
                # pytest's own tracebacks re-parse this 6,000-line file per failure (seconds each,
                # xfails included); Python's are cheap. The update needs only the causes.
                "--tb=no" if args.update_known_failures else "--tb=native",
                *pytest_args,
            ],
            plugins=[plugin],
        )
    if args.update_known_failures:
        if status not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) or plugin.problems:
            print(
                "conformance: the run did not complete; known_failures.json left as it was",
                file=sys.stderr,
            )
            return 1
        failures = {
            case: plugin.causes[case]
            for case, outcome in plugin.outcomes.items()
            if outcome == "failed"
        }
        _write(KNOWN_FAILURES, failures)
        print(f"conformance: wrote {len(failures)} known failures to {KNOWN_FAILURES}")
        return 0
    return int(status)


def _min_pass_rate() -> float | None:
    text = os.environ.get("HERMES_CONFORMANCE_MIN", "").strip()
    if not text:
        return MIN_PASS_RATE
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0.0 < rate <= 1.0:
        raise ValueError(
            f"HERMES_CONFORMANCE_MIN={text!r} is not a fraction in (0, 1]; "
            "set it like HERMES_CONFORMANCE_MIN=0.95, or unset it to report only"
        )
    return rate


def _read(path: Path) -> dict[str, str]:
    entries = json.loads(path.read_text(encoding="utf-8"))
    if not (
        isinstance(entries, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in entries.items())
    ):
        raise SystemExit(f"conformance: {path} must be one JSON object of test id -> reason")
    return entries


def _write(path: Path, entries: Mapping[str, str]) -> None:
    path.write_text(
        json.dumps(dict(entries), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def _explain_disagreement(rule: Mapping[str, str], listed: Mapping[str, str]) -> None:
    print("conformance: the scope rule (scope.py) and out_of_scope.json disagree:", file=sys.stderr)
    for test_id in sorted(rule.keys() - listed.keys()):
        print(
            f"  rule says out of scope, list does not: {test_id} ({rule[test_id]})", file=sys.stderr
        )
    for test_id in sorted(listed.keys() - rule.keys()):
        print(f"  list says out of scope, rule does not: {test_id}", file=sys.stderr)
    for test_id in sorted(rule.keys() & listed.keys()):
        if rule[test_id] != listed[test_id]:
            print(
                f"  reasons differ for {test_id}: rule {rule[test_id]!r}, list {listed[test_id]!r}",
                file=sys.stderr,
            )
    print(
        "Review the tests named; if the rule is right, run "
        "scripts/conformance --update-out-of-scope and commit the list.",
        file=sys.stderr,
    )


if __name__ == "__main__":
    sys.exit(main())
