"""What `make test` (scripts/run-tests) does before and after the suites:
it refuses to start without a tool a suite needs, one line per tool with
the command that installs it (exit 2), and its summary names every test
that failed. The suites themselves are stood in for by a fake make.

And the Makefile's own first steps: on a machine without Go (and without
cmake), `make help` works, `make` says in one line what to install, and
`make test` one line per missing tool; a make that builds with another Go
than go.mod's toolchain line says which. The README's set-up installs
what run-tests checks for, and the Go go.mod names. A test that hangs
ends its suite's run with every thread's stack (unittest_progress.py)."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
from typing import Optional

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

    def test_lint_checks_are_the_makefiles(self) -> None:
        # Run by hand (no LINT_CHECKS from make), the lint suite runs the
        # Makefile's checks, every one, and asks for the C compiler lint-c uses.
        loader = importlib.machinery.SourceFileLoader("run_tests_lint", RUN_TESTS)
        spec = importlib.util.spec_from_loader("run_tests_lint", loader)
        run_tests = importlib.util.module_from_spec(spec)
        saved = os.environ.pop("LINT_CHECKS", None)
        try:
            loader.exec_module(run_tests)
        finally:
            if saved is not None:
                os.environ["LINT_CHECKS"] = saved
        with open(os.path.join(_support.ROOT, "Makefile")) as f:
            m = re.search(r"^LINT_CHECKS := (.*)$", f.read(), re.M)
        self.assertIsNotNone(m)
        self.assertEqual(run_tests.LINT_CHECKS, m.group(1).split())
        self.assertIn("lint-c", run_tests.LINT_CHECKS)
        self.assertIn("gcc", run_tests.NEEDS["lint"])

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


UNITTEST_PROGRESS = os.path.join(_support.ROOT, "scripts", "unittest_progress.py")


class TestTimeout(unittest.TestCase):
    """scripts/unittest_progress.py's bound on one test: a hung test dumps
    every Python thread's stack and ends the run, naming where it hung; the
    bound is per test, so a suite longer than it runs whole."""

    def progress(self, body: str, *args: str) -> subprocess.CompletedProcess:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        with open(os.path.join(tmp.name, "test_timed.py"), "w", encoding="utf-8") as f:
            f.write("import threading, time, unittest\n\n\nclass T(unittest.TestCase):\n" + body)
        return subprocess.run([sys.executable, UNITTEST_PROGRESS, "-s", tmp.name, *args],
                              capture_output=True, text=True, timeout=120)

    def test_a_hung_test_dumps_its_stack_and_ends_the_run(self) -> None:
        r = self.progress("    def test_waits_forever(self):\n        threading.Event().wait()\n",
                          "--test-timeout", "1")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("Timeout (0:00:01)!", r.stderr)
        self.assertIn("in test_waits_forever", r.stderr)
        self.assertNotIn("DONE", r.stdout)

    def test_the_bound_is_per_test(self) -> None:
        body = "".join("    def test_%d(self):\n        time.sleep(1)\n" % i for i in range(6))
        r = self.progress(body, "--test-timeout", "5")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("DONE 6 tests, 0 skipped, 0 failed", r.stdout)
        self.assertNotIn("Timeout", r.stderr)


def go_mod_toolchain() -> str:
    with open(os.path.join(_support.ROOT, "go.mod"), encoding="utf-8") as f:
        return re.search(r"^toolchain (\S+)$", f.read(), re.M).group(1)


class MakeWithoutGo(unittest.TestCase):
    """make on a PATH of the tools a newcomer has: all but go and cmake."""

    #: What the Makefile, scripts/go-toolchain and scripts/run-tests call, and
    #: what run-tests checks for besides go and cmake.
    TOOLS = ("make", "sh", "bash", "env", "sed", "grep", "cat", "dirname", "mkdir", "rm", "cmp", "ls",
             "gcc", "g++", "pkg-config", "readelf", "ip")

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.bin = os.path.join(tmp.name, "bin")
        os.makedirs(self.bin)
        for tool in self.TOOLS:
            path = shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")
            self.assertIsNotNone(path, tool)
            os.symlink(path, os.path.join(self.bin, tool))

    def make(self, *args: str) -> subprocess.CompletedProcess:
        e = _support.child_env(CI=None, MAKEFLAGS=None, MFLAGS=None, MAKELEVEL=None, MAKEOVERRIDES=None, GO=None,
                               GOTOOLCHAIN=None, PATH=self.bin)
        return subprocess.run(["make", "--no-print-directory", "-C", _support.ROOT, *args], env=e,
                              capture_output=True, text=True, timeout=300)

    def test_help(self) -> None:
        r = self.make("help")
        self.assertEqual((r.returncode, r.stderr), (0, ""), r.stdout)
        self.assertIn("\ntest\t", r.stdout)

    def test_build_says_what_to_install(self) -> None:
        for goal in ((), ("install", "PREFIX=" + self.bin)):
            r = self.make(*goal)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertEqual(r.stdout, "")
            self.assertRegex(r.stderr, r"^Makefile:\d+: \*\*\* no go command on PATH: install Go %s from its "
                             r"release tarball into /usr/local/go and put /usr/local/go/bin on PATH [^\n]*Stop\.\n$"
                             % re.escape(go_mod_toolchain()[2:]))

    def test_test_checks_first(self) -> None:
        r = self.make("test")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        lines = [line for line in r.stdout.splitlines() if line.startswith("run-tests: ")]
        self.assertEqual(lines[:2], [
            "run-tests: missing: Go (no go command on PATH: install Go %s from its release tarball into "
            "/usr/local/go and put /usr/local/go/bin on PATH (README.md, Set up; Debian's golang-go is older))"
            % go_mod_toolchain()[2:],
            "run-tests: missing: cmake (apt-get install -y cmake)"])
        self.assertEqual(len(lines), 3, r.stdout)
        self.assertIn("nothing was run", lines[2])
        self.assertNotIn("suite", r.stdout)


class MakeSaysWhichGo(unittest.TestCase):
    """A make whose environment picks another Go than go.mod's toolchain
    line (GOTOOLCHAIN=local, a Go on PATH of another version) says, before
    it builds, which Go it builds with; with go.mod's, it says nothing."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name

    def make_n(self, **env: Optional[str]) -> subprocess.CompletedProcess:
        # make -n (nothing built) into a build folder of its own: make still
        # reads the Makefile, which is where it looks for its Go.
        e = _support.child_env(**{"CI": None, "MAKEFLAGS": None, "MFLAGS": None, "MAKELEVEL": None,
                                  "MAKEOVERRIDES": None, "GO": None, **env})
        r = subprocess.run(["make", "--no-print-directory", "-n", "-C", _support.ROOT, "all",
                            "BUILD=" + os.path.join(self.tmp, "build")],
                           env=e, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def test_another_go(self) -> None:
        goroot = os.path.join(self.tmp, "goroot")
        bin_dir = os.path.join(goroot, "bin")
        os.makedirs(bin_dir)
        with open(os.path.join(bin_dir, "go"), "w") as f:
            f.write(textwrap.dedent("""\
                #!/bin/sh
                # A Go other than go.mod's toolchain line: all make asks of it.
                [ "$1" = env ] || exit 2
                shift
                for v in "$@"; do
                  case $v in GOVERSION) echo go1.99.0;; GOROOT) echo %s;; GOMODCACHE) echo /nonexistent;; esac
                done
                """ % goroot))
        os.chmod(os.path.join(bin_dir, "go"), 0o755)
        r = self.make_n(GOTOOLCHAIN="local", PATH=bin_dir + os.pathsep + os.environ["PATH"])
        self.assertEqual(r.stdout.splitlines()[0],
                         "make: building with go1.99.0 (%s), not go.mod's toolchain %s: GOTOOLCHAIN=local"
                         % (goroot, go_mod_toolchain()))
        self.assertIn(os.path.join(bin_dir, "go") + " build ", r.stdout)
        # A make that make started (make test's suites) says nothing again.
        sub = self.make_n(GOTOOLCHAIN="local", PATH=bin_dir + os.pathsep + os.environ["PATH"], MAKELEVEL="1")
        self.assertNotIn("make: building with", sub.stdout + sub.stderr)
        self.assertIn(os.path.join(bin_dir, "go") + " build ", sub.stdout)

    def test_go_mod_toolchain(self) -> None:
        r = self.make_n(GOTOOLCHAIN=None)
        self.assertNotIn("make: building with", r.stdout + r.stderr)


class ReadmeSetUp(unittest.TestCase):
    """The README's set-up, against what it sets up for."""

    def setUp(self) -> None:
        with open(os.path.join(_support.ROOT, "README.md"), encoding="utf-8") as f:
            self.readme = f.read()

    def test_apt_line_has_every_tool_run_tests_checks(self) -> None:
        loader = importlib.machinery.SourceFileLoader("run_tests", RUN_TESTS)
        spec = importlib.util.spec_from_loader("run_tests", loader)
        run_tests = importlib.util.module_from_spec(spec)
        loader.exec_module(run_tests)
        wanted = set()
        for _, _, install in run_tests.TOOLS.values():
            if isinstance(install, str) and install.startswith(run_tests.APT):
                wanted.update(install[len(run_tests.APT):].split())
        self.assertIn("iproute2", wanted)
        m = re.search(r"^sudo apt-get install -y (.*)$", self.readme, re.M)
        self.assertIsNotNone(m, "README.md has no apt-get install line")
        self.assertEqual(wanted - set(m.group(1).split()), set(), "README.md's apt-get line lacks what run-tests checks")

    def test_go_is_go_mods(self) -> None:
        version = go_mod_toolchain()
        self.assertIn("Go %s, the Go that `go.mod` names" % version[2:], self.readme)
        tarballs = re.findall(r"\b(go[0-9.]+)\.linux-amd64\.tar\.gz", self.readme)
        self.assertTrue(tarballs)
        self.assertEqual(set(tarballs), {version})

    def test_under_200_lines(self) -> None:
        self.assertLess(self.readme.count("\n"), 200, "README.md: keep it under 200 lines")


if __name__ == "__main__":
    unittest.main()
