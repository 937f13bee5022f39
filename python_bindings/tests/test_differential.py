"""The differential suite: every scenario of _scenarios.py runs on the real
torch.distributed.autograd and on distautograd, each in a process of its
own, and the two records must be equal (values, exception types, and the
messages of RuntimeErrors).

torch comes from $DISTAUTOGRAD_TORCH_PYTHON, default /usr/bin/python3 (Debian's
python3-torch). Without it the suite skips loudly, and under CI=true fails.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest
from typing import Any, Dict, Optional

from . import _scenarios, _support

TORCH_PYTHON = _support.TORCH_PYTHON
SCRIPT = os.path.join(_support.TESTS, "_scenarios.py")
NAMES = list(_scenarios.SCENARIOS)


class Differential(unittest.TestCase):
    """One test per scenario: torch's record == distautograd's."""

    torch_results: Dict[str, Any] = {}
    dac_results: Dict[str, Any] = {}
    problem: Optional[str] = None

    @classmethod
    def setUpClass(cls) -> None:
        cls.problem = _support.torch_problem("torch.distributed.autograd")
        if cls.problem:
            if not _support.in_ci():
                sys.stderr.write("\n" + "!" * 72 + "\n!! SKIPPING the differential suite (%d scenarios): no torch oracle.\n!! %s\n"
                                 % (len(NAMES), cls.problem) + "!" * 72 + "\n")
            return
        # The two backends' runners in parallel: torch's spends its time
        # importing torch.
        procs = {
            "torch": subprocess.Popen(
                [TORCH_PYTHON, SCRIPT, "torch"] + NAMES,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_support.child_env(),
            ),
            "distautograd": subprocess.Popen(
                [sys.executable, SCRIPT, "distautograd"] + NAMES,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_support.child_env(),
            ),
        }
        outs = {}
        for k, p in procs.items():
            out, err = p.communicate(timeout=600)
            if p.returncode != 0:
                raise AssertionError("%s runner failed (%d):\n%s" % (k, p.returncode, err[-4000:]))
            outs[k] = json.loads(out)
        cls.torch_results = outs["torch"]
        cls.dac_results = outs["distautograd"]

    def setUp(self) -> None:
        if self.problem:
            msg = "the differential suite needs torch, the oracle: " + self.problem
            if _support.in_ci():
                self.fail("CI=true and " + msg)
            self.skipTest(msg)

    def check(self, name: str) -> None:
        t, d = self.torch_results[name], self.dac_results[name]
        self.assertNotIn("harness_error", t, "scenario broke on torch: %s" % t.get("harness_error"))
        self.assertNotIn("harness_error", d, "scenario broke on distautograd: %s" % d.get("harness_error"))
        self.assertNotIn("wait_status", d)
        self.assertTrue(t["events"], "scenario recorded nothing")
        self.assertEqual(len(t["events"]), len(d["events"]), "different numbers of steps")
        for te, de in zip(t["events"], d["events"]):
            self.assertEqual(te, de, "step %r differs" % te[0])

    def test_oracle_is_torch(self) -> None:
        # The records are compared, so check once that torch's say what the
        # contract says (a broken runner could make both sides agree).
        ev = {e[0]: e for e in self.torch_results["init_worker_3"]["events"]}
        self.assertEqual(ev["new"], ["new", "ok", {"context": _support.FIRST_ID}])
        self.assertEqual(ev["max_id"], ["max_id", "ok", 1125899906842623])
        ev = {e[0]: e for e in self.torch_results["init_worker_40000"]["events"]}
        self.assertEqual(ev["init same"][3], "Container is already initialized with worker_id: -25536, "
                         "cannot initialize with different worker_id: 40000")
        ev = {e[0]: e for e in self.torch_results["before_init"]["events"]}
        self.assertEqual(ev["new"][3], "Need to initialize distributed autograd using torch.distributed.autograd.init()")
        self.assertEqual(set(self.torch_results), set(NAMES))


def _make(name: str) -> Any:
    def test(self: Differential) -> None:
        self.check(name)

    test.__doc__ = "scenario %s: torch and distautograd agree" % name
    return test


for _name in NAMES:
    setattr(Differential, "test_" + _name, _make(_name))


if __name__ == "__main__":
    unittest.main()
