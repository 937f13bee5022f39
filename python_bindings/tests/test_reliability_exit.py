"""Interpreter exit with a cleanup sender (or log hook) that misbehaves:
blocked for good, blocked and waking now and then, failing (so retries are
pending with backoff), slow. The exit handler promises to wait for calls in
progress EXIT_WAIT seconds at most in all, whatever they do: each scenario
runs in a fresh interpreter that prints the time it starts to exit, and
must be gone EXIT_WAIT plus a margin later (the margin is for a loaded
machine's interpreter teardown, not for the library). A child that has not
exited a minute after is killed and the test fails.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import unittest

from . import _support
from distautograd import _fanout

# The interpreter's own teardown on a loaded 2-core machine, on top of
# EXIT_WAIT: generous, as it bounds a hang, not a speed.
MARGIN = 10.0
KILL_AFTER = 60.0

PRELUDE = """
import sys, threading, time, distautograd as D
D._init(3)
entered = threading.Event()

def release_with_workers(n):
    for i in range(n):
        with D.context():
            D._current_context()._add_known_worker_id(i + 1)

def exiting():
    # The moment the interpreter starts to exit, on the clock the parent reads.
    sys.stdout.write("exiting %.6f\\n" % time.monotonic())
    sys.stdout.flush()
"""


# The scenarios: what each child does before it exits (PRELUDE first).
SCENARIOS = {
    # Blocked in a wait that releases the GIL: a peer that never answers.
    "sender_blocked_for_good": """
        def blocked(w, c):
            entered.set()
            threading.Event().wait()
        D.set_cleanup_sender(blocked)
        release_with_workers(8)
        assert entered.wait(30)
        exiting()
    """,
    # Never returns, but takes the GIL back every few milliseconds.
    "sender_blocked_waking_up": """
        def polling(w, c):
            entered.set()
            while True:
                time.sleep(0.005)
        D.set_cleanup_sender(polling)
        release_with_workers(8)
        assert entered.wait(30)
        exiting()
    """,
    # Every attempt fails: retries with backoff (the defaults,
    # DAC_CLEANUP_DEFAULT_*: seconds apart) are pending when the interpreter exits.
    "sender_failing": """
        def failing(w, c):
            entered.set()
            raise ConnectionError("peer %d is gone" % w)
        D.set_cleanup_sender(failing)
        release_with_workers(40)
        assert entered.wait(30)
        assert D.cleanup_stats().pending > 0
        exiting()
    """,
    # Each delivery takes a second; forty are queued behind the first.
    "sender_slow": """
        def slow(w, c):
            entered.set()
            time.sleep(1)
        D.set_cleanup_sender(slow)
        release_with_workers(40)
        assert entered.wait(30)
        exiting()
    """,
    # The hook gets the line of a message given up on, and never returns.
    "log_hook_blocked_for_good": """
        D.set_cleanup_options(max_attempts=1)
        def hook(level, message):
            entered.set()
            threading.Event().wait()
        D.set_log_hook(hook)
        def failing(w, c):
            raise ConnectionError(w)
        D.set_cleanup_sender(failing)
        release_with_workers(4)
        assert entered.wait(30)
        exiting()
    """,
    # Other threads go on releasing (so queueing messages) while the
    # interpreter exits; they are daemon threads, stopped at finalization.
    "blocked_sender_and_threads_still_releasing": """
        def blocked(w, c):
            entered.set()
            threading.Event().wait()
        D.set_cleanup_sender(blocked)
        def busy():
            while True:
                release_with_workers(1)
        for _ in range(2):
            threading.Thread(target=busy, daemon=True).start()
        assert entered.wait(30)
        exiting()
    """,
}


class Child:
    """A scenario's interpreter, started at once and waited for by a thread
    of its own (so the moment it is gone is known whenever its test looks),
    checked by its test."""

    def __init__(self, body: str) -> None:
        code = textwrap.dedent(PRELUDE) + textwrap.dedent(body)
        self.p = subprocess.Popen([sys.executable, "-c", code], env=_support.child_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.started = time.monotonic()
        self.out = self.err = ""
        self.gone = 0.0
        self.waiter = threading.Thread(target=self._wait, daemon=True)
        self.waiter.start()

    def _wait(self) -> None:
        self.out, self.err = self.p.communicate()
        self.gone = time.monotonic()

    def check(self, test: unittest.TestCase) -> str:
        """Fails test unless the child exited, with status 0, within
        EXIT_WAIT + MARGIN of its "exiting" line; returns its stderr."""
        self.waiter.join(max(0.0, self.started + KILL_AFTER - time.monotonic()))
        if self.waiter.is_alive():
            self.p.kill()
            self.waiter.join()
            test.fail("the interpreter had not exited %.0f s after it started; stdout:\n%s\nstderr:\n%s"
                      % (KILL_AFTER, self.out, self.err))
        lines = [line for line in self.out.splitlines() if line.startswith("exiting ")]
        test.assertEqual(len(lines), 1, "no 'exiting' line; stdout:\n%s\nstderr:\n%s" % (self.out, self.err))
        took = self.gone - float(lines[0].split()[1])
        test.assertLessEqual(took, _fanout.EXIT_WAIT + MARGIN, "the exit took %.1f s (EXIT_WAIT is %.1f s); stderr:\n%s"
                             % (took, _fanout.EXIT_WAIT, self.err))
        test.assertEqual(self.p.returncode, 0, "stdout:\n%s\nstderr:\n%s" % (self.out, self.err))
        return self.err


class ExitIsBounded(unittest.TestCase):
    """The scenarios run side by side (each mostly waits): setUpClass starts
    them all, each test checks its own, against its own "exiting" line."""

    children: dict = {}

    @classmethod
    def setUpClass(cls) -> None:
        cls.children = {name: Child(body) for name, body in SCENARIOS.items()}

    @classmethod
    def tearDownClass(cls) -> None:
        for c in cls.children.values():
            if c.p.poll() is None:
                c.p.kill()
            c.waiter.join()

    def test_every_scenario_has_a_test(self) -> None:
        self.assertEqual(sorted("test_" + n for n in SCENARIOS), sorted(n for n in dir(self) if n.startswith("test_")
                                                                        and n != "test_every_scenario_has_a_test"))

    def test_sender_blocked_for_good(self) -> None:
        self.children["sender_blocked_for_good"].check(self)

    def test_sender_blocked_waking_up(self) -> None:
        self.children["sender_blocked_waking_up"].check(self)

    def test_sender_failing(self) -> None:
        err = self.children["sender_failing"].check(self)
        # What was pending fails with no sender; the default log says so.
        for line in err.splitlines():
            self.assertTrue(line.startswith("distautograd: Could not release Dist Autograd Context on node "), line)

    def test_sender_slow(self) -> None:
        self.children["sender_slow"].check(self)

    def test_log_hook_blocked_for_good(self) -> None:
        self.children["log_hook_blocked_for_good"].check(self)

    def test_blocked_sender_and_threads_still_releasing(self) -> None:
        self.children["blocked_sender_and_threads_still_releasing"].check(self)


if __name__ == "__main__":
    unittest.main()
