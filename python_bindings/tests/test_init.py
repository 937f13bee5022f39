"""What needs a process of its own: before-init errors, the init rules for
worker ids across the range, and fork. Expected values come from the
contract (include/distautograd.h), not from torch: these run with or without the oracle."""
from __future__ import annotations

import unittest

from . import _support

NEED_INIT = "Need to initialize distributed autograd using torch.distributed.autograd.init()"
RANGE = "worker_id needs to be in the range [0, 65535]"


def int64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def int16(v: int) -> int:
    return v - 65536 if v >= 32768 else v


class BeforeInit(unittest.TestCase):
    def test_every_function_needs_init(self) -> None:
        out = _support.run_json(self, """
            import json, distautograd as D
            res = {}
            calls = {
                "_new_context": lambda: D._new_context(),
                "_current_context": lambda: D._current_context(),
                "_get_max_id": lambda: D._get_max_id(),
                "_get_debug_info": lambda: D._get_debug_info(),
                "_is_valid_context": lambda: D._is_valid_context(1),
                "_retrieve_context": lambda: D._retrieve_context(1),
                "_retrieve_context_if_present": lambda: D._retrieve_context_if_present(1),
                "_get_or_create_context": lambda: D._get_or_create_context(1),
                "_release_context": lambda: D._release_context(1),
                "_release_context_if_present": lambda: D._release_context_if_present(1),
                "context": lambda: D.context().__enter__(),
                "init -1": lambda: D._init(-1),
                "init 65536": lambda: D._init(65536),
                "after failed init": lambda: D._new_context(),
            }
            for k, f in calls.items():
                try:
                    f()
                    res[k] = "no error"
                except D.DistAutogradError as e:
                    res[k] = [str(e), int(e.status)]
            D._init(5)
            res["max_id"] = D._get_max_id()
            print(json.dumps(res))
        """)
        for k, v in out.items():
            if k == "max_id":
                self.assertEqual(v, (5 << 48) | (2**48 - 1))
            elif k.startswith("init"):
                self.assertEqual(v, [RANGE, 2], k)
            else:
                self.assertEqual(v, [NEED_INIT, 1], k)


class WorkerIds(unittest.TestCase):
    def check_worker(self, w: int) -> None:
        out = _support.run_json(self, """
            import json, sys, distautograd as D
            w = %d
            def err(f, *a):
                try:
                    f(*a)
                    return None
                except RuntimeError as e:
                    return str(e)
            D._init(w)
            res = {"max_id": D._get_max_id()}
            with D.context() as a:
                res["first"] = a
            res["second"] = D._new_context()._context_id()
            res["init same"] = err(D._init, w)
            res["init other"] = err(D._init, (w + 1) %% 65536)
            res["init range"] = err(D._init, 65536)
            print(json.dumps(res))
        """ % w)
        self.assertEqual(out["max_id"], int64((w << 48) | (2**48 - 1)))
        self.assertEqual(out["first"], int64(w << 48))
        self.assertEqual(out["second"], int64(w << 48) + 1)
        if w < 32768:
            self.assertIsNone(out["init same"])
        else:
            self.assertEqual(out["init same"], "Container is already initialized with worker_id: %d, "
                             "cannot initialize with different worker_id: %d" % (int16(w), w))
        self.assertEqual(out["init other"], "Container is already initialized with worker_id: %d, "
                         "cannot initialize with different worker_id: %d" % (int16(w), (w + 1) % 65536))
        self.assertEqual(out["init range"], RANGE)

    def test_worker_ids(self) -> None:
        for w in (0, 3, 32767, 32768, 40000, 65535):
            with self.subTest(worker=w):
                self.check_worker(w)

    def test_known_values(self) -> None:
        # The header's examples of the id layout, spelled out.
        self.assertEqual(int64((3 << 48) | (2**48 - 1)), 1125899906842623)
        self.assertEqual(int64(40000 << 48), -7187745005283311616)
        self.assertEqual(int64((65535 << 48) | (2**48 - 1)), -1)


class Exit(unittest.TestCase):
    def test_exit_with_live_contexts_is_quiet(self) -> None:
        # Objects collected during interpreter shutdown drop their references
        # without "Exception ignored" noise, from any thread.
        p = _support.run_python("""
            import threading, distautograd as D
            D._init(3)
            kept = [D._new_context()] + [D._get_or_create_context(i) for i in range(10)]
            class Cycle:
                pass
            c = Cycle(); c.me = c; c.ctx = D._retrieve_context(0)
            def hold():
                threading.Event().wait()
            t = threading.Thread(target=hold, daemon=True)
            t.start()
            def in_thread():
                global other
                other = D._new_context()
            u = threading.Thread(target=in_thread); u.start(); u.join()
            print("done")
        """)
        self.assertEqual((p.returncode, p.stdout.strip(), p.stderr), (0, "done", ""))


class Fork(unittest.TestCase):
    def test_forked_child_fails_cleanly(self) -> None:
        out = _support.run_json(self, """
            import json, os, distautograd as D
            D._init(3)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    D._get_max_id()
                    msg = "no error"
                except D.DistAutogradError as e:
                    msg = json.dumps([int(e.status), str(e)])
                os.write(w, msg.encode())
                os._exit(0)
            os.close(w)
            child = os.read(r, 65536).decode()
            os.waitpid(pid, 0)
            print(json.dumps({"child": json.loads(child), "parent": D._get_max_id()}))
        """)
        status, msg = out["child"]
        self.assertEqual(status, 10)  # DAC_ERR_FORKED
        self.assertTrue(msg.startswith("distautograd: "), msg)
        self.assertIn("fork", msg)
        self.assertEqual(out["parent"], 1125899906842623)


if __name__ == "__main__":
    unittest.main()
