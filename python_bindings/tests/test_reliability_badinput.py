"""Bad input, everywhere in Python: every function and method of the
package (``distautograd.__all__``, the methods of DistAutogradContext and
context, and ``distautograd.rpc`` where torch is installed) called with wrong
types, out-of-range values, wrong arity, ids no context has, contexts in the
wrong state. Each row must raise the error it names (or, where the row says
so, succeed) with a non-empty message, and the process must keep working: a
normal operation runs after every row. The table must cover the whole
surface: a function without a row fails the test.

Running it prints "bad-input cases: N Python" on stderr (the Go test
TestBadInputEverywhere runs it too and reports both counts).
"""
from __future__ import annotations

import copy
import ctypes
import inspect
import math
import pickle
import sys
import threading
import unittest
from typing import Any, Callable, List, Optional, Tuple

from . import _support

D = _support.init()
from distautograd import _lib  # noqa: E402

S = D.Status
OK = "not an error"  # the row's call must succeed

Row = Tuple[str, str, Callable[[], Any], Any]

_normal_id = [(6 << 48) | 1]


def normal_op() -> None:
    """What every row is followed by: the container still works."""
    with D.context() as cid:
        assert D._current_context()._context_id() == cid
        assert D._retrieve_context(cid)._context_id() == cid
    n = _normal_id[0]
    _normal_id[0] += 1
    assert D._get_or_create_context(n)._context_id() == n
    assert D._release_context_if_present(n) is True
    assert D._get_max_id() == (3 << 48) | (2**48 - 1)


def stale_current() -> None:
    """_current_context with this thread's context released by another."""
    ctx = D._new_context()
    t = threading.Thread(target=D._release_context, args=(ctx._context_id(),))
    t.start()
    t.join()
    try:
        D._current_context()
    finally:
        _lib.LIB.dac_clear_current_context()  # no Python API clears a stale id (nor has torch's)


def nested_new_context() -> None:
    with D.context():
        D._new_context()


def enter_twice() -> None:
    c = D.context()
    c.__enter__()
    try:
        c.__enter__()
    finally:
        c.__exit__(None, None, None)


def exit_after_released_elsewhere() -> None:
    c = D.context()
    cid = c.__enter__()
    t = threading.Thread(target=D._release_context, args=(cid,))
    t.start()
    t.join()
    try:
        c.__exit__(None, None, None)
    finally:
        _lib.LIB.dac_clear_current_context()


def past_the_cap() -> None:
    n = D._get_debug_info()["num_autograd_contexts"]
    assert _lib.LIB.dac_set_max_contexts(n) == 0  # the cap has no Python API: set through the C ABI
    try:
        D._get_or_create_context((9 << 48) | 1)
    finally:
        _lib.LIB.dac_set_max_contexts(0)


def forged() -> Any:
    """A DistAutogradContext made behind the package's back, holding a handle
    the library never issued: its calls fail cleanly, and its __del__ too."""
    c = object.__new__(D.DistAutogradContext)
    c._handle = 0x12345
    c._id = 1
    return c


def rows() -> List[Row]:
    live = D._get_or_create_context((5 << 48) | 1)
    released = D._get_or_create_context((5 << 48) | 2)
    D._release_context((5 << 48) | 2)
    big, small = 2**63, -(2**63) - 1
    ctor = "DistAutogradContext"
    return [
        # (function, what, call, expected: an exception class, (DistAutogradError, status), or OK)
        ("_init", "a negative worker id", lambda: D._init(-1), (D.DistAutogradError, S.ERR_INVALID_ARGUMENT)),
        ("_init", "one past the last worker id", lambda: D._init(65536), (D.DistAutogradError, S.ERR_INVALID_ARGUMENT)),
        ("_init", "2**63", lambda: D._init(big), TypeError),
        ("_init", "-(2**63) - 1", lambda: D._init(small), TypeError),
        ("_init", "a str", lambda: D._init("3"), TypeError),
        ("_init", "a float", lambda: D._init(3.0), TypeError),
        ("_init", "None", lambda: D._init(None), TypeError),
        ("_init", "another worker id", lambda: D._init(4), (D.DistAutogradError, S.ERR_ALREADY_INITIALIZED)),
        ("_init", "no argument", lambda: D._init(), TypeError),
        ("_init", "two arguments", lambda: D._init(3, 4), TypeError),
        ("_init", "a keyword argument", lambda: D._init(worker_id=3), TypeError),
        ("_init", "the same worker id again", lambda: D._init(3), OK),
        ("_new_context", "an argument", lambda: D._new_context(1), TypeError),
        ("_new_context", "inside a context", nested_new_context, (D.DistAutogradError, S.ERR_ALREADY_HAS_CONTEXT)),
        ("_current_context", "an argument", lambda: D._current_context(1), TypeError),
        ("_current_context", "no current context", D._current_context, (D.DistAutogradError, S.ERR_NO_CURRENT_CONTEXT)),
        ("_current_context", "released by another thread", stale_current, (D.DistAutogradError, S.ERR_NOT_FOUND)),
        ("_retrieve_context", "a str", lambda: D._retrieve_context("1"), TypeError),
        ("_retrieve_context", "2**63", lambda: D._retrieve_context(big), TypeError),
        ("_retrieve_context", "-1", lambda: D._retrieve_context(-1), (D.DistAutogradError, S.ERR_NOT_FOUND)),
        ("_retrieve_context", "-(2**63)", lambda: D._retrieve_context(-(2**63)), (D.DistAutogradError, S.ERR_NOT_FOUND)),
        ("_retrieve_context", "another worker's id, never stored", lambda: D._retrieve_context((9 << 48) | 5),
         (D.DistAutogradError, S.ERR_NOT_FOUND)),
        ("_retrieve_context", "a released context's id", lambda: D._retrieve_context((5 << 48) | 2),
         (D.DistAutogradError, S.ERR_NOT_FOUND)),
        ("_retrieve_context", "no argument", lambda: D._retrieve_context(), TypeError),
        ("_retrieve_context_if_present", "a float", lambda: D._retrieve_context_if_present(1.5), TypeError),
        ("_retrieve_context_if_present", "-(2**63): None", lambda: D._retrieve_context_if_present(-(2**63)), OK),
        ("_get_or_create_context", "None", lambda: D._get_or_create_context(None), TypeError),
        ("_get_or_create_context", "2**64", lambda: D._get_or_create_context(2**64), TypeError),
        ("_get_or_create_context", "past the cap of live contexts", past_the_cap, (D.DistAutogradError, S.ERR_LIMIT)),
        ("_is_valid_context", "a list", lambda: D._is_valid_context([1]), TypeError),
        ("_is_valid_context", "-1", lambda: D._is_valid_context(-1), (D.DistAutogradError, S.ERR_NOT_FOUND)),
        ("_release_context", "a str", lambda: D._release_context("1"), TypeError),
        ("_release_context", "-1", lambda: D._release_context(-1), (D.DistAutogradError, S.ERR_NOT_FOUND)),
        ("_release_context", "a second release", lambda: D._release_context((5 << 48) | 2),
         (D.DistAutogradError, S.ERR_NOT_FOUND)),
        ("_release_context_if_present", "a complex", lambda: D._release_context_if_present(1j), TypeError),
        ("_release_context_if_present", "2**63 - 1: False", lambda: D._release_context_if_present(2**63 - 1), OK),
        ("_get_max_id", "an argument", lambda: D._get_max_id(1), TypeError),
        ("_get_debug_info", "an argument", lambda: D._get_debug_info(1), TypeError),
        ("contexts", "an argument", lambda: D.contexts(1), TypeError),
        ("context", "an argument", lambda: D.context(1), TypeError),
        ("context.__exit__", "without __enter__ (as torch's: no context to release)",
         lambda: D.context().__exit__(None, None, None), AttributeError),
        ("context.__exit__", "its context released by another thread", exit_after_released_elsewhere,
         (D.DistAutogradError, S.ERR_NOT_FOUND)),
        ("context.__enter__", "twice", enter_twice, (D.DistAutogradError, S.ERR_ALREADY_HAS_CONTEXT)),
        (ctor, "constructed directly", lambda: D.DistAutogradContext(), TypeError),
        (ctor, "pickled", lambda: pickle.dumps(live), TypeError),
        (ctor, "copied", lambda: copy.copy(live), TypeError),
        (ctor + "._context_id", "an argument", lambda: live._context_id(1), TypeError),
        (ctor + "._known_worker_ids", "an argument", lambda: live._known_worker_ids(1), TypeError),
        (ctor + "._known_worker_ids", "a released context: still readable", released._known_worker_ids, OK),
        (ctor + "._known_worker_ids", "a forged object, a never-issued handle", lambda: forged()._known_worker_ids(),
         (D.DistAutogradError, S.ERR_BAD_HANDLE)),
        (ctor + "._send_functions", "an argument", lambda: live._send_functions(1), TypeError),
        (ctor + "._send_functions", "a forged object, a never-issued handle", lambda: forged()._send_functions(),
         (D.DistAutogradError, S.ERR_BAD_HANDLE)),
        (ctor + "._recv_functions", "an argument", lambda: live._recv_functions(1), TypeError),
        (ctor + "._recv_functions", "a released context: still readable", released._recv_functions, OK),
        (ctor + "._add_known_worker_id", "a negative worker id", lambda: live._add_known_worker_id(-1),
         (D.DistAutogradError, S.ERR_INVALID_ARGUMENT)),
        (ctor + "._add_known_worker_id", "one past the last worker id", lambda: live._add_known_worker_id(65536),
         (D.DistAutogradError, S.ERR_INVALID_ARGUMENT)),
        (ctor + "._add_known_worker_id", "2**40 (outside int32)", lambda: live._add_known_worker_id(2**40),
         (D.DistAutogradError, S.ERR_INVALID_ARGUMENT)),
        (ctor + "._add_known_worker_id", "2**63", lambda: live._add_known_worker_id(big), TypeError),
        (ctor + "._add_known_worker_id", "a str", lambda: live._add_known_worker_id("4"), TypeError),
        (ctor + "._add_known_worker_id", "a float", lambda: live._add_known_worker_id(4.0), TypeError),
        (ctor + "._add_known_worker_id", "no argument", lambda: live._add_known_worker_id(), TypeError),
        (ctor + "._add_known_worker_id", "a forged object", lambda: forged()._add_known_worker_id(4),
         (D.DistAutogradError, S.ERR_BAD_HANDLE)),
        (ctor + "._add_known_worker_id", "a released context: still works", lambda: released._add_known_worker_id(4), OK),
        ("DistAutogradError", "no arguments", lambda: D.DistAutogradError(), TypeError),
        ("DistAutogradError", "a status newer than the package: kept as an int", lambda: D.DistAutogradError("m", 99), OK),
        ("Status", "a value no status has", lambda: D.Status(99), ValueError),
        ("CleanupStats", "no arguments", lambda: D.CleanupStats(), TypeError),
        ("cleanup_flush", "a negative timeout", lambda: D.cleanup_flush(-1), ValueError),
        ("cleanup_flush", "a str", lambda: D.cleanup_flush("1"), ValueError),
        ("cleanup_flush", "NaN", lambda: D.cleanup_flush(math.nan), ValueError),
        ("cleanup_flush", "infinity", lambda: D.cleanup_flush(math.inf), ValueError),
        ("cleanup_flush", "1e300 s: returns once all is delivered", lambda: D.cleanup_flush(1e300), OK),
        ("cleanup_stats", "an argument", lambda: D.cleanup_stats(1), TypeError),
        ("log_to_logging", "no message", lambda: D.log_to_logging(1), TypeError),
        ("set_cleanup_options", "a negative max_attempts", lambda: D.set_cleanup_options(max_attempts=-1), ValueError),
        ("set_cleanup_options", "max_attempts past int32", lambda: D.set_cleanup_options(max_attempts=2**31), ValueError),
        ("set_cleanup_options", "a str max_attempts", lambda: D.set_cleanup_options(max_attempts="3"), TypeError),
        ("set_cleanup_options", "a negative backoff", lambda: D.set_cleanup_options(initial_backoff=-1), ValueError),
        ("set_cleanup_options", "a NaN backoff", lambda: D.set_cleanup_options(max_backoff=math.nan), ValueError),
        ("set_cleanup_options", "max_pending 2**63", lambda: D.set_cleanup_options(max_pending=2**63), ValueError),
        ("set_cleanup_options", "max_pending 2**40 (the library's bound)",
         lambda: D.set_cleanup_options(max_pending=2**40), (D.DistAutogradError, S.ERR_INVALID_ARGUMENT)),
        ("set_cleanup_options", "a positional argument", lambda: D.set_cleanup_options(3), TypeError),
        ("set_cleanup_options", "an unknown option", lambda: D.set_cleanup_options(retries=3), TypeError),
        ("set_cleanup_sender", "not callable", lambda: D.set_cleanup_sender(5), TypeError),
        ("set_cleanup_sender", "no argument", lambda: D.set_cleanup_sender(), TypeError),
        ("set_log_hook", "not callable", lambda: D.set_log_hook("stderr"), TypeError),
        ("_reap_idle_contexts", "a negative time", lambda: D._reap_idle_contexts(-1), ValueError),
        ("_reap_idle_contexts", "a str", lambda: D._reap_idle_contexts("1"), ValueError),
        ("_reap_idle_contexts", "NaN", lambda: D._reap_idle_contexts(math.nan), ValueError),
        ("_reap_idle_contexts", "1e300 s: nothing is that idle", lambda: D._reap_idle_contexts(1e300), OK),
        ("_release_contexts_of_worker", "a negative worker id", lambda: D._release_contexts_of_worker(-1),
         (D.DistAutogradError, S.ERR_INVALID_ARGUMENT)),
        ("_release_contexts_of_worker", "one past the last worker id", lambda: D._release_contexts_of_worker(65536),
         (D.DistAutogradError, S.ERR_INVALID_ARGUMENT)),
        ("_release_contexts_of_worker", "2**40", lambda: D._release_contexts_of_worker(2**40),
         (D.DistAutogradError, S.ERR_INVALID_ARGUMENT)),
        ("_release_contexts_of_worker", "2**63", lambda: D._release_contexts_of_worker(big), TypeError),
        ("_release_contexts_of_worker", "a str", lambda: D._release_contexts_of_worker("5"), TypeError),
    ]


def rpc_rows() -> List[Row]:
    import distautograd.rpc as R

    return [
        ("rpc.install", "timeout 0", lambda: R.install(timeout=0), ValueError),
        ("rpc.install", "a str timeout", lambda: R.install(timeout="1"), ValueError),
        ("rpc.install", "infinite timeout", lambda: R.install(timeout=math.inf), ValueError),
        ("rpc.install", "a positional argument", lambda: R.install(1.0), TypeError),
        ("rpc.install", "before rpc.init_rpc (torch's error)", lambda: R.install(), RuntimeError),
        ("rpc.send_cleanup", "before rpc.init_rpc (torch's error)", lambda: R.send_cleanup(1, 2), RuntimeError),
        ("rpc.send_cleanup", "no arguments", lambda: R.send_cleanup(), TypeError),
        ("rpc.uninstall", "an argument", lambda: R.uninstall(1), TypeError),
        ("rpc.installed", "an argument", lambda: R.installed(1), TypeError),
    ]


def surface() -> List[str]:
    """The callables a row must exist for, by the names rows use."""
    names = []
    for n in D.__all__:
        if callable(getattr(D, n)):
            names.append(n)
    for m in vars(D.DistAutogradContext):
        if m.startswith("_") and not m.startswith("__") and inspect.isfunction(getattr(D.DistAutogradContext, m)):
            names.append("DistAutogradContext." + m)
    names += ["context.__enter__", "context.__exit__"]
    return names


def rpc_surface() -> List[str]:
    import distautograd.rpc as R

    return ["rpc." + n for n in R.__all__ if callable(getattr(R, n))]


class BadInput(unittest.TestCase):
    count = 0

    def run_rows(self, table: List[Row]) -> None:
        for name, what, call, want in table:
            with self.subTest(function=name, input=what):
                try:
                    call()
                    got: Optional[BaseException] = None
                except BaseException as e:  # noqa: B902 - whatever it is, the row says what it must be
                    got = e
                if want is OK:
                    self.assertIsNone(got, "%s(%s) must succeed" % (name, what))
                else:
                    cls, status = want if isinstance(want, tuple) else (want, None)
                    self.assertIsInstance(got, cls, "%s(%s)" % (name, what))
                    self.assertNotIsInstance(got, ctypes.ArgumentError)
                    self.assertTrue(str(got), "an empty message")
                    if status is not None:
                        self.assertEqual(got.status, status)  # type: ignore[union-attr]
                        self.assertNotEqual(got.status, S.ERR_INTERNAL)  # type: ignore[union-attr]
                normal_op()
                BadInput.count += 1

    def check_coverage(self, table: List[Row], names: List[str]) -> None:
        covered = {name for name, _, _, _ in table}
        missing = [n for n in names if n not in covered]
        self.assertEqual(missing, [], "functions without a bad-input row")

    def test_every_function(self) -> None:
        table = rows()
        self.check_coverage(table, surface())
        before = _lib.debug_info()["live_handles"]
        self.run_rows(table)
        import gc

        gc.collect()
        # Nothing the rows did holds a reference now but the two fixtures
        # (and the forged objects, which never had one).
        self.assertLessEqual(_lib.debug_info()["live_handles"], before + 2)
        self.assertIs(D._release_context_if_present((5 << 48) | 1), True)

    def test_rpc_functions(self) -> None:
        try:
            import torch.distributed.rpc  # noqa: F401
        except ImportError as e:
            _support.loud_skip(self, "torch is missing (%s): the distautograd.rpc rows did not run" % e)
        table = rpc_rows()
        self.check_coverage(table, rpc_surface())
        self.run_rows(table)

    @classmethod
    def tearDownClass(cls) -> None:
        sys.stderr.write("\nbad-input cases: %d Python\n" % cls.count)


if __name__ == "__main__":
    unittest.main()
