"""bench/torchthreads.py, short: the training job's threads are found and
classed, natively and under the backend.

Its figures (CPU time, waits, switches per step) are not asserted: make
bench shows them. What is asserted is what a reader of its table relies
on: every process's main thread is counted on both sides; the threads Go's
runtime started are found under the backend (where a stopped thread
stands lies in the library's code) and never natively; the backend adds
no class of threads but those (the library starts no thread of its own);
and the entry lands in the report given, beside what the report already
held.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import unittest

from torch_backend.tests.test_backend import BackendTest, PYTHON, ROOT, TIMEOUT

TORCHTHREADS = os.path.join(ROOT, "bench", "torchthreads.py")


class TestTorchThreads(BackendTest):
    def test_threads_are_classed(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bench.json")
            with open(path, "w") as f:
                json.dump({"rows": [{"level": "c"}], "torch_threads": [{"torch": "0.0"}]}, f)
            run = subprocess.run([PYTHON, TORCHTHREADS, "--pairs", "1", "--rounds", "1", "--steps", "3",
                                  "--json", path], cwd=ROOT, capture_output=True, text=True, timeout=2 * TIMEOUT)
            self.assertEqual(run.returncode, 0, "bench/torchthreads.py failed:\n%s\n%s"
                             % (run.stdout[-3000:], run.stderr[-3000:]))
            with open(path) as f:
                report = json.load(f)
        self.assertEqual(report["rows"], [{"level": "c"}])
        import torch
        version = ".".join(torch.__version__.split(".")[:2])
        self.assertEqual([e["torch"] for e in report["torch_threads"]], ["0.0", version])
        entry = report["torch_threads"][1]
        rows = {r["threads"]: r for r in entry["rows"]}
        self.assertEqual(rows["main thread"]["native"]["count"], 3, rows["main thread"])
        self.assertEqual(rows["main thread"]["backend"]["count"], 3, rows["main thread"])
        self.assertEqual(rows["go runtime"]["native"]["count"], 0, rows["go runtime"])
        self.assertGreaterEqual(rows["go runtime"]["backend"]["count"], 3, rows["go runtime"])
        added = {name for name, r in rows.items() if r["backend"]["count"] > 0 and r["native"]["count"] == 0}
        self.assertEqual(added, {"go runtime"}, rows)
        for side in ("native", "backend"):
            self.assertGreater(entry["step_ns"][side], 0)
            self.assertGreater(sum(r[side]["cpu_us"] for r in entry["rows"]), 0)


if __name__ == "__main__":
    unittest.main()
