"""The differential scenarios of python_bindings/tests/_scenarios.py, run
through torch.distributed.autograd itself: once natively and once under the
torch backend (torch's own binding, served by distautograd). The records
must be equal: values, exception types, RuntimeError messages. `make test`
runs it; CI=true: it must run, never skip."""
from __future__ import annotations

import json
import os
import subprocess
import unittest

from .test_backend import ROOT, SHIM, BackendTest, env, PYTHON

SCRIPT = os.path.join(ROOT, "python_bindings", "tests", "_scenarios.py")


#: What torch's _get_debug_info() has; under the backend it has
#: distautograd's figures too (the fan-out's counters...), which the native
#: record cannot have: compared on torch's keys.
NATIVE_KEYS = {"num_autograd_contexts", "num_current_backward_passes"}


def torch_keys(v):
    """The record with every debug-info record (a list of [key, value]
    pairs holding num_autograd_contexts) cut to torch's keys."""
    if isinstance(v, list):
        if v and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in v) and any(
                p[0] == "num_autograd_contexts" for p in v):
            return [p for p in v if p[0] in NATIVE_KEYS]
        return [torch_keys(x) for x in v]
    if isinstance(v, dict):
        return {k: torch_keys(x) for k, x in v.items()}
    return v


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
                self.assertEqual(torch_keys(served[name]), native[name])
        # The extra keys are there, under the backend only.
        self.assertIn("cleanup_sent", json.dumps(served))
        self.assertNotIn("cleanup_sent", json.dumps(native))


if __name__ == "__main__":
    unittest.main()
