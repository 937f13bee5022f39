"""Which changes of Go's runtime the library was built with
(docs/go-runtime.md): dac_debug_info's go_runtime_* keys, and the line of
``python -m distautograd`` that names them, say what the build's own record
(build/go-runtime/STATUS, written by scripts/go-runtime-overlay) says, for
a build with the overlay and one with GO_RUNTIME_OVERLAY=0 alike.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest
from typing import Dict

from . import _support

STATUS = os.path.join(_support.ROOT, "build", "go-runtime", "STATUS")


def built_with() -> Dict[str, bool]:
    """The build's record: whether it took each change, by name."""
    out: Dict[str, bool] = {}
    with open(STATUS, encoding="utf-8") as f:
        for line in f:
            name, _, rest = line.rstrip("\n").partition(": ")
            out[name] = rest == "applied"
    return out


class GoRuntime(unittest.TestCase):
    def setUp(self) -> None:
        if not os.path.exists(STATUS):
            self.fail("%s is missing: run make first" % STATUS)
        self.want = built_with()
        self.assertTrue(self.want, "STATUS names no change")

    def test_debug_info_says_what_the_build_took(self) -> None:
        info = _support.run_json(self, """
            import json
            import distautograd as D
            from distautograd import _lib
            D._init(0)
            print(json.dumps({k: v for k, v in _lib.debug_info().items() if k.startswith("go_runtime_")}))
        """)
        self.assertEqual(info, {"go_runtime_" + name.replace("-", "_"): int(took)
                                for name, took in self.want.items()})

    def test_python_m_distautograd_names_them(self) -> None:
        p = subprocess.run([sys.executable, "-m", "distautograd"], env=_support.child_env(),
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        lines = [line for line in p.stdout.splitlines() if line.startswith("go runtime:    ")]
        self.assertEqual(len(lines), 1, p.stdout)
        taken = sorted(n for n, took in self.want.items() if took)
        left = sorted(n for n, took in self.want.items() if not took)
        if not taken:
            want = "none: Go's runtime as it is (not applied: %s)" % ", ".join(left)
        else:
            want = ", ".join(taken) + (" (not applied: %s)" % ", ".join(left) if left else "")
        self.assertEqual(lines[0], "go runtime:    " + want)
        info = json.loads("\n".join(p.stdout.splitlines()[p.stdout.splitlines().index(
            "debug info (this process, after _init(0)):") + 1:]))
        self.assertEqual({k for k in info if k.startswith("go_runtime_")},
                         {"go_runtime_" + n.replace("-", "_") for n in self.want})

    def test_the_line_for_each_kind_of_build(self) -> None:
        from distautograd.__main__ import go_runtime_changes

        self.assertEqual(go_runtime_changes({"go_runtime_a_b": 1, "go_runtime_c": 1, "live_handles": 3}), "a-b, c")
        self.assertEqual(go_runtime_changes({"go_runtime_a_b": 0, "go_runtime_c": 1}), "c (not applied: a-b)")
        self.assertEqual(go_runtime_changes({"go_runtime_a_b": 0, "go_runtime_c": 0}),
                         "none: Go's runtime as it is (not applied: a-b, c)")
        self.assertEqual(go_runtime_changes({"live_handles": 3}), "unknown (a build made without the Makefile)")


if __name__ == "__main__":
    unittest.main()
