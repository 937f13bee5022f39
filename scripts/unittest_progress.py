#!/usr/bin/env python3
"""Runs unittest discovery in one process and reports as it goes: a line per
test module when it finishes (its counts and time), a line at once for each
test that fails, errs or skips (with --each-test, a line as each test
ends), the tracebacks at the end, and the counts and the failed tests as
JSON for the summary of `make test` (scripts/run-tests).

    unittest_progress.py [--json FILE] [--each-test] [--test-timeout S] [-k PATTERN]... -s START_DIR [-t TOP_LEVEL_DIR]

-k runs only the tests whose id holds PATTERN (as unittest's -k). A test
that runs past --test-timeout seconds (DEFAULT_TEST_TIMEOUT) is a hang: the
stack of every Python thread goes to stderr, then the process exits with
status 1, so a stuck test names where it is stuck instead of stalling the
suite (faulthandler's watchdog, a C thread: it fires even while a thread
holds the GIL in C).

Exit status 0 when every test passed or skipped, 1 otherwise (also when
nothing was found: a suite that runs no test is broken).
"""
from __future__ import annotations

import argparse
import faulthandler
import io
import json
import sys
import time
import traceback
import unittest
from typing import Dict, List, Optional, Tuple


#: Seconds a single test may run before it counts as hung: several times
#: the longest test's (a torch job with faults, about a minute).
DEFAULT_TEST_TIMEOUT = 900.0


def module_of(test: unittest.TestCase) -> str:
    # A module that fails to import shows up as unittest.loader._FailedTest,
    # whose id() is the module's name.
    if type(test).__module__ == "unittest.loader":
        name = test.id()
        prefix = "unittest.loader._FailedTest."
        return name[len(prefix):] if name.startswith(prefix) else name
    return type(test).__module__


class ModuleCounts:
    def __init__(self, started: float) -> None:
        self.name = ""
        self.started = started
        self.passed = self.failed = self.skipped = 0


class ProgressResult(unittest.TestResult):
    """Counts per module; main prints a module's line when its suite ends
    (its class and module fixtures included in its time)."""

    def __init__(self, stream: io.TextIOBase, each_test: bool = False,
                 test_timeout: float = DEFAULT_TEST_TIMEOUT) -> None:
        super().__init__()
        self.stream = stream
        self.each_test = each_test
        self.test_timeout = test_timeout
        self.test_started = 0.0
        self.current: Optional[ModuleCounts] = None
        self.modules: List[Dict[str, object]] = []
        self.problems: List[Tuple[str, str, str]] = []  # (kind, test id, text)
        self.totals = {"passed": 0, "failed": 0, "skipped": 0}

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def begin_module(self) -> None:
        self.finish_module()
        self.current = ModuleCounts(time.monotonic())

    def _module(self, test: unittest.TestCase) -> ModuleCounts:
        name = module_of(test)
        if self.current is None:
            self.begin_module()
        assert self.current is not None
        if self.current.name and self.current.name != name:
            # A suite that holds several modules (a test package): one line each.
            self.begin_module()
            assert self.current is not None
        self.current.name = name
        return self.current

    def finish_module(self) -> None:
        m = self.current
        if m is None:
            return
        self.current = None
        if not m.name:  # a suite that held no test
            return
        took = time.monotonic() - m.started
        status = "FAIL" if m.failed else "ok  "
        extra = ", %d skipped" % m.skipped if m.skipped else ""
        extra += ", %d failed" % m.failed if m.failed else ""
        self._line("%s %-44s %3d tests%s (%.1fs)" % (status, m.name, m.passed + m.failed + m.skipped, extra, took))
        self.modules.append({"module": m.name, "passed": m.passed, "failed": m.failed,
                             "skipped": m.skipped, "seconds": round(took, 3)})

    def startTest(self, test: unittest.TestCase) -> None:
        self._module(test)
        self.test_started = time.monotonic()
        if self.test_timeout > 0:
            faulthandler.dump_traceback_later(self.test_timeout, exit=True, file=sys.stderr)
        super().startTest(test)

    def stopTest(self, test: unittest.TestCase) -> None:
        faulthandler.cancel_dump_traceback_later()
        super().stopTest(test)
        if self.each_test:
            self._line("  ... %s (%.1fs)" % (test.id(), time.monotonic() - self.test_started))

    def _count(self, test: unittest.TestCase, key: str) -> None:
        m = self._module(test)
        setattr(m, key, getattr(m, key) + 1)
        self.totals[key] += 1

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._count(test, "passed")

    def _problem(self, kind: str, test: unittest.TestCase, err) -> None:
        self._count(test, "failed")
        text = "".join(traceback.format_exception(*err))
        self.problems.append((kind, test.id(), text))
        self._line("  --- %s: %s" % (kind, test.id()))

    def addFailure(self, test: unittest.TestCase, err) -> None:
        super().addFailure(test, err)
        self._problem("FAIL", test, err)

    def addError(self, test: unittest.TestCase, err) -> None:
        super().addError(test, err)
        self._problem("ERROR", test, err)

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._count(test, "skipped")
        self._line("  --- SKIP: %s: %s" % (test.id(), reason))

    def addExpectedFailure(self, test: unittest.TestCase, err) -> None:
        super().addExpectedFailure(test, err)
        self._count(test, "passed")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._count(test, "failed")
        self.problems.append(("UNEXPECTED SUCCESS", test.id(), ""))
        self._line("  --- UNEXPECTED SUCCESS: %s" % test.id())

    def addSubTest(self, test: unittest.TestCase, subtest: unittest.TestCase, err) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            kind = "FAIL" if issubclass(err[0], test.failureException) else "ERROR"
            self.problems.append((kind, subtest.id(), "".join(traceback.format_exception(*err))))
            self._line("  --- %s: %s" % (kind, subtest.id()))
            # The whole test counts once, as failed, when it ends (addSuccess
            # is not called for a test with a failed subtest).
            m = self._module(test)
            if not getattr(test, "_progress_counted_failed", False):
                test._progress_counted_failed = True  # type: ignore[attr-defined]
                m.failed += 1
                self.totals["failed"] += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-s", "--start-directory", required=True)
    ap.add_argument("-t", "--top-level-directory")
    ap.add_argument("-p", "--pattern", default="test*.py")
    ap.add_argument("--json", help="write the counts here")
    ap.add_argument("--each-test", action="store_true",
                    help="also a line as each test ends (for suites whose modules run for minutes)")
    ap.add_argument("--test-timeout", type=float, default=DEFAULT_TEST_TIMEOUT,
                    help="seconds a test may run before the stacks are dumped and the run ends (0: no bound)")
    ap.add_argument("-k", dest="patterns", action="append", help="only the tests whose id holds this")
    args = ap.parse_args()

    if args.top_level_directory:
        sys.path.insert(0, args.top_level_directory)
    if args.patterns:
        unittest.defaultTestLoader.testNamePatterns = ["*%s*" % p for p in args.patterns]
    suite = unittest.defaultTestLoader.discover(args.start_directory, args.pattern, args.top_level_directory)
    out = sys.stdout
    result = ProgressResult(out, each_test=args.each_test, test_timeout=args.test_timeout)
    started = time.monotonic()
    # discover gives one suite per test module: each runs as a top-level
    # suite, which tears its class and module fixtures down at its end.
    for module_suite in suite:
        result.begin_module()
        module_suite.run(result)
        result.finish_module()
    took = time.monotonic() - started

    for kind, test_id, text in result.problems:
        out.write("\n" + "=" * 70 + "\n%s: %s\n" % (kind, test_id) + "-" * 70 + "\n" + text)
    t = result.totals
    total = t["passed"] + t["failed"] + t["skipped"]
    out.write("\nDONE %d tests, %d skipped, %d failed in %.1fs\n" % (total, t["skipped"], t["failed"], took))
    out.flush()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(t, seconds=round(took, 3), modules=result.modules,
                           failures=[test_id for _, test_id, _ in result.problems]), f, indent=1)
    return 0 if total and not t["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
