"""The release fan-out from Python: set_cleanup_sender and its failures,
set_cleanup_options, cleanup_stats, cleanup_flush, set_log_hook and
log_to_logging, _release_contexts_of_worker, _reap_idle_contexts, and the
exit handler that keeps library threads out of a finalizing interpreter.

The tests in this process share its container (worker 3) and its one
fan-out, so they count in deltas, look only at their own contexts' messages,
and put the sender, the log hook and the options back as they found them;
what needs exact counters or an interpreter exit runs in a child process.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import unittest
from typing import Any, List, Tuple

from . import _support

D = _support.init()
from distautograd import _fanout  # noqa: E402

NEED_INIT = "Need to initialize distributed autograd using torch.distributed.autograd.init()"
RANGE = "worker_id needs to be in the range [0, 65535]"


class Recorder:
    """A sender that records (worker id, context id, thread) and can be made
    to fail or to block."""

    def __init__(self) -> None:
        self.calls: List[Tuple[int, int, int]] = []
        self.lock = threading.Lock()
        self.fail_workers: set = set()
        self.gate = threading.Event()
        self.gate.set()
        self.raise_type: type = ValueError

    def __call__(self, worker_id: int, context_id: int) -> Any:
        self.gate.wait(30)
        with self.lock:
            self.calls.append((worker_id, context_id, threading.get_ident()))
        if worker_id in self.fail_workers:
            raise self.raise_type("worker %d is unreachable" % worker_id)
        return False  # any return value means delivered

    def of(self, *context_ids: int) -> List[Tuple[int, int]]:
        with self.lock:
            return sorted((w, c) for w, c, _ in self.calls if c in context_ids)


class FanOut(unittest.TestCase):
    def setUp(self) -> None:
        self.assertEqual(D.cleanup_flush(10), 0)
        self.rec = Recorder()
        D.set_cleanup_sender(self.rec)
        self.addCleanup(self._restore)
        self.before = D.cleanup_stats()

    def _restore(self) -> None:
        self.rec.gate.set()
        D.cleanup_flush(10)
        D.set_cleanup_sender(None)
        D.set_log_hook(None)
        D.set_cleanup_options()

    def delta(self) -> D.CleanupStats:
        now = D.cleanup_stats()
        return D.CleanupStats(**{f.name: getattr(now, f.name) - getattr(self.before, f.name)
                                 for f in dataclasses.fields(now) if f.name != "pending"}, pending=now.pending)

    def release_with_workers(self, *workers: int) -> int:
        ctx = D._new_context()
        for w in workers:
            ctx._add_known_worker_id(w)
        D._release_context(ctx._context_id())
        return ctx._context_id()

    def test_one_message_per_known_worker_on_a_library_thread(self) -> None:
        cid = self.release_with_workers(4, 5, 65535)
        self.assertEqual(D.cleanup_flush(10), 0)
        self.assertEqual(self.rec.of(cid), [(4, cid), (5, cid), (65535, cid)])
        me = threading.get_ident()
        self.assertTrue(all(t != me for _, c, t in self.rec.calls if c == cid))
        d = self.delta()
        self.assertEqual((d.sent, d.retried, d.failed, d.dropped, d.skipped, d.pending), (3, 0, 0, 0, 0, 0))

    def test_release_returns_before_the_sender_runs(self) -> None:
        self.rec.gate.clear()  # the sender blocks until the release returned
        cid = self.release_with_workers(4)
        self.assertEqual(self.rec.of(cid), [])
        self.assertEqual(D.cleanup_stats().pending, 1)
        self.assertEqual(D.cleanup_flush(0.05), 1)  # still blocked: flush times out, says so
        self.rec.gate.set()
        self.assertEqual(D.cleanup_flush(10), 0)
        self.assertEqual(self.rec.of(cid), [(4, cid)])

    def test_exception_is_a_failed_attempt_retried_then_given_up(self) -> None:
        D.set_cleanup_options(max_attempts=3, initial_backoff=0.001, max_backoff=0.002)
        self.rec.fail_workers = {5}
        lines: List[Tuple[int, str]] = []
        D.set_log_hook(lambda level, msg: lines.append((level, msg)))
        with self.assertLogs("distautograd", logging.DEBUG) as logs:
            cid = self.release_with_workers(4, 5)
            self.assertEqual(D.cleanup_flush(10), 0)
        self.assertEqual(self.rec.of(cid), [(4, cid), (5, cid), (5, cid), (5, cid)])
        d = self.delta()
        self.assertEqual((d.sent, d.retried, d.failed, d.dropped), (1, 2, 1, 0))
        # The sender's exception is logged (DEBUG), the library gives up (ERROR).
        self.assertIn("worker 5 is unreachable", "\n".join(logs.output))
        errors = [m for lv, m in lines if lv == D.LOG_ERROR]
        self.assertEqual(len(errors), 1, lines)
        self.assertTrue(errors[0].startswith("Could not release Dist Autograd Context on node 5: "), errors)
        self.assertIn(str(cid), errors[0])

    def test_base_exceptions_fail_too(self) -> None:
        D.set_cleanup_options(max_attempts=1)
        lines: List[str] = []
        D.set_log_hook(lambda level, msg: lines.append(msg))  # keeps the give-up lines off stderr
        for exc in (KeyboardInterrupt, SystemExit, GeneratorExit):
            with self.subTest(exc=exc.__name__):
                self.rec.raise_type = exc
                self.rec.fail_workers = {6}
                cid = self.release_with_workers(6)
                self.assertEqual(D.cleanup_flush(10), 0)
                self.assertEqual(self.rec.of(cid), [(6, cid)])
        self.assertEqual(self.delta().failed, 3)
        self.assertEqual(self.delta().sent, 0)
        self.assertEqual(len(lines), 3, lines)

    def test_none_unsets(self) -> None:
        D.set_cleanup_sender(None)
        cid = self.release_with_workers(4, 5)
        self.assertEqual(self.rec.of(cid), [])
        d = self.delta()
        self.assertEqual((d.skipped, d.sent), (2, 0))

    def test_replacing_while_messages_are_in_flight(self) -> None:
        self.rec.gate.clear()
        first = self.release_with_workers(*range(1, 9))  # 8 messages; the library runs 4 senders
        second = Recorder()
        D.set_cleanup_sender(second)
        cid = self.release_with_workers(9)
        self.rec.gate.set()
        self.assertEqual(D.cleanup_flush(10), 0)
        self.assertEqual(second.of(cid), [(9, cid)])
        # Each message of the first release went to one of the two senders.
        got = sorted(self.rec.of(first) + second.of(first))
        self.assertEqual(got, [(w, first) for w in range(1, 9)])
        self.assertEqual(self.delta().sent, 9)

    def test_sender_may_call_the_library(self) -> None:
        # A loopback "RPC layer": the message releases the receiver's copy,
        # here another context of this process, which fans out in turn.
        a, b = (12 << 48) + 1, (12 << 48) + 2
        D._get_or_create_context(a)._add_known_worker_id(7)
        calls: List[Tuple[int, int]] = []

        def loopback(worker_id: int, context_id: int) -> None:
            calls.append((worker_id, context_id))
            if context_id == a:
                D._get_or_create_context(b)._add_known_worker_id(8)
                D._release_context_if_present(b)

        D.set_cleanup_sender(loopback)
        D._release_context(a)
        self.assertEqual(D.cleanup_flush(10), 0)
        self.assertEqual(sorted(calls), [(7, a), (8, b)])
        self.assertIsNone(D._retrieve_context_if_present(b))

    def test_arguments(self) -> None:
        self.assertRaises(TypeError, D.set_cleanup_sender, 3)
        self.assertRaises(TypeError, D.set_log_hook, "stderr")
        for bad in (-1, float("nan"), float("inf"), True, "1"):
            with self.subTest(timeout=bad):
                self.assertRaises(ValueError, D.cleanup_flush, bad)
        self.assertRaises(ValueError, D.set_cleanup_options, max_attempts=-1)
        self.assertRaises(ValueError, D.set_cleanup_options, max_attempts=1 << 31)
        self.assertRaises(TypeError, D.set_cleanup_options, max_attempts=2.0)
        self.assertRaises(TypeError, D.set_cleanup_options, max_pending=True)
        self.assertRaises(ValueError, D.set_cleanup_options, initial_backoff=-0.5)
        self.assertRaises(ValueError, D.set_cleanup_options, max_backoff=float("nan"))
        self.assertRaises(TypeError, D.set_cleanup_options, max_backoff="1s")
        self.assertRaises(TypeError, D.set_cleanup_options, 3)  # keyword-only

    def test_max_pending_cannot_grow_once_used(self) -> None:
        self.release_with_workers(4)
        D.cleanup_flush(10)
        with self.assertRaises(D.DistAutogradError) as cm:
            D.set_cleanup_options(max_pending=1 << 20)
        self.assertEqual(cm.exception.status, D.Status.ERR_INVALID_ARGUMENT)
        D.set_cleanup_options(max_pending=1000)  # shrinking is fine

    def test_log_to_logging(self) -> None:
        D.set_cleanup_options(max_attempts=1)
        self.rec.fail_workers = {5}
        D.set_log_hook(D.log_to_logging)
        with self.assertLogs("distautograd", logging.ERROR) as logs:
            cid = self.release_with_workers(5)
            self.assertEqual(D.cleanup_flush(10), 0)
        self.assertEqual(len(logs.records), 1, logs.output)
        self.assertEqual(logs.records[0].levelno, logging.ERROR)
        self.assertIn("on node 5", logs.records[0].getMessage())
        self.assertIn(str(cid), logs.records[0].getMessage())

    def test_stats_type(self) -> None:
        s = D.cleanup_stats()
        self.assertIsInstance(s, D.CleanupStats)
        self.assertEqual([f.name for f in dataclasses.fields(s)],
                         ["sent", "retried", "failed", "dropped", "skipped", "pending"])
        with self.assertRaises(dataclasses.FrozenInstanceError):
            s.sent = 0  # type: ignore[misc]
        info = D._lib.debug_info()
        for f in dataclasses.fields(s):
            self.assertIsInstance(getattr(s, f.name), int)
            self.assertGreaterEqual(getattr(s, f.name), 0)
            self.assertIn("cleanup_" + f.name, info)


class ReleaseOfWorker(unittest.TestCase):
    def setUp(self) -> None:
        self.rec = Recorder()
        D.set_cleanup_sender(self.rec)
        self.addCleanup(D.set_cleanup_sender, None)

    def test_releases_and_fans_out(self) -> None:
        ids = [(21 << 48) + i for i in range(3)]
        for cid in ids:
            D._get_or_create_context(cid)._add_known_worker_id(22)
        other = D._get_or_create_context((23 << 48) + 1)
        self.assertEqual(D._release_contexts_of_worker(21), 3)
        self.assertEqual(D._release_contexts_of_worker(21), 0)
        for cid in ids:
            self.assertIsNone(D._retrieve_context_if_present(cid))
        self.assertEqual(D.cleanup_flush(10), 0)
        self.assertEqual(self.rec.of(*ids), [(22, cid) for cid in ids])
        self.assertIsNotNone(D._retrieve_context_if_present(other._context_id()))
        self.assertEqual(D._release_contexts_of_worker(23), 1)

    def test_arguments(self) -> None:
        for bad in (-1, 65536, 1 << 40, 1 << 70):
            with self.subTest(worker=bad):
                if bad >= 1 << 63:
                    self.assertRaises(TypeError, D._release_contexts_of_worker, bad)
                    continue
                with self.assertRaises(D.DistAutogradError) as cm:
                    D._release_contexts_of_worker(bad)
                self.assertEqual(str(cm.exception), RANGE)
        self.assertRaises(TypeError, D._release_contexts_of_worker, 1.0)
        self.assertRaises(TypeError, D._release_contexts_of_worker, "1")
        self.assertEqual(D._release_contexts_of_worker(True), 0)  # an int, as torch takes it
        for bad in (-1, float("nan"), True, "1"):
            with self.subTest(idle=bad):
                self.assertRaises(ValueError, D._reap_idle_contexts, bad)
        self.assertEqual(D._reap_idle_contexts(3600), 0)  # nothing here is an hour old


class OwnProcess(unittest.TestCase):
    """Exact counters and interpreter exit, in fresh processes."""

    def test_before_init(self) -> None:
        out = _support.run_json(self, """
            import dataclasses, json, distautograd as D
            res = {"stats": dataclasses.asdict(D.cleanup_stats()), "flush": D.cleanup_flush(0)}
            D.set_cleanup_sender(lambda w, c: None)   # allowed before _init
            D.set_cleanup_options(max_attempts=2)
            D.set_log_hook(D.log_to_logging)
            for name, fn in (("of_worker", lambda: D._release_contexts_of_worker(1)),
                             ("reap", lambda: D._reap_idle_contexts(1))):
                try:
                    fn()
                except RuntimeError as e:
                    res[name] = str(e)
            print(json.dumps(res))
        """)
        self.assertEqual(out["stats"], dict(sent=0, retried=0, failed=0, dropped=0, skipped=0, pending=0))
        self.assertEqual(out["flush"], 0)
        self.assertEqual(out["of_worker"], NEED_INIT)
        self.assertEqual(out["reap"], NEED_INIT)

    def test_reaper(self) -> None:
        # On the library's testing build, whose container dates uses by a
        # clock that moves only when told (dactest_use_manual_clock): what is
        # idle is what the test says, however long the machine stalls it.
        if not os.path.exists(_support.TESTING_LIB):
            _support.loud_skip(self, "%s is missing (make testing-lib)" % _support.TESTING_LIB)
        out = _support.run_json(self, """
            import ctypes, json, distautograd as D
            from distautograd import _lib
            testing = _lib.LIB
            testing.dactest_advance_clock.argtypes = (ctypes.c_int64,)
            refused = [testing.dactest_advance_clock(1)]      # no manual clock yet
            assert testing.dactest_use_manual_clock() == 0
            D._init(2)
            refused.append(testing.dactest_use_manual_clock())  # after dac_init
            sent = []
            D.set_cleanup_sender(lambda w, c: sent.append((w, c)))
            old = [D._get_or_create_context((5 << 48) + i) for i in range(3)]
            old[0]._add_known_worker_id(5)
            assert testing.dactest_advance_clock(300) == 0
            fresh = D._get_or_create_context((6 << 48) + 1)
            D._retrieve_context((5 << 48) + 2)    # a lookup counts as use
            reaped = D._reap_idle_contexts(0.15)
            D.cleanup_flush(10)
            print(json.dumps({"reaped": reaped, "left": sorted(D._retrieve_context_if_present(i) is not None
                              for i in ((5 << 48) + 2, (6 << 48) + 1)),
                              "sent": sent, "all": D._reap_idle_contexts(0),
                              "n": D._get_debug_info()["num_autograd_contexts"], "refused": refused}))
        """, env=_support.child_env(DISTAUTOGRAD_LIBRARY=_support.TESTING_LIB))
        self.assertEqual(out["refused"], [int(D.Status.ERR_INVALID_ARGUMENT)] * 2)
        self.assertEqual(out["reaped"], 2)
        self.assertEqual(out["left"], [True, True])
        self.assertEqual(out["sent"], [[5, 5 << 48]])
        self.assertEqual(out["all"], 2)
        self.assertEqual(out["n"], 0)

    # Each exit scenario prints "finalized" from a __del__ that runs during
    # finalization after sleeping, GIL released, while library threads want
    # the GIL for the sender or the log hook. Without the exit handler such
    # a process ends in the middle of its finalization (observed: exit
    # status 0, the rest of the __del__ never ran).
    EXIT_PRELUDE = """
        import sys, threading, time, distautograd as D
        D._init(3)
        class Late:
            def __del__(self):
                time.sleep(0.5)
                sys.stdout.write("finalized\\n")
                sys.stdout.flush()
        late = Late()
    """

    def test_exit_with_senders_in_flight(self) -> None:
        p = _support.run_python(self.EXIT_PRELUDE + """
        inside = threading.Event()
        def slow(w, c):
            inside.set()
            time.sleep(0.2)
        D.set_cleanup_sender(slow)
        for i in range(40):
            with D.context():
                D._current_context()._add_known_worker_id(i + 1)
        inside.wait(10)
        print("exiting", D.cleanup_stats().pending > 0)
        """)
        self.assertEqual((p.returncode, p.stdout, p.stderr), (0, "exiting True\nfinalized\n", ""))

    def test_exit_with_log_hook_in_flight(self) -> None:
        p = _support.run_python(self.EXIT_PRELUDE + """
        D.set_cleanup_options(max_attempts=1)
        D.set_log_hook(lambda level, msg: time.sleep(0.05))
        def failing(w, c):
            raise ConnectionError(w)
        D.set_cleanup_sender(failing)
        for i in range(40):
            with D.context():
                D._current_context()._add_known_worker_id(i + 1)
        print("exiting")
        """)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "exiting\nfinalized\n")
        # What is still pending at exit fails with no sender, and the default
        # log (stderr) says so; nothing else is written.
        for line in p.stderr.splitlines():
            self.assertTrue(line.startswith("distautograd: Could not release Dist Autograd Context on node "), line)

    def test_default_log_and_restoring_it(self) -> None:
        p = _support.run_python("""
            import distautograd as D
            D._init(3)
            D.set_cleanup_options(max_attempts=1)
            def failing(w, c):
                raise ConnectionError(w)
            D.set_cleanup_sender(failing)
            seen = []
            D.set_log_hook(lambda level, msg: seen.append(level))
            with D.context():
                D._current_context()._add_known_worker_id(4)
            D.cleanup_flush(10)
            D.set_log_hook(None)               # back to stderr
            with D.context():
                D._current_context()._add_known_worker_id(5)
            D.cleanup_flush(10)
            print(seen)
        """)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "[%d]" % D.LOG_ERROR)
        lines = p.stderr.splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertTrue(lines[0].startswith("distautograd: Could not release Dist Autograd Context on node 5: "),
                        lines)


class Thunks(unittest.TestCase):
    def test_one_thunk_for_the_life_of_the_process(self) -> None:
        # The library may call a sender it was just told to forget: what it
        # holds is always the module's thunk, which is never freed.
        t = _fanout._SENDER_THUNK
        D.set_cleanup_sender(lambda w, c: None)
        D.set_cleanup_sender(lambda w, c: None)
        D.set_cleanup_sender(None)
        self.assertIs(_fanout._SENDER_THUNK, t)
        self.assertIsNone(_fanout._sender)


if __name__ == "__main__":
    unittest.main()
