"""The distautograd API in this process (worker 3): contexts, the context
manager, the extensions beyond torch, errors, references and collection."""
from __future__ import annotations

import copy
import gc
import inspect
import os
import pickle
import typing
import unittest
import weakref

from . import _support

D = _support.init()
from distautograd import _lib  # noqa: E402


def live_handles() -> int:
    gc.collect()
    return _lib.debug_info()["live_handles"]


class Base(unittest.TestCase):
    def setUp(self) -> None:
        # Each test starts with no current context on the main thread.
        self.assertRaises(RuntimeError, D._current_context)
        self.contexts_before = D._get_debug_info()["num_autograd_contexts"]

    def tearDown(self) -> None:
        try:
            c = D._current_context()
        except RuntimeError:
            pass
        else:
            D._release_context_if_present(c._context_id())
            self.fail("test left a current context")

    def assertRaisesMessage(self, message: str, fn: typing.Callable[..., typing.Any], *args: typing.Any) -> D.DistAutogradError:
        with self.assertRaises(D.DistAutogradError) as cm:
            fn(*args)
        self.assertEqual(str(cm.exception), message)
        self.assertIsInstance(cm.exception, RuntimeError)
        return cm.exception


def not_found(cid: int) -> str:
    return "Could not find autograd context with id: %d" % cid


NO_CURRENT = (
    "Current thread doesn't have a valid autograd context. Please wrap your code using: "
    "`with torch.distributed.autograd.context() as context_id` to generate a valid context"
)
ALREADY = "Already have an autograd context id for this thread."
STALE = "Couldn't find autograd context data for current autograd context id"


class Contexts(Base):
    def test_new_current_retrieve_release(self) -> None:
        c = D._new_context()
        cid = c._context_id()
        self.assertEqual(cid >> 48, _support.WORKER)
        self.assertIsInstance(c, D.DistAutogradContext)
        self.assertEqual(D._current_context()._context_id(), cid)
        self.assertEqual(D._retrieve_context(cid)._context_id(), cid)
        self.assertIsNone(D._is_valid_context(cid))
        self.assertEqual(D._get_debug_info()["num_autograd_contexts"], self.contexts_before + 1)
        self.assertRaisesMessage(ALREADY, D._new_context)
        self.assertIsNone(D._release_context(cid))
        self.assertRaisesMessage(NO_CURRENT, D._current_context)
        self.assertRaisesMessage(not_found(cid), D._retrieve_context, cid)
        self.assertRaisesMessage(not_found(cid), D._is_valid_context, cid)
        e = self.assertRaisesMessage(not_found(cid), D._release_context, cid)
        self.assertEqual(e.status, D.Status.ERR_NOT_FOUND)
        self.assertEqual(D._get_debug_info()["num_autograd_contexts"], self.contexts_before)

    def test_ids_are_consecutive(self) -> None:
        ids = []
        for _ in range(4):
            with D.context() as cid:
                ids.append(cid)
        self.assertEqual(ids, list(range(ids[0], ids[0] + 4)))

    def test_context_object(self) -> None:
        c = D._new_context()
        cid = c._context_id()
        self.assertEqual(c._known_worker_ids(), set())
        self.assertEqual(c._send_functions(), {})
        self.assertEqual(c._recv_functions(), {})
        self.assertIs(type(c._known_worker_ids()), set)
        self.assertIs(type(c._send_functions()), dict)
        D._release_context(cid)
        # Still readable once released: the object holds a reference.
        self.assertEqual(c._context_id(), cid)
        self.assertEqual(c._known_worker_ids(), set())
        self.assertEqual(c._send_functions(), {})

    def test_no_constructor(self) -> None:
        with self.assertRaises(TypeError):
            D.DistAutogradContext()
        with self.assertRaises(TypeError):
            D.DistAutogradContext(5)

    def test_not_copyable(self) -> None:
        with D.context() as cid:
            c = D._retrieve_context(cid)
            for f in (pickle.dumps, copy.copy, copy.deepcopy):
                with self.assertRaises(TypeError):
                    f(c)
            with self.assertRaises(AttributeError):
                c.foo = 1  # type: ignore[attr-defined]
            self.assertIs(weakref.ref(c)(), c)

    def test_debug_info(self) -> None:
        self.assertEqual(
            D._get_debug_info(),
            {"num_autograd_contexts": self.contexts_before, "num_current_backward_passes": 0},
        )
        full = _lib.debug_info()
        self.assertEqual(full["num_autograd_contexts"], self.contexts_before)
        self.assertIn("live_handles", full)

    def test_max_id(self) -> None:
        self.assertEqual(D._get_max_id(), 1125899906842623)


class ContextManager(Base):
    def test_enter_returns_id_exit_releases(self) -> None:
        cm = D.context()
        cid = cm.__enter__()
        self.assertIsInstance(cid, int)
        self.assertEqual(cm.autograd_context._context_id(), cid)
        self.assertEqual(D._current_context()._context_id(), cid)
        self.assertIsNone(cm.__exit__(None, None, None))
        self.assertRaisesMessage(not_found(cid), D._retrieve_context, cid)
        self.assertRaisesMessage(NO_CURRENT, D._current_context)

    def test_body_raises(self) -> None:
        seen = []
        with self.assertRaises(KeyError):
            with D.context() as cid:
                seen.append(cid)
                raise KeyError("body")
        self.assertRaisesMessage(not_found(seen[0]), D._retrieve_context, seen[0])
        self.assertRaisesMessage(NO_CURRENT, D._current_context)

    def test_released_inside(self) -> None:
        with self.assertRaises(D.DistAutogradError) as cm:
            with D.context() as cid:
                D._release_context(cid)
        self.assertEqual(str(cm.exception), not_found(cid))

    def test_nested(self) -> None:
        with D.context() as outer:
            with self.assertRaises(D.DistAutogradError) as cm:
                with D.context():
                    pass
            self.assertEqual(str(cm.exception), ALREADY)
            self.assertEqual(D._current_context()._context_id(), outer)

    def test_exit_without_enter(self) -> None:
        with self.assertRaises(AttributeError):
            D.context().__exit__(None, None, None)

    def test_no_arguments(self) -> None:
        with self.assertRaises(TypeError):
            D.context(1)  # type: ignore[call-arg]


class Extensions(Base):
    """The names beyond torch's module, for the runtime that delivers RPCs."""

    def test_release_if_present(self) -> None:
        c = D._new_context()
        cid = c._context_id()
        self.assertIs(D._release_context_if_present(cid), True)
        self.assertRaisesMessage(NO_CURRENT, D._current_context)
        self.assertIs(D._release_context_if_present(cid), False)
        self.assertIs(D._release_context_if_present(-1), False)

    def test_get_or_create(self) -> None:
        cid = (9 << 48) + 17  # a pass started by worker 9
        self.assertIsNone(D._retrieve_context_if_present(cid))
        c = D._get_or_create_context(cid)
        self.assertEqual(c._context_id(), cid)
        self.assertRaisesMessage(NO_CURRENT, D._current_context)  # current untouched
        self.assertEqual(D._get_or_create_context(cid)._context_id(), cid)
        self.assertEqual(D._get_debug_info()["num_autograd_contexts"], self.contexts_before + 1)
        c._add_known_worker_id(9)
        # Both objects name the one stored context.
        self.assertEqual(D._retrieve_context_if_present(cid)._known_worker_ids(), {9})
        D._release_context(cid)
        self.assertIsNone(D._retrieve_context_if_present(cid))
        # Recreated after a release: a new context, the old object keeps the old one.
        again = D._get_or_create_context(cid)
        self.assertEqual(again._known_worker_ids(), set())
        self.assertEqual(c._known_worker_ids(), {9})
        self.assertTrue(D._release_context_if_present(cid))

    def test_known_worker_ids(self) -> None:
        with D.context() as cid:
            c = D._retrieve_context(cid)
            workers = [0, 3, 32767, 32768, 40000, 65535] + list(range(100, 140))
            for w in workers + workers:
                self.assertIsNone(c._add_known_worker_id(w))
            c._add_known_worker_id(True)
            self.assertEqual(c._known_worker_ids(), set(workers) | {1})
            # Seen through another object of the same context.
            self.assertEqual(D._current_context()._known_worker_ids(), set(workers) | {1})
            for bad in (-1, 65536, 2**31, -(2**31) - 1, 2**40, 2**63 - 1, -(2**63)):
                e = self.assertRaisesMessage("worker_id needs to be in the range [0, 65535]",
                                             c._add_known_worker_id, bad)
                self.assertEqual(e.status, D.Status.ERR_INVALID_ARGUMENT)
            for bad in ("1", 1.0, None, 2**63, -(2**63) - 1):
                with self.assertRaises(TypeError):
                    c._add_known_worker_id(bad)  # type: ignore[arg-type]
            self.assertEqual(len(c._known_worker_ids()), len(set(workers) | {1}))

    def test_contexts(self) -> None:
        import time

        other = (7 << 48) + 5  # a pass of worker 7
        with D.context() as cid:
            D._current_context()._add_known_worker_id(40000)
            D._current_context()._add_known_worker_id(2)
            theirs = D._get_or_create_context(other)
            time.sleep(0.3)
            theirs._add_known_worker_id(3)  # a use: its idle time starts over
            listed = {c["id"]: c for c in D.contexts()}
            self.assertEqual(set(listed), {cid, other})
            mine, t = listed[cid], listed[other]
            self.assertEqual(sorted(mine), ["age_s", "id", "idle_s", "known_workers", "origin_worker"])
            self.assertEqual(mine["origin_worker"], 3)
            self.assertEqual(t["origin_worker"], 7)
            self.assertEqual(mine["known_workers"], [2, 40000])  # sorted
            self.assertEqual(t["known_workers"], [3])
            self.assertGreaterEqual(mine["age_s"], 0.25)
            self.assertGreaterEqual(mine["idle_s"], 0.25)
            self.assertLess(t["idle_s"], t["age_s"])
            # Plain data: it pickles, as an RPC's result must. One listing:
            # two would differ when the clock's millisecond turns between.
            snapshot = D.contexts()
            self.assertEqual(pickle.loads(pickle.dumps(snapshot)), snapshot)
            # Looking is no use: the idle time goes on.
            time.sleep(0.05)
            self.assertGreater({c["id"]: c for c in D.contexts()}[cid]["idle_s"], mine["idle_s"])
            self.assertTrue(D._release_context_if_present(other))
        self.assertEqual([c for c in D.contexts() if c["id"] in (cid, other)], [])
        del theirs
        self.assertEqual(live_handles(), 0)  # the listings dropped every handle they took

    def test_functions(self) -> None:
        # No Python API adds functions (the host's autograd does, through C):
        # use the C ABI directly.
        L = _lib.LIB
        with D.context() as cid:
            c = D._retrieve_context(cid)
            sends, recvs = {}, {}
            import ctypes

            for i in range(20):
                mid = ctypes.c_int64()
                self.assertEqual(L.dac_new_autograd_message_id(mid), 0)
                sends[mid.value] = 2**64 - 1 - i
                self.assertEqual(L.dac_context_add_send_function(c._handle, mid.value, sends[mid.value]), 0)
                if i % 2:
                    recvs[mid.value] = i
                    self.assertEqual(L.dac_context_add_recv_function(c._handle, mid.value, i), 0)
            self.assertEqual(c._send_functions(), sends)
            self.assertEqual(c._recv_functions(), recvs)
            self.assertEqual(len(recvs), 10)


class Errors(Base):
    def test_error_type(self) -> None:
        self.assertTrue(issubclass(D.DistAutogradError, RuntimeError))
        e = self.assertRaisesMessage(not_found(12345), D._retrieve_context, 12345)
        self.assertEqual(e.status, D.Status.ERR_NOT_FOUND)
        self.assertEqual(e.args, (not_found(12345),))
        self.assertEqual(repr(e), "DistAutogradError(%r)" % not_found(12345))
        e2 = pickle.loads(pickle.dumps(e))
        self.assertEqual((str(e2), e2.status), (str(e), e.status))

    def test_status_codes(self) -> None:
        self.assertEqual(self.assertRaisesMessage(NO_CURRENT, D._current_context).status,
                         D.Status.ERR_NO_CURRENT_CONTEXT)
        with D.context():
            self.assertEqual(self.assertRaisesMessage(ALREADY, D._new_context).status,
                             D.Status.ERR_ALREADY_HAS_CONTEXT)
        self.assertEqual(self.assertRaisesMessage("Container is already initialized with worker_id: 3, "
                                                  "cannot initialize with different worker_id: 4",
                                                  D._init, 4).status, D.Status.ERR_ALREADY_INITIALIZED)
        self.assertIsNone(D._init(3))

    def test_unknown_status_stays_int(self) -> None:
        e = D.DistAutogradError("x", 999)
        self.assertEqual(e.status, 999)
        self.assertEqual(str(e), "x")


class References(Base):
    """A DistAutogradContext holds one library reference and drops it when
    collected."""

    def test_collected_objects_drop_their_reference(self) -> None:
        before = live_handles()
        with D.context() as cid:
            objs = [D._retrieve_context(cid) for _ in range(50)]
            objs += [D._current_context() for _ in range(50)]
            self.assertEqual(live_handles(), before + 101)  # + the context manager's
            del objs
            self.assertEqual(live_handles(), before + 1)
        self.assertEqual(live_handles(), before)
        c = D._get_or_create_context(12345)
        self.assertIsNone(D._retrieve_context_if_present(99999))
        self.assertEqual(live_handles(), before + 1)
        D._release_context(12345)
        self.assertEqual(live_handles(), before + 1)  # released, still held
        self.assertEqual(c._context_id(), 12345)
        del c
        self.assertEqual(live_handles(), before)

    def test_failures_leak_nothing(self) -> None:
        before = live_handles()
        for _ in range(20):
            self.assertRaises(RuntimeError, D._retrieve_context, 777)
            self.assertRaises(RuntimeError, D._current_context)
            self.assertRaises(TypeError, D._retrieve_context, "777")
        with D.context():
            for _ in range(20):
                self.assertRaises(RuntimeError, D._new_context)
        self.assertEqual(live_handles(), before)

    def test_cycle_collected(self) -> None:
        before = live_handles()

        class Holder:
            pass

        with D.context() as cid:
            h = Holder()
            h.me = h  # type: ignore[attr-defined]
            h.ctx = D._retrieve_context(cid)  # type: ignore[attr-defined]
            del h
        self.assertEqual(live_handles(), before)


class Surface(unittest.TestCase):
    """Names, docstrings and type hints."""

    TORCH_NAMES = ["_init", "_new_context", "_release_context", "_retrieve_context", "_current_context",
                   "_is_valid_context", "_get_max_id", "_get_debug_info", "context", "DistAutogradContext"]
    EXTENSIONS = ["_release_context_if_present", "_get_or_create_context", "_retrieve_context_if_present", "contexts"]

    def test_names(self) -> None:
        for name in self.TORCH_NAMES + self.EXTENSIONS + ["DistAutogradError", "Status"]:
            self.assertTrue(hasattr(D, name), name)
            self.assertIn(name, D.__all__)
        for name in ["_context_id", "_known_worker_ids", "_send_functions", "_recv_functions",
                     "_add_known_worker_id"]:
            self.assertTrue(callable(getattr(D.DistAutogradContext, name)), name)
        self.assertEqual(D.DistAutogradContext.__module__, "distautograd")
        self.assertEqual(D.DistAutogradError.__module__, "distautograd")

    def test_docstrings_and_hints(self) -> None:
        objs = [getattr(D, n) for n in self.TORCH_NAMES + self.EXTENSIONS]
        objs += [getattr(D.DistAutogradContext, n) for n in
                 ["_context_id", "_known_worker_ids", "_send_functions", "_recv_functions", "_add_known_worker_id"]]
        objs += [D.context.__enter__, D.context.__exit__, D.DistAutogradError, D]
        for o in objs:
            self.assertTrue(inspect.getdoc(o), "no docstring: %r" % o)
        for o in objs:
            if inspect.isfunction(o) and o.__name__ not in ("__exit__",):
                hints = typing.get_type_hints(o, vars(D))
                self.assertIn("return", hints, o.__name__)
        self.assertTrue(os.path.isfile(os.path.join(os.path.dirname(D.__file__), "py.typed")))

    def test_version(self) -> None:
        self.assertEqual(D.__version__, _lib.LIB.dac_version().decode())
        self.assertRegex(D.__version__, r"^\d+\.\d+\.\d+$")

    def test_positional_only_like_torch(self) -> None:
        # torch's functions take no keywords.
        with self.assertRaises(TypeError):
            D._retrieve_context(context_id=1)  # type: ignore[call-arg]
        with self.assertRaises(TypeError):
            D._init(worker_id=3)  # type: ignore[call-arg]


if __name__ == "__main__":
    unittest.main()
