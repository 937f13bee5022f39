"""The differential scenarios of python_bindings/tests/_scenarios.py, run
through torch.distributed.autograd itself: once natively and once under the
torch backend (torch's own binding, served by distautograd). The records
must be equal: values, exception types, RuntimeError messages, and
_get_debug_info() (torch's two keys, with torch's figures). `make test`
runs it; CI=true: it must run, never skip."""
from __future__ import annotations

import json
import os
import subprocess
import unittest

from .test_backend import ROOT, SHIM, BackendTest, env, PYTHON

SCRIPT = os.path.join(ROOT, "python_bindings", "tests", "_scenarios.py")


def run(backend: bool) -> dict:
    r = subprocess.run([PYTHON, SCRIPT, "torch"], env=env(backend), capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError("scenario runner (backend=%s) failed %d:\n%s" % (backend, r.returncode, r.stderr[-4000:]))
    return json.loads(r.stdout)


class TestDifferentialThroughTorch(BackendTest):
    def test_scenarios(self) -> None:
        self.assertTrue(os.path.isfile(SHIM))
        native, served = run(False), run(True)
        self.assertGreater(len(native), 20)
        self.assertEqual(sorted(native), sorted(served))
        for name in native:
            with self.subTest(name):
                self.assertEqual(served[name], native[name])


if __name__ == "__main__":
    unittest.main()
