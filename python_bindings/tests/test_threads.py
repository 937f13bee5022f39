"""Each Python thread has its own current context, as in torch (the library
keeps it per OS thread, and a Python thread is one)."""
from __future__ import annotations

import gc
import threading
import unittest
from typing import Any, Callable, Dict, List

from . import _support

D = _support.init()
from distautograd import _lib  # noqa: E402

NO_CURRENT = (
    "Current thread doesn't have a valid autograd context. Please wrap your code using: "
    "`with torch.distributed.autograd.context() as context_id` to generate a valid context"
)
ALREADY = "Already have an autograd context id for this thread."
STALE = "Couldn't find autograd context data for current autograd context id"


def message(fn: Callable[..., Any], *args: Any) -> str:
    try:
        fn(*args)
    except RuntimeError as e:
        return str(e)
    return "no error"


def run_threads(n: int, target: Callable[[int], None]) -> None:
    errors: List[BaseException] = []

    def wrap(i: int) -> None:
        try:
            target(i)
        except BaseException as e:  # noqa: B902 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        if t.is_alive():
            raise AssertionError("a thread did not finish")
    if errors:
        raise errors[0]


class Threads(unittest.TestCase):
    def setUp(self) -> None:
        self.assertEqual(message(D._current_context), NO_CURRENT)

    def test_each_thread_its_own_current(self) -> None:
        n = 8
        barrier = threading.Barrier(n)
        ids: Dict[int, int] = {}

        def body(i: int) -> None:
            self.assertEqual(message(D._current_context), NO_CURRENT)
            c = D._new_context()
            ids[i] = c._context_id()
            barrier.wait()  # every thread holds a current context now
            self.assertEqual(D._current_context()._context_id(), ids[i])
            self.assertEqual(message(D._new_context), ALREADY)
            barrier.wait()
            D._release_context(ids[i])
            self.assertEqual(message(D._current_context), NO_CURRENT)

        run_threads(n, body)
        self.assertEqual(len(set(ids.values())), n)
        self.assertEqual(message(D._current_context), NO_CURRENT)

    def test_new_thread_has_no_current(self) -> None:
        with D.context() as cid:
            seen: List[str] = []
            run_threads(1, lambda i: seen.append(message(D._current_context)))
            self.assertEqual(seen, [NO_CURRENT])
            self.assertEqual(D._current_context()._context_id(), cid)

    def test_release_from_other_thread_leaves_stale_current(self) -> None:
        created = threading.Event()
        released = threading.Event()
        box: Dict[str, Any] = {}

        def owner(i: int) -> None:
            box["ctx"] = D._new_context()
            created.set()
            released.wait(60)
            box["current"] = message(D._current_context)
            box["new"] = message(D._new_context)
            box["with"] = message(lambda: D.context().__enter__())
            box["held id"] = box["ctx"]._context_id()
            box["held known"] = box["ctx"]._known_worker_ids()

        t = threading.Thread(target=owner, args=(0,))
        t.start()
        created.wait(60)
        cid = box["ctx"]._context_id()
        # This thread's current is untouched by releasing another thread's.
        D._release_context(cid)
        self.assertEqual(message(D._current_context), NO_CURRENT)
        released.set()
        t.join(60)
        self.assertEqual(box["current"], STALE)
        self.assertEqual(box["new"], ALREADY)
        self.assertEqual(box["with"], ALREADY)
        self.assertEqual(box["held id"], cid)
        self.assertEqual(box["held known"], set())

    def test_thread_exit_keeps_its_context(self) -> None:
        box: Dict[str, int] = {}
        run_threads(1, lambda i: box.setdefault("id", D._new_context()._context_id()))
        self.assertEqual(D._retrieve_context(box["id"])._context_id(), box["id"])
        D._release_context(box["id"])

    def test_release_if_present_from_other_thread(self) -> None:
        with D.context() as cid:
            res: List[bool] = []
            run_threads(1, lambda i: res.append(D._release_context_if_present(cid)))
            self.assertEqual(res, [True])
            self.assertEqual(message(D._current_context), STALE)
            # Clear this thread's stale id the way a C host would.
            self.assertEqual(_lib.LIB.dac_clear_current_context(), 0)
            # The with statement's own release now fails, as torch's would.
            D._get_or_create_context(cid)

    def test_objects_dropped_on_other_threads(self) -> None:
        gc.collect()
        before = _lib.debug_info()["live_handles"]
        with D.context() as cid:
            objs = [D._retrieve_context(cid) for _ in range(64)]
            lock = threading.Lock()

            def drop(i: int) -> None:
                with lock:
                    mine = [objs.pop() for _ in range(8)]
                self.assertTrue(all(o._context_id() == cid for o in mine))
                del mine

            run_threads(8, drop)
        gc.collect()
        self.assertEqual(_lib.debug_info()["live_handles"], before)

    def test_stress(self) -> None:
        n, rounds = 8, 200
        ids: List[List[int]] = [[] for _ in range(n)]

        def body(i: int) -> None:
            for r in range(rounds):
                with D.context() as cid:
                    ids[i].append(cid)
                    c = D._current_context()
                    if c._context_id() != cid:
                        raise AssertionError("thread %d sees context %d, not its %d" % (i, c._context_id(), cid))
                    c._add_known_worker_id(r % 7)
                    if D._retrieve_context(cid)._known_worker_ids() != {r % 7}:
                        raise AssertionError("known workers crossed between threads")
                if message(D._current_context) != NO_CURRENT:
                    raise AssertionError("current not cleared on exit")

        before = D._get_debug_info()["num_autograd_contexts"]
        run_threads(n, body)
        flat = [x for xs in ids for x in xs]
        self.assertEqual(len(flat), n * rounds)
        self.assertEqual(len(set(flat)), n * rounds)
        for xs in ids:
            self.assertEqual(xs, sorted(xs))  # each thread's ids increase
        self.assertEqual(D._get_debug_info()["num_autograd_contexts"], before)


if __name__ == "__main__":
    unittest.main()
