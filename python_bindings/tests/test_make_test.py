"""What `make test` (scripts/run-tests) does before and after the suites:
it refuses to start without a tool a suite needs, one line per tool with
the command that installs it (exit 2), and its summary names every test
that failed. The suites themselves are stood in for by a fake make."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

from . import _support

RUN_TESTS = os.path.join(_support.ROOT, "scripts", "run-tests")


class MakeTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name

    def run_tests(self, *suites: str, **env: str) -> subprocess.CompletedProcess:
        e = _support.child_env(CI=None, MAKEFLAGS=None, MAKELEVEL=None, **env)
        return subprocess.run([sys.executable, RUN_TESTS, *suites], env=e, capture_output=True, text=True,
                              timeout=300)

    def test_missing_tool(self) -> None:
        # A PATH with everything the go suite needs but cmake.
        bin_dir = os.path.join(self.tmp, "bin")
        os.makedirs(bin_dir)
        for tool in ("go", "make", "gcc", "g++", "pkg-config", "readelf", "sh", "bash", "env"):
            path = shutil.which(tool)
            self.assertIsNotNone(path, tool)
            os.symlink(path, os.path.join(bin_dir, tool))
        r = self.run_tests("go", PATH=bin_dir, GO=os.path.join(bin_dir, "go"))
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(r.stdout.splitlines()[0], "run-tests: missing: cmake (apt-get install -y cmake)")
        self.assertNotIn("suite go", r.stdout)

    def test_summary_names_failed_tests(self) -> None:
        results = os.path.join(self.tmp, "results")
        fake_make = os.path.join(self.tmp, "make")
        with open(fake_make, "w") as f:
            f.write(textwrap.dedent("""\
                #!/bin/sh
                # Stands in for `make test-python`: two tests failed.
                mkdir -p "$TEST_RESULTS"
                echo '{"passed": 3, "failed": 2, "skipped": 0, "failures": ["m.T.test_a", "m.T.test_b"]}' \\
                  > "$TEST_RESULTS/python.json"
                exit 1
                """))
        os.chmod(fake_make, 0o755)
        r = self.run_tests("python", MAKE=fake_make, TEST_RESULTS=results)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        out = r.stdout
        self.assertIn("failed tests:\n  python  m.T.test_a\n  python  m.T.test_b\n", out)
        self.assertIn("FAILED: python (exit status 1)", out)

        # The go suite: gotestsum's test2json events, a failed test and subtest.
        events = [{"Action": "pass", "Package": "p/a", "Test": "TestOK"},
                  {"Action": "fail", "Package": "p/b", "Test": "TestBad/case"},
                  {"Action": "fail", "Package": "p/b", "Test": "TestBad"},
                  {"Action": "fail", "Package": "p/b"}]
        with open(fake_make, "w") as f:
            f.write("#!/bin/sh\nmkdir -p \"$TEST_RESULTS\"\ncat > \"$TEST_RESULTS/go.json\" <<'EOF'\n%s\nEOF\nexit 2\n"
                    % "\n".join(json.dumps(e) for e in events))
        r = self.run_tests("go", MAKE=fake_make, TEST_RESULTS=results)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("failed tests:\n  go      p/b TestBad/case\n  go      p/b TestBad\n", r.stdout)


if __name__ == "__main__":
    unittest.main()
