"""One preload library for every served torch: the implementation loaded is
the one built for the torch in the process, and what torch reads back from
the backend's members has that torch's types. `make test` runs it against
the host's torch; `make test-torch-versions` inside each served torch's
root too."""
from __future__ import annotations

import os
import re
import subprocess
import unittest

from .test_backend import BUILD, PYTHON, ROOT, TIMEOUT, SERVED_TORCH, BackendTest, env, probe, torch_series


class TestServedVersions(unittest.TestCase):
    """The served versions are one list: the package's
    (distautograd._launch.SERVED_TORCH), the shim's (symbols.h) and the
    Makefile's are the same."""

    def test_one_list(self) -> None:
        with open(os.path.join(ROOT, "torch_backend", "symbols.h"), encoding="utf-8") as f:
            m = re.search(r"#define DAT_TORCH_VERSIONS\(X\) (.*)", f.read())
        self.assertIsNotNone(m)
        self.assertEqual(tuple(re.findall(r'X\("([^"]+)"\)', m.group(1))), SERVED_TORCH)
        self.assertEqual(tuple(make_print("TORCH_VERSIONS").split()), SERVED_TORCH)

    def test_built_with_this_machines_torch(self) -> None:
        # A machine with the libtorch-dev of a served torch builds its
        # implementation with its own g++ (Debian 13 its 2.6, as Debian 12
        # its 1.13); only a torch the machine lacks comes from a root.
        series = torch_series()
        self.assertIn(series, make_print("HOST_TORCHES").split())
        impl = "build/libdistautograd_torch_impl_%s.so" % series
        r = subprocess.run(["make", "-n", "-B", "--no-print-directory", impl], cwd=ROOT, capture_output=True,
                           text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [line for line in r.stdout.splitlines() if line.endswith("-o " + impl)]
        self.assertEqual(len(lines), 1, r.stdout)
        self.assertFalse(lines[0].startswith("scripts/torch-root"), lines[0])


def make_print(variable: str) -> str:
    """The Makefile's value of variable, as make reads it on this machine."""
    r = subprocess.run(["make", "-s", "--no-print-directory", "--eval", "print-it: ; @echo $(%s)" % variable,
                        "print-it"], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    if r.returncode != 0:
        raise AssertionError("make: " + r.stderr)
    return r.stdout


class TestImplementationPerTorch(BackendTest):
    """Under the backend, the implementation mapped is the one built against
    this torch's headers, and no other; torch's own _get_debug_info(), which
    reads the container through the served members, gives exact figures
    (MALLOC_PERTURB_: a figure read from memory the backend never wrote
    would show as garbage rather than as a lucky zero)."""

    def test_mapped_implementation(self) -> None:
        got, err = probe("versions", True)
        self.assertTrue(got["active"], err)
        self.assertEqual([os.path.basename(p) for p in got["impls"]],
                         ["libdistautograd_torch_impl_%s.so" % torch_series()])
        self.assertEqual(os.path.dirname(got["impls"][0]), os.path.realpath(BUILD))
        self.assertTrue(got["torch"].startswith(torch_series()))

    def test_debug_info_figures_exact(self) -> None:
        perturb = {"MALLOC_PERTURB_": "165"}
        native, _ = probe("versions", False, **perturb)
        served, err = probe("versions", True, **perturb)
        self.assertFalse(native["active"])
        self.assertTrue(served["active"], err)
        expect = [{"num_autograd_contexts": 0, "num_current_backward_passes": 0},
                  {"num_autograd_contexts": 1, "num_current_backward_passes": 0},
                  {"num_autograd_contexts": 2, "num_current_backward_passes": 0},
                  {"num_autograd_contexts": 0, "num_current_backward_passes": 0}]
        for record in (native, served):
            figures = [{k: d[k] for k in ("num_autograd_contexts", "num_current_backward_passes")}
                       for d in record["figures"]]
            self.assertEqual(figures, expect, record)
        # torch's own two keys, as natively, each a sane count.
        for d in served["figures"]:
            self.assertEqual(sorted(d), ["num_autograd_contexts", "num_current_backward_passes"], d)
            for k, v in d.items():
                self.assertTrue(0 <= v < 1 << 40, (k, v, d))


if __name__ == "__main__":
    unittest.main()
