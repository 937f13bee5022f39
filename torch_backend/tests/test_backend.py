"""The torch backend against real torch (the interpreter's: Debian 12's
torch 1.13 on this machine, Debian 13's torch 2.6 when make
test-torch-versions runs this inside a root): each test runs torch programs
in child processes, natively and under libdistautograd_torch.so, and
compares. `make test` runs it (CI=true: it must run, never skip). Every
child has a hard timeout: a hang fails."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))
BUILD = os.path.join(ROOT, "build")
SHIM = os.path.join(BUILD, "libdistautograd_torch.so")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
TIMEOUT = 180

sys.path.insert(0, os.path.join(ROOT, "python_bindings"))
from distautograd._launch import LAUNCHER_SETTINGS, NOTIFY_ENV, SERVED_LINE, SERVED_TORCH, SETTINGS  # noqa: E402
from distautograd._process import impl_name  # noqa: E402


#: distautograd.torch.debug_info()'s keys, as its docstring lists them
#: (programs read them: a change is a change of interface).
def go_runtime_changes() -> list:
    """The changes of Go's runtime the build knows, by name: the overlay's
    to name (build/go-runtime/BUILT_WITH, name=0|1,...); none before a build."""
    try:
        with open(os.path.join(BUILD, "go-runtime", "BUILT_WITH")) as f:
            return [kv.split("=")[0] for kv in f.read().strip().split(",") if kv]
    except OSError:
        return []


DEBUG_INFO_KEYS = sorted([
    "num_autograd_contexts", "num_current_backward_passes",
    "cleanup_sent", "cleanup_retried", "cleanup_failed", "cleanup_dropped", "cleanup_skipped", "cleanup_pending",
    "max_contexts", "refused_contexts", "live_handles", "uncounted_handles", "go_heap_bytes",
    "torch_cleanup_handed", "torch_cleanup_delivered", "torch_cleanup_failed", "torch_cleanup_outstanding",
    "torch_contexts_made", "torch_contexts_alive", "torch_native_contexts",
    "torch_cleanup_gone", "torch_origin_probes", "torch_orphans_released", "torch_workers_gone"] + ["go_runtime_" + name.replace("-", "_") for name in go_runtime_changes()])


def documented_keys() -> list:
    """The keys distautograd.torch.debug_info()'s docstring names (``key``)."""
    import ast
    import re

    with open(os.path.join(ROOT, "python_bindings", "distautograd", "torch.py")) as f:
        tree = ast.parse(f.read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "debug_info")
    doc = ast.get_docstring(fn)
    keys = set(re.findall(r"``([a-z_]+)``", doc))
    if "``go_runtime_<change>``" in doc:
        keys |= {k for k in DEBUG_INFO_KEYS if k.startswith("go_runtime_")}
    return sorted(keys)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def torch_series() -> str:
    """The served release of this interpreter's torch ("1.13", "2.6"), or
    its version if the backend does not serve it; "" without torch."""
    r = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    if r.returncode != 0:
        return ""
    v = r.stdout.strip()
    return next((s for s in SERVED_TORCH if v == s or v.startswith(s + ".")), v)


def torch_version() -> str:
    """This interpreter's torch.__version__."""
    r = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                       timeout=TIMEOUT)
    return r.stdout.strip()


def torch_problem() -> str:
    series = torch_series()
    if not series:
        return "torch does not import for %s" % PYTHON
    if series not in SERVED_TORCH:
        return "torch %s is not a torch the backend serves (%s)" % (series, ", ".join(SERVED_TORCH))
    if not os.path.isfile(os.path.join(BUILD, impl_name(series))):
        return "the torch backend's implementation for torch %s is not built (make; it needs libtorch-dev)" % series
    return ""


def env(backend: bool, **extra: str) -> dict:
    e = dict(os.environ)
    # The backend's settings too: each test sets those it is about.
    for k in ("LD_PRELOAD", "DISTAUTOGRAD_LIBRARY", "DISTAUTOGRAD_TORCH_SIMULATE_MISMATCH", NOTIFY_ENV, *SETTINGS,
              *LAUNCHER_SETTINGS):
        e.pop(k, None)
    e["PYTHONPATH"] = os.path.join(ROOT, "python_bindings")
    e["GLOG_minloglevel"] = "2"
    # torch 2.6 of Debian 13 has no libuv: env:// needs this, natively too.
    e["USE_LIBUV"] = "0"
    if backend:
        e["LD_PRELOAD"] = SHIM
    e.update(extra)
    return e


def served_text() -> str:
    """The torch versions the backend serves, as its messages name them
    (SERVED_TORCH: one list, read here rather than restated)."""
    r = subprocess.run([PYTHON, "-c", "from distautograd._launch import served_text; print(served_text())"],
                       env=env(False), capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def free_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return str(port)


def probe(name: str, backend: bool, **extra: str):
    r = subprocess.run([PYTHON, os.path.join(HERE, "_probe.py"), name], env=env(backend, **extra),
                       capture_output=True, text=True, timeout=TIMEOUT)
    if r.returncode != 0:
        raise AssertionError("%s (backend=%s) exited %d:\n%s\n%s" % (name, backend, r.returncode, r.stdout, r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def run_job(out: str, backend: bool, *args: str, **extra: str) -> list:
    """The 3-worker job of train_job.py; returns the exit codes."""
    os.makedirs(out, exist_ok=True)
    port = free_port()
    procs = []
    for rank in range(3):
        log = open(os.path.join(out, "log-%d" % rank), "w")
        procs.append((subprocess.Popen([PYTHON, os.path.join(HERE, "train_job.py"), str(rank), port, out, *args],
                                       env=env(backend, **extra), stdout=log, stderr=subprocess.STDOUT), log))
    codes = []
    for p, log in procs:
        try:
            codes.append(p.wait(timeout=TIMEOUT))
        except subprocess.TimeoutExpired:
            for q, _ in procs:
                q.kill()
            raise AssertionError("the job hung; logs in %s" % out)
        finally:
            log.close()
    return codes


def logs(out: str) -> str:
    text = ""
    for rank in range(3):
        try:
            with open(os.path.join(out, "log-%d" % rank)) as f:
                text += "--- worker %d\n%s" % (rank, f.read()[-3000:])
        except OSError:
            pass
    return text


def report(out: str, rank: int) -> dict:
    with open(os.path.join(out, "report-%d.json" % rank)) as f:
        return json.load(f)


def both_ways(make_job, scenario) -> dict:
    """Runs scenario(job) on make_job(False), a native job, then on
    make_job(True), one under the backend, closing each after: their
    results by backend. A failed assertion names the side and carries the
    job's logs (job.out)."""
    out = {}
    for backend in (False, True):
        j = make_job(backend)
        try:
            out[backend] = scenario(j)
        except AssertionError as e:
            raise AssertionError("%s (backend=%s); logs:\n%s" % (e, backend, logs(j.out))) from None
        j.close()
    return out


class BackendTest(unittest.TestCase):
    def setUp(self) -> None:
        problem = torch_problem()
        if problem:
            if in_ci():
                self.fail("CI=true and " + problem)
            sys.stderr.write("\n*** SKIPPED (torch backend): %s\n" % problem)
            self.skipTest(problem)
        self.tmp = tempfile.mkdtemp(prefix="dat-")
        self.addCleanup(shutil.rmtree, self.tmp, True)


class TestTrainingJob(BackendTest):
    """The 3-worker training job, natively and under the backend: the same
    parameters bit for bit; under the backend every worker ends with no
    context, torch's own map empty, no cleanup failed or dropped, and the
    package sees the backend's container."""

    def test_native_and_backend_agree(self) -> None:
        import torch

        nat, be = os.path.join(self.tmp, "native"), os.path.join(self.tmp, "backend")
        self.assertEqual(run_job(nat, False), [0, 0, 0], logs(nat))
        self.assertEqual(run_job(be, True), [0, 0, 0], logs(be))
        for rank in (0, 1):
            a = torch.load(os.path.join(nat, "params-%d.pt" % rank))
            b = torch.load(os.path.join(be, "params-%d.pt" % rank))
            self.assertEqual(len(a), 6)
            for x, y in zip(a, b):
                self.assertTrue(torch.equal(x.view(torch.int32), y.view(torch.int32)), "trainer %d differs" % rank)
        shim_dir = os.path.realpath(BUILD)
        for rank in range(3):
            n, r = report(nat, rank), report(be, rank)
            self.assertFalse(n["active"])
            self.assertEqual(n["debug_info"]["num_autograd_contexts"], 0)
            # torch's own figures are torch's, under the backend too.
            self.assertEqual(n["torch_debug_info"], {"num_autograd_contexts": 0, "num_current_backward_passes": 0})
            self.assertEqual(r["torch_debug_info"], n["torch_debug_info"])
            self.assertTrue(r["active"], r)
            d = r["debug_info"]
            self.assertEqual(d["num_autograd_contexts"], 0, d)
            self.assertEqual(d["torch_native_contexts"], 0, d)
            self.assertGreater(d["torch_contexts_made"], 0, d)
            self.assertEqual(d["torch_contexts_alive"], 0, d)  # every libtorch context destroyed
            for k in ("cleanup_failed", "cleanup_dropped", "cleanup_pending", "torch_cleanup_failed", "live_handles"):
                self.assertEqual(d[k], 0, (k, d))
            self.assertGreater(d["cleanup_sent"], 0, d)
            self.assertEqual(d["cleanup_sent"], d["torch_cleanup_handed"], d)
            self.assertEqual(os.path.dirname(os.path.realpath(r["package_library"])), shim_dir)
            self.assertEqual(r["package_contexts"], 0)
            self.assertEqual(r["package_cleanup_sent"], d["cleanup_sent"])


class TestKilledWorker(BackendTest):
    """Worker 2 dies inside a pass that reached workers 0 and 1: they go on
    (5 more passes each), the reaper clears the orphans, nothing hangs."""

    def test_orphans_reaped(self) -> None:
        out = os.path.join(self.tmp, "kill")
        codes = run_job(out, True, "kill", DISTAUTOGRAD_REAP_IDLE_MS="1000")
        self.assertEqual(codes[:2], [0, 0], logs(out))
        self.assertEqual(codes[2], 17, logs(out))
        for rank in (0, 1):
            r = report(out, rank)
            self.assertGreaterEqual(min(r["orphans_seen"]), 1, r)
            self.assertEqual(r["passes_after"], 5)
            self.assertEqual(r["debug_info"]["num_autograd_contexts"], 0, r)
            self.assertEqual(r["debug_info"]["torch_native_contexts"], 0, r)


class TestReapedPass(BackendTest):
    """A pass idle past DISTAUTOGRAD_REAP_IDLE_MS loses its context (as
    documented), gets one error that names the reaper and its setting, and
    the thread goes on: its next passes work, as natively. Before the fix
    the end of the `with` block raised "Could not find autograd context"
    and every later pass on the thread "Already have an autograd context id
    for this thread."."""

    def test_thread_starts_new_passes(self) -> None:
        # Passes of one worker alone: nothing but the probe's pause leaves a
        # context idle for long.
        native, _ = probe("reaped", False, DISTAUTOGRAD_REAP_IDLE_MS="1000")
        self.assertFalse(native["active"])
        self.assertEqual(native["first"], {"grads": [2.0] * 3})
        got, _ = probe("reaped", True, DISTAUTOGRAD_REAP_IDLE_MS="1000")
        self.assertTrue(got["active"])
        err = got["first"].get("error", "")
        self.assertRegex(err, r"^Could not find autograd context with id: \d+ \(distautograd: it was reaped by "
                         r"dac_reap_idle_contexts, unused for 1000 ms or more\); the torch backend's reaper", got)
        self.assertIn("DISTAUTOGRAD_REAP_IDLE_MS=1000", err)
        self.assertFalse(got["first"]["chained"], "the end of the pass raised a second error")
        for k in ("after", "other", "contexts"):
            self.assertEqual(got[k], native[k], k)
        self.assertEqual(got["after"], [[2.0] * 3] * 2)
        self.assertEqual(got["contexts"], 0)


class TestGuard(BackendTest):
    """A libtorch that is not a build the backend serves (simulated: another
    soname, a missing symbol, a failed run-time layout check, an
    implementation given another torch than its own) leaves torch native:
    it works, the backend says so once on stderr."""

    def test_mismatch_runs_native(self) -> None:
        native, _ = probe("guard", False)
        self.assertFalse(native["active"])
        self.assertEqual(native["keys"], ["num_autograd_contexts", "num_current_backward_passes"])
        for what, needle in (("soname", "is not a torch this backend serves (torch %s)" % ", ".join(SERVED_TORCH)),
                             ("symbol", "does not define"), ("layout", "layout check"),
                             ("impl", "the implementation for torch %s was given torch 0.0" % torch_series())):
            with self.subTest(what):
                got, err = probe("guard", True, DISTAUTOGRAD_TORCH_SIMULATE_MISMATCH=what)
                self.assertEqual(got, native)
                lines = [ln for ln in err.splitlines() if ln.startswith("distautograd-torch:")]
                self.assertEqual(len(lines), 1, err)
                self.assertIn(needle, lines[0])
                self.assertIn("NOT in use", lines[0])
        served, err = probe("guard", True)
        self.assertTrue(served["active"])
        self.assertEqual(served["grads"], native["grads"])
        self.assertEqual(served["error"], native["error"])
        # torch's _get_debug_info is torch's; distautograd's figures are
        # distautograd.torch.debug_info()'s, which says when it cannot serve.
        self.assertEqual(served["keys"], native["keys"])
        self.assertEqual(native["figures"], "NotServing")
        self.assertEqual(served["figures"], DEBUG_INFO_KEYS)
        self.assertEqual(documented_keys(), DEBUG_INFO_KEYS)
        self.assertNotIn("distautograd-torch:", err)


class TestOneLibrary(BackendTest):
    """distautograd imported in a process under the backend is the library
    the backend loaded: one file mapped, torch's contexts seen through it."""

    def test_package_uses_backend_library(self) -> None:
        got, _ = probe("one_library", True)
        self.assertTrue(got["active"])
        self.assertEqual(len(got["mapped"]), 1, got)
        self.assertEqual(os.path.dirname(got["mapped"][0]), os.path.realpath(BUILD))
        self.assertEqual(got["inside"], {"torch": 1, "package": 1, "package_current": True, "package_valid": True})
        self.assertEqual(got["after"], 0)


class TestFork(BackendTest):
    """fork-started children (DataLoader workers, os.fork) of a process
    using the backend that never touch autograd run normally."""

    def test_fork_children(self) -> None:
        native, _ = probe("fork", False)
        got, _ = probe("fork", True)
        self.assertEqual(got, native)
        self.assertEqual(got["child_status"], 0)
        self.assertEqual(got["batches"], [[0.0, 1.0, 4.0, 9.0], [16.0, 25.0, 36.0, 49.0]])


class TestSettings(BackendTest):
    """The backend's settings: the launcher refuses a bad value before the
    job starts (one line, exit status 2, nothing run), and the backend
    itself, started without the launcher, takes exactly the values the
    launcher takes (distautograd._launch.SETTINGS: one table, tied here to
    impl.cpp's read_settings), writing one line for each it refuses."""

    VALUES = {
        "DISTAUTOGRAD_REAP_IDLE_MS": [("250", True), ("1", True), ("9223372036854", True), ("0", False),
                                      ("-5", False), ("abc", False), ("5ms", False), (" 5", False),
                                      ("9223372036855", False)],
        "DISTAUTOGRAD_MAX_CONTEXTS": [("10", True), ("0", True), ("+3", True), ("9223372036854775807", True),
                                      ("-1", False), ("x", False), ("1e3", False), ("9223372036854775808", False)],
        "DISTAUTOGRAD_DEAD_WORKERS": [("0", True), ("1", True), ("yes", False), ("2", False), ("on", False)],
        "DISTAUTOGRAD_CONTEXTS_SIGNAL": [("USR1", True), ("SIGUSR2", True), ("off", True), ("0", True),
                                         ("10", True), ("34", True), ("KILL", False), ("9", False),
                                         ("SIGSTOP", False), ("65", False), ("SIGFOO", False)],
    }

    #: The launcher's own settings (distautograd._launch.LAUNCHER_SETTINGS),
    #: which the backend does not read.
    LAUNCHER_VALUES = {
        "DISTAUTOGRAD_QUIET": [("0", True), ("1", True), ("yes", False), ("true", False), ("2", False)],
    }

    def test_every_setting_has_values(self) -> None:
        self.assertEqual(sorted(self.VALUES), sorted(SETTINGS))
        self.assertEqual(sorted(self.LAUNCHER_VALUES), sorted(LAUNCHER_SETTINGS))

    def test_launcher_refuses_before_the_job_starts(self) -> None:
        marker = os.path.join(self.tmp, "ran")
        for name, values in {**self.VALUES, **self.LAUNCHER_VALUES}.items():
            for value, ok in values:
                with self.subTest(name=name, value=value):
                    r = subprocess.run([PYTHON, "-m", "distautograd.torch", PYTHON, "-c",
                                        "open(%r, 'w').close()" % marker], env=env(False, **{name: value}),
                                       capture_output=True, text=True, timeout=TIMEOUT)
                    if ok:
                        self.assertEqual(r.returncode, 0, r.stderr)
                        self.assertTrue(os.path.exists(marker))
                        os.unlink(marker)
                    else:
                        self.assertEqual(r.returncode, 2, r.stderr)
                        what = {**SETTINGS, **LAUNCHER_SETTINGS}[name][0]
                        self.assertEqual(r.stderr.strip().splitlines(),
                                         ["distautograd-torch: %s=%s is not %s" % (name, value, what)])
                        self.assertFalse(os.path.exists(marker), "the command ran")

    def test_several_bad_values_one_line(self) -> None:
        # build/distautograd-torch, as a user runs it: the first bad value
        # refused, in one line, and nothing run.
        marker = os.path.join(self.tmp, "ran")
        r = subprocess.run([os.path.join(BUILD, "distautograd-torch"), PYTHON, "-c", "open(%r, 'w').close()" % marker],
                           env=env(False, DISTAUTOGRAD_REAP_IDLE_MS="abc", DISTAUTOGRAD_MAX_CONTEXTS="-1"),
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
        self.assertEqual(r.stderr.splitlines(), ["distautograd-torch: DISTAUTOGRAD_REAP_IDLE_MS=abc is not %s"
                                                 % SETTINGS["DISTAUTOGRAD_REAP_IDLE_MS"][0]])
        self.assertFalse(os.path.exists(marker), "the command ran")

    def test_a_misspelt_setting_is_refused(self) -> None:
        # A setting's name misspelt would be ignored by the job: refused in
        # one line, nothing run; a DISTAUTOGRAD_* name of no setting's
        # likeness (a script's own) runs.
        marker = os.path.join(self.tmp, "ran")
        launcher = [os.path.join(BUILD, "distautograd-torch"), PYTHON, "-c", "open(%r, 'w').close()" % marker]
        for name, near in (("DISTAUTOGRAD_REAP_IDLE", "DISTAUTOGRAD_REAP_IDLE_MS"),
                           ("DISTAUTOGRAD_MAX_CONTEXT", "DISTAUTOGRAD_MAX_CONTEXTS"),
                           ("DISTAUTOGRAD_QUITE", "DISTAUTOGRAD_QUIET")):
            with self.subTest(name=name):
                r = subprocess.run(launcher, env=env(False, **{name: "100"}), capture_output=True, text=True,
                                   timeout=TIMEOUT)
                self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
                self.assertEqual(r.stderr.splitlines(), ["distautograd-torch: %s is not a setting: %s?" % (name, near)])
                self.assertFalse(os.path.exists(marker), "the command ran")
        r = subprocess.run(launcher, env=env(False, DISTAUTOGRAD_MY_SCRIPTS_OWN="1", DISTAUTOGRAD_QUIET="1"),
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(marker), "the command did not run")

    def test_backend_takes_the_same_values(self) -> None:
        # One process a round, each round the next value of every setting.
        rounds = max(len(v) for v in self.VALUES.values())
        for k in range(rounds):
            case = {name: values[k] for name, values in self.VALUES.items() if k < len(values)}
            with self.subTest(case=case):
                got, err = probe("settings", True, **{name: value for name, (value, _) in case.items()})
                self.assertTrue(got["active"], err)
                refused = sorted(ln.split("=")[0][len("distautograd-torch: "):] for ln in err.splitlines()
                                 if ln.startswith("distautograd-torch: DISTAUTOGRAD_"))
                self.assertEqual(refused, sorted(name for name, (_, ok) in case.items() if not ok), err)
                cap, ok = case.get("DISTAUTOGRAD_MAX_CONTEXTS", (None, False))
                self.assertEqual(got["max_contexts"], int(cap) if ok else 0, case)
                sig, ok = case.get("DISTAUTOGRAD_CONTEXTS_SIGNAL", (None, False))
                self.assertEqual(got["usr1"], ok and sig in ("USR1", "10"), case)
                self.assertEqual(got["usr2"], not ok or sig in ("SIGUSR2", "12"), case)


class TestLauncher(BackendTest):
    """distautograd-torch / python -m distautograd.torch: runs the command
    under the backend, torchrun and the workers it starts included; bad use
    gets a clear message."""

    def launch(self, *args: str, python=None, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([python or PYTHON, "-m", "distautograd.torch", *args], env=env(False, **extra),
                              capture_output=True, text=True, timeout=TIMEOUT)

    def test_runs_the_command_under_the_backend(self) -> None:
        code = "import distautograd.torch as t; print(t.active())"
        r = self.launch(PYTHON, "-c", code)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "True"), r.stderr)
        r = subprocess.run([PYTHON, "-c", code], env=env(False), capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "False"), r.stderr)

    def test_report_shows_the_running_configuration(self) -> None:
        # python -m distautograd: under the backend, distautograd.torch.debug_info().
        r = self.launch(PYTHON, "-m", "distautograd")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertTrue(any(ln.startswith("torch backend: active (torch ") for ln in lines), lines)
        head = "debug info (distautograd.torch.debug_info(), this process, after _init(0)):"
        tail = "contexts (distautograd.torch.contexts(), this process): 0"
        info = json.loads("\n".join(lines[lines.index(head) + 1:lines.index(tail)]))
        self.assertEqual(sorted(info), DEBUG_INFO_KEYS)
        self.assertEqual(info["torch_native_contexts"], 0)
        self.assertEqual(lines[-1], tail)
        r = subprocess.run([PYTHON, "-m", "distautograd"], env=env(False), capture_output=True, text=True,
                           timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("torch backend: inactive: not preloaded in this process", r.stdout)
        self.assertIn("debug info (this process, after _init(0)):", r.stdout)

    def test_use_libuv(self) -> None:
        # Debian 13's torch 2.6 has no libuv, which its env:// TCPStore asks
        # for unless USE_LIBUV=0: the launcher sets that for torch 2.x when
        # it is unset, so init_rpc through env:// works under it.
        e = env(False)
        del e["USE_LIBUV"]
        r = subprocess.run([PYTHON, "-m", "distautograd.torch", PYTHON, os.path.join(HERE, "_probe.py"), "guard"],
                           env=e, capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(json.loads(r.stdout.strip().splitlines()[-1])["active"])
        show = [PYTHON, "-m", "distautograd.torch", PYTHON, "-c", "import os; print(os.environ.get('USE_LIBUV'))"]
        r = subprocess.run(show, env=e, capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.stdout.strip(), "None" if torch_series().startswith("1.") else "0", r.stderr)
        r = subprocess.run(show, env=dict(e, USE_LIBUV="1"), capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.stdout.strip(), "1", r.stderr)

    def test_in_front_of_torchrun(self) -> None:
        # Debian's torchrun for torch 1.13 cannot start on Python 3.11 with
        # its default --redirects 0 --tee 0 (its Std enum parses only 1 and
        # 2 there): natively too, so the job passes 2. Debian 13's torchrun
        # for torch 2.6 cannot start at all: its rendezvous makes a TCPStore
        # that asks for libuv, which that build lacks, whatever USE_LIBUV
        # says; there the launcher must leave that failure as it is.
        torchrun = shutil.which("torchrun")
        cmd = [torchrun] if torchrun else [PYTHON, "-m", "torch.distributed.run"]
        no_libuv = "use_libuv was requested but PyTorch was build without libuv support"
        reports, failures = {}, {}
        for backend in (False, True):
            out = os.path.join(self.tmp, "backend" if backend else "native")
            os.makedirs(out)
            args = [*cmd, "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                    "--master_port", free_port(), "--redirects", "2", "--tee", "2", "--log_dir",
                    os.path.join(out, "logs"), os.path.join(HERE, "torchrun_job.py"), out]
            if backend:
                r = self.launch(*args)
            else:
                r = subprocess.run(args, env=env(False), capture_output=True, text=True, timeout=TIMEOUT)
            if torch_series() != "1.13" and r.returncode != 0 and no_libuv in r.stderr:
                failures[backend] = r.returncode
                continue
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            reports[backend] = [report(out, rank) for rank in (0, 1)]
        if failures:
            self.assertEqual(failures, {False: 1, True: 1}, "torchrun failed for want of libuv on one side only")
            return
        for rank in (0, 1):
            native, served = reports[False][rank], reports[True][rank]
            self.assertFalse(native["active"])
            self.assertTrue(served["active"], served)
            self.assertEqual(served["grad"], native["grad"])
            self.assertEqual(native["grad"], [2.0 * (rank + 1)] * 3)
            self.assertEqual(served["contexts"], 0)

    def test_bad_use(self) -> None:
        r = self.launch("--check", PYTHON)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("libdistautograd_torch.so (torch %s" % torch_series(), r.stdout)
        r = self.launch("--check", PYTHON, DISTAUTOGRAD_TORCH_LIBRARY="/nonexistent/libdistautograd_torch.so")
        self.assertEqual(r.returncode, 2)
        self.assertIn("does not name a file", r.stderr)
        r = self.launch("no-such-command-here")
        self.assertEqual(r.returncode, 127)
        self.assertEqual(r.stderr, "distautograd-torch: no-such-command-here: command not found\n")


def served_line_rx() -> str:
    """SERVED_LINE as a regular expression: any served torch, any pid."""
    rx = re.escape(SERVED_LINE % ("VERSION", 424242))
    return "^%s$" % rx.replace("VERSION", "(%s)" % "|".join(map(re.escape, SERVED_TORCH))).replace("424242", "([0-9]+)")


class TestServedLine(BackendTest):
    """The launcher says once per job, on stderr, that the backend serves
    it, when the first process of the job is served: a job of two served
    processes prints it once; DISTAUTOGRAD_QUIET=1 silences it; a job that
    is not served prints none. The watcher that prints it leaves no process
    nor socket behind."""

    def job(self, *cmd: str, **extra: str):
        """Runs the launcher on cmd: (exit status, stdout, stderr's lines
        from distautograd-torch). Its stderr ends when every process holding
        it has ended, the watcher included."""
        p = subprocess.Popen([os.path.join(BUILD, "distautograd-torch"), *cmd], env=env(False, **extra),
                             cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            raise
        # The watcher's socket, named after the launcher's pid (the command's), is gone.
        with open("/proc/net/unix") as f:
            self.assertNotIn("@distautograd-torch-%d-" % p.pid, f.read())
        return p.returncode, out, [ln for ln in err.splitlines() if ln.startswith("distautograd-torch: ")]

    def pair(self, **extra: str):
        """The two-process job (spawn_job.py): its status, its workers'
        pids, distautograd-torch's lines."""
        rc, out, lines = self.job(PYTHON, os.path.join(HERE, "spawn_job.py"), **extra)
        self.assertEqual(rc, 0, out + "\n".join(lines))
        pids = [int(ln.split()[1]) for ln in out.splitlines() if ln.startswith("pid ")]
        self.assertEqual(len(pids), 2, out)
        self.assertIn("grad [2.0, 2.0]", out.splitlines())
        return pids, lines

    def test_once_per_job(self) -> None:
        pids, lines = self.pair()
        self.assertEqual(len(lines), 1, lines)
        m = re.match(served_line_rx(), lines[0])
        self.assertTrue(m, lines)
        self.assertEqual(m.group(1), torch_series())
        self.assertIn(int(m.group(2)), pids)
        # docs/torch.md shows this line.
        with open(os.path.join(ROOT, "docs", "torch.md"), encoding="utf-8") as f:
            shown = [ln for ln in f.read().splitlines() if ln.startswith("distautograd-torch: torch ")]
        self.assertEqual(len(shown), 1)
        self.assertRegex(shown[0], served_line_rx(), "docs/torch.md shows the line the launcher prints")

    def test_quiet(self) -> None:
        _, lines = self.pair(DISTAUTOGRAD_QUIET="1")
        self.assertEqual(lines, [])

    def test_not_served(self) -> None:
        # A torch the backend refuses: each process says so, and no one says it is served.
        pids, lines = self.pair(DISTAUTOGRAD_TORCH_SIMULATE_MISMATCH="soname")
        self.assertEqual(len(lines), 2, lines)
        for line in lines:
            self.assertIn("(distautograd is NOT in use in this process)", line)
        # A job that never makes a container call.
        self.assertEqual(self.job(PYTHON, "-c", "import torch"), (0, "", []))

    def test_line_in_one_write(self) -> None:
        # The processes of a job share stderr: each of the backend's lines
        # goes in one write (torch_backend/say.h), or another process's line
        # can land inside it (Debian 13's glibc writes a printf to stderr in
        # pieces of 128 bytes). A packet-mode pipe hands each write to one read.
        r, w = os.pipe2(os.O_DIRECT)
        code = "import torch.distributed.autograd as da\ntry:\n    da._get_max_id()\nexcept RuntimeError:\n    pass\n"
        try:
            p = subprocess.Popen([PYTHON, "-c", code], stderr=w, cwd=self.tmp,
                                 env=env(True, DISTAUTOGRAD_TORCH_SIMULATE_MISMATCH="soname"))
        finally:
            os.close(w)
        writes = []
        with os.fdopen(r, "rb") as f:
            while True:
                got = os.read(f.fileno(), 65536)
                if not got:
                    break
                writes.append(got.decode())
        self.assertEqual(p.wait(timeout=TIMEOUT), 0, writes)
        ours = [x for x in writes if x.startswith("distautograd-torch: ")]
        self.assertEqual(len(ours), 1, writes)
        self.assertTrue(ours[0].endswith("(distautograd is NOT in use in this process)\n"), writes)
        self.assertGreater(len(ours[0]), 128, "a line longer than glibc's pieces")

    def test_notify_names_one_variable(self) -> None:
        # The shim reads the variable the launcher sets (symbols.h).
        with open(os.path.join(ROOT, "torch_backend", "symbols.h"), encoding="utf-8") as f:
            m = re.search(r'^#define DAT_NOTIFY_ENV "([^"]*)"$', f.read(), re.M)
        self.assertEqual(m and m.group(1), NOTIFY_ENV)


#: What a command run under the launcher prints: whether the backend serves it.
ACTIVE = "import distautograd.torch as t; print('ran', t.active())"


class TestLauncherJudgesTheCommand(BackendTest):
    """The launcher judges the Python the command runs, wherever the
    launcher itself runs: a refusal is one line that names that Python and
    what to run instead, and runs nothing."""

    def setUp(self) -> None:
        super().setUp()
        self.bare = self.venv("venv")

    def venv(self, name: str, *flags: str) -> str:
        folder = os.path.join(self.tmp, name)
        r = subprocess.run([PYTHON, "-m", "venv", "--without-pip", *flags, folder], capture_output=True, text=True,
                           timeout=TIMEOUT)
        if r.returncode != 0:
            if in_ci():
                self.fail("python3 -m venv failed (Debian: python3-venv): " + r.stderr)
            self.skipTest("python3 -m venv failed (Debian: python3-venv): " + r.stderr)
        return os.path.join(folder, "bin", "python3")

    def launch(self, *args: str, python=None, path=None, cwd=None, **extra: str) -> subprocess.CompletedProcess:
        e = env(False, **extra)
        if path:
            e["PATH"] = path + os.pathsep + e.get("PATH", os.defpath)
        return subprocess.run([python or PYTHON, "-m", "distautograd.torch", *args], env=e, cwd=cwd or self.tmp,
                              capture_output=True, text=True, timeout=TIMEOUT)

    def assert_ran_served(self, r: subprocess.CompletedProcess) -> None:
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "ran True"), r.stderr)

    def assert_refused(self, r: subprocess.CompletedProcess, *wants: str) -> None:
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertNotIn("ran", r.stdout)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("distautograd-torch: "), r.stderr)
        for want in wants:
            self.assertIn(want, lines[0])

    def shim(self, name: str, target: str) -> str:
        """A folder holding a pyenv-style shim: a shell script named name
        that execs target."""
        folder = os.path.join(self.tmp, "shims-" + os.path.basename(os.path.dirname(os.path.dirname(target))))
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name)
        with open(path, "w") as f:
            f.write('#!/usr/bin/env bash\nset -e\nexec "%s" "$@"\n' % target)
        os.chmod(path, 0o755)
        return folder

    def test_bare_venv(self) -> None:
        # The launcher in a venv without torch runs the system's Python, which has it...
        self.assert_ran_served(self.launch(PYTHON, "-c", ACTIVE, python=self.bare))
        # ...and refuses the venv's own Python, which has none, naming the one that has.
        r = self.launch(self.bare, "-c", ACTIVE)
        self.assert_refused(r, "runs %s, which has no torch" % self.bare, "the backend serves torch %s:" % served_text(),
                            "`distautograd-torch %s -c " % PYTHON)

    def test_venv_with_system_site_packages(self) -> None:
        python = self.venv("system", "--system-site-packages")
        self.assert_ran_served(self.launch(python, "-c", ACTIVE, python=self.bare))
        self.assert_ran_served(self.launch("python3", "-c", ACTIVE, path=os.path.dirname(python)))

    def test_pyenv_style_shim_first_on_path(self) -> None:
        # A shim is a shell script that execs another Python: the launcher
        # asks it, so it judges the Python the shim picks.
        self.assert_ran_served(self.launch("python3", "-c", ACTIVE, path=self.shim("python3", PYTHON)))
        r = self.launch("python3", "-c", ACTIVE, path=self.shim("python3", self.bare))
        self.assert_refused(r, "python3 runs %s, which has no torch" % self.bare)
        # docs/torch.md shows this refusal.
        r = self.launch("python3", "train.py", path=self.shim("python3", self.bare))
        with open(os.path.join(ROOT, "docs", "torch.md"), encoding="utf-8") as f:
            shown = [ln for ln in f.read().splitlines() if ln.startswith("distautograd-torch: python3 runs ")]
        self.assertEqual(len(shown), 1)
        rx = ".*".join(re.escape(part) for part in shown[0].split("..."))
        self.assertRegex(r.stderr.strip(), "^%s$" % rx, "docs/torch.md shows %r" % shown[0])

    def test_torch_not_served(self) -> None:
        fake = os.path.join(self.tmp, "fake", "torch")
        os.makedirs(fake)
        for name, text in (("__init__.py", ""), ("version.py", "__version__ = '2.99.0'\n")):
            with open(os.path.join(fake, name), "w") as f:
                f.write(text)
        r = self.launch(self.bare, "-c", ACTIVE,
                        PYTHONPATH=os.pathsep.join([os.path.dirname(fake), os.path.join(ROOT, "python_bindings")]))
        self.assert_refused(r, "whose torch is 2.99.0; the backend serves torch %s only" % served_text(),
                            "run the command without distautograd-torch")

    def test_torchrun(self) -> None:
        # A program is judged by the Python of its #! line: Debian's torchrun
        # is served; one of a venv without torch is refused.
        torchrun = shutil.which("torchrun")
        if torchrun:
            r = self.launch("--check", "torchrun")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("(torch %s" % torch_series(), r.stdout)
        fake = os.path.join(os.path.dirname(self.bare), "torchrun")
        with open(fake, "w") as f:
            f.write("#!%s\nimport sys\nprint('ran')\n" % self.bare)
        os.chmod(fake, 0o755)
        r = self.launch("torchrun", "--nproc_per_node", "2", "train.py", path=os.path.dirname(fake))
        self.assert_refused(r, "torchrun (a %s program) runs %s, which has no torch" % (self.bare, self.bare),
                            "`distautograd-torch %s %s --nproc_per_node 2 train.py`" % (PYTHON, fake))
        with open(fake, "w") as f:
            f.write("#!/usr/bin/env python3\nprint('ran')\n")
        r = self.launch("torchrun", path=os.pathsep.join([os.path.dirname(fake)]))
        self.assert_refused(r, "torchrun (a %s program) runs %s, which has no torch" % (self.bare, self.bare))

    def test_non_python_command(self) -> None:
        # Not a Python program: it runs unjudged, under the backend.
        r = self.launch("sh", "-c", 'echo "$LD_PRELOAD"')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split()[0], os.path.realpath(SHIM))
        r = self.launch("--check", "sh")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("is not a Python program: not checked", r.stdout)

    def test_missing_script(self) -> None:
        with open(os.path.join(self.tmp, "train.py"), "w") as f:
            f.write("print('ran')\n")
        r = self.launch("train.py", "--epochs", "3")
        self.assert_refused(r, "train.py is not a command; to run a Python script, name its Python first: "
                            "`distautograd-torch %s train.py --epochs 3`" % PYTHON)
        r = self.launch("absent.py")
        self.assertEqual(r.returncode, 127, r.stderr)
        self.assertEqual(r.stderr, "distautograd-torch: absent.py: no such script in %s, nor a command of that "
                         "name\n" % self.tmp)


class TestDiagnosis(BackendTest):
    """`python -m distautograd` says whether the backend serves this
    process, and if not, why and what to run."""

    def backend_line(self, *flags: str, preload: bool, **extra: str) -> str:
        r = subprocess.run([PYTHON, *flags, "-m", "distautograd"], env=env(preload, **extra), cwd=self.tmp,
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("torch backend: ")]
        self.assertEqual(len(lines), 1, r.stdout)
        return lines[0]

    def test_each_reason(self) -> None:
        run_as = "run the script as `distautograd-torch %s script.py`" % PYTHON
        self.assertEqual(self.backend_line(preload=False),
                         "torch backend: inactive: not preloaded in this process: " + run_as)
        self.assertEqual(self.backend_line(preload=True),
                         "torch backend: active (torch %s, %s)" % (torch_version(), os.path.realpath(SHIM)))
        # -S: no site packages, so no torch.
        line = self.backend_line("-S", preload=True)
        self.assertIn("inactive: preloaded (%s), but torch does not import in this Python" % os.path.realpath(SHIM),
                      line)
        self.assertTrue(line.endswith(run_as), line)
        fake = os.path.join(self.tmp, "fake", "torch")
        os.makedirs(fake)
        with open(os.path.join(fake, "__init__.py"), "w") as f:
            f.write("__version__ = '2.99.0'\n")
        line = self.backend_line(preload=True, PYTHONPATH=os.pathsep.join(
            [os.path.dirname(fake), os.path.join(ROOT, "python_bindings")]))
        self.assertIn("inactive: preloaded, but torch 2.99.0 is not one the backend serves (%s)" % served_text(), line)
        line = self.backend_line(preload=True, DISTAUTOGRAD_TORCH_SIMULATE_MISMATCH="layout")
        self.assertIn("inactive: preloaded, but the backend refused this torch", line)


class TestExample(BackendTest):
    """examples/torch_train.py, the README's torch example, trains the same
    natively and under the launcher, and says which container served it."""

    def test_torch_train(self) -> None:
        script = os.path.join(ROOT, "examples", "torch_train.py")
        outs = {}
        runs = {"native": ([PYTHON, script], {}),
                "served": ([os.path.join(BUILD, "distautograd-torch"), PYTHON, script], {}),
                # the core library preloaded instead of the backend: torch keeps its own container
                "wrong preload": ([PYTHON, script], {"LD_PRELOAD": os.path.join(BUILD, "libdistautograd.so.0")})}
        for name, (cmd, extra) in runs.items():
            e = env(False, **extra)
            del e["PYTHONPATH"]  # as a user runs it: the script finds the package in the checkout
            r = subprocess.run(cmd, env=e, cwd=self.tmp, capture_output=True, text=True, timeout=TIMEOUT)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            outs[name] = r.stdout.splitlines()
        native, served = outs["native"], outs["served"]
        self.assertEqual(native[:-1], served[:-1])
        self.assertEqual(outs["wrong preload"][:-1], native[:-1])
        self.assertTrue(native[-2].startswith("step 29  loss "), native)
        not_served = ("distributed autograd served by distautograd: no (not preloaded in this process: run the "
                      "script as `distautograd-torch %s script.py`)" % PYTHON)
        self.assertEqual(native[-1], not_served)
        self.assertEqual(outs["wrong preload"][-1], not_served)
        self.assertEqual(served[-1], "distributed autograd served by distautograd: yes (torch %s, %s)"
                         % (torch_version(), os.path.realpath(SHIM)))
        # The README shows this output: it is what the example prints.
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        after = readme[readme.index("build/distautograd-torch /usr/bin/python3 examples/torch_train.py\n```\n"):]
        block = after[after.index("```\n\n```\n") + 9:]
        shown = block[:block.index("```\n")].splitlines()
        self.assertEqual(len(shown), len(served), (shown, served))
        for want, got in zip(shown, served):
            rx = ".*".join(re.escape(part) for part in want.split("..."))
            self.assertRegex(got, "^%s$" % rx, "README.md's torch example shows %r" % want)


class TestInstalled(BackendTest):
    """make install puts the whole backend and the launcher in place: a
    staged install (DESTDIR) preloaded serves torch, and the launcher of an
    install into a private PREFIX runs a script under that install; make
    uninstall leaves nothing, not even what Python wrote when the launcher
    ran, and a second one finds nothing to do."""

    def make(self, *args: str) -> str:
        e = {k: v for k, v in os.environ.items()
             if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "DESTDIR", "PREFIX")}
        r = subprocess.run(["make", "--no-print-directory", "-C", ROOT, *args], env=e, capture_output=True,
                           text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def served_by(self, cmd, **extra: str) -> dict:
        code = ("import json, distautograd.torch as t, distautograd._lib as l, distautograd._process as p; "
                "print(json.dumps({'state': t.state(), 'shim': p.shim_path(), 'lib': l.PATH}))")
        r = subprocess.run([*cmd, "-c", code], env=env(False, **extra), cwd=self.tmp, capture_output=True,
                           text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return json.loads(r.stdout.strip().splitlines()[-1])

    def test_staged_install_serves_torch(self) -> None:
        stage = os.path.join(self.tmp, "stage")
        self.make("install", "DESTDIR=" + stage, "PREFIX=/usr/local")
        lib = os.path.join(stage, "usr", "local", "lib")
        impls = [n for n in os.listdir(BUILD) if n.startswith("libdistautograd_torch_impl") and n.endswith(".so")]
        for name in ["libdistautograd_torch.so", "libdistautograd.so.0"] + impls:
            self.assertTrue(os.path.isfile(os.path.join(lib, name)), name)
        self.assertTrue(os.access(os.path.join(stage, "usr", "local", "bin", "distautograd-torch"), os.X_OK))
        got = self.served_by([PYTHON], LD_PRELOAD=os.path.join(lib, "libdistautograd_torch.so"))
        self.assertTrue(got["state"][0], got)
        self.assertEqual(os.path.dirname(got["shim"]), lib)
        self.assertEqual(os.path.dirname(os.path.realpath(got["lib"])), lib)
        self.make("uninstall", "DESTDIR=" + stage, "PREFIX=/usr/local")
        self.assertEqual(os.listdir(stage), [])

    def test_launcher_of_a_private_prefix(self) -> None:
        prefix = os.path.join(self.tmp, "prefix")
        out = self.make("install", "PREFIX=" + prefix, "LDCONFIG=false")
        self.assertIn("is not in the loader's configuration", out)
        lib = os.path.join(prefix, "lib")
        got = self.served_by([os.path.join(prefix, "bin", "distautograd-torch"), PYTHON])
        self.assertTrue(got["state"][0], got)
        self.assertEqual(os.path.dirname(got["shim"]), lib)
        self.assertEqual(os.path.dirname(os.path.realpath(got["lib"])), lib)
        # As a user's shell runs it, where Python writes its bytecode beside
        # the launcher's code.
        e = env(False)
        e.pop("PYTHONDONTWRITEBYTECODE", None)
        r = subprocess.run([os.path.join(prefix, "bin", "distautograd-torch"), PYTHON, "-c", "print('ran')"],
                           env=e, cwd=self.tmp, capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual((r.returncode, r.stdout), (0, "ran\n"), r.stderr)
        pycache = os.path.join(prefix, "share", "distautograd", "__pycache__")
        self.assertTrue(os.listdir(pycache), "the launcher's run wrote no bytecode: the test no longer shows uninstall "
                        "removing it")
        for _ in range(2):
            self.make("uninstall", "PREFIX=" + prefix)
            left = [os.path.join(d, f) for d, _, files in os.walk(prefix) for f in files]
            self.assertEqual(left, [])
            self.assertFalse(os.path.exists(prefix))


if __name__ == "__main__":
    unittest.main()
