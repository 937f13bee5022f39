"""pytorch issue 61920's job, natively and under the backend: what a pass
leaves behind in the container.

bench/torchmem.py's job (a trainer and a worker that owns a model behind
an RRef; a pass: a context, 20 rpc_async forwards through the RRef, a
distributed backward), short: a native job and a backend job taking turns.
At the end both processes of both jobs hold no context and no backward
pass, and the RRef counts are the same both ways; under the backend no
libtorch context object is alive and no handle is held. The RSS figures
bench/torchmem.py prints are not asserted (make bench-torch-memory shows
them): they are the machine's, not the container's.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import unittest

from torch_backend.tests.test_backend import BackendTest, PYTHON, ROOT, TIMEOUT

TORCHMEM = os.path.join(ROOT, "bench", "torchmem.py")
#: Short: the end state, not the slopes, is what is asserted.
ARGS = ["--passes", "24", "--warmup", "8", "--every", "8", "--chunk", "8", "--threads", "4"]


class TestIssue61920(BackendTest):
    def test_a_pass_leaves_nothing_in_the_container(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "torchmem.json")
            run = subprocess.run([PYTHON, TORCHMEM] + ARGS + ["--json", path], cwd=ROOT,
                                 capture_output=True, text=True, timeout=2 * TIMEOUT)
            self.assertEqual(run.returncode, 0, "bench/torchmem.py failed:\n%s\n%s"
                             % (run.stdout[-3000:], run.stderr[-3000:]))
            with open(path) as f:
                rows = json.load(f)["rows"]
        sides = {(r["process"], r["side"]): r["report"] for r in rows}
        self.assertEqual(len(sides), 4, sorted(sides))
        for (process, side), r in sorted(sides.items()):
            with self.subTest(process=process, side=side):
                self.assertEqual(r["torch_autograd"]["num_autograd_contexts"], 0)
                self.assertEqual(r["torch_autograd"]["num_current_backward_passes"], 0)
                native = sides[(process, "native")]
                self.assertEqual(r["rpc"], native["rpc"], "RRef counts differ from native's")
                if side == "backend":
                    d = r["distautograd"]
                    self.assertEqual(d["torch_contexts_alive"], 0, d)
                    self.assertEqual(d["live_handles"], 0, d)
                else:
                    self.assertNotIn("distautograd", r)


if __name__ == "__main__":
    unittest.main()
