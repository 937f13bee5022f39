"""Collected DistAutogradContext objects drop their references in batches
(one dac_context_unref_many call per UNREF_BATCH): none is dropped twice,
none is lost, a flush drops what is queued, and a reference still held keeps
its context readable whatever other objects of the same context do."""
from __future__ import annotations

import gc
import threading
import unittest
from typing import List

from . import _support

D = _support.init()
from distautograd import _lib  # noqa: E402


def live_handles() -> int:
    return _lib.debug_info()["live_handles"]  # flushes first


class UnrefBatch(unittest.TestCase):
    def setUp(self) -> None:
        gc.collect()
        self.assertEqual(live_handles(), 0)

    def test_queued_until_a_batch_or_a_flush(self) -> None:
        cid = D._new_context()._context_id()
        try:
            objs = [D._retrieve_context(cid) for _ in range(_lib.UNREF_BATCH // 2)]
            del objs
            gc.collect()
            # Queued, not dropped: the library still counts them.
            self.assertGreaterEqual(len(_lib._unrefs), _lib.UNREF_BATCH // 2 - 1)
            self.assertEqual(live_handles(), 0)  # the flush dropped them
            objs = [D._retrieve_context(cid) for _ in range(_lib.UNREF_BATCH * 3)]
            del objs
            gc.collect()
            self.assertLess(len(_lib._unrefs), _lib.UNREF_BATCH, "full batches go at once")
        finally:
            D._release_context(cid)
        self.assertEqual(live_handles(), 0)

    def test_threads_drop_each_reference_once(self) -> None:
        cid = D._new_context()._context_id()
        kept = D._retrieve_context(cid)
        errors: List[BaseException] = []

        def churn() -> None:
            try:
                for _ in range(3000):
                    c = D._retrieve_context(cid)
                    c._add_known_worker_id(7)
                    del c
            except BaseException as e:  # noqa: B902 - reported below
                errors.append(e)

        threads = [threading.Thread(target=churn) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        gc.collect()
        # A reference dropped twice would have taken kept's: it still reads.
        self.assertEqual(live_handles(), 1)
        D._release_context(cid)
        self.assertEqual(kept._context_id(), cid)
        self.assertEqual(kept._known_worker_ids(), {7})
        del kept
        gc.collect()
        self.assertEqual(live_handles(), 0)


if __name__ == "__main__":
    unittest.main()
