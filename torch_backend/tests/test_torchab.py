"""bench/torchab.py, short: one process switches between torch's own
container and the backend, and each side's calls land where they should.

Its figures are not asserted (they are measurements). What is asserted is
what its tables rest on: on the native side every member torch calls is
libtorch's (its own release sends the cleanup message through its
sendReleaseContextRpc and erases through eraseContextIdAndReset), on the
backend side none of libtorch's private members runs (both are timed on
both sides, so a switch that did not take shows), both sides make the
same public calls, and each side's op and each member's calls are timed.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import unittest

from torch_backend.tests.test_backend import BackendTest, PYTHON, ROOT, TIMEOUT

TORCHAB = os.path.join(ROOT, "bench", "torchab.py")
TORCHBENCH = os.path.join(ROOT, "bench", "torchbench.py")


class TestTorchAB(BackendTest):
    def run_ab(self, op, rounds):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "ab.json")
            run = subprocess.run([PYTHON, TORCHAB, "--op", op, "--rounds", str(rounds), "--batches", "3",
                                  "--json", path], cwd=ROOT, capture_output=True, text=True, timeout=2 * TIMEOUT)
            self.assertEqual(run.returncode, 0, "bench/torchab.py failed:\n%s\n%s"
                             % (run.stdout[-3000:], run.stderr[-3000:]))
            with open(path) as f:
                return json.load(f)

    def test_pass_is_served_by_each_side_in_turn(self):
        report = self.run_ab("pass", 4)
        native, backend = report["members"]["native"], report["members"]["backend"]
        for side in (native, backend):
            self.assertEqual(side["newContext"][0], 1.0, side)
            self.assertEqual(side["releaseContext"][0], 1.0, side)
        self.assertEqual(native["sendReleaseContextRpc"][0], 1.0, native)
        self.assertEqual(native["eraseContextIdAndReset"][0], 1.0, native)
        self.assertNotIn("sendReleaseContextRpc", backend)
        self.assertNotIn("eraseContextIdAndReset", backend)
        # The calls made before the op returns (not those of the cleanup
        # message, which may land after the chunk): the same on both sides.
        within = ("newContext", "releaseContext", "getOrCreateContext", "newAutogradMessageId")
        self.assertEqual({k: native[k][0] for k in within}, {k: backend[k][0] for k in within})
        for side in ("native", "backend"):
            self.assertGreater(report["ns"][side], 0)
            self.assertIn("main", report["threads"][side])
            # Every member called has its calls' median (ab.S keeps each
            # call's ticks), a call's share of what the member took.
            for name, (calls, ns, median) in report["members"][side].items():
                self.assertGreater(median, 0, (side, name))

    def test_step_switches_every_worker(self):
        report = self.run_ab("step", 2)
        native, backend = report["members"]["native"], report["members"]["backend"]
        for w in ("w1", "w2"):
            # Each other worker gets the pass's context from a message and
            # releases it on worker 0's cleanup message, on its own side.
            self.assertGreater(native["%s getOrCreateContext" % w][0], 0, native)
            self.assertGreater(native["%s eraseContextIdAndReset" % w][0], 0, native)
            self.assertGreater(backend["%s getOrCreateContext" % w][0], 0, backend)
            self.assertNotIn("%s eraseContextIdAndReset" % w, backend)
        self.assertEqual(native["w0 newContext"][0], 1.0)
        self.assertEqual(backend["w0 newContext"][0], 1.0)
        self.assertEqual(native["w0 sendReleaseContextRpc"][0], 1.0, native)
        self.assertNotIn("w0 sendReleaseContextRpc", backend)
        self.assertNotIn("w0 eraseContextIdAndReset", backend)


class TestTorchBenchAA(BackendTest):
    """bench/torchbench.py --aa, short: pairs of native against native with
    the library loaded (the A/B build pointed back at libtorch; each such
    side fails unless a context it makes goes to libtorch), printed, never
    written to make bench's report."""

    def test_aa_times_libtorch_on_both_sides_and_writes_nothing(self):
        report = os.path.join(ROOT, "build", "bench.json")

        def text():
            if not os.path.exists(report):
                return None
            with open(report) as f:
                return f.read()

        before = text()
        run = subprocess.run([PYTHON, TORCHBENCH, "--aa", "--pairs", "1", "--rounds", "1", "--job-pairs", "1",
                              "--job-rounds", "1"], cwd=ROOT, capture_output=True, text=True, timeout=2 * TIMEOUT)
        self.assertEqual(run.returncode, 0, "bench/torchbench.py --aa failed:\n%s\n%s"
                         % (run.stdout[-3000:], run.stderr[-3000:]))
        self.assertIn("A/A, torch", run.stdout)
        rows = [line for line in run.stdout.splitlines() if line.startswith("| ") and "ns/op" not in line]
        # The pass, pass + backward, the step, the cycle and the two lookups.
        self.assertEqual(len(rows), 6, run.stdout)
        for row in rows:
            ratio = float(row.split("|")[4])
            self.assertGreater(ratio, 0, row)
        self.assertEqual(text(), before, "--aa wrote make bench's report")


if __name__ == "__main__":
    unittest.main()
