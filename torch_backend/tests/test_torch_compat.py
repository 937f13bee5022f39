"""What a torch program can observe of torch.distributed.autograd, natively
and under the backend, compared exactly: _compat_probe.py's records (values,
types, reprs, exceptions with their whole messages, warnings, object
identities) and everything the process writes to stderr. What differs
on purpose is asserted as docs/torch-compat.md states it, so that a change
either way shows here. Then torch 1.13's own DistAutogradTest.test_debug_info
(torch_suites.py), natively and under the backend, every worker served.
`make test` runs it (CI=true: it must run, never skip)."""
from __future__ import annotations

import json
import os
import re
import subprocess

from .test_backend import HERE, PYTHON, TIMEOUT, BackendTest, env, torch_series

#: A torch log line's prefix: severity, date, time and, from glog (torch
#: 1.13), the thread id; c10's own logging (Debian's torch 2.6, built
#: without glog) brackets the line and writes no thread id.
LOG_PREFIX = re.compile(r"^\[?([IWEF])(?:\d{4}){1,2} \d\d:\d\d:\d\d\.\d{6,9}(?: +\d+)? ", re.M)
#: Where each served torch's container.cpp logs that init ran twice.
ALREADY_INITIALIZED_LINE = {"1.13": 52, "2.6": 50}
#: The ports of a run, which torch's c10d logs at INFO ([::]:PORT).
PORT = re.compile(r"(\]):\d+")


def run_probe(backend: bool):
    # torch's INFO lines too: GLOG_minloglevel=0 (1.13's glog; a user sees
    # them by default), TORCH_CPP_LOG_LEVEL=INFO (2.6's c10 logging).
    r = subprocess.run([PYTHON, os.path.join(HERE, "_compat_probe.py")],
                       env=env(backend, GLOG_minloglevel="0", TORCH_CPP_LOG_LEVEL="INFO"),
                       capture_output=True, text=True, timeout=TIMEOUT)
    if r.returncode != 0:
        raise AssertionError("_compat_probe.py (backend=%s) exited %d:\n%s" % (backend, r.returncode, r.stderr))
    err = PORT.sub(r"\1:PORT", LOG_PREFIX.sub(r"\1 ", r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1]), err.splitlines()


class TestTorchCompat(BackendTest):
    def test_every_surface_as_native(self) -> None:
        native, native_err = run_probe(False)
        served, served_err = run_probe(True)
        self.assertGreater(len(native), 80)
        self.assertEqual(sorted(served), sorted(native))
        # The probes probe: errors, warnings-free calls and values all occur.
        self.assertIn("Already have an autograd context id for this thread.",
                      native["new twice on a thread"]["message"])
        self.assertEqual(native["debug inside backward"]["value"],
                         {"dict": [["num_autograd_contexts", 1], ["num_current_backward_passes", 1]]})
        self.assertEqual(native["identity: retrieve is new"]["value"], True)

        ids_native = native.pop("message ids (values)")["value"]
        ids_served = served.pop("message ids (values)")["value"]
        step_native = native.pop("another thread's context id (value)")["value"]
        step_served = served.pop("another thread's context id (value)")["value"]
        for label in native:
            with self.subTest(label):
                n, s = native[label], served[label]
                if n.get("raised from") and "container.cpp" in n["raised from"]:
                    # Raised by the backend where native's container raises:
                    # the backtrace names the backend's frame.
                    self.assertRegex(s["raised from"], r"^fail_dac at torch_backend/impl\.cpp:\d+$")
                    s = dict(s, **{"raised from": n["raised from"]})
                self.assertEqual(s, n)

        # Autograd message ids: native's are consecutive; the backend's are
        # unique, of this worker (0), each thread's from its own block.
        self.assertEqual(ids_native, list(range(len(ids_native))))
        self.assertEqual(len(ids_served), len(ids_native))
        self.assertEqual(len(set(ids_served)), len(ids_served))
        self.assertTrue(all(0 <= i < 2**48 for i in ids_served), ids_served)
        # Context ids: native's other thread gets the counter's next id; the
        # backend's the first of the next run of DAC_CONTEXT_ID_RUN (the
        # counter is past the runs this thread and an earlier one took).
        from distautograd._abi import CONTEXT_ID_RUN  # on the path test_backend sets

        (cid, tid), (scid, stid) = step_native, step_served
        self.assertEqual(tid, cid + 1)
        self.assertEqual(stid % CONTEXT_ID_RUN, 0, step_served)
        self.assertGreater(stid, scid)
        self.assertLess(scid, CONTEXT_ID_RUN, step_served)  # this thread's first run goes on

        line = ALREADY_INITIALIZED_LINE[torch_series()]
        self.assertIn("I container.cpp:%d] DistAutogradContainer is already initialized" % line, native_err)
        self.assertEqual(served_err, native_err)


class TestTorchsOwnSuite(BackendTest):
    """torch 1.13's DistAutogradTest.test_debug_info, as torch's
    test_tensorpipe_agent.py composes it (4 worker processes over
    TensorPipe): passes natively and under the backend, where every worker
    was served."""

    def run_suite(self, backend: bool, served_dir: str) -> subprocess.CompletedProcess:
        os.makedirs(served_dir)
        return subprocess.run([PYTHON, os.path.join(HERE, "torch_suites.py"), "-v",
                               "TensorPipeDistAutogradTest.test_debug_info"],
                              env=env(backend, DISTAUTOGRAD_SUITE_SERVED=served_dir), cwd=self.tmp,
                              capture_output=True, text=True, timeout=TIMEOUT * 2)

    def test_debug_info(self) -> None:
        for backend in (False, True):
            with self.subTest(backend=backend):
                folder = os.path.join(self.tmp, "served-%s" % backend)
                r = self.run_suite(backend, folder)
                self.assertEqual(r.returncode, 0, r.stderr[-6000:])
                self.assertRegex(r.stderr, r"Ran 1 test in .*\n\nOK")
                served = []
                for name in sorted(os.listdir(folder)):
                    with open(os.path.join(folder, name)) as f:
                        served.append(f.read())
                self.assertEqual(served, ["1" if backend else "0"] * 4)
